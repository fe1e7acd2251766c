"""The site controller's caches: its reflectors, their indexes, the overlays of what it wrote, and the reads over them.

Nothing here writes to the API: :mod:`.triggers` maps the caches' changes to namespaces, :mod:`.read` reads one
namespace's inputs from them, :mod:`.writer` writes and remembers what it wrote in the overlays
(:class:`~operator_runtime.written.Written`: the cache, overlaid with what this process wrote and the watch has not
delivered yet).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operator_runtime.api import KubeApi
from operator_runtime.kinds import (
    CONFIG_MAP,
    DEPLOYMENT,
    ENDPOINT_SLICE,
    NAMESPACE,
    POD,
    ROLE,
    ROLE_BINDING,
    SECRET,
    SERVICE,
    SERVICE_ACCOUNT,
    ResourceInfo,
)
from operator_runtime.objects import JsonDict, items, mapping, meta, object_key
from operator_runtime.projection import Transform
from operator_runtime.reflector import ApiSource, Reflector
from operator_runtime.written import Written

from ..constants import (
    COMPONENT_ROUTER,
    LABEL_COMPONENT,
    LABEL_LISTENER,
    LABEL_ROUTER_CONFIG,
    NETWORK_STATUS_NAME,
)
from ..kinds import (
    ACCESS_GRANT,
    ACCESS_TOKEN,
    ATTACHED_CONNECTOR,
    ATTACHED_CONNECTOR_BINDING,
    CERTIFICATE,
    CONNECTOR,
    LINK,
    LISTENER,
    MULTI_KEY_LISTENER,
    ROUTER_ACCESS,
    SECURED_ACCESS,
    SITE,
)
from .caches import (
    BINDING_CACHE,
    ENDPOINT_SLICE_CACHE,
    NAMESPACE_CACHE,
    NAMESPACE_CONFIG_CACHE,
    POD_CACHE,
    ROUTER_OBJECT_CACHE,
    SECRET_CACHE,
    SERVICE_CACHE,
    TEMPLATE_CACHE,
)
from .control import NAMESPACE_CONFIG
from .grant_io import NetworkLinks
from .identities import ANNOTATION_KEY_FINGERPRINT, IdentityRecord, known_ids, parse_identity
from .netstatus import RouterStatus, StatusReader, TargetFailure
from .selector import LabelSelector
from .templates import LABEL_TEMPLATE, Template, templates_for

__all__ = ["KIND_INFO", "SERVICE_NAME_LABEL", "SiteCaches", "namespace_of", "site_namespace_of"]

#: The custom kinds whose statuses the controller writes, by kind name.
KIND_INFO: Mapping[str, ResourceInfo] = {
    "Listener": LISTENER, "Connector": CONNECTOR, "Site": SITE, "RouterAccess": ROUTER_ACCESS,
    "AccessToken": ACCESS_TOKEN, "Link": LINK, "AttachedConnector": ATTACHED_CONNECTOR,
    "AttachedConnectorBinding": ATTACHED_CONNECTOR_BINDING, "MultiKeyListener": MULTI_KEY_LISTENER,
    "Certificate": CERTIFICATE, "SecuredAccess": SECURED_ACCESS}

#: The label an EndpointSlice names its Service with (discovery.k8s.io).
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def namespace_of(obj: JsonDict) -> list[str]:
    return [meta(obj).namespace]


def site_namespace_of(obj: JsonDict) -> list[str]:
    """An AttachedConnector's site namespace (where its binding and router are)."""
    site_namespace = mapping(obj, "spec").get("siteNamespace")
    return [site_namespace] if isinstance(site_namespace, str) and site_namespace else []


def _secret_refs(obj: JsonDict) -> list[str]:
    name = mapping(obj, "spec").get("tlsCredentials")
    return [f"{meta(obj).namespace}/{name}"] if isinstance(name, str) and name else []


def _host_of(obj: JsonDict) -> list[str]:
    return [f"{meta(obj).namespace}/{mapping(obj, 'spec').get('host')}"]


class SiteCaches:
    """Every reflector the site controller reads (in one namespace, or all: ``watch_namespace``), indexed by
    namespace and by what the triggers look up (TLS Secrets, hosts, labels, Certificate Secrets)."""

    def __init__(self, api: KubeApi, *, watch_namespace: str | None, controller_namespace: str) -> None:
        ns = watch_namespace
        self.controller_namespace = controller_namespace

        def reflector(name: str, info: ResourceInfo, transform: Transform, label_selector: str | None = None
                      ) -> Reflector:
            source = ApiSource(api, info, namespace=ns, label_selector=label_selector)
            created = Reflector(name, source, transform=transform)
            if info.namespaced:
                created.add_index("namespace", namespace_of)
            return created

        self.namespaces = Reflector("namespaces", ApiSource(api, NAMESPACE, field_selector=f"metadata.name={ns}"
                                                            if ns else None), transform=NAMESPACE_CACHE)
        self.sites = reflector("sites", SITE, BINDING_CACHE)
        self.listeners = reflector("listeners", LISTENER, BINDING_CACHE)
        self.connectors = reflector("connectors", CONNECTOR, BINDING_CACHE)
        self.router_accesses = reflector("routeraccesses", ROUTER_ACCESS, BINDING_CACHE)
        self.access_grants = reflector("accessgrants", ACCESS_GRANT, BINDING_CACHE)
        self.access_tokens = reflector("accesstokens", ACCESS_TOKEN, BINDING_CACHE)
        self.links = reflector("links", LINK, BINDING_CACHE)
        self.attached_bindings = reflector("attachedconnectorbindings", ATTACHED_CONNECTOR_BINDING, BINDING_CACHE)
        self.attached_connectors = reflector("attachedconnectors", ATTACHED_CONNECTOR, BINDING_CACHE)
        self.attached_connectors.add_index("siteNamespace", site_namespace_of)
        self.multi_key_listeners = reflector("multikeylisteners", MULTI_KEY_LISTENER, BINDING_CACHE)
        self.certificates = reflector("certificates", CERTIFICATE, BINDING_CACHE)
        # the ConfigMaps ``skupper`` that hand a namespace to a controller (``control.py``, upstream's rule)
        self.namespace_configs = Reflector("namespaceconfigs", ApiSource(
            api, CONFIG_MAP, namespace=ns, field_selector=f"metadata.name={NAMESPACE_CONFIG}"),
            transform=NAMESPACE_CONFIG_CACHE)
        self.certificates.add_index("secret", lambda o: [f"{meta(o).namespace}/{n}" for n in (
            meta(o).name, mapping(o, "spec").get("ca")) if isinstance(n, str) and n])
        self.secured_accesses = reflector("securedaccesses", SECURED_ACCESS, BINDING_CACHE)
        self.pods = reflector("pods", POD, POD_CACHE)
        self.services = reflector("services", SERVICE, SERVICE_CACHE)
        self.secrets = reflector("secrets", SECRET, SECRET_CACHE)
        self.endpoint_slices = reflector("endpointslices", ENDPOINT_SLICE, ENDPOINT_SLICE_CACHE,
                                         label_selector=LABEL_LISTENER)
        self.endpoint_slices.add_index("service", lambda o: [
            f"{meta(o).namespace}/{meta(o).labels.get(SERVICE_NAME_LABEL, '')}"])
        router_label = f"{LABEL_COMPONENT}={COMPONENT_ROUTER}"
        self.config_maps = reflector("configmaps", CONFIG_MAP, ROUTER_OBJECT_CACHE, label_selector=LABEL_ROUTER_CONFIG)
        # label templates: in the watched namespaces, and in the controller's (for every site) when it is not one
        self.label_templates = [reflector("labeltemplates", CONFIG_MAP, TEMPLATE_CACHE, label_selector=LABEL_TEMPLATE)]
        own = controller_namespace
        if ns and own and own != ns:
            self.label_templates.append(Reflector(
                "labeltemplates-controller", ApiSource(api, CONFIG_MAP, namespace=own, label_selector=LABEL_TEMPLATE),
                transform=TEMPLATE_CACHE))
        for templates in self.label_templates:
            templates.add_index("namespace", namespace_of)
        self.router_caches: dict[ResourceInfo, Reflector] = {
            info: reflector(info.plural, info, ROUTER_OBJECT_CACHE, label_selector=router_label)
            for info in (SERVICE_ACCOUNT, ROLE, ROLE_BINDING, DEPLOYMENT)}
        self.router_caches[CONFIG_MAP] = self.config_maps

        self.pods.add_index("label", lambda p: [f"{meta(p).namespace}/{k}={v}" for k, v in meta(p).labels.items()])
        for secret_user in (self.listeners, self.connectors, self.links, self.multi_key_listeners):
            secret_user.add_index("tls", _secret_refs)
        self.listeners.add_index("host", _host_of)
        self.multi_key_listeners.add_index("host", _host_of)
        self.router_accesses.add_index("tls", lambda o: [f"{meta(o).namespace}/{mapping(o, 'spec').get(k)}"
                                                         for k in ("tlsCredentials", "issuer")])

        #: what the controller applied, per kind of router object and for Services (the writer remembers)
        self.written = {info: Written(r) for info, r in self.router_caches.items()}
        self.written[SERVICE] = Written(self.services)
        #: the statuses it wrote, per custom kind (and the Certificates it applied)
        self.written_status = {kind: Written(r) for kind, r in (
            ("Listener", self.listeners), ("Connector", self.connectors), ("Site", self.sites),
            ("RouterAccess", self.router_accesses), ("AccessToken", self.access_tokens), ("Link", self.links),
            ("AttachedConnector", self.attached_connectors), ("AttachedConnectorBinding", self.attached_bindings),
            ("MultiKeyListener", self.multi_key_listeners), ("Certificate", self.certificates),
            ("SecuredAccess", self.secured_accesses))}
        self._status_reader = StatusReader()

    # ---- reads over the caches -----------------------------------------------------------------------------------
    def current_status(self, kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        """The status of ``obj`` as last seen or written."""
        return mapping(self.written_status[kind].get(object_key(obj)) or obj, "status")

    def templates(self, namespace: str) -> tuple[Template, ...]:
        """The label templates that apply in ``namespace`` (its own, then the controller namespace's)."""
        own = self.controller_namespace
        found = [c for r in self.label_templates for n in {namespace, own} if n for c in r.by_index("namespace", n)]
        return templates_for(namespace, own or None, {object_key(c): c for c in found}.values())

    def router_statuses(self, namespace: str) -> list[RouterStatus]:
        """The network status the routers of ``namespace`` last wrote (parsed once per change)."""
        return self._status_reader.statuses(self.config_maps.get(f"{namespace}/{NETWORK_STATUS_NAME}"))

    def forget_statuses(self, namespace: str) -> None:
        self._status_reader.forget(namespace)

    def network_ids(self, namespace: str) -> frozenset[str]:
        """The site and router identities the routers of ``namespace`` know in the network."""
        statuses = self.router_statuses(namespace)
        return known_ids((site.id for status in statuses for site in status.sites),
                         (router for status in statuses for router in status.routers))

    def network_links(self, namespace: str) -> NetworkLinks:
        """For trust decisions: the sites each site's routers advertise links to, and this site's links up."""
        dials: dict[str, set[str]] = {}
        up: dict[str, str] = {}
        for status in self.router_statuses(namespace):
            for site in status.sites:
                dials.setdefault(site.id, set()).update(link.remote_site_id for link in site.links
                                                        if link.remote_site_id)
            up.update((link.name, link.remote_site_id) for link in status.links if link.up and link.remote_site_id)
        return NetworkLinks({k: frozenset(v) for k, v in dials.items()}, up)

    def credentials(self, namespace: str) -> list[str]:
        """Key fingerprints of the client certificates the namespace's Certificates issued (credentials for static
        links: each binds to the first new identity that links with it)."""
        found = []
        for obj in self.certificates.by_index("namespace", namespace):
            spec = mapping(obj, "spec")
            if spec.get("client") is not True or spec.get("signing") is True or meta(obj).deletion_timestamp:
                continue
            secret = self.secrets.get(f"{namespace}/{meta(obj).name}")
            noted = meta(secret).annotations.get(ANNOTATION_KEY_FINGERPRINT) if secret is not None else None
            if noted:
                found.append(noted)
        return found

    def credential_namespace(self, certificate: str) -> str | None:
        """The namespace whose Certificates issued the client credential ``certificate`` (a key fingerprint)."""
        for namespace in sorted({meta(c).namespace for c in self.certificates.items()}):
            if certificate in self.credentials(namespace):
                return namespace
        return None

    def identity_records(self, namespace: str) -> dict[str, IdentityRecord]:
        """The link identities the site of ``namespace`` issued or bound (docs: "Trust")."""
        found = {}
        for config_map in self.config_maps.by_index("namespace", namespace):
            record = parse_identity(config_map)
            if record is not None:
                found[record.identity] = record
        return found

    def listening(self, namespace: str) -> frozenset[str] | None:
        """The listeners any router of ``namespace`` reports bound (None when no router reports them)."""
        reported = [s.listening for s in self.router_statuses(namespace) if s.listening is not None]
        return frozenset().union(*reported) if reported else None

    def unreachable(self, namespace: str) -> dict[tuple[str, str], TargetFailure]:
        """Connector targets the routers of ``namespace`` could not connect to at their last tries (with HA: as
        either router reports it)."""
        found: dict[tuple[str, str], TargetFailure] = {}
        for status in self.router_statuses(namespace):
            for failure in status.unreachable:
                found.setdefault((failure.connector, failure.target), failure)
        return found

    def ready_ports(self, namespace: str) -> dict[str, frozenset[str]]:
        """Listener Service -> the port names its EndpointSlices route to at least one ready endpoint."""
        found: dict[str, set[str]] = {}
        for item in self.endpoint_slices.by_index("namespace", namespace):
            service = meta(item).labels.get(SERVICE_NAME_LABEL)
            if not service or not any(isinstance(e, Mapping) and mapping(e, "conditions").get("ready") is True
                                      for e in items(item, "endpoints")):
                continue
            names = {str(p.get("name")) for p in items(item, "ports") if isinstance(p, Mapping) and p.get("name")}
            found.setdefault(service, set()).update(names)
        return {k: frozenset(v) for k, v in found.items()}

    def select_pods(self, namespace: str, selector: LabelSelector) -> list[JsonDict]:
        """Pods of ``namespace`` matching ``selector``, narrowed through the label index when it can be."""
        equalities = selector.equalities()
        if equalities:
            key, value = equalities[0]
            candidates = self.pods.by_index("label", f"{namespace}/{key}={value}")
        else:
            candidates = self.pods.by_index("namespace", namespace)
        return [p for p in candidates if selector.matches(meta(p).labels)]
