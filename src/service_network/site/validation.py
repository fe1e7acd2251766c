"""Checks of the names and values a Listener or Connector author writes, before they reach a Service, the router
document or a log line: every name that becomes a Service name, a port name or a router entity is hostile until
checked here. Messages quote at most 100 characters of the offending value."""

from __future__ import annotations

import ipaddress
import re

from ..router.names import encode_name

__all__ = [
    "MAX_QUOTED",
    "dns1035_label_problem",
    "host_problem",
    "port_problem",
    "quoted",
    "routing_key_problem",
    "service_port_name_problem",
    "type_problem",
]

MAX_QUOTED = 100
#: Routing keys up to this length leave room for ``.<pod name>`` within the router's limit of 4096 characters.
MAX_ROUTING_KEY = 3800
_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_LABEL = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?")


def quoted(value: str) -> str:
    """``value`` in quotes, cut to :data:`MAX_QUOTED` characters."""
    shown = value if len(value) <= MAX_QUOTED else value[:MAX_QUOTED] + "..."
    return '"' + shown.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def dns1035_label_problem(value: str) -> str | None:
    """Why ``value`` cannot name a Service (a DNS-1035 label), or None."""
    if not value:
        return "must not be empty"
    if len(value) > 63:
        return f"must be no more than 63 characters (has {len(value)})"
    if not _DNS1035.fullmatch(value):
        return ("must consist of lower case alphanumeric characters or '-', start with an alphabetic character, "
                "and end with an alphanumeric character")
    return None


def service_port_name_problem(value: str) -> str | None:
    """Why ``value`` cannot name a Service port (a DNS-1123 label), or None."""
    if len(value) > 63:
        return f"must be no more than 63 characters (has {len(value)})"
    if not _DNS1123_LABEL.fullmatch(value):
        return "must consist of lower case alphanumeric characters or '-', and start and end with an alphanumeric"
    return None


def port_problem(port: int) -> str | None:
    if not 1 <= port <= 65535:
        return f"port {port} is not between 1 and 65535"
    return None


def host_problem(host: str) -> str | None:
    """Why a Connector's ``host`` cannot be dialled by the router (an IP address or a DNS name), or None."""
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    if not name or len(name) > 253 or not all(_DNS_LABEL.fullmatch(label) for label in name.split(".")):
        return f"host {quoted(host)} is neither an IP address nor a DNS name"
    return None


def type_problem(type_: str | None) -> str | None:
    """Only TCP is carried (upstream silently configures nothing for other types; we say so)."""
    if type_ in (None, "", "tcp"):
        return None
    return f"type {quoted(type_)} is not supported: only tcp"


def routing_key_problem(key: str) -> str | None:
    """Routing keys are opaque (any text) but not empty, and must be encodable into router names."""
    if not key:
        return "routingKey must not be empty"
    if len(key) > MAX_ROUTING_KEY:
        return f"routingKey of {len(key)} characters is longer than {MAX_ROUTING_KEY}"
    try:
        encode_name(key)
    except ValueError as e:
        return f"routingKey {quoted(key)} cannot be used: {e}"
    return None
