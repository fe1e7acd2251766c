"""Readiness checks as the kubelet makes them: ``tcpSocket`` and ``httpGet`` probes against the Pod IP.

Only loopback targets are ever dialled: a probe naming another ``host`` fails with a message saying why.
``exec`` probes cannot run (no process to exec in) and fail with a message saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from kubesim.addresses import not_loopback_reason
from kubesim.version import MAJOR, MINOR

MAX_MESSAGE = 200


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    message: str = ""


@dataclass(frozen=True)
class ProbeTiming:
    initial_delay: float
    period: float
    timeout: float
    success_threshold: int
    failure_threshold: int


def timing(probe: Mapping[str, Any]) -> ProbeTiming:
    """The probe's timing fields with Kubernetes' defaults (period 10 s, timeout 1 s, thresholds 1 and 3)."""

    def number(key: str, default: float, minimum: float) -> float:
        value = probe.get(key)
        return max(float(value), minimum) if isinstance(value, int | float) else default

    return ProbeTiming(
        initial_delay=number("initialDelaySeconds", 0, 0),
        period=number("periodSeconds", 10, 1),
        timeout=number("timeoutSeconds", 1, 1),
        success_threshold=int(number("successThreshold", 1, 1)),
        failure_threshold=int(number("failureThreshold", 3, 1)),
    )


def resolve_port(port: Any, container: Mapping[str, Any]) -> int | None:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int):
        return port if 0 < port < 65536 else None
    if isinstance(port, str):
        if port.isdigit():
            return resolve_port(int(port), container)
        for declared in container.get("ports") or []:
            if declared.get("name") == port and isinstance(declared.get("containerPort"), int):
                return int(declared["containerPort"])
    return None


async def tcp_accepts(host: str, port: int, seconds: float) -> ProbeResult:
    refusal = not_loopback_reason(host)
    if refusal:
        return ProbeResult(False, f"not probed: {refusal}")
    try:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that arrives as the
        # connection attempt ends, and a readiness loop cancelled that way never stops (nor its Pod's shutdown)
        async with asyncio.timeout(seconds):
            _, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError) as error:
        return ProbeResult(False, f"dial tcp {host}:{port}: {_describe(error)}")
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()
    return ProbeResult(True)


async def http_get(
    scheme: str, host: str, port: int, path: str, headers: Mapping[str, str], seconds: float
) -> ProbeResult:
    refusal = not_loopback_reason(host)
    if refusal:
        return ProbeResult(False, f"not probed: {refusal}")
    if not path.startswith("/"):
        path = "/" + path
    url = f"{scheme.lower()}://{host}:{port}{path}"
    try:
        async with (
            aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True, ssl=False),
                timeout=aiohttp.ClientTimeout(total=seconds),
            ) as session,
            session.get(url, headers=dict(headers), allow_redirects=False) as response,
        ):
            status = response.status
    except aiohttp.ClientConnectorError as error:       # the kubelet's words: the dial that failed
        return ProbeResult(False, f'Get "{url[:MAX_MESSAGE]}": dial tcp {host}:{port}: {_describe(error.os_error)}')
    except TimeoutError:
        return ProbeResult(False, f'Get "{url[:MAX_MESSAGE]}": context deadline exceeded (Client.Timeout exceeded '
                                  f"while awaiting headers)")
    except (aiohttp.ClientError, OSError) as error:
        return ProbeResult(False, f'Get "{url[:MAX_MESSAGE]}": {_describe(error)}')
    if 200 <= status < 400:
        return ProbeResult(True)
    return ProbeResult(False, f"HTTP probe failed with statuscode: {status}")


async def run_probe(probe: Mapping[str, Any], pod_ip: str, container: Mapping[str, Any]) -> ProbeResult:
    """One attempt of a readiness probe."""
    seconds = timing(probe).timeout
    if "tcpSocket" in probe:
        spec = probe["tcpSocket"] or {}
        port = resolve_port(spec.get("port"), container)
        if port is None:
            return ProbeResult(False, f"invalid tcpSocket port {str(spec.get('port'))[:50]!r}")
        return await tcp_accepts(str(spec.get("host") or pod_ip), port, seconds)
    if "httpGet" in probe:
        spec = probe["httpGet"] or {}
        port = resolve_port(spec.get("port"), container)
        if port is None:
            return ProbeResult(False, f"invalid httpGet port {str(spec.get('port'))[:50]!r}")
        headers = {
            str(h.get("name")): str(h.get("value", ""))
            for h in spec.get("httpHeaders") or []
            if isinstance(h, dict) and h.get("name")
        }
        headers.setdefault("User-Agent", f"kube-probe/{MAJOR}.{MINOR}")
        return await http_get(
            str(spec.get("scheme") or "HTTP"),
            str(spec.get("host") or pod_ip),
            port,
            str(spec.get("path") or "/"),
            headers,
            seconds,
        )
    if "exec" in probe:
        return ProbeResult(False, "exec probes cannot run in kubesim (containers have no process to exec in)")
    if "grpc" in probe:
        return ProbeResult(False, "grpc probes are not supported by kubesim")
    return ProbeResult(False, "probe has no handler (tcpSocket, httpGet)")


def _describe(error: BaseException) -> str:
    if isinstance(error, TimeoutError):
        return "i/o timeout"
    if isinstance(error, ConnectionRefusedError):
        return "connect: connection refused"
    if isinstance(error, ConnectionResetError):
        return "read: connection reset by peer"
    return str(error)[:MAX_MESSAGE] or type(error).__name__
