"""What queues a namespace for the site controller: every cache's changes mapped to the namespaces they matter to.

All triggers map to the namespace: Sites, Listeners, Connectors, Links and the other custom kinds; Pods a Connector,
an AttachedConnector or a SecuredAccess selects, or that are router Pods (only changes of phase, readiness, IP,
labels or deletion); Services that are ours or named as a Listener's host; Secrets a Listener, Connector, Link,
RouterAccess or Certificate names (and the site CA); the router ConfigMaps (with the network status), Deployment,
ServiceAccount, Role, RoleBinding; label templates (one in the controller's namespace: every namespace).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operator_runtime.controller import Controller
from operator_runtime.objects import JsonDict, mapping, meta, object_key

from ..constants import ROUTER_POD_LABELS
from .access import ANNOTATION_ACCESS, SITE_CA_SECRET
from .bounded import BoundedCache
from .caches import relevant_pod_change
from .reflectors import SiteCaches, namespace_of, site_namespace_of
from .secured import ANNOTATION_SECURED_ACCESS
from .selector import LabelSelector, SelectorError, parse_selector
from .services import is_controlled

__all__ = ["Triggers", "labels_match", "string_map"]


def string_map(value: Any) -> dict[str, str]:
    """A label map from a spec (anything else selects nothing)."""
    if not isinstance(value, Mapping) or not value:
        return {"\0": "\0"}
    return {str(k): str(v) for k, v in value.items()}


def labels_match(labels: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in wanted.items())


class Triggers:
    """The mappers from the caches' objects to site namespaces (the selectors they parse kept in a bounded
    cache)."""

    def __init__(self, caches: SiteCaches) -> None:
        self.caches = caches
        self._selectors: BoundedCache[str, LabelSelector | None] = BoundedCache()

    def watch(self, controller: Controller[Any]) -> None:
        """Map every cache but the namespaces' to the namespaces it queues."""
        c = self.caches
        for r in (c.sites, c.listeners, c.connectors, c.router_accesses, c.access_grants, c.access_tokens, c.links,
                  c.attached_bindings, c.multi_key_listeners, c.certificates, c.secured_accesses,
                  c.namespace_configs, *c.router_caches.values()):
            controller.watches(r, namespace_of)
        controller.watches(c.attached_connectors, site_namespace_of)
        for templates in c.label_templates:
            controller.watches(templates, self.template_namespaces)
        controller.watches(c.endpoint_slices, namespace_of)
        controller.watches(c.pods, self.pod_namespaces, predicate=relevant_pod_change)
        controller.watches(c.services, self.service_namespaces)
        controller.watches(c.secrets, self.secret_namespaces)

    def _selector(self, text: str) -> LabelSelector | None:
        if text in self._selectors:
            return self._selectors.get(text)
        try:
            selector: LabelSelector | None = parse_selector(text)
        except SelectorError:
            selector = None
        self._selectors.put(text, selector)
        return selector

    def _selects(self, obj: JsonDict, labels: Mapping[str, str]) -> bool:
        text = mapping(obj, "spec").get("selector")
        selector = self._selector(text) if isinstance(text, str) and text else None
        return selector is not None and selector.matches(labels)

    def pod_namespaces(self, pod: JsonDict) -> list[str]:
        """The site namespaces a Pod matters to: its own (a router Pod, or a Connector or SecuredAccess selects it),
        and those of the AttachedConnectors of its namespace that select it."""
        namespace, labels = meta(pod).namespace, meta(pod).labels
        if labels_match(labels, ROUTER_POD_LABELS):
            return [namespace]
        found: list[str] = []
        for connector in self.caches.connectors.by_index("namespace", namespace):
            if self._selects(connector, labels):
                found.append(namespace)
                break
        for attached in self.caches.attached_connectors.by_index("namespace", namespace):
            if self._selects(attached, labels):
                found += site_namespace_of(attached)
        if namespace not in found and any(
                labels_match(labels, string_map(mapping(sa, "spec").get("selector")))
                for sa in self.caches.secured_accesses.by_index("namespace", namespace)):
            found.append(namespace)
        return found

    def template_namespaces(self, config_map: JsonDict) -> list[str]:
        """A label template matters to its namespace; one in the controller's namespace to every namespace."""
        namespace = meta(config_map).namespace
        if namespace == self.caches.controller_namespace:
            return list(self.caches.namespaces.keys())
        return [namespace]

    def service_namespaces(self, service: JsonDict) -> list[str]:
        c = self.caches
        if (is_controlled(service) or ANNOTATION_ACCESS in meta(service).annotations
                or ANNOTATION_SECURED_ACCESS in meta(service).annotations
                or c.listeners.by_index("host", object_key(service))
                or c.multi_key_listeners.by_index("host", object_key(service))):
            return [meta(service).namespace]
        return []

    def secret_namespaces(self, secret: JsonDict) -> list[str]:
        c, key = self.caches, object_key(secret)
        if (meta(secret).name == SITE_CA_SECRET or c.router_accesses.by_index("tls", key)
                or c.listeners.by_index("tls", key) or c.connectors.by_index("tls", key)
                or c.multi_key_listeners.by_index("tls", key) or c.certificates.by_index("secret", key)
                or c.links.by_index("tls", key)):
            return [meta(secret).namespace]
        return []
