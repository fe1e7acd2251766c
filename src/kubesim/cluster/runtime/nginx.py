"""Built-in stand-in for ``nginx`` images: a static HTTP server on the Pod IP.

nginx's listening ports come from its configuration file, which kubesim does not read, so this server listens on
every TCP ``containerPort`` the container declares (port 80, or 8080 for ``nginx-unprivileged``, when it declares
none). It serves ``GET``/``HEAD`` from the document root ``/usr/share/nginx/html`` as the container sees it: files
of the volumes mounted there (a downward-API volume with the Pod's name, an emptyDir a test writes into, ...).
Without an ``index.html``, ``/`` answers with the container's hostname (the Pod name) where nginx would show its
welcome page, so a client can tell which replica it reached. Paths never leave the mounted volumes.
"""

from __future__ import annotations

import asyncio
import mimetypes
import posixpath
from typing import Any

from aiohttp import web

from kubesim.cluster.runtime.httpserve import HttpServer, text
from kubesim.cluster.runtime.inprocess import InProcessHandler, Program, ProgramContext
from kubesim.cluster.runtime.registry import ContainerSpec

DOCUMENT_ROOT = "/usr/share/nginx/html"
MAX_FILE = 16 * 1024 * 1024


def _read(path: Any) -> bytes | None:
    try:
        if path.is_dir():
            path = path / "index.html"
        if not path.is_file() or path.stat().st_size > MAX_FILE:
            return None
        return bytes(path.read_bytes())
    except OSError:
        return None


def program_for(default_port: int) -> Any:
    def make(spec: ContainerSpec) -> Program:
        ports = spec.declared_ports("TCP") or [default_port]

        async def handle(request: web.BaseRequest) -> web.StreamResponse:
            if request.method not in ("GET", "HEAD"):
                return text("405 Not Allowed", 405)
            path = posixpath.normpath("/" + request.path.lstrip("/"))
            host = spec.host_path(posixpath.join(DOCUMENT_ROOT, path.lstrip("/")))
            body = await asyncio.to_thread(_read, host) if host is not None else None
            if body is None:
                if path == "/":
                    return text(spec.hostname)
                return text("404 Not Found", 404)
            content_type = mimetypes.guess_type(path)[0] or "text/plain"
            if path == "/" or (host is not None and host.is_dir()):
                content_type = "text/html"
            return web.Response(body=body, content_type=content_type)

        async def main(ctx: ProgramContext) -> int:
            binds = [
                (f"bind() to {ctx.pod_ip}:{port} failed", lambda port=port: HttpServer(handle).bind(ctx.pod_ip, port))
                for port in ports
            ]
            return await ctx.serve(binds, f"serving {DOCUMENT_ROOT} on {ctx.pod_ip} ports {', '.join(map(str, ports))}")

        return main

    return make


def handler(default_port: int = 80) -> InProcessHandler:
    return InProcessHandler(program_for(default_port))
