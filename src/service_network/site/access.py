"""Router access of one site (pure): how other sites reach this site's router, composed from the Site's
``linkAccess``, the namespace's RouterAccess objects, Secrets, Services and router Pods.

- The site CA (Secret ``skupper-site-ca``, upstream's name) is wanted for every active Site: it signs the router
  access's server certificate and the client certificates issued to linking sites. As upstream, it is a Certificate
  resource of that name (signing, self-signed, owned by the Site), which the Certificate reconcile keeps in the
  Secret (:mod:`.certificates`); a CA Secret that exists without being written by it is used as it is.
- A Site with ``linkAccess`` other than none gets the RouterAccess ``skupper-router`` (roles inter-router on 55671
  and edge on 45671, as upstream's interior; ``generateTlsCredentials`` with the site CA as issuer, server Secret
  ``skupper-site-server``); RouterAccess objects written by users are honoured the same way. One RouterAccess per
  site is used (``skupper-router`` first, else the oldest): the router document's ``routerAccess`` has one entry per
  role it serves (inter-router, edge), each on its role's port, with the same TLS profile.
- An edge Site (``spec.edge: true``) cannot accept links (as upstream: "Edge sites cannot accept links from remote
  sites"): its ``linkAccess`` makes no RouterAccess (the Site's ``Resolved`` says why) and a RouterAccess in its
  namespace is not served (its ``Configured`` says why).
- Exposure: a Service named after the RouterAccess selecting the router Pods' port of each role: ``LoadBalancer`` for
  ``loadbalancer`` (and ``default``), ``NodePort`` for ``nodeport``, ``ClusterIP`` for ``local``. Its resolved
  endpoint (the load balancer's address, the router Pod's node address and the node port, or the Service's DNS name)
  goes into the RouterAccess status, and the Site is ``Resolved`` once it is known.
- The router binds its Pod IP (``host`` "" in the document): ``bindHost`` is not used.
- The server certificate (``generateTlsCredentials``) is the Certificate resource named after ``tlsCredentials``,
  owned by the RouterAccess, signed by its issuer, valid for servers, for ``*.key.service-network`` and
  ``control.service-network`` (what routers send in SNI), the Service's DNS names and the resolved hosts; the
  Certificate reconcile reissues it when those change, and renews it.

The controller executes the plan: applies the Certificates, the RouterAccess and the Service, writes statuses.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from operator_runtime.objects import JsonDict, items, mapping, meta

from ..constants import ANNOTATION_CONTROLLED, EDGE_PORT, GROUP_VERSION, INTER_ROUTER_PORT, ROUTER_NAME
from ..crd.models import RouterAccessSpec
from ..router.names import CONTROL_SNI, KEY_SNI_WILDCARD
from .ha import group_labels, group_selector, router_groups
from .resources import owner_references
from .status import ConditionState, error, pending, ready
from .validation import quoted

__all__ = [
    "ACCESS_TYPES",
    "ANNOTATION_ACCESS",
    "ANNOTATION_CERT_ISSUER",
    "ANNOTATION_CERT_NAMES",
    "EDGE_SITE",
    "ROUTER_ACCESS_NAME",
    "SITE_CA_SECRET",
    "SITE_SERVER_SECRET",
    "AccessInputs",
    "AccessPlan",
    "AccessState",
    "compose_access",
    "default_issuer",
    "endpoint_hosts",
    "is_edge",
]

SITE_CA_SECRET = "skupper-site-ca"
SITE_SERVER_SECRET = "skupper-site-server"
ROUTER_ACCESS_NAME = "skupper-router"
INTER_ROUTER = "inter-router"
EDGE = "edge"
#: role -> the port the router serves it on (upstream's defaults, ``RouterAccessRole.GetPort``), in endpoint order
ROLE_PORTS = {INTER_ROUTER: INTER_ROUTER_PORT, EDGE: EDGE_PORT}
#: Why an edge Site has no router access (upstream's words for ``spec.edge``, then ours).
EDGE_SITE = "Edge sites cannot accept links from remote sites: an edge site has no link access"
#: On generated Secrets: the names the certificate was issued for, and the uid of the CA Secret that signed it.
ANNOTATION_CERT_NAMES = "internal.skupper.io/certificate-names"
ANNOTATION_CERT_ISSUER = "internal.skupper.io/issuer-uid"
#: On access Services: the RouterAccess they expose (a Service without it is never modified).
ANNOTATION_ACCESS = "internal.skupper.io/routeraccess"
#: Upstream's label on the Services its SecuredAccesses (and so its router accesses) make.
LABEL_SECURED_ACCESS = "internal.skupper.io/secured-access"
#: Upstream's marks on the Certificates its controller keeps (the label, and per owner uid the hosts it asked for).
LABEL_CERTIFICATE = "internal.skupper.io/certificate"
ANNOTATION_HOSTS_PREFIX = "internal.skupper.io/hosts-"
#: access type -> Service type
ACCESS_TYPES = {"loadbalancer": "LoadBalancer", "nodeport": "NodePort", "local": "ClusterIP"}
#: ``linkAccess: default`` (and a RouterAccess without ``accessType``): a load balancer, as upstream on Kubernetes.
DEFAULT_ACCESS_TYPE = "loadbalancer"
TLS_KEYS = ("ca.crt", "tls.crt", "tls.key")


@dataclass(frozen=True)
class AccessInputs:
    site: Mapping[str, Any]                             # the active Site
    router_accesses: Sequence[Mapping[str, Any]]        # RouterAccess objects of the namespace
    secrets: Mapping[str, Mapping[str, Any]]            # Secret views (type, key names, metadata) by name
    services: Mapping[str, Mapping[str, Any]]           # Services by name
    router_pods: Sequence[Mapping[str, Any]]


@dataclass
class AccessState:
    """One RouterAccess's status."""

    obj: Mapping[str, Any]
    configured: ConditionState
    resolved: ConditionState | None = None
    endpoints: list[JsonDict] = field(default_factory=list)


@dataclass
class AccessPlan:
    router_access: JsonDict | None = None              # RouterAccess to apply (from the Site's linkAccess)
    stale_router_access: Mapping[str, Any] | None = None   # the Site's RouterAccess its linkAccess no longer asks for
    document_access: list[JsonDict] = field(default_factory=list)     # router document routerAccess[]
    profiles: list[JsonDict] = field(default_factory=list)            # its TLS profile
    services: list[JsonDict] = field(default_factory=list)            # access Services to write
    certificates: list[JsonDict] = field(default_factory=list)        # Certificate resources to apply
    states: list[AccessState] = field(default_factory=list)
    resolved: ConditionState | None = None             # the Site's Resolved (None: no linkAccess)
    endpoints: list[JsonDict] = field(default_factory=list)           # the used access's endpoints


def certificate(name: str, namespace: str, owners: list[JsonDict], *, ca: str, subject: str,
                hosts: Sequence[str] = (), server: bool = False, signing: bool = False) -> JsonDict:
    """A Certificate resource (:mod:`.certificates` keeps its Secret), with upstream's label and annotations of a
    Certificate its controller keeps (``controlled``, and per owner the hosts it asked for)."""
    spec: JsonDict = {"ca": ca, "subject": subject[:64]}
    if hosts:
        spec["hosts"] = list(hosts)
    if server:
        spec["server"] = True
    if signing:
        spec["signing"] = True
    annotations = {ANNOTATION_CONTROLLED: "true",
                   **{ANNOTATION_HOSTS_PREFIX + str(o.get("uid")): ",".join(sorted(hosts)) for o in owners}}
    return {"apiVersion": GROUP_VERSION, "kind": "Certificate",
            "metadata": {"name": name, "namespace": namespace, "labels": {LABEL_CERTIFICATE: "true"},
                         "annotations": annotations, "ownerReferences": owners}, "spec": spec}


def _age(obj: Mapping[str, Any]) -> tuple[int, str, str]:
    return (0 if meta(obj).name == ROUTER_ACCESS_NAME else 1,
            str(mapping(obj, "metadata").get("creationTimestamp") or ""), meta(obj).name)


def is_edge(site: Mapping[str, Any] | None) -> bool:
    """Whether the Site runs its router as an edge (``spec.edge: true``): it links as an edge, accepts no links."""
    return site is not None and mapping(site, "spec").get("edge") is True


def default_issuer(site: Mapping[str, Any]) -> str:
    """The CA Secret that signs a Site's link credentials: ``spec.defaultIssuer``, else ``skupper-site-ca`` (what
    upstream publishes as ``status.defaultIssuer``)."""
    return str(mapping(site, "spec").get("defaultIssuer") or SITE_CA_SECRET)


def site_router_access(site: Mapping[str, Any], access_type: str) -> JsonDict:
    """The RouterAccess a Site's ``linkAccess`` asks for (owned by the Site)."""
    issuer = default_issuer(site)
    return {"apiVersion": GROUP_VERSION, "kind": "RouterAccess",
            "metadata": {"name": ROUTER_ACCESS_NAME, "namespace": meta(site).namespace,
                         "annotations": {ANNOTATION_CONTROLLED: "true"}, "ownerReferences": owner_references(site)},
            "spec": {"accessType": access_type, "generateTlsCredentials": True, "issuer": issuer,
                     "roles": [{"name": role, "port": port} for role, port in ROLE_PORTS.items()],
                     "tlsCredentials": SITE_SERVER_SECRET}}


def _access_service(obj: Mapping[str, Any], service_type: str, ports: Mapping[str, int], name: str | None = None,
                    group: str = ROUTER_NAME) -> JsonDict:
    """The Service exposing the access (``name``, default the RouterAccess's) to the router Pods of ``group`` (one
    router of the site), one port per role (``ports``: role -> port, named after the role), labelled and selecting
    as the Service upstream's SecuredAccess makes. It publishes router
    Pods that are not Ready yet: a router becomes Ready once its Listeners have routes, which come over the links
    other sites dial to this access."""
    access_meta = meta(obj)
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name or access_meta.name, "namespace": access_meta.namespace,
                         "labels": {LABEL_SECURED_ACCESS: "true"},
                         "annotations": {ANNOTATION_CONTROLLED: "true", ANNOTATION_ACCESS: access_meta.name},
                         "ownerReferences": [{"apiVersion": GROUP_VERSION, "kind": "RouterAccess",
                                              "name": access_meta.name, "uid": access_meta.uid}]},
            "spec": {"type": service_type, "selector": group_selector(group),
                     "publishNotReadyAddresses": True,
                     "ports": [{"name": role, "port": port, "targetPort": port, "protocol": "TCP"}
                               for role, port in ports.items()]}}


def _resolve(service_type: str, service: Mapping[str, Any] | None, router_pods: Sequence[Mapping[str, Any]],
             name: str, namespace: str, port: int, role: str = INTER_ROUTER) -> tuple[str | None, int | None, str]:
    """(host, port, what is awaited) of the port of ``role`` of an access Service."""
    if service is None:
        return None, None, f"waiting for Service {name}"
    if service_type == "ClusterIP":
        return f"{name}.{namespace}", port, ""
    if service_type == "LoadBalancer":
        for ingress in items(service, "status", "loadBalancer", "ingress"):
            if isinstance(ingress, Mapping) and (ingress.get("ip") or ingress.get("hostname")):
                return str(ingress.get("ip") or ingress.get("hostname")), port, ""
        return None, None, f"waiting for a load balancer address of Service {name}"
    node_port = next((p.get("nodePort") for p in items(service, "spec", "ports")
                      if isinstance(p, Mapping) and p.get("name") == role and p.get("nodePort")), None)
    if not isinstance(node_port, int):
        return None, None, f"waiting for a node port of Service {name}"
    for pod in sorted(router_pods, key=lambda p: meta(p).name):
        host_ip = mapping(pod, "status").get("hostIP")
        if isinstance(host_ip, str) and host_ip and not meta(pod).deletion_timestamp:
            return host_ip, node_port, ""
    return None, None, "waiting for a router Pod on a node (its node address is the endpoint)"


def endpoint_hosts(hosts: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(DNS names, IPs) among ``hosts``."""
    dns, ips = [], []
    for host in hosts:
        try:
            ips.append(str(ipaddress.ip_address(host)))
        except ValueError:
            dns.append(host)
    return tuple(dns), tuple(ips)


def _secret_usable(secret: Mapping[str, Any] | None) -> bool:
    return secret is not None and all(k in mapping(secret, "data") for k in TLS_KEYS)


def compose_access(inputs: AccessInputs) -> AccessPlan:
    """The access plan of one namespace (see the module docstring)."""
    site = inputs.site
    namespace = meta(site).namespace
    plan = AccessPlan()
    issuer_default = default_issuer(site)
    if issuer_default == SITE_CA_SECRET:
        plan.certificates.append(certificate(SITE_CA_SECRET, namespace, owner_references(site),
                                             ca="", subject=SITE_CA_SECRET, signing=True))

    link_access = str(mapping(site, "spec").get("linkAccess") or "")
    accesses = sorted((o for o in inputs.router_accesses if not meta(o).deletion_timestamp), key=_age)
    access_type = DEFAULT_ACCESS_TYPE if link_access == "default" else link_access
    edge = is_edge(site)
    if link_access in ("", "none") or access_type not in ACCESS_TYPES or edge:
        for obj in accesses:
            if meta(obj).name == ROUTER_ACCESS_NAME and any(
                    ref.kind == "Site" and ref.uid == meta(site).uid for ref in meta(obj).owner_references):
                plan.stale_router_access = obj           # ours (owned by the Site): deleted, and not used meanwhile
        accesses = [o for o in accesses if o is not plan.stale_router_access]
    if link_access not in ("", "none"):
        if edge:
            plan.resolved = error(EDGE_SITE)
        elif access_type not in ACCESS_TYPES:
            plan.resolved = error(f"link access {quoted(link_access)} is not supported here (supported: default, "
                                  f"{', '.join(ACCESS_TYPES)})")
        else:
            plan.router_access = site_router_access(site, access_type)
            plan.resolved = pending(f"waiting for RouterAccess {ROUTER_ACCESS_NAME}")
            if not any(meta(o).name == ROUTER_ACCESS_NAME for o in accesses):
                accesses.insert(0, plan.router_access)   # not in the cache yet: composed as written

    for i, obj in enumerate(accesses):
        state = _compose_one(obj, inputs, namespace, issuer_default, plan, meta(accesses[0]).name if i else None)
        if meta(obj).uid:
            plan.states.append(state)     # (the Site's RouterAccess not created yet has no status to write)
        if i == 0 and meta(obj).name == ROUTER_ACCESS_NAME and plan.router_access is not None:
            plan.resolved = (state.configured if state.configured.status != "True"
                             else state.resolved or pending("waiting for the access endpoint"))
    return plan


def _compose_one(obj: Mapping[str, Any], inputs: AccessInputs, namespace: str, issuer_default: str,
                 plan: AccessPlan, used: str | None) -> AccessState:
    name = meta(obj).name
    if is_edge(inputs.site):
        return AccessState(obj, error(EDGE_SITE))
    if used is not None:
        return AccessState(obj, error(f"only one RouterAccess per site is supported; {used} is in use"))
    try:
        spec = RouterAccessSpec.model_validate(dict(mapping(obj, "spec")))
    except ValidationError as e:
        first = e.errors(include_input=False)[0]
        return AccessState(obj, error(f"spec.{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"))
    ports: dict[str, int] = {}
    for role in spec.roles:
        if role.name in ROLE_PORTS and role.name not in ports:
            ports[role.name] = role.port or ROLE_PORTS[role.name]
    if not ports:
        return AccessState(obj, error(f"no role {INTER_ROUTER} or {EDGE}: the router access serves only these"))
    for role_name, port in ports.items():
        if port != ROLE_PORTS[role_name]:
            return AccessState(obj, error(f"{role_name} port {port} is not supported: the router access serves "
                                          f"{role_name} on {ROLE_PORTS[role_name]}"))
    ports = {role_name: ports[role_name] for role_name in ROLE_PORTS if role_name in ports}   # endpoint order
    access_type = spec.access_type or DEFAULT_ACCESS_TYPE
    if access_type == "default":
        access_type = DEFAULT_ACCESS_TYPE
    if access_type not in ACCESS_TYPES:
        return AccessState(obj, error(f"access type {quoted(access_type)} is not supported here (supported: "
                                      f"{', '.join(ACCESS_TYPES)})"))
    service_type = ACCESS_TYPES[access_type]
    # one Service per router of the site (HA: two, the second named <access>-2), each endpoint with its group
    groups = {group: name + group[len(ROUTER_NAME):] for group in router_groups(inputs.site)}
    for service_name in groups.values():
        live = inputs.services.get(service_name)
        if live is not None and meta(live).annotations.get(ANNOTATION_ACCESS) != name:
            return AccessState(obj, error(f"Service {service_name} already exists in namespace"))
    state = AccessState(obj, ready())
    endpoints: list[JsonDict] = []
    awaiting: list[str] = []
    for group, service_name in groups.items():
        labels = group_labels(group)
        if meta(obj).uid:
            plan.services.append(_access_service(obj, service_type, ports, service_name, group))
        pods = [p for p in inputs.router_pods if all(meta(p).labels.get(k) == v for k, v in labels.items())]
        for role_name, port in ports.items():
            host, resolved_port, awaited = _resolve(service_type, inputs.services.get(service_name), pods,
                                                    service_name, namespace, port, role_name)
            if host is None:
                awaiting.append(awaited)
            else:
                endpoints.append({"name": role_name, "host": host, "port": str(resolved_port), "group": group})
    if awaiting:
        state.resolved = pending(awaiting[0])
    else:
        state.endpoints = endpoints
        state.resolved = ready()
        plan.endpoints = state.endpoints

    secret_name = spec.tls_credentials
    secret = inputs.secrets.get(secret_name)
    if spec.generate_tls_credentials:
        issuer = spec.issuer or issuer_default
        if issuer not in inputs.secrets and issuer != SITE_CA_SECRET:
            state.configured = pending(f"waiting for the issuer Secret {quoted(issuer)}")
            return state
        if meta(obj).uid:
            dns = (KEY_SNI_WILDCARD, CONTROL_SNI, name, f"{name}.{namespace}", f"{name}.{namespace}.svc",
                   f"{name}.{namespace}.svc.cluster.local", *(spec.subject_alternative_names or []))
            # each host once, as upstream's getHosts has them (an endpoint per role shares its host)
            extra_dns, ips = endpoint_hosts([e["host"] for e in state.endpoints])
            owner = [{"apiVersion": GROUP_VERSION, "kind": "RouterAccess", "name": name, "uid": meta(obj).uid}]
            # the common name is the site's id: the routers of linking sites bind this site's router ids to it
            plan.certificates.append(certificate(
                secret_name, namespace, owner, ca=issuer, subject=meta(inputs.site).uid or f"{name}.{namespace}",
                hosts=[*sorted({*dns, *extra_dns}), *dict.fromkeys(ips)], server=True))
    if not _secret_usable(secret):
        state.configured = pending(f"waiting for the TLS credentials Secret {quoted(secret_name)} (ca.crt, tls.crt, "
                                   f"tls.key)")
        return state
    plan.document_access = [{"name": name, "role": role_name, "host": "", "port": port, "tlsProfile": secret_name}
                            for role_name, port in ports.items()]
    plan.profiles = [{"name": secret_name, "secret": {"name": secret_name}}]
    return state
