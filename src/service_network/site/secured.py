"""SecuredAccess (pure): selected Pods' ports exposed through an access type, with a server certificate.

For each SecuredAccess the controller keeps:

- a Service named after it (type by ``accessType``: ``loadbalancer`` (default), ``nodeport`` or ``local``), selecting
  ``spec.selector``, one port per ``spec.ports`` entry (``targetPort`` defaults to ``port``), annotated and owned so
  that a Service it did not write is never taken over;
- a Certificate named ``spec.certificate`` (default: the SecuredAccess's name), signed by ``spec.issuer`` (default:
  the site CA ``skupper-site-ca``), for the Service's DNS names and the resolved hosts, valid for servers; the
  Certificate reconcile writes it into the Secret of that name (the Service and the Certificate carry upstream's
  labels and annotations of the objects its SecuredAccess manager makes);
- its status: the resolved endpoints (one per port, named after it) and, once known, the CA certificate clients verify
  the server with (read from the issuer Secret by the I/O half, as the caches hold no values).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from operator_runtime.objects import JsonDict, items, mapping, meta

from ..constants import ANNOTATION_CONTROLLED, GROUP_VERSION
from ..crd.models import SecuredAccessSpec
from .access import (
    ACCESS_TYPES,
    ANNOTATION_HOSTS_PREFIX,
    DEFAULT_ACCESS_TYPE,
    LABEL_CERTIFICATE,
    LABEL_SECURED_ACCESS,
    SITE_CA_SECRET,
    endpoint_hosts,
)
from .bindings import BindingError, parse_spec
from .status import ConditionState, error, pending, ready
from .templates import Template, with_extra
from .validation import dns1035_label_problem, port_problem, quoted, service_port_name_problem

__all__ = ["ANNOTATION_SECURED_ACCESS", "SecuredPlan", "compose_secured_access"]

ANNOTATION_SECURED_ACCESS = "internal.skupper.io/securedaccess"
MAX_PORTS = 64


@dataclass
class SecuredPlan:
    obj: Mapping[str, Any]
    configured: ConditionState
    resolved: ConditionState | None = None
    service: JsonDict | None = None
    certificate: JsonDict | None = None
    endpoints: list[JsonDict] = field(default_factory=list)
    issuer: str | None = None             # the CA Secret whose certificate goes into status.ca
    reason: str | None = None


def _owner(obj: Mapping[str, Any]) -> list[JsonDict]:
    return [{"apiVersion": GROUP_VERSION, "kind": "SecuredAccess", "name": meta(obj).name, "uid": meta(obj).uid,
             "controller": True}]


def _resolve(service_type: str, service: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]],
             name: str, namespace: str, port: JsonDict) -> tuple[str | None, int | None, str]:
    """(host, port, what is awaited) of one port of the Service."""
    if service is None:
        return None, None, f"waiting for Service {name}"
    if service_type == "ClusterIP":
        return f"{name}.{namespace}", int(port["port"]), ""
    if service_type == "LoadBalancer":
        for ingress in items(service, "status", "loadBalancer", "ingress"):
            if isinstance(ingress, Mapping) and (ingress.get("ip") or ingress.get("hostname")):
                return str(ingress.get("ip") or ingress.get("hostname")), int(port["port"]), ""
        return None, None, f"waiting for a load balancer address of Service {name}"
    node_port = next((p.get("nodePort") for p in items(service, "spec", "ports")
                      if isinstance(p, Mapping) and p.get("name") == port["name"] and p.get("nodePort")), None)
    if not isinstance(node_port, int):
        return None, None, f"waiting for a node port of Service {name}"
    for pod in sorted(pods, key=lambda p: meta(p).name):
        host_ip = mapping(pod, "status").get("hostIP")
        if isinstance(host_ip, str) and host_ip and not meta(pod).deletion_timestamp:
            return host_ip, node_port, ""
    return None, None, "waiting for a selected Pod on a node (its node address is the endpoint)"


def _check(obj: Mapping[str, Any]) -> tuple[SecuredAccessSpec, str]:
    spec = parse_spec(SecuredAccessSpec, obj)
    name = meta(obj).name
    if problem := dns1035_label_problem(name):
        raise BindingError("InvalidName", f"SecuredAccess name {quoted(name)} cannot name a Service: {problem}")
    if not spec.selector:
        raise BindingError("InvalidSpec", "spec.selector must select Pods (at least one label)")
    if not 1 <= len(spec.ports) <= MAX_PORTS:
        raise BindingError("InvalidSpec", f"spec.ports must have 1 to {MAX_PORTS} entries")
    seen: set[str] = set()
    for i, p in enumerate(spec.ports):
        if problem := service_port_name_problem(p.name):
            raise BindingError("InvalidSpec", f"spec.ports[{i}].name {quoted(p.name)}: {problem}")
        if p.name in seen:
            raise BindingError("InvalidSpec", f"spec.ports[{i}].name {quoted(p.name)} is used twice")
        seen.add(p.name)
        for value in (p.port, p.target_port or p.port):
            if problem := port_problem(value):
                raise BindingError("InvalidPort", f"spec.ports[{i}]: {problem}")
        if (p.protocol or "TCP") not in ("TCP", "UDP"):
            raise BindingError("InvalidSpec", f"spec.ports[{i}].protocol {quoted(p.protocol or '')}: TCP or UDP")
    access_type = spec.access_type or DEFAULT_ACCESS_TYPE
    if access_type == "default":
        access_type = DEFAULT_ACCESS_TYPE
    if access_type not in ACCESS_TYPES:
        raise BindingError("UnsupportedAccessType", f"access type {quoted(access_type)} is not supported here "
                                                    f"(supported: {', '.join(ACCESS_TYPES)})")
    return spec, ACCESS_TYPES[access_type]


def compose_secured_access(obj: Mapping[str, Any], services: Mapping[str, Mapping[str, Any]],
                           pods: Sequence[Mapping[str, Any]], templates: tuple[Template, ...] = ()) -> SecuredPlan:
    """One SecuredAccess: its Service, its Certificate and its state. ``pods``: the Pods its selector picks;
    ``templates``: the label templates of its namespace."""
    name, namespace = meta(obj).name, meta(obj).namespace
    try:
        spec, service_type = _check(obj)
    except BindingError as e:
        return SecuredPlan(obj, error(str(e)), reason=e.reason)
    live = services.get(name)
    if live is not None and meta(live).annotations.get(ANNOTATION_SECURED_ACCESS) != name:
        return SecuredPlan(obj, error(f"Service {name} already exists in namespace"), reason="ServiceConflict")
    ports: list[JsonDict] = [{"name": p.name, "port": p.port, "targetPort": p.target_port or p.port,
                              "protocol": p.protocol or "TCP"} for p in spec.ports]
    service: JsonDict = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": {LABEL_SECURED_ACCESS: "true"},
                     "annotations": {ANNOTATION_CONTROLLED: "true", ANNOTATION_SECURED_ACCESS: name},
                     "ownerReferences": _owner(obj)},
        "spec": {"type": service_type, "selector": dict(spec.selector), "ports": ports}}
    plan = SecuredPlan(obj, ready(), service=with_extra(service, templates), issuer=spec.issuer or SITE_CA_SECRET)
    awaiting: list[str] = []
    for port in ports:
        host, resolved_port, awaited = _resolve(service_type, live, pods, name, namespace, port)
        if host is None:
            awaiting.append(awaited)
        else:
            plan.endpoints.append({"name": port["name"], "host": host, "port": str(resolved_port)})
    plan.resolved = pending(awaiting[0]) if awaiting else ready()
    if awaiting:
        plan.endpoints = []
    extra_dns, ips = endpoint_hosts(sorted({e["host"] for e in plan.endpoints}))
    dns = sorted({name, f"{name}.{namespace}", f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local",
                  *extra_dns})
    hosts = [*dns, *ips]
    plan.certificate = {
        "apiVersion": GROUP_VERSION, "kind": "Certificate",
        "metadata": {"name": spec.certificate or name, "namespace": namespace,
                     "labels": {LABEL_CERTIFICATE: "true"},
                     "annotations": {ANNOTATION_CONTROLLED: "true",
                                     ANNOTATION_HOSTS_PREFIX + meta(obj).uid: ",".join(sorted(hosts))},
                     "ownerReferences": _owner(obj)},
        "spec": {"ca": plan.issuer, "subject": name, "hosts": hosts, "server": True}}
    plan.certificate = with_extra(plan.certificate, templates)
    return plan
