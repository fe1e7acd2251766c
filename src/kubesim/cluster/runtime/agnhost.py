"""Built-in stand-in for Kubernetes' e2e test image ``agnhost``: ``serve-hostname``, ``netexec`` and ``pause``.

The command line is parsed as agnhost parses it (``command``/``args`` of the container, ``/agnhost`` as the
entrypoint, ``--flag=value`` or ``--flag value``); the servers bind the Pod IP on the ports those flags name, exactly
as the real program listens on them, and answer with the container's hostname (the Pod name), so a client can tell
which replica it reached. Behaviour follows agnhost 2.x:

- ``serve-hostname [--port 9376] [--http=true] [--tcp] [--udp] [--close]``: HTTP answers every request with the
  hostname; ``--tcp`` writes the hostname and closes each connection (needs ``--http=false``); ``--udp`` answers
  every datagram with it.
- ``netexec [--http-port 8080] [--udp-port 8081]``: HTTP ``/`` (``NOW: <time>``), ``/hostname``, ``/echo?msg=``,
  ``/clientip`` (``ip:port`` of the peer), ``/header?key=``, ``/healthz``, ``/readyz``, ``/exit?code=N`` (the
  container ends with that code); UDP commands ``hostname``, ``echo <text>``, ``clientip``. ``--udp-port -1``
  disables UDP.
- ``pause``: runs until stopped.

Anything else (unknown subcommand or flag) exits with 1 after writing the error to the container log, which the
kubelet turns into restarts and ``CrashLoopBackOff`` like any crashing program.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

from aiohttp import web

from kubesim.cluster.runtime.httpserve import HttpServer, bind_tcp, bind_udp, text
from kubesim.cluster.runtime.inprocess import InProcessHandler, Program, ProgramContext
from kubesim.cluster.runtime.registry import ContainerSpec

MAX_ECHO = 64 * 1024


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _bool(value: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "t", "true"):
        return True
    if lowered in ("0", "f", "false"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value {value!r}")


def _parser(name: str) -> _Parser:
    return _Parser(prog=f"agnhost {name}", add_help=False, allow_abbrev=False)


def _flag(parser: argparse.ArgumentParser, name: str, default: bool) -> None:
    parser.add_argument(name, type=_bool, nargs="?", const=True, default=default)


def parse_command(command: list[str], args: list[str]) -> tuple[str, argparse.Namespace]:
    """(subcommand, flags) from a container's command and args; ``UsageError`` says what is wrong."""
    argv = [*command, *args] if command else list(args)
    if argv and argv[0].rsplit("/", 1)[-1] == "agnhost":
        argv = argv[1:]
    if not argv:
        raise UsageError("a subcommand is required (serve-hostname, netexec or pause)")
    sub, rest = argv[0], argv[1:]
    if sub == "serve-hostname":
        parser = _parser(sub)
        parser.add_argument("--port", type=int, default=9376)
        _flag(parser, "--http", True)
        _flag(parser, "--tcp", False)
        _flag(parser, "--udp", False)
        _flag(parser, "--close", False)
        flags = parser.parse_args(rest)
        if flags.http and (flags.tcp or flags.udp):
            raise UsageError("Can't serve TCP/UDP mode and HTTP mode at the same time")
    elif sub == "netexec":
        parser = _parser(sub)
        parser.add_argument("--http-port", type=int, default=8080)
        parser.add_argument("--udp-port", type=int, default=8081)
        parser.add_argument("--sctp-port", type=int, default=-1)
        flags = parser.parse_args(rest)
    elif sub == "pause":
        flags = _parser(sub).parse_args(rest)
    else:
        raise UsageError(f'unknown command "{sub[:100]}" for "agnhost"')
    for port_flag in ("port", "http_port"):
        port = getattr(flags, port_flag, None)
        if port is not None and not 0 < port < 65536:
            raise UsageError(f"invalid port {port}")
    return sub, flags


def program_for(spec: ContainerSpec) -> Program:
    try:
        sub, flags = parse_command(spec.command, spec.args)
    except UsageError as error:
        message = f"Error: {error}"

        async def usage(ctx: ProgramContext) -> int:
            ctx.log(message)
            return 1

        return usage
    if sub == "serve-hostname":
        return lambda ctx: _serve_hostname(ctx, flags)
    if sub == "netexec":
        return lambda ctx: _netexec(ctx, flags)
    return _pause


async def _pause(ctx: ProgramContext) -> int:
    return await ctx.exited()


async def _serve_hostname(ctx: ProgramContext, flags: argparse.Namespace) -> int:
    hostname = ctx.hostname.encode()

    async def write_hostname(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(hostname)
        await writer.drain()

    async def answer(request: web.BaseRequest) -> web.StreamResponse:
        return text(ctx.hostname, close=flags.close)

    where = f"serve-hostname cannot listen on {ctx.pod_ip}:{flags.port}"
    binds: list[tuple[str, Callable[[], Awaitable[Any]]]] = []
    if flags.tcp:
        binds.append((where, lambda: bind_tcp(ctx.pod_ip, flags.port, write_hostname)))
    if flags.udp:
        binds.append((where, lambda: bind_udp(ctx.pod_ip, flags.port, lambda data, peer: hostname)))
    if flags.http:
        binds.append((where, lambda: HttpServer(answer).bind(ctx.pod_ip, flags.port)))
    return await ctx.serve(binds, f"Serving on port {flags.port}.")


def _udp_answer(ctx: ProgramContext, data: bytes, peer: tuple[str, int]) -> bytes:
    command = data.decode(errors="replace").strip()
    if command == "hostname":
        return ctx.hostname.encode()
    if command.startswith("echo "):
        return command[5:][:MAX_ECHO].encode()
    if command == "clientip":
        return f"{peer[0]}:{peer[1]}".encode()
    return b""


async def _netexec(ctx: ProgramContext, flags: argparse.Namespace) -> int:
    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        path = request.path
        if path == "/":
            return text(f"NOW: {datetime.datetime.now(datetime.UTC).isoformat()}")
        if path in ("/hostname", "/hostName"):
            return text(ctx.hostname)
        if path == "/echo":
            return text(request.query.get("msg", "")[:MAX_ECHO])
        if path == "/clientip":
            peer = request.transport.get_extra_info("peername") if request.transport else None
            return text(f"{peer[0]}:{peer[1]}" if peer else "")
        if path == "/header":
            return text(request.headers.get(request.query.get("key", ""), ""))
        if path in ("/healthz", "/readyz"):
            return text("ok")
        if path == "/exit":
            try:
                code = int(request.query.get("code", "0"))
            except ValueError:
                return text("bad exit code", 400)
            if not 0 <= code <= 255:
                return text("exit code must be between 0 and 255", 400)
            asyncio.get_running_loop().call_soon(ctx.exit, code)
            return text("", close=True)
        return text("404 page not found", 404)

    where = f"netexec cannot listen on {ctx.pod_ip}"
    binds: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        (where, lambda: HttpServer(handle).bind(ctx.pod_ip, flags.http_port))
    ]
    if 0 < flags.udp_port < 65536:
        binds.append((where, lambda: bind_udp(ctx.pod_ip, flags.udp_port, lambda d, peer: _udp_answer(ctx, d, peer))))
    return await ctx.serve(binds, f"Started HTTP server on port {flags.http_port}; UDP server on port {flags.udp_port}")


def handler() -> InProcessHandler:
    return InProcessHandler(program_for)


def pause_handler() -> InProcessHandler:
    """``registry.k8s.io/pause``: a container that does nothing until it is stopped."""
    return InProcessHandler(lambda spec: _pause)
