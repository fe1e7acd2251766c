"""Listeners and Connectors -> router entities (pure): the checks of each object, its errors with upstream's messages
(skupper-listener.md §4.3, §5.9) plus those upstream misses, the targets of a Connector, and its entities in the
router document (docs/service-network-router.md).

Entity names: a Listener's router listener is named after it, with ``exposePodsByName`` one more per Pod named
``<listener>@<pod>``; a Connector's router connector is named after it, with one target per Pod (named after the
Pod) or its host, and with ``exposePodsByName`` one more connector per Pod, ``<connector>@<pod>`` on routing key
``<routingKey>.<pod>``. ``@`` cannot occur in object names, so entity names never collide.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from operator_runtime.objects import JsonDict, items, mapping, meta

from ..crd.models import ConnectorSpec, ListenerSpec
from .selector import SelectorError, parse_selector
from .status import ConditionState, error
from .validation import (
    dns1035_label_problem,
    host_problem,
    port_problem,
    quoted,
    routing_key_problem,
    service_port_name_problem,
    type_problem,
)

__all__ = [
    "Binding",
    "BindingError",
    "SecretInfo",
    "check_connector",
    "check_exposure",
    "check_listener",
    "connector_entities",
    "parse_spec",
    "pod_targets",
    "secret_info",
    "tls_problem",
]

TLS_SECRET_TYPES = ("kubernetes.io/tls", "Opaque")
M = TypeVar("M", bound=BaseModel)


@dataclass
class Binding:
    """The state of one Listener, MultiKeyListener, Connector, AttachedConnector or AttachedConnectorBinding."""

    kind: str
    obj: Mapping[str, Any]
    configured: ConditionState
    reason: str | None = None                  # the error's name, for its Event
    matched: bool = False
    host: str | None = None                    # Listener: the Service it is exposed on
    selected_pods: list[JsonDict] | None = None
    reachable: list[str] | None = None         # MultiKeyListener: its keys with a reachable connector

    @property
    def name(self) -> str:
        return meta(self.obj).name

    def fail(self, reason: str, message: str) -> None:
        self.configured = error(message)
        self.reason = reason


class BindingError(Exception):
    """Why a Listener or Connector is not (fully) configured: ``reason`` names the case (Event reason), ``str()``
    is the status message."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class SecretInfo:
    """What the controller knows of a Secret: its type and the names of its keys (never the values)."""

    type: str
    keys: frozenset[str]


def secret_info(secret: Mapping[str, Any]) -> SecretInfo:
    data = mapping(secret, "data")
    return SecretInfo(type=str(secret.get("type") or "Opaque"), keys=frozenset(str(k) for k in data))


def parse_spec(model: type[M], obj: Mapping[str, Any]) -> M:
    """The object's spec as ``model``, or ``BindingError`` (InvalidSpec) naming the first bad field."""
    try:
        return model.model_validate(dict(mapping(obj, "spec")))
    except ValidationError as e:
        first = e.errors(include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
        raise BindingError("InvalidSpec", f"spec.{where}: {first['msg']}{more}") from None


def check_listener(obj: Mapping[str, Any]) -> ListenerSpec:
    """The Listener's spec, or ``BindingError`` for what makes it unusable on its own (upstream reports none of
    these: an invalid host or port failed later, in the Service write, or not at all)."""
    spec = parse_spec(ListenerSpec, obj)
    if problem := type_problem(spec.type):
        raise BindingError("UnsupportedType", problem)
    if problem := routing_key_problem(spec.routing_key):
        raise BindingError("InvalidRoutingKey", problem)
    check_exposure("Listener", meta(obj).name, spec.host, spec.port)
    return spec


def check_exposure(kind: str, name: str, host: str, port: int) -> None:
    """``BindingError`` unless a Listener-like object can be a port (named ``name``) of the Service ``host``."""
    if problem := dns1035_label_problem(host):
        raise BindingError("InvalidHost", f"host {quoted(host)} cannot name a Service: {problem}")
    if problem := port_problem(port):
        raise BindingError("InvalidPort", problem)
    if problem := service_port_name_problem(name):
        raise BindingError("InvalidName", f"{kind} name {quoted(name)} cannot name a Service port: {problem}")


def check_connector(obj: Mapping[str, Any]) -> ConnectorSpec:
    spec = parse_spec(ConnectorSpec, obj)
    if problem := type_problem(spec.type):
        raise BindingError("UnsupportedType", problem)
    if problem := routing_key_problem(spec.routing_key):
        raise BindingError("InvalidRoutingKey", problem)
    if not spec.host and not spec.selector:
        raise BindingError("NoTarget", "Connector must define a non-empty spec.host or spec.selector")
    if spec.host and spec.selector:
        raise BindingError("NoTarget", "Connector must not define both spec.host and spec.selector")
    if problem := port_problem(spec.port):
        raise BindingError("InvalidPort", problem)
    if spec.host and (problem := host_problem(spec.host)):
        raise BindingError("InvalidHost", problem)
    if spec.selector:
        try:
            parse_selector(spec.selector)
        except SelectorError as e:
            raise BindingError("InvalidSelector", f"invalid selector {quoted(spec.selector)}: {e}") from None
    return spec


def tls_problem(name: str, secret: SecretInfo | None, *, need_cert: bool, need_ca: bool) -> BindingError | None:
    """Why the Secret ``name`` cannot provide the TLS material needed, or None."""
    if secret is None:
        return BindingError("TlsCredentialsNotFound", f"TLS credentials secret {quoted(name)} not found")
    if secret.type not in TLS_SECRET_TYPES:
        return BindingError("TlsCredentialsInvalid", f"TLS credentials secret {quoted(name)} has type "
                                                     f"{quoted(secret.type)}: expected kubernetes.io/tls or Opaque")
    needed = (["tls.crt", "tls.key"] if need_cert else []) + (["ca.crt"] if need_ca else [])
    missing = [key for key in needed if key not in secret.keys]
    if missing:
        return BindingError("TlsCredentialsInvalid",
                            f"TLS credentials secret {quoted(name)} has no {' and no '.join(missing)}")
    return None


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    return any(isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
               for c in items(pod, "status", "conditions"))


def pod_targets(pods: Iterable[Mapping[str, Any]], include_not_ready: bool) -> list[JsonDict]:
    """Router targets for the Pods of a selector: Running, Ready (or ``include_not_ready``), not being deleted,
    with an IP; sorted by Pod name. Each is ``{"host": ip, "name": pod, "processId": uid}``."""
    targets = []
    for pod in pods:
        pod_meta = meta(pod)
        ip = mapping(pod, "status").get("podIP")
        if (pod_meta.deletion_timestamp or mapping(pod, "status").get("phase") != "Running" or not ip
                or not (include_not_ready or _pod_ready(pod))):
            continue
        targets.append({"host": str(ip), "name": pod_meta.name, "processId": pod_meta.uid})
    return sorted(targets, key=lambda t: t["name"])


def connector_entities(name: str, spec: ConnectorSpec, targets: Sequence[Mapping[str, Any]],
                       tls_profile: str | None) -> list[JsonDict]:
    """The router document's connectors for one Connector (one more per Pod with ``exposePodsByName``)."""
    base: JsonDict = {"routingKey": spec.routing_key, "port": spec.port, "tlsProfile": tls_profile,
                      "useClientCert": bool(spec.use_client_cert and tls_profile),
                      "verifyHostname": bool(spec.verify_hostname)}
    entities = [{"name": name, **base, "targets": [dict(t) for t in targets]}]
    if spec.expose_pods_by_name and spec.selector:
        for target in targets:
            pod = str(target["name"])
            entities.append({"name": f"{name}@{pod}", **base, "routingKey": f"{spec.routing_key}.{pod}",
                             "targets": [dict(target)]})
    return entities
