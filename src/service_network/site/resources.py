"""The Kubernetes objects of a site's router (pure): Deployment ``skupper-router`` running the project's image as
``service-network run router`` (the router process and its adaptor), its ServiceAccount, Role and RoleBinding (only what the
adaptor reads: the router ConfigMap and the TLS Secrets; and the one write it makes: its network status into the
``skupper-network-status`` ConfigMap), and the router ConfigMap holding the router document.

Every object is owned by the Site (deleted with it) and labelled ``skupper.io/component=router`` (the controller's
caches select them by it). Bodies are complete server-side-apply configurations.

The Deployments carry upstream's labels and its Pod template's labels and annotations (``ROUTER_LABELS``, the
router's group ``skupper.io/group``, ``prometheus.io/*`` and ``skupper.io/config-digest``), so upstream's tools find
the router Pods by any of its selectors. A Deployment's selector cannot change (Kubernetes refuses it): one created
by this controller gets upstream's, ``skupper.io/component=router``; one that exists keeps the selector it has (an
earlier version's), and its Pods keep the labels that selector needs, so an upgrade is a rolling update of the Pods
and never a deleted Deployment.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from operator_runtime.kinds import CONFIG_MAP, DEPLOYMENT, ROLE, ROLE_BINDING, SERVICE_ACCOUNT, ResourceInfo
from operator_runtime.objects import JsonDict, meta

from ..constants import (
    ADAPTOR_PORT,
    COMPONENT_ROUTER,
    DEFAULT_ROUTER_IMAGE,
    GROUP_VERSION,
    LABEL_COMPONENT,
    LABEL_GROUP,
    LABEL_ROUTER_CONFIG,
    NETWORK_STATUS_NAME,
    PORTS_KEY,
    ROUTER_CONFIG_KEY,
    ROUTER_LABELS,
    ROUTER_METRICS_PORT,
    ROUTER_NAME,
    ROUTER_SELECTOR,
    ROUTER_STATE_DIR,
)

__all__ = ["CONTROLLER_RULES", "RouterOptions", "config_digest", "config_map", "controller_rules", "deployment",
           "owner_references", "pod_annotations", "role_rules", "router_objects"]

#: The ConfigMaps a router reads: its document (an HA site's second router: ``skupper-router-2``) and the network
#: status it writes its key of. (``ha.HA_ROUTER_NAME``, which imports this module.)
ROUTER_CONFIG_MAPS = (ROUTER_NAME, "skupper-router-2", NETWORK_STATUS_NAME)


_READ = ["get", "list", "watch"]
#: Everything the site controller does with the API, as the rules of its ClusterRole (the Helm chart renders these;
#: ``tests/service_network/site/test_site_rbac.py`` runs the controller with exactly them). Reading Secrets and
#: ConfigMaps is also what lets it create the router's Role, which grants those reads (RBAC escalation check).
CONTROLLER_RULES: tuple[Mapping[str, Any], ...] = (
    {"apiGroups": ["skupper.io"], "resources": ["sites", "listeners", "connectors", "accessgrants", "accesstokens",
                                                "attachedconnectors", "attachedconnectorbindings", "multikeylisteners",
                                                "securedaccesses"],
     "verbs": _READ},
    # patch: the default redemptionsAllowed written into an AccessGrant's spec, as upstream
    {"apiGroups": ["skupper.io"], "resources": ["accessgrants"], "verbs": ["patch"]},
    {"apiGroups": ["skupper.io"], "resources": ["routeraccesses", "links", "certificates"],
     "verbs": [*_READ, "create", "patch", "delete"]},
    {"apiGroups": ["skupper.io"], "resources": ["sites/status", "listeners/status", "connectors/status",
                                                "routeraccesses/status", "links/status", "accessgrants/status",
                                                "accesstokens/status", "attachedconnectors/status",
                                                "attachedconnectorbindings/status", "multikeylisteners/status",
                                                "certificates/status", "securedaccesses/status"],
     "verbs": ["get", "patch", "update"]},
    # NetworkObservers (service_network.networkobserver): read, and their status
    {"apiGroups": ["observability.skupper.io"], "resources": ["networkobservers"], "verbs": _READ},
    {"apiGroups": ["observability.skupper.io"], "resources": ["networkobservers/status"],
     "verbs": ["get", "patch", "update"]},
    {"apiGroups": [""], "resources": ["namespaces", "pods"], "verbs": _READ},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": [*_READ, "create", "patch", "delete"]},
    {"apiGroups": [""], "resources": ["services"], "verbs": [*_READ, "create", "patch", "delete"]},
    {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": [*_READ, "create", "patch"]},
    # delete: the second router of a Site whose HA was turned off
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": [*_READ, "create", "patch", "delete"]},
    # Listener readiness: whether its Service routes to a ready router Pod
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": _READ},
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": [*_READ, "create", "patch", "delete"]},
    {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"],
     "verbs": [*_READ, "create", "patch"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
)


def controller_rules() -> list[JsonDict]:
    return [{k: list(v) for k, v in rule.items()} for rule in CONTROLLER_RULES]


@dataclass(frozen=True)
class RouterOptions:
    """How router Pods are run (``service-network run controller`` flags)."""

    image: str = DEFAULT_ROUTER_IMAGE
    image_pull_policy: str = "IfNotPresent"


def role_rules(secrets: Iterable[str] = ()) -> list[JsonDict]:
    """The router's Role, least privilege by ``resourceNames``: read (get, and list/watch by name) its ConfigMaps and
    exactly the Secrets its TLS profiles name (``secrets``; none: no Secret at all, as an empty ``resourceNames``
    would allow every one); patch its key of the network status (server-side apply; the controller creates the
    ConfigMap, so the router needs no ``create``, which RBAC cannot limit to one name)."""
    rules: list[JsonDict] = [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": list(ROUTER_CONFIG_MAPS),
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [NETWORK_STATUS_NAME], "verbs": ["patch"]},
    ]
    names = sorted(set(secrets))
    if names:
        rules.append({"apiGroups": [""], "resources": ["secrets"], "resourceNames": names,
                      "verbs": ["get", "list", "watch"]})
    return rules


def owner_references(site: Mapping[str, Any]) -> list[JsonDict]:
    """The Site as owner (upstream sets no ``controller`` flag)."""
    site_meta = meta(site)
    return [{"apiVersion": GROUP_VERSION, "kind": "Site", "name": site_meta.name, "uid": site_meta.uid}]


def _metadata(site: Mapping[str, Any], name: str, labels: Mapping[str, str] | None = None) -> JsonDict:
    return {"name": name, "namespace": meta(site).namespace,
            "labels": {LABEL_COMPONENT: COMPONENT_ROUTER, **(labels or {})},
            "ownerReferences": owner_references(site)}


def service_account_name(site: Mapping[str, Any]) -> str:
    spec = site.get("spec")
    name = spec.get("serviceAccount") if isinstance(spec, Mapping) else None
    return name if isinstance(name, str) and name else ROUTER_NAME


def config_digest(site: Mapping[str, Any]) -> str:
    """Upstream's ``skupper.io/config-digest`` of a router Pod: SHA-256 of what in the Site's spec needs a router
    restart there (edge or interior, the ``router-data-connection-count`` and ``router-logging`` settings), so that
    the same Site gives the same value as upstream's controller, and changing one of them rolls the router Pods."""
    spec = site.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    settings = spec.get("settings")
    settings = settings if isinstance(settings, Mapping) else {}
    digest = hashlib.sha256(b"edge" if spec.get("edge") is True else b"interior")
    for key in ("router-data-connection-count", "router-logging"):
        value = settings.get(key)
        if isinstance(value, str) and value:
            digest.update(value.encode())
    return digest.hexdigest()


def pod_annotations(site: Mapping[str, Any]) -> dict[str, str]:
    """The router Pod's annotations, upstream's: where Prometheus scrapes the router (its metrics port) and the
    config digest."""
    return {"prometheus.io/port": str(ROUTER_METRICS_PORT), "prometheus.io/scrape": "true",
            "skupper.io/config-digest": config_digest(site)}


def _match_labels(selector: Mapping[str, Any] | None) -> dict[str, str]:
    labels = selector.get("matchLabels") if isinstance(selector, Mapping) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


def _deployment(site: Mapping[str, Any], options: RouterOptions, name: str = ROUTER_NAME,
                selector: Mapping[str, Any] | None = None) -> JsonDict:
    """The router Deployment ``name`` reading the ConfigMap of the same name. Its Pods carry upstream's labels (the
    listener Services select them by ``application`` and ``skupper.io/component``) and their group (the Deployment's
    name). ``selector``: the live Deployment's (immutable) selector, kept, with the labels it selects on the Pods;
    None: upstream's."""
    def field_env(name: str, path: str) -> JsonDict:
        return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}

    container: JsonDict = {
        "name": "router",
        "image": options.image,
        "imagePullPolicy": options.image_pull_policy,
        "command": ["service-network", "run", "router"],
        "env": [
            field_env("POD_IP", "status.podIP"),
            field_env("POD_NAMESPACE", "metadata.namespace"),
            field_env("POD_NAME", "metadata.name"),
            {"name": "ROUTER_CONFIG_MAP", "value": name},
            {"name": "ROUTER_STATE_DIR", "value": ROUTER_STATE_DIR},
        ],
        "ports": [{"name": "metrics", "containerPort": ROUTER_METRICS_PORT, "protocol": "TCP"},
                  {"name": "adaptor", "containerPort": ADAPTOR_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": ADAPTOR_PORT}, "periodSeconds": 1,
                           "failureThreshold": 3},
        "volumeMounts": [{"name": "state", "mountPath": ROUTER_STATE_DIR}],
    }
    kept = {k: dict(v) if isinstance(v, Mapping) else v for k, v in selector.items()} if selector else None
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": _metadata(site, name, dict(ROUTER_LABELS)),
        "spec": {
            "replicas": 1,
            "selector": kept or {"matchLabels": dict(ROUTER_SELECTOR)},
            "template": {
                "metadata": {"labels": {**_match_labels(kept), **ROUTER_LABELS, LABEL_GROUP: name},
                             "annotations": pod_annotations(site)},
                "spec": {"serviceAccountName": service_account_name(site), "containers": [container],
                         "volumes": [{"name": "state", "emptyDir": {}}]},
            },
        },
    }


def deployment(site: Mapping[str, Any], options: RouterOptions, name: str,
               selector: Mapping[str, Any] | None = None) -> tuple[ResourceInfo, JsonDict]:
    """A further router Deployment of the site (HA: ``skupper-router-2``); ``selector`` as :func:`_deployment`."""
    return DEPLOYMENT, _deployment(site, options, name, selector)


def router_objects(site: Mapping[str, Any], options: RouterOptions, secrets: Iterable[str] = (),
                   selectors: Mapping[str, Mapping[str, Any]] | None = None) -> list[tuple[ResourceInfo, JsonDict]]:
    """ServiceAccount, Role (reading the ``secrets`` the router document names) and RoleBinding (unless the Site
    names its own service account), then the Deployment; ``selectors``: the live router Deployments' selectors by
    name (kept: they are immutable)."""
    objects: list[tuple[ResourceInfo, JsonDict]] = []
    spec = site.get("spec")
    if not (isinstance(spec, Mapping) and spec.get("serviceAccount")):
        objects += [
            (SERVICE_ACCOUNT, {"apiVersion": "v1", "kind": "ServiceAccount",
                               "metadata": _metadata(site, ROUTER_NAME)}),
            (ROLE, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                    "metadata": _metadata(site, ROUTER_NAME), "rules": role_rules(secrets)}),
            (ROLE_BINDING, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                            "metadata": _metadata(site, ROUTER_NAME),
                            "subjects": [{"kind": "ServiceAccount", "name": ROUTER_NAME,
                                          "namespace": meta(site).namespace}],
                            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                        "name": ROUTER_NAME}}),
        ]
    objects.append((DEPLOYMENT, _deployment(site, options, ROUTER_NAME, (selectors or {}).get(ROUTER_NAME))))
    return objects


def config_map(site: Mapping[str, Any], document: str, ports: str,
               name: str = ROUTER_NAME) -> tuple[ResourceInfo, JsonDict]:
    """The router ConfigMap: the router document, and the port allocations it was composed with."""
    return CONFIG_MAP, {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": _metadata(site, name, {LABEL_ROUTER_CONFIG: ""}),
        "data": {ROUTER_CONFIG_KEY: document, PORTS_KEY: ports},
    }
