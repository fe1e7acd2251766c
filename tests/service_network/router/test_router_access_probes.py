"""Issue 49.8: a TCP health check of the router access (the local cluster's load balancer connects and closes every
second) is counted in ``service_network_access_rejected_total{reason="closed"}`` and logged only at debug; a
connection that fails the TLS handshake is still logged ("link refused") and counted as ``tls``."""

from __future__ import annotations

import asyncio
import logging

import pytest
from router_support import wait_until

PROBES = 3


async def _rejected(router, reason: str) -> int:  # type: ignore[no-untyped-def]
    text = await router.adaptor.plane.metrics_text()
    prefix = f'service_network_access_rejected_total{{reason="{reason}"}} '
    return sum(int(float(line[len(prefix):])) for line in text.splitlines() if line.startswith(prefix))


async def _connect(host: str, port: int, payload: bytes = b"") -> None:
    _, writer = await asyncio.open_connection(host, port)
    if payload:
        writer.write(payload)
        await writer.drain()
    writer.close()
    await writer.wait_closed()


async def test_health_checks_of_the_router_access_are_counted_not_logged(net, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="service_network.router.dataplane")
    router = await net.router("west").start()
    await wait_until(lambda: router.adaptor.plane.addresses(), what="the router answers")
    await wait_until(lambda: _probe_accepted(router.host, router.access_port), what="the router access listens")
    for _ in range(PROBES):
        await _connect(router.host, router.access_port)
    await wait_until(lambda: _at_least(router, "closed", PROBES + 1), what="the health checks counted")
    assert [r.getMessage() for r in caplog.records if "link refused" in r.getMessage()] == []

    # a client that speaks something else than TLS is still refused out loud
    await _connect(router.host, router.access_port, b"GET / HTTP/1.0\r\n\r\n")
    await wait_until(lambda: _at_least(router, "tls", 1), what="the failed handshake counted")
    await wait_until(lambda: [r for r in caplog.records if "link refused" in r.getMessage()],
                     what="the failed handshake logged")


async def _at_least(router, reason: str, count: int) -> bool:  # type: ignore[no-untyped-def]
    return await _rejected(router, reason) >= count


async def _probe_accepted(host: str, port: int) -> bool:
    try:
        await _connect(host, port)
    except OSError:
        return False
    return True
