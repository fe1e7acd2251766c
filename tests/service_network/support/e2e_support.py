"""What the end-to-end network proofs observe, as a user would: a client in one cluster connecting to a Listener's
Service (its cluster IP, through kubesim's kube-proxy) and the name of the Pod that answered (``sn-test/echo``
greets with it); and, to tell which path a connection took, the streams each router Pod opened over each link (the
router's own metrics on the router Pod's metrics port: ``service_network_link_streams_total{link=...}``).
Loopback addresses only; every wait is bounded."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import aiohttp
from router_support import who
from site_support import ECHO_IMAGE, SiteEnv

from kubesim.addresses import is_loopback
from service_network.constants import ROUTER_METRICS_PORT

ECHO = {"app": "echo"}
_STREAMS = re.compile(r'^service_network_link_streams_total\{link="([^"]*)",remote_router="[^"]*"\} (\d+)', re.M)


async def service_ip(env: SiteEnv, host: str, within: float = 30.0) -> str:
    """The cluster IP of the Service ``host`` a Listener created in ``env``'s namespace."""
    async def check() -> str | None:
        assert env.sim.cluster is not None
        return env.sim.cluster.resolve(f"{host}.{env.namespace}.svc.cluster.local")
    ip: str = await env.wait_for(check, within, f"Service {host} in {env.namespace}")
    return ip


async def greeting(ip: str, port: int) -> str | None:
    """The Pod name an echo backend greets with through the network, or None while nothing answers."""
    try:
        name, _, writer = await who(ip, port)
    except (OSError, TimeoutError):
        return None
    writer.close()
    return name or None


async def first_greeting(env: SiteEnv, ip: str, port: int, within: float = 30.0) -> str:
    """The first Pod that answers at ``ip:port`` (polled: routes appear when the routers agree)."""
    name: str = await env.wait_for(lambda: greeting(ip, port), within, f"an answer at {ip}:{port}")
    return name


async def greetings(ip: str, port: int, count: int) -> Counter[str]:
    """``count`` connections one after another: which Pod answered each (``None`` counted as ``"-"``)."""
    answers: Counter[str] = Counter()
    for _ in range(count):
        answers[await greeting(ip, port) or "-"] += 1
    return answers


async def echo_backend(env: SiteEnv, replicas: int, key: str = "echo", connector: str = "echo") -> set[str]:
    """``replicas`` echo Pods and a Connector for them in ``env``; the names of the Pods once Ready."""
    await env.deployment("echo", ECHO_IMAGE, replicas, ECHO)
    await env.create("Connector", connector, {"routingKey": key, "selector": "app=echo", "port": 7000})
    return {p["metadata"]["name"] for p in await env.wait_ready_pods(ECHO, replicas)}


async def hop_sessions(env: SiteEnv) -> dict[str, int]:
    """Connections (streams) each router Pod of ``env`` has opened over each link (summed per link name)."""
    pods, _ = await env.api.list("pods", env.namespace, label_selector="skupper.io/component=router")
    totals: Counter[str] = Counter()
    for pod in pods:
        ip = pod.get("status", {}).get("podIP")
        if not ip:
            continue
        body = await _metrics(ip)
        for link, count in _STREAMS.findall(body):
            totals[link] += int(count)
    return dict(totals)


async def _metrics(ip: str) -> str:
    """The router Pod's metrics (the whole text: kubesim.testing.traffic.http_get keeps only 64 KiB)."""
    assert is_loopback(ip), ip
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session, \
            session.get(f"http://{ip}:{ROUTER_METRICS_PORT}/metrics") as response:
        assert response.status == 200, response.status
        return await response.text()


async def statuses(env: SiteEnv, kind: str) -> dict[str, dict[str, Any]]:
    """Every object of ``kind`` in ``env``'s namespace: name -> status."""
    from site_support import RESOURCES

    objects, _ = await env.api.list(RESOURCES[kind], env.namespace)
    return {o["metadata"]["name"]: o.get("status") or {} for o in objects}


async def wait_sessions_change(env: SiteEnv, before: dict[str, int], within: float = 10.0) -> dict[str, int]:
    """Hop counters of ``env`` once they differ from ``before``."""
    async def check() -> dict[str, int] | None:
        now = await hop_sessions(env)
        return now if now != before else None
    result: dict[str, int] = await env.wait_for(check, within, "hop counters to change")
    return result


__all__ = ["ECHO", "echo_backend", "first_greeting", "greeting", "greetings", "hop_sessions", "link_with_token",
           "service_ip", "statuses", "wait_sessions_change"]


async def link_with_token(granting: SiteEnv, redeeming: SiteEnv, name: str | None = None,
                          within: float = 30.0) -> None:
    """Link ``redeeming`` to ``granting`` as a user does: an AccessGrant in ``granting``, its url, code and CA in
    an AccessToken applied in ``redeeming``, redeemed (one link, dialed by ``redeeming``, carrying both ways)."""
    grant = name or f"for-{redeeming.namespace}"
    await granting.create("AccessGrant", grant, {"redemptionsAllowed": 1, "expirationWindow": "15m"})

    async def published() -> dict[str, Any] | None:
        status = await granting.status("AccessGrant", grant)
        return status if status.get("url") and status.get("code") and status.get("ca") else None
    status = await granting.wait_for(published, within, f"AccessGrant {grant} published")
    token = f"to-{granting.namespace}"
    await redeeming.create("AccessToken", token, {"url": status["url"], "code": status["code"], "ca": status["ca"]})

    async def redeemed() -> bool:
        current = await redeeming.status("AccessToken", token)
        assert current.get("status") != "Error", current
        return current.get("redeemed") is True
    await redeeming.wait_for(redeemed, within, f"AccessToken {token} redeemed")
