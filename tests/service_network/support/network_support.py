"""Helpers for tests of several routers on one machine: sites with their CA and router access certificate, routers
(the adaptor with its router process) run from router documents in their own state directories and loopback addresses (127.0.60.x - 127.0.62.x), links between
them, and a ``Cable`` (a loopback TCP relay that can be cut or made silent) to put on a link.

Certificates name their holder as the site controller's do: the access certificate and the client certificates a
site issues carry the holder's site id (``<site>-uid``) as common name, which the Rust router binds router ids to."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

from router_certs import Issued, TestCA
from router_support import free_port, metric_value

from service_network.router.names import CONTROL_SNI, KEY_SNI_WILDCARD
from service_network.router.rust_adaptor import RustAdaptor
from service_network.router.sources import FileConfigSource

_next = itertools.count(random.randrange(240))


def net_address(block: int = 60) -> str:
    """A loopback address of 127.0.<block>.x not handed out before in this process."""
    return f"127.0.{block}.{2 + next(_next) % 250}"


class NetSite:
    """A site: its CA (the router access verifies clients against it) and the access server certificate."""

    def __init__(self, directory: Path, name: str) -> None:
        self.name = name
        self.dir = directory / name
        self.ca = TestCA(self.dir, f"{name}-ca")
        self._n = itertools.count()
        self._clients: dict[tuple[str, str], Issued] = {}

    @property
    def id(self) -> str:
        return f"{self.name}-uid"

    def server_cert(self, host: str) -> Issued:
        return self.ca.issue(f"{self.name}-access-{next(self._n)}", dns=[KEY_SNI_WILDCARD, CONTROL_SNI], ips=[host],
                             cn=self.id)

    def client_cert(self, for_site: str, cn: str | None = None) -> Issued:
        """A client certificate for a site that links to this one (what redeeming a token gives): its common name
        is the redeeming site's id (``cn``; default the id of the test site named ``for_site``). One per linking
        site and name, as a redemption gives one credential that every router of the site uses (a second
        certificate for an identity that is linked is refused: docs/service-network-router.md, "Trust")."""
        key = (for_site, cn or f"{for_site}-uid")
        if key not in self._clients:
            self._clients[key] = self.ca.issue(f"{for_site}-to-{self.name}-{next(self._n)}", client=True, cn=key[1])
        return self._clients[key]


class NetRouter:
    """One router (the adaptor in-process, its router process) from a document file that the test edits."""

    def __init__(self, site: NetSite, name: str, *, block: int = 60, router_id: str | None = None,
                 access: bool = True) -> None:
        self.site = site
        self.name = name
        self.host = net_address(block)
        self.state_dir = Path(tempfile.mkdtemp(prefix="snn-", dir="/tmp"))
        self.config_path = self.state_dir.parent / f"{self.state_dir.name}.json"
        self.access_port = free_port(self.host) if access else None
        self.doc: dict[str, Any] = {
            "version": 1, "site": {"id": f"{site.name}-uid", "name": site.name, "namespace": site.name},
            "router": {"id": router_id or f"{site.name}-uid"}, "tlsProfiles": [], "listeners": [], "connectors": [],
            "links": []}
        if access:
            cert = site.server_cert(self.host)
            self.doc["tlsProfiles"].append({"name": "site-server", "files": {
                "ca": str(site.ca.ca_file), "cert": str(cert.cert), "key": str(cert.key)}})
            self.doc["routerAccess"] = [{"name": "inter-router", "host": self.host, "port": self.access_port,
                                         "tlsProfile": "site-server"}]
        self.adaptor: RustAdaptor | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    @property
    def router_id(self) -> str:
        return str(self.doc["router"]["id"])

    def write(self) -> None:
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.doc))
        tmp.replace(self.config_path)

    async def start(self) -> NetRouter:
        self.write()
        self._stop = asyncio.Event()
        self.adaptor = RustAdaptor(FileConfigSource(self.config_path), self.state_dir, metrics_address=(self.host, 0))
        self._task = asyncio.create_task(self.adaptor.run(self._stop), name=f"router-{self.name}")
        applied = asyncio.ensure_future(self.adaptor.applied.wait())
        await asyncio.wait({applied, self._task}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        if self._task.done():
            self._task.result()
        assert applied.done(), f"router {self.name} did not start"
        return self

    async def apply(self) -> None:
        """Write the document and wait until the adaptor applied it."""
        assert self.adaptor is not None
        self.adaptor.applied.clear()
        self.write()
        await asyncio.wait_for(self.adaptor.applied.wait(), 30)

    async def stop(self) -> None:
        if self._task is not None:
            self._stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, 30)
            self._task = None

    async def crash(self) -> None:
        """As if the router's Pod died: the router process killed (SIGKILL), the adaptor gone; its sockets close."""
        assert self.adaptor is not None
        pid = self.adaptor.plane.pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        await self.stop()

    def cleanup(self) -> None:
        shutil.rmtree(self.state_dir, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            self.config_path.unlink()

    # --- document edits ----------------------------------------------------------------------------------------

    def link_to(self, other: NetRouter, *, cost: int = 1, name: str | None = None, via: Cable | None = None,
                cert: Issued | None = None, ca: Path | None = None) -> str:
        """Add a link from this router to ``other``'s access (through ``via`` when given)."""
        name = name or f"to-{other.name}"
        cert = cert or other.site.client_cert(self.site.name)
        profile = f"link-{name}"
        self.doc["tlsProfiles"] = [p for p in self.doc["tlsProfiles"] if p["name"] != profile]
        self.doc["tlsProfiles"].append({"name": profile, "files": {
            "ca": str(ca or other.site.ca.ca_file), "cert": str(cert.cert), "key": str(cert.key)}})
        host, port = (via.host, via.port) if via else (other.host, other.access_port)
        self.doc["links"] = [x for x in self.doc["links"] if x["name"] != name]
        self.doc["links"].append({"name": name, "host": host, "port": port, "tlsProfile": profile, "cost": cost})
        return name

    def unlink(self, name: str) -> None:
        self.doc["links"] = [x for x in self.doc["links"] if x["name"] != name]

    def listen(self, key: str, name: str | None = None) -> int:
        port = free_port(self.host)
        self.doc["listeners"].append({"name": name or key, "routingKey": key, "host": self.host, "port": port})
        return port

    def connect(self, key: str, backends: list[Any], name: str | None = None) -> None:
        ports = {b.port for b in backends}
        assert len(ports) == 1
        self.doc["connectors"].append({"name": name or f"{key}-{self.name}", "routingKey": key,
                                       "port": ports.pop(),
                                       "targets": [{"host": b.host, "name": b.name} for b in backends]})

    def disconnect(self, key: str) -> None:
        self.doc["connectors"] = [c for c in self.doc["connectors"] if c["routingKey"] != key]

    # --- observations ------------------------------------------------------------------------------------------

    def link_status(self, name: str) -> dict[str, Any] | None:
        assert self.adaptor is not None
        links = (self.adaptor.status or {}).get("links", [])
        return next((x for x in links if x["name"] == name), None)

    def routes(self) -> dict[str, dict[str, int]]:
        """routing key -> {link: cost} as this router uses them now."""
        assert self.adaptor is not None
        out: dict[str, dict[str, int]] = {}
        for route in (self.adaptor.status or {}).get("routes", []):
            for via in route["via"]:
                out.setdefault(route["routingKey"], {})[via["link"]] = via["cost"]
        return out

    async def metric(self, name: str, labels: str) -> float:
        """This router's metric ``name`` whose labels contain ``labels`` (0 when there is none), read from the router
        now."""
        assert self.adaptor is not None
        return metric_value(await self.adaptor.plane.metrics_text(), name, labels)

    async def link_metric(self, metric: str, link: str) -> int:
        """A per-link counter of this router, e.g. ``streams`` or ``connections``, summed over the link's sessions
        (the metrics are refreshed every second)."""
        assert self.adaptor is not None
        text = await self.adaptor.plane.metrics_text()
        total = 0
        for line in text.splitlines():
            if line.startswith(f"service_network_link_{metric}_total{{") and f'link="{link}"' in line:
                total += int(float(line.rsplit(" ", 1)[1]))
        return total

    async def sent_over(self, link: str) -> int:
        """Connections this router has sent over ``link`` so far (streams it opened there, for any key)."""
        assert self.adaptor is not None
        answer = await self.adaptor.plane.request({"op": "links"})
        return sum(int(g["streams"]) for g in answer.get("links", []) if g["name"] == link)


class Cable:
    """A loopback TCP relay standing for the network between two routers: ``cut()`` resets every connection and
    refuses new ones; ``silence()`` keeps connections open but forwards nothing (packets lost); ``restore()``
    forwards again."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.host = net_address(61)
        self.port = 0
        self.state = "up"
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()

    async def start(self) -> Cable:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.state != "up":
            if self.state == "cut":
                writer.transport.abort()
            else:
                self._writers.add(writer)     # silent: held, nothing forwarded
            return
        try:
            up_r, up_w = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_w}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    await self._flowing.wait()      # silent: bytes are held back, as if lost
                    if self.state == "cut":
                        break
                    dst.write(data)
                    await dst.drain()
                if self.state == "up" and dst.can_write_eof():
                    dst.write_eof()
            except (OSError, RuntimeError):
                pass

        for t in (asyncio.create_task(pipe(reader, up_w)), asyncio.create_task(pipe(up_r, writer))):
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)

    def silence(self) -> None:
        self.state = "silent"
        self._flowing.clear()

    def cut(self) -> None:
        self.state = "cut"
        self._flowing.set()
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()

    def restore(self) -> None:
        self.state = "up"
        self._flowing.set()

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        with contextlib.suppress(Exception):
            if self._server is not None:
                await asyncio.wait_for(self._server.wait_closed(), 5)
