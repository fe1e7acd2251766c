"""``kubesim node stop|start|restart NODE`` and ``kubesim node list``: control the simulated nodes of a running
kubesim through its admin endpoint (``/kubesim/nodes``), found through a kubeconfig as kubectl finds its cluster
(``--kubeconfig``, else ``$KUBECONFIG``, else ``~/.kube/config``; its current context)."""

from __future__ import annotations

import base64
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

TIMEOUT_SECONDS = 60.0


class NodeCommandError(Exception):
    """What ``kubesim node`` tells its user instead of a traceback."""


@dataclass(frozen=True)
class Endpoint:
    url: str
    token: str | None
    ca_pem: bytes | None


def kubeconfig_path(given: Path | None) -> Path:
    if given is not None:
        return given
    env = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    return Path(env) if env else Path.home() / ".kube" / "config"


def read_endpoint(path: Path) -> Endpoint:
    """The server, CA and bearer token of the kubeconfig's current context."""
    try:
        config: Any = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise NodeCommandError(f"cannot read kubeconfig {path}: {error}") from None
    if not isinstance(config, dict):
        raise NodeCommandError(f"{path} is not a kubeconfig")
    contexts = {c.get("name"): c.get("context") or {} for c in config.get("contexts") or [] if isinstance(c, dict)}
    context = contexts.get(config.get("current-context")) or next(iter(contexts.values()), {})
    clusters = {c.get("name"): c.get("cluster") or {} for c in config.get("clusters") or [] if isinstance(c, dict)}
    users = {u.get("name"): u.get("user") or {} for u in config.get("users") or [] if isinstance(u, dict)}
    cluster = clusters.get(context.get("cluster")) or {}
    user = users.get(context.get("user")) or {}
    if not cluster.get("server"):
        raise NodeCommandError(f"{path} names no server for its current context")
    ca = cluster.get("certificate-authority-data")
    return Endpoint(str(cluster["server"]).rstrip("/"), user.get("token"),
                    base64.b64decode(ca) if isinstance(ca, str) else None)


async def call(endpoint: Endpoint, method: str, path: str) -> dict[str, Any]:
    """One request to the admin endpoint; the JSON answer, or ``NodeCommandError`` with the server's message."""
    context = None
    if endpoint.url.startswith("https://"):
        context = ssl.create_default_context(cadata=endpoint.ca_pem.decode()) if endpoint.ca_pem else \
            ssl.create_default_context()
    headers = {"Authorization": f"Bearer {endpoint.token}"} if endpoint.token else {}
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_SECONDS)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session, session.request(
                method, f"{endpoint.url}{path}", headers=headers, ssl=context if context is not None else False) \
                as answer:
            body = await answer.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as error:
        raise NodeCommandError(f"cannot reach kubesim at {endpoint.url}: {error}") from None
    if answer.status >= 400:
        message = body.get("message") if isinstance(body, dict) else None
        raise NodeCommandError(str(message or f"HTTP {answer.status}"))
    if not isinstance(body, dict):
        raise NodeCommandError("kubesim answered something that is not a JSON object")
    return body


async def run(action: str, node: str | None, kubeconfig: Path | None) -> list[str]:
    """The lines ``kubesim node <action> [NODE]`` prints."""
    endpoint = read_endpoint(kubeconfig_path(kubeconfig))
    if action == "list":
        listed = await call(endpoint, "GET", "/kubesim/nodes")
        return [f"{n['name']}\t{'running' if n['running'] else 'stopped'}" for n in listed.get("nodes") or []]
    assert node is not None
    await call(endpoint, "POST", f"/kubesim/nodes/{node}/{action}")
    past = {"stop": "stopped", "start": "started", "restart": "restarted"}[action]
    return [f"node/{node} {past}"]
