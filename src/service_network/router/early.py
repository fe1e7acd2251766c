"""A router Pod container's first moments (``service-network run router`` after a crash): the router process started
from the document it ran before and its readiness served, before the adaptor imports what only later work needs
(pydantic for documents, aiohttp for its HTTP server and the API client, lightkube for the configuration). The
kubelet probes readiness at the container's start and then every second: a router that is ready within that
second is in its Services' endpoints a whole probe period sooner.

The document is the one the adaptor last handed to the router (``document.json`` in the state directory, the Pod's
emptyDir, with the bind host it was made for); the adaptor takes the running router over (``RustAdaptor(...,
early=...)``), replaces this module's small HTTP server by its own on the same address and applies the ConfigMap's
document as any update. Standard library, ``dataplane.py`` and ``routed.py`` only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .dataplane import DataPlane
from .errors import RouterError
from .routed import RouteMemory, listening_in_status

__all__ = ["DOCUMENT_FILE", "EarlyRouter", "listener_names", "readiness", "remember_stored_routes", "start_early",
           "store_document", "stored_document"]

log = logging.getLogger("service_network.router.early")

DOCUMENT_FILE = "document.json"
NETWORK_FILE = "network.json"
MAX_REQUEST = 8192           # bytes of an HTTP request's head
REQUEST_SECONDS = 5.0


def store_document(state_dir: Path, bind_host: str | None, document: dict[str, Any]) -> None:
    """Keep ``document`` (what the router was handed) for the next start; ``OSError`` if it cannot be written."""
    path = state_dir / DOCUMENT_FILE
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"bindHost": bind_host, "document": document}, separators=(",", ":")))
    os.replace(tmp, path)


def stored_document(state_dir: Path, bind_host: str | None) -> dict[str, Any] | None:
    """The document the router ran before, if one was kept for this bind host."""
    try:
        stored = json.loads((state_dir / DOCUMENT_FILE).read_text())
    except (OSError, ValueError):
        return None
    document = stored.get("document") if isinstance(stored, dict) else None
    if not isinstance(document, dict) or stored.get("bindHost") != bind_host:
        return None
    return document


def listener_names(document: dict[str, Any]) -> list[str]:
    listeners = document.get("listeners")
    return [str(x.get("name")) for x in listeners if isinstance(x, dict)] if isinstance(listeners, list) else []


def remember_stored_routes(state_dir: Path, routes: RouteMemory) -> None:
    """The Listeners the router listened for before this start (its ``network.json``, kept in the state directory
    across a container restart)."""
    try:
        stored = json.loads((state_dir / NETWORK_FILE).read_text())
    except (OSError, ValueError):
        return
    routes.remember(listening_in_status(stored))


async def readiness(plane: DataPlane, routes: RouteMemory, names: list[str]) -> tuple[int, str]:
    """``/readyz``: (HTTP status, body) for the router running a document with Listeners ``names``."""
    if plane.restarts:
        routes.remember(())     # what the crashed router process listened for is known
    try:
        ok, reason = await plane.ready(routes.routed(names))
    except RouterError as e:
        ok, reason = False, str(e)
    return (200, "ready\n") if ok else (503, f"not ready: {reason}\n")


@dataclass
class EarlyRouter:
    """The router started from its stored document, and the HTTP server answering its probes meanwhile."""

    plane: DataPlane
    routes: RouteMemory
    names: list[str]
    server: asyncio.Server | None = None

    async def close_http(self) -> None:
        """Stop answering (the adaptor's own server takes the address over)."""
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None

    def abort(self) -> None:
        """The container's start failed after this: stop answering, stop the router."""
        if self.server is not None:
            self.server.close()
            self.server = None
        self.plane.kill()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(REQUEST_SECONDS):
                head = await reader.readuntil(b"\r\n\r\n")
                method, path, *_ = [*head.split(b"\r\n", 1)[0].decode("latin-1").split(" "), "", ""]
                if method != "GET":
                    status, body = 405, "GET only\n"
                elif path == "/readyz":
                    status, body = await readiness(self.plane, self.routes, self.names)
                elif path == "/healthz":
                    ok = self.plane.running
                    status, body = (200, "ok\n") if ok else (503, "the router is not running\n")
                else:
                    status, body = 503, "the adaptor is starting\n"
                data = body.encode()
                writer.write(f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\nContent-Type: text/plain; "
                             f"charset=utf-8\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
                             + data)
                await writer.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


_REASONS = {200: "OK", 405: "Method Not Allowed", 503: "Service Unavailable"}


async def start_early(state_dir: Path, bind_host: str | None, router_binary: str | None,
                      http_address: tuple[str, int] | None) -> EarlyRouter | None:
    """The router started from the document kept in ``state_dir`` for ``bind_host`` and ``/readyz`` served on
    ``http_address``; None when there is none or it cannot run (the adaptor then starts as on a first start)."""
    document = stored_document(state_dir, bind_host)
    if document is None:
        return None
    router = document.get("router")
    threads = router.get("threads") if isinstance(router, dict) else None
    plane = DataPlane(state_dir, router_binary, threads=threads if isinstance(threads, int) else None,
                      log_level=os.environ.get("ROUTER_LOG", "info"))
    try:
        await plane.start()
        answer = await plane.apply(document)
    except RouterError as e:
        answer = {"ok": False, "problems": [str(e)]}
    if not answer.get("ok"):
        plane.kill()
        log.warning("the stored document was not run (%s); waiting for the configuration",
                    "; ".join(str(p) for p in answer.get("problems", []))[:500])
        return None
    routes = RouteMemory()
    remember_stored_routes(state_dir, routes)
    early = EarlyRouter(plane, routes, listener_names(document))
    if http_address is not None:
        try:
            early.server = await asyncio.start_server(early._answer, *http_address, limit=MAX_REQUEST)
        except OSError as e:
            log.warning("readiness not served before the adaptor's start: %s", e)
    log.info("router started from its last document (%s), before the configuration was read",
             state_dir / DOCUMENT_FILE)
    return early
