"""A Pod's ``/etc/resolv.conf`` as the kubelet writes it (pure), from its ``dnsPolicy`` and ``dnsConfig``.

Kubernetes (``pkg/kubelet/network/dns``) gives each Pod a resolver configuration:

- ``ClusterFirst`` (the default) and ``ClusterFirstWithHostNet``: the cluster DNS as the only nameserver, the search
  domains ``<namespace>.svc.<domain> svc.<domain> <domain>`` (then the node's own), ``options ndots:5``. A Pod with
  ``hostNetwork: true`` and ``ClusterFirst`` falls back to ``Default``.
- ``Default``: the node's resolver configuration (here: this machine's ``/etc/resolv.conf``).
- ``None``: nothing but the Pod's ``dnsConfig``.

``dnsConfig`` is merged last in every policy: its ``nameservers`` and ``searches`` are appended (duplicates dropped),
its ``options`` replace those of the same name (an option without a value is written bare). The kubelet keeps at
most three nameservers and 32 search domains; so does this.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MAX_NAMESERVERS = 3
MAX_SEARCHES = 32
CLUSTER_FIRST_NDOTS = "5"


def parse_resolv_conf(text: str) -> tuple[list[str], list[str], dict[str, str | None]]:
    """(nameservers, search domains, options) of a resolv.conf text."""
    nameservers: list[str] = []
    searches: list[str] = []
    options: dict[str, str | None] = {}
    for line in text.splitlines():
        words = line.split("#", 1)[0].split(";", 1)[0].split()
        if len(words) < 2:
            continue
        if words[0] == "nameserver":
            nameservers.append(words[1])
        elif words[0] in ("search", "domain"):
            searches = words[1:]
        elif words[0] == "options":
            for option in words[1:]:
                name, _, value = option.partition(":")
                options[name] = value or None
    return nameservers, searches, options


@functools.cache
def node_resolv_conf(path: str = "/etc/resolv.conf") -> str:
    """The node's resolver configuration: this machine's (read once; empty when there is none)."""
    try:
        return Path(path).read_text(errors="replace")[:65536]
    except OSError:
        return ""


def _unique(values: list[str]) -> list[str]:
    return list(dict.fromkeys(v for v in values if v))


def pod_resolv_conf(pod: Mapping[str, Any], cluster_dns: str | None, node_resolv_conf: str,
                    cluster_domain: str = "cluster.local") -> str | None:
    """The text of the Pod's ``/etc/resolv.conf``; None when it is the node's own, unchanged (``Default`` without
    ``dnsConfig``) or when the policy wants the cluster DNS and there is none (``cluster_dns`` None)."""
    spec = pod.get("spec") or {}
    namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
    policy = str(spec.get("dnsPolicy") or "ClusterFirst")
    config = spec.get("dnsConfig") or {}
    if policy == "ClusterFirst" and spec.get("hostNetwork"):
        policy = "Default"
    node_servers, node_searches, node_options = parse_resolv_conf(node_resolv_conf)
    if policy in ("ClusterFirst", "ClusterFirstWithHostNet"):
        if cluster_dns is None:
            return None
        nameservers = [cluster_dns]
        searches = [f"{namespace}.svc.{cluster_domain}", f"svc.{cluster_domain}", cluster_domain, *node_searches]
        options: dict[str, str | None] = {"ndots": CLUSTER_FIRST_NDOTS}
    elif policy == "None":
        nameservers, searches, options = [], [], {}
    else:
        if not config:
            return None
        nameservers, searches, options = node_servers, node_searches, dict(node_options)
    nameservers = _unique([*nameservers, *(str(s) for s in config.get("nameservers") or [])])[:MAX_NAMESERVERS]
    searches = _unique([*searches, *(str(s) for s in config.get("searches") or [])])[:MAX_SEARCHES]
    for option in config.get("options") or []:
        if isinstance(option, Mapping) and option.get("name"):
            value = option.get("value")
            options[str(option["name"])] = str(value) if value not in (None, "") else None
    lines = [f"nameserver {server}" for server in nameservers]
    if searches:
        lines.append("search " + " ".join(searches))
    if options:
        lines.append("options " + " ".join(k if v is None else f"{k}:{v}" for k, v in options.items()))
    return "\n".join(lines) + "\n"
