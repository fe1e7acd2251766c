"""The read step of the site controller: one namespace's :class:`~.snapshot.NamespaceSnapshot`, before any write.

Everything comes from the caches (:class:`~.reflectors.SiteCaches`) but the CA certificates of the issuer Secrets
SecuredAccess statuses carry (the caches keep no Secret values): those are read from the API when the Secret's
version changed (kept in a bounded cache).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping
from typing import Any

from operator_runtime.api import KubeApi
from operator_runtime.errors import KubeError, NotFound
from operator_runtime.kinds import CONFIG_MAP, DEPLOYMENT, SECRET
from operator_runtime.objects import mapping, meta

from ..constants import ROUTER_NAME, ROUTER_POD_LABELS
from .access import SITE_CA_SECRET, default_issuer
from .access_io import decode
from .bindings import secret_info
from .bounded import BoundedCache
from .compose import SiteInputs
from .control import NAMESPACE_CONFIG, other_controller, our_controller
from .grant_io import SiteAccess
from .ha import HA_ROUTER_NAME
from .metrics import ControllerMetrics
from .network import NetworkView
from .outcomes import Failed
from .reflectors import SiteCaches
from .resources import RouterOptions
from .selector import LabelSelector, Requirement
from .snapshot import GrantInput, NamespaceSnapshot
from .triggers import labels_match, string_map

__all__ = ["SnapshotReader", "secured_selector"]

log = logging.getLogger(__name__)

def secured_selector(obj: Mapping[str, Any]) -> LabelSelector:
    """A SecuredAccess's ``spec.selector`` (a label map) as a selector."""
    return LabelSelector(tuple(Requirement(k, "=", (v,)) for k, v in sorted(
        string_map(mapping(obj, "spec").get("selector")).items())))


class SnapshotReader:
    def __init__(self, api: KubeApi, caches: SiteCaches, *, view: NetworkView, router: RouterOptions, version: str,
                 controller_namespace: str, site_access: Callable[[str], SiteAccess],
                 binding_annotation: Callable[[], str | None], metrics: ControllerMetrics,
                 grants: Callable[[str, datetime.datetime], tuple[GrantInput, ...]],
                 grant_server_ca: Callable[[], str | None]) -> None:
        self.api = api
        self.caches = caches
        self.view = view
        self.router = router
        self.version = version
        self.controller_namespace = controller_namespace
        self.site_access = site_access
        self.binding_annotation = binding_annotation
        self.metrics = metrics
        self.grants = grants
        self.grant_server_ca = grant_server_ca
        self._issuer_cas: BoundedCache[str, tuple[str, str]] = BoundedCache()   # Secret -> (uid:rv, PEM)

    def site_inputs(self, namespace: str) -> SiteInputs:
        """What the caches hold for ``namespace``'s Site path."""
        c = self.caches
        return SiteInputs(
            namespace=namespace,
            sites=c.sites.by_index("namespace", namespace),
            listeners=c.listeners.by_index("namespace", namespace),
            connectors=c.connectors.by_index("namespace", namespace),
            links=c.links.by_index("namespace", namespace),
            services={meta(s).name: s for s in c.services.by_index("namespace", namespace)},
            secrets={meta(s).name: secret_info(s) for s in c.secrets.by_index("namespace", namespace)},
            secret_objects={meta(s).name: s for s in c.secrets.by_index("namespace", namespace)},
            attached_bindings=c.attached_bindings.by_index("namespace", namespace),
            attached_connectors=c.attached_connectors.by_index("siteNamespace", namespace),
            multi_key_listeners=c.multi_key_listeners.by_index("namespace", namespace),
            listening=c.listening(namespace),
            unreachable=c.unreachable(namespace),
            identities=c.identity_records(namespace),
            credentials=c.credentials(namespace),
            router_selectors={name: mapping(live, "spec", "selector") for name in (ROUTER_NAME, HA_ROUTER_NAME)
                              if (live := c.written[DEPLOYMENT].get(f"{namespace}/{name}")) is not None
                              and mapping(live, "spec", "selector")},
            templates=c.templates(namespace),
            ready_ports=c.ready_ports(namespace),
            router_accesses=c.router_accesses.by_index("namespace", namespace),
            router_config_map=c.written[CONFIG_MAP].get(f"{namespace}/{ROUTER_NAME}"),
            router_pods=[p for p in c.pods.by_index("label", f"{namespace}/application=skupper-router")
                         if labels_match(meta(p).labels, ROUTER_POD_LABELS)],
            select_pods=c.select_pods,
            view=self.view,
            router=self.router,
            version=self.version,
            controller={k: v for k, v in (("name", "service-network-controller"),
                                          ("namespace", self.controller_namespace),
                                          ("version", self.version)) if v},
        )

    async def read(self, namespace: str) -> NamespaceSnapshot:
        """The namespace's inputs, read once before anything is written."""
        c = self.caches
        now = datetime.datetime.now(datetime.UTC)
        other = other_controller(c.namespace_configs.get(f"{namespace}/{NAMESPACE_CONFIG}"),
                                 our_controller(self.controller_namespace))
        if other is not None:
            return NamespaceSnapshot(namespace, now, self.site_inputs(namespace), other_controller=other)
        secured = [o for o in c.secured_accesses.by_index("namespace", namespace) if not meta(o).deletion_timestamp]
        certificates = c.certificates.by_index("namespace", namespace)
        # the namespace's active Site (its one live Site, else the one its last reconcile chose) signs what names no CA
        live_sites = [s for s in c.sites.by_index("namespace", namespace) if not meta(s).deletion_timestamp]
        active = live_sites[0] if len(live_sites) == 1 else self.site_access(namespace).site
        issuers = {str(mapping(o, "spec").get("issuer") or SITE_CA_SECRET) for o in secured}
        issuer_cas: dict[str, str] = {}
        failures: list[Failed] = []
        for name in sorted(issuers):
            pem = await self._issuer_ca(namespace, name)
            if isinstance(pem, Failed):
                failures.append(pem)
            elif pem:
                issuer_cas[name] = pem
        return NamespaceSnapshot(
            namespace=namespace,
            now=now,
            site=self.site_inputs(namespace),
            grants_or_tokens=bool(c.access_grants.by_index("namespace", namespace)
                                  or c.access_tokens.by_index("namespace", namespace)),
            secured_accesses=tuple(secured),
            secured_pods={meta(o).name: c.select_pods(namespace, secured_selector(o)) for o in secured},
            certificates=tuple(certificates),
            issuer_cas=issuer_cas,
            default_ca=default_issuer(active) if active is not None else None,
            binding_annotation=self.binding_annotation(),
            grants=self.grants(namespace, now),
            grant_server_ca=self.grant_server_ca(),
            read_failures=tuple(failures),
        )

    async def _issuer_ca(self, namespace: str, issuer: str) -> str | Failed | None:
        """The CA certificate (PEM) of the issuer Secret, read when it changed (None: no such Secret)."""
        key = f"{namespace}/{issuer}"
        view = self.caches.secrets.get(key)
        if view is None:
            return None
        version = f"{meta(view).uid}:{mapping(view, 'metadata').get('resourceVersion') or ''}"
        known = self._issuer_cas.get(key)
        if known is not None and known[0] == version:
            return known[1]
        try:
            secret = await self.api.get(SECRET, issuer, namespace)
        except NotFound:
            return None
        except KubeError as failure:
            self.metrics.write_failures.labels("Secret").inc()
            message = f"could not read the issuer Secret {issuer}: {failure}"
            log.warning("%s", message)
            return Failed(message, True)
        pem = decode(secret, "tls.crt").decode("utf-8", "replace")
        self._issuer_cas.put(key, (version, pem))
        return pem
