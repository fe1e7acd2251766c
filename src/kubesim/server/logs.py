"""``GET .../pods/<name>/log`` (``kubectl logs``): a container's output as the simulated kubelet wrote it.

The API server reads the file through ``log_path(namespace, pod, container)``, which ``KubeSim`` connects to its
cluster (a real API server asks the node's kubelet). ``container`` is required when the Pod has several containers
(400 naming them, as the API server answers); ``tailLines`` and ``limitBytes`` cut the output; ``previous`` is not
kept apart (the file holds every run of the container) and answers 400; ``follow`` returns what is there now.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from kubesim import errors
from kubesim.server import wire
from kubesim.server.routing import Target

if TYPE_CHECKING:
    from kubesim.server.context import ServerContext

MAX_BYTES = 10 * 1024 * 1024


def _read(path: Path, tail_lines: int | None, limit_bytes: int | None) -> bytes:
    try:
        with path.open("rb") as log:
            log.seek(0, 2)
            size = log.tell()
            log.seek(max(0, size - MAX_BYTES))
            data = log.read()
    except FileNotFoundError:
        return b""
    if tail_lines is not None:
        lines = data.splitlines(keepends=True)
        data = b"".join(lines[-tail_lines:]) if tail_lines > 0 else b""
    if limit_bytes is not None:
        data = data[:limit_bytes]
    return data


async def pod_log(ctx: ServerContext, request: web.Request, t: Target) -> web.StreamResponse:
    assert t.name is not None and t.namespace is not None
    pod = ctx.store.get(t.rt, t.namespace, t.name)
    spec = pod.get("spec") or {}
    names = [str(c.get("name", "")) for c in spec.get("containers") or []]
    init_names = [str(c.get("name", "")) for c in spec.get("initContainers") or []]
    q = request.query
    container = q.get("container") or (names[0] if len(names) == 1 else "")
    if not container:
        inits = f" or one of the init containers: [{' '.join(init_names)}]" if init_names else ""
        raise errors.bad_request(f"a container name must be specified for pod {t.name}, choose one of: "
                                 f"[{' '.join(names)}]{inits}")
    if container not in names and container not in init_names:
        raise errors.bad_request(f"container {container[:63]} is not valid for pod {t.name}")
    if wire.bool_param(q.get("previous")):
        raise errors.bad_request("kubesim keeps one log per container (every run appended): previous is not "
                                 "available")
    path = ctx.pod_logs(t.namespace, t.name, container) if ctx.pod_logs is not None else None
    if path is None:
        raise errors.bad_request(f"container {container} in pod {t.name} is not running on a kubesim node: no log")
    tail = wire.int_param(q, "tailLines")
    limit = wire.int_param(q, "limitBytes")
    data = await asyncio.to_thread(_read, path, tail, limit)
    return web.Response(body=data, content_type="text/plain", charset="utf-8")
