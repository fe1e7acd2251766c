"""``.../pods/<name>/exec`` (``kubectl exec``) over WebSocket, the streaming protocol kubectl 1.30+ speaks first
(``v5.channel.k8s.io``, else ``v4.channel.k8s.io``): each binary message is one channel byte (1 stdout, 2 stderr, 3
the final ``Status``) followed by data. The command runs in the container's view (:mod:`kubesim.cluster.runtime
.execution`, which ``KubeSim`` connects as ``exec_command``); a non-zero exit code is a ``Failure`` Status with
reason ``NonZeroExitCode`` and the code as cause, as the kubelet reports it, so kubectl exits with that code.

SPDY (kubectl's fallback) is not spoken: a request without a WebSocket upgrade gets 400 saying so. stdin is not
read (the command set reads no input); a TTY is not allocated.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from kubesim import errors
from kubesim.server.routing import Target

if TYPE_CHECKING:
    from kubesim.server.context import ServerContext

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
CHUNK = 32 * 1024
MAX_COMMAND = 64 * 1024


def _status(code: int, argv: list[str]) -> dict[str, Any]:
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {"metadata": {}, "status": "Failure",
            "message": f"command terminated with non-zero exit code: error executing command {argv}, exit code {code}",
            "reason": "NonZeroExitCode", "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}


async def pod_exec(ctx: ServerContext, request: web.Request, t: Target) -> web.StreamResponse:
    assert t.name is not None and t.namespace is not None
    pod = ctx.store.get(t.rt, t.namespace, t.name)
    names = [str(c.get("name", "")) for c in (pod.get("spec") or {}).get("containers") or []]
    container = request.query.get("container") or (names[0] if len(names) == 1 else "")
    if not container:
        raise errors.bad_request(f"a container name must be specified for pod {t.name}, choose one of: "
                                 f"[{' '.join(names)}]")
    if container not in names:
        raise errors.bad_request(f"container {container[:100]} is not valid for pod {t.name}")
    argv = request.query.getall("command", [])
    if not argv or sum(len(a) for a in argv) > MAX_COMMAND:
        raise errors.bad_request("you must specify at least one command for the container" if not argv else
                                 "the command is too long")
    if request.headers.get("Upgrade", "").lower() != "websocket":
        raise errors.bad_request("kubesim speaks the WebSocket streaming protocol (v5.channel.k8s.io) only; "
                                 "use kubectl 1.30 or later")
    offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")]
    protocol = next((p for p in PROTOCOLS if p in offered), None)
    if protocol is None:
        raise errors.bad_request(f"no supported streaming protocol offered (kubesim speaks {', '.join(PROTOCOLS)})")
    if ctx.exec_command is None:
        raise errors.bad_request("this kubesim has no nodes: there is no container to exec in")
    result = ctx.exec_command(t.namespace, t.name, container, list(argv))
    socket = web.WebSocketResponse(protocols=(protocol,))
    await socket.prepare(request)
    if isinstance(result, str):
        message = {"metadata": {}, "status": "Failure", "message": result, "reason": "InternalError"}
        await socket.send_bytes(b"\x03" + json.dumps(message).encode())
    else:
        for channel, data in ((1, bytes(result.stdout)), (2, bytes(result.stderr))):
            for start in range(0, len(data), CHUNK):
                await socket.send_bytes(bytes([channel]) + data[start:start + CHUNK])
        await socket.send_bytes(b"\x03" + json.dumps(_status(result.code, list(argv))).encode())
    await socket.close()
    return socket
