"""The network observer of a demo, installed as a Skupper user installs it: a NetworkObserver resource
(``observability.skupper.io/v2alpha1``, upstream's chart values; here every default) in a site's namespace, which
the site controller deploys. Then its console URL, sign-in and what it saw, for the demo's output.

The observer Pod serves HTTPS on its Pod IP (a loopback address in the local cluster) with a certificate from the
namespace's ``skupper-local-ca``, and asks for the user ``skupper`` and the password of its Secret, as upstream's.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from devenv.up import Console
from service_network.networkobserver.compose import API_PORT

__all__ = ["OBSERVER_NAME", "ObserverAccess", "network_observer", "observed_summary", "observer_access",
           "show_observer"]

#: The NetworkObserver's name: it holds the chart's name, so its objects are named the same (the chart's rule).
OBSERVER_NAME = "network-observer"
NETWORK_OBSERVERS = "networkobservers.observability.skupper.io"


def network_observer(namespace: str) -> dict[str, Any]:
    """A NetworkObserver with upstream's defaults (basic authentication, a certificate Skupper issues)."""
    return {"apiVersion": "observability.skupper.io/v2alpha1", "kind": "NetworkObserver",
            "metadata": {"name": OBSERVER_NAME, "namespace": namespace}, "spec": {}}


@dataclass(frozen=True)
class ObserverAccess:
    """How to reach a deployed observer: its console URL, sign-in, and the CA and name its certificate is for."""

    url: str
    user: str
    password: str
    ca: str
    server_name: str

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca)

    def authorization(self) -> str:
        return "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()


async def _get(api: Any, resource: str, name: str, namespace: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = await api.get(resource, name, namespace)
    except Exception as error:    # kubesim's ApiError: not there (yet)
        if getattr(error, "code", None) == 404:
            return None
        raise
    return found


def _decoded(secret: dict[str, Any] | None, key: str) -> str | None:
    value = ((secret or {}).get("data") or {}).get(key)
    return base64.b64decode(value).decode() if value else None


async def _ready_pod_ip(api: Any, namespace: str) -> str | None:
    pods, _ = await api.list("pods", namespace, label_selector=f"app.kubernetes.io/instance={OBSERVER_NAME}")
    for pod in pods:
        status = pod.get("status") or {}
        if not pod["metadata"].get("deletionTimestamp") and status.get("podIP") and any(
                c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []):
            return str(status["podIP"])
    return None


async def _deployed(api: Any, namespace: str) -> str | None:
    """None once the NetworkObserver is Deployed, else what its status says (or that it has none yet)."""
    obj = await _get(api, NETWORK_OBSERVERS, OBSERVER_NAME, namespace)
    conditions = {c.get("type"): c for c in ((obj or {}).get("status") or {}).get("conditions") or []}
    if (conditions.get("Deployed") or {}).get("status") == "True":
        return None
    failed = conditions.get("ReleaseFailed") or {}
    return str(failed.get("message")) if failed.get("status") == "True" else "not deployed yet"


async def observer_access(api: Any, namespace: str, seconds: float) -> ObserverAccess | str:
    """Waits (up to ``seconds``) until the NetworkObserver of ``namespace`` is deployed and its Pod ready; how to
    reach it, or what it is still waiting for."""
    deadline = time.monotonic() + seconds
    waiting = "not deployed yet"
    while time.monotonic() < deadline:
        waiting = await _deployed(api, namespace) or ""
        if not waiting:
            ip = await _ready_pod_ip(api, namespace)
            password = _decoded(await _get(api, "secrets", f"{OBSERVER_NAME}-auth", namespace), "htpasswd")
            ca = _decoded(await _get(api, "secrets", f"{OBSERVER_NAME}-tls", namespace), "ca.crt")
            if ip and password and ca:
                user, _, hashed = password.strip().partition(":")
                return ObserverAccess(f"https://{ip}:{API_PORT}/", user, hashed.removeprefix("{PLAIN}"), ca,
                                      OBSERVER_NAME)
            waiting = "its Pod is not ready yet"
        await asyncio.sleep(0.5)
    return waiting


async def observed_summary(access: ObserverAccess, sites: int, seconds: float, connections: int = 0
                           ) -> tuple[bool, str]:
    """Waits (up to ``seconds``) until the observer sees ``sites`` sites and at least ``connections`` connections
    between sites; (whether it did, what it sees)."""
    api = f"{access.url}api/v2alpha1"
    deadline = time.monotonic() + seconds
    seen: dict[str, Any] = {}
    headers = {"Authorization": access.authorization()}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5), headers=headers) as session:
        while True:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError, KeyError):
                for kind in ("sites", "routerlinks", "services", "processes", "sitepairs"):
                    async with session.get(f"{api}/{kind}", ssl=access.ssl_context(),
                                           server_hostname=access.server_name) as resp:
                        seen[kind] = (await resp.json())["results"]
            counted = sum(p["recordCount"] for p in seen.get("sitepairs", []))
            if (len(seen.get("sites", [])) >= sites and counted >= connections) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
    names = sorted(s["name"] for s in seen.get("sites", []))
    links_up = sum(1 for link in seen.get("routerlinks", []) if link["status"] == "up")
    pairs = ", ".join(f"{p['sourceName']} -> {p['destinationName']}: {p['recordCount']} connections"
                      for p in seen.get("sitepairs", []))
    text = (f"{len(names)} sites ({', '.join(names)}), {links_up} links up, "
            f"{len(seen.get('services', []))} services, {len(seen.get('processes', []))} processes"
            + (f"; {pairs}" if pairs else ""))
    return len(names) >= sites and counted >= connections, text


async def show_observer(api: Any, namespace: str, label: str, console: Console, *, sites: int,
                        connections: int = 0, seconds: float = 20.0, create: bool = True) -> bool:
    """Installs a NetworkObserver in ``namespace`` (unless ``create`` is False: the demo applied one), waits until
    it is deployed, prints its console URL and sign-in, and what it sees; whether it saw ``sites`` sites and
    ``connections`` connections."""
    if create:
        await api.patch(NETWORK_OBSERVERS, OBSERVER_NAME, network_observer(namespace), namespace=namespace,
                        patch_type="apply", field_manager="listener-operator-demo", force=True)
    access = await observer_access(api, namespace, max(seconds, 60.0))
    console.line()
    if isinstance(access, str):
        console.line(f"Network observer (NetworkObserver {OBSERVER_NAME} in {namespace}): not running: {access}")
        return False
    seen, summary = await observed_summary(access, sites, seconds, connections)
    console.line(f"Network observer (NetworkObserver {OBSERVER_NAME} in {namespace}, {label}): console {access.url}"
                 f" (user {access.user}, password {access.password}; its certificate, from {namespace}'s "
                 f"skupper-local-ca, names {access.server_name}: a browser that trusts that CA opens it by that name)")
    console.line(f"  or: kubectl -n {namespace} port-forward service/{OBSERVER_NAME} 8443:443, then "
                 f"https://127.0.0.1:8443/")
    console.line(f"  {'sees' if seen else 'sees only'} {summary}")
    return seen
