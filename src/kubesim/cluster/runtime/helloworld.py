"""Built-in stand-ins for Skupper's hello-world images (``quay.io/skupper/hello-world-backend`` and ``-frontend``),
so that upstream's hello-world runs on kubesim as written.

- **backend**: HTTP on port 8080 (or ``BACKEND_SERVICE_PORT_``): ``POST /api/hello`` with ``{"name": ...}`` answers
  ``{"text": "Hi, <name>.  I am <its name> (<Pod name>).", "name": <its name>}``, as upstream's backend does; its
  name is made from the Pod's name.
- **frontend**: HTTP on port 8080 (or ``FRONTEND_SERVICE_PORT``): ``GET /`` a small page that says hello through
  the backend; ``POST /api/hello`` forwards the request to the backend at ``BACKEND_SERVICE_HOST``:``
  BACKEND_SERVICE_PORT`` (default port 8080; without the variable, the first of ``backend`` and
  ``hello-world-backend`` the cluster's names resolve: upstream's image relies on the kubelet's service variables of
  a ``backend`` Service that existed when it started, which kubesim does not set) and records
  the exchange; ``GET /api/data`` lists the exchanges; ``POST /api/generate-id`` names a visitor; ``GET
  /api/health`` answers OK. A backend that cannot be reached is a 503 naming it.

Connections stay on loopback addresses: a backend name that does not resolve to one is refused.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import aiohttp
from aiohttp import web

from kubesim.addresses import not_loopback_reason
from kubesim.cluster.runtime.httpserve import HttpServer, text
from kubesim.cluster.runtime.inprocess import InProcessHandler, Program, ProgramContext
from kubesim.cluster.runtime.registry import ContainerSpec

PORT = 8080
MAX_BODY = 64 * 1024
MAX_RECORDS = 100
_WORDS = ("amber", "brisk", "cobalt", "dapper", "eager", "fuzzy", "gentle", "hazel", "ivory", "jolly")
_THINGS = ("anchor", "beacon", "compass", "dynamo", "engine", "falcon", "gadget", "harbor", "island", "jigsaw")
PAGE = """<!doctype html><html><head><title>Hello World</title></head><body>
<h1>Hello World</h1><p>This frontend says hello to the backend through the service network.</p>
<form method="post" action="/api/hello" onsubmit="return false"><button id="hello">Say hello</button></form>
<pre id="answer"></pre>
<script>
document.getElementById("hello").onclick = async () => {
  const response = await fetch("/api/hello", {method: "POST", headers: {"Content-Type": "application/json"},
                                             body: JSON.stringify({name: "Visitor", text: "Hello!"})});
  document.getElementById("answer").textContent = await response.text();
};
</script></body></html>
"""


def made_up_name(seed: str, words: tuple[str, ...] = _WORDS, things: tuple[str, ...] = _THINGS) -> str:
    """A stable two-word name for ``seed`` (upstream's images pick random ones)."""
    digest = hashlib.sha256(seed.encode()).digest()
    return f"{words[digest[0] % len(words)].title()} {things[digest[1] % len(things)].title()}"


def _port(spec: ContainerSpec, variable: str) -> int:
    value = spec.env.get(variable, "")
    return int(value) if value.isdigit() and 0 < int(value) < 65536 else PORT


async def _json(request: web.BaseRequest) -> dict[str, Any] | None:
    body = await request.content.read(MAX_BODY + 1)
    if len(body) > MAX_BODY:
        return None
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def backend_program(spec: ContainerSpec) -> Program:
    name = made_up_name(spec.pod_name)
    port = _port(spec, "BACKEND_SERVICE_PORT_")

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        if request.path == "/api/hello" and request.method == "POST":
            data = await _json(request)
            if data is None:
                return text("Bad Request", 400)
            requestor = str(data.get("name") or "stranger")[:100]
            return web.json_response({"text": f"Hi, {requestor}.  I am {name} ({spec.hostname}).", "name": name})
        if request.path in ("/", "/api/health") and request.method == "GET":
            return text("OK")
        return text("Not Found", 404)

    async def main(ctx: ProgramContext) -> int:
        return await ctx.serve([(f"bind to {ctx.pod_ip}:{port} failed",
                                 lambda: HttpServer(handle).bind(ctx.pod_ip, port))],
                               f"hello-world backend {name!r} on {ctx.pod_ip}:{port}")

    return main


def frontend_program(spec: ContainerSpec) -> Program:
    port = _port(spec, "FRONTEND_SERVICE_PORT")
    backend_hosts = [spec.env["BACKEND_SERVICE_HOST"]] if spec.env.get("BACKEND_SERVICE_HOST") else [
        "backend", "hello-world-backend"]
    backend_host = backend_hosts[0]
    backend_port = _port(spec, "BACKEND_SERVICE_PORT")
    records: list[dict[str, Any]] = []

    async def call_backend(data: dict[str, Any]) -> web.StreamResponse:
        address = None
        for host in backend_hosts:
            address = spec.resolve(host) if spec.resolve is not None else None
            if address is not None:
                break
        if address is None:
            return text(f"the backend ({' or '.join(backend_hosts)}) does not resolve", 503)
        if refusal := not_loopback_reason(address):
            return text(f"the backend {backend_host} ({address}) is not dialled: {refusal}", 503)
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as client, \
                    client.post(f"http://{address}:{backend_port}/api/hello", json=data) as response:
                answer = await response.json(content_type=None)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as e:
            return text(f"the backend {backend_host}:{backend_port} did not answer: {str(e)[:200]}", 503)
        records.append({"request": data, "response": answer})
        del records[:-MAX_RECORDS]
        return web.json_response(answer)

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        if request.path == "/" and request.method == "GET":
            return web.Response(text=PAGE, content_type="text/html")
        if request.path == "/api/hello" and request.method == "POST":
            data = await _json(request)
            return text("Bad Request", 400) if data is None else await call_backend(data)
        if request.path == "/api/data" and request.method == "GET":
            return web.json_response(records)
        if request.path == "/api/generate-id" and request.method == "POST":
            visitor = made_up_name(f"{spec.pod_name}-{len(records)}")
            return web.json_response({"id": visitor.lower().replace(" ", "-"), "name": visitor})
        if request.path == "/api/health" and request.method == "GET":
            return text("OK")
        return text("Not Found", 404)

    async def main(ctx: ProgramContext) -> int:
        return await ctx.serve([(f"bind to {ctx.pod_ip}:{port} failed",
                                 lambda: HttpServer(handle).bind(ctx.pod_ip, port))],
                               f"hello-world frontend on {ctx.pod_ip}:{port} (backend {backend_host}:{backend_port})")

    return main


def backend_handler() -> InProcessHandler:
    return InProcessHandler(backend_program)


def frontend_handler() -> InProcessHandler:
    return InProcessHandler(frontend_program)
