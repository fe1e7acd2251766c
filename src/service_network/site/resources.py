"""The Kubernetes objects of a site's router (pure): Deployment ``skupper-router`` running the project's image as
``service-network run router`` (the router process and its adaptor), its ServiceAccount, Role and RoleBinding (only what the
adaptor reads: the router ConfigMap and the TLS Secrets; and the one write it makes: its network status into the
``skupper-network-status`` ConfigMap), and the router ConfigMap holding the router document.

Every object is owned by the Site (deleted with it) and labelled ``skupper.io/component=router`` (the controller's
caches select them by it). Bodies are complete server-side-apply configurations.
"""

from __future__ import annotations

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
    LABEL_ROUTER_CONFIG,
    NETWORK_STATUS_NAME,
    PORTS_KEY,
    ROUTER_CONFIG_KEY,
    ROUTER_METRICS_PORT,
    ROUTER_NAME,
    ROUTER_POD_LABELS,
    ROUTER_STATE_DIR,
)

__all__ = ["CONTROLLER_RULES", "RouterOptions", "config_map", "controller_rules", "deployment", "owner_references",
           "role_rules", "router_objects"]

#: The ConfigMaps a router reads: its document (an HA site's second router: ``skupper-router-2``) and the network
#: status it writes its key of. (``ha.HA_ROUTER_NAME``, which imports this module.)
ROUTER_CONFIG_MAPS = (ROUTER_NAME, "skupper-router-2", NETWORK_STATUS_NAME)


_READ = ["get", "list", "watch"]
#: Everything the site controller does with the API, as the rules of its ClusterRole (the Helm chart renders these;
#: ``tests/service_network/test_site_rbac.py`` runs the controller with exactly them). Reading Secrets and
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


def _deployment(site: Mapping[str, Any], options: RouterOptions, name: str = ROUTER_NAME,
                pod_labels: Mapping[str, str] | None = None) -> JsonDict:
    """The router Deployment ``name`` reading the ConfigMap of the same name; its Pods carry the router labels
    (which every listener Service selects) and ``pod_labels`` (HA: which router of the site)."""
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
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": _metadata(site, name, dict(ROUTER_POD_LABELS)),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {**ROUTER_POD_LABELS, **((pod_labels or {}) if name != ROUTER_NAME else {})}},
            "template": {
                "metadata": {"labels": {**ROUTER_POD_LABELS, **(pod_labels or {})}},
                "spec": {"serviceAccountName": service_account_name(site), "containers": [container],
                         "volumes": [{"name": "state", "emptyDir": {}}]},
            },
        },
    }


def deployment(site: Mapping[str, Any], options: RouterOptions, name: str,
               pod_labels: Mapping[str, str]) -> tuple[ResourceInfo, JsonDict]:
    """A further router Deployment of the site (HA: ``skupper-router-2``)."""
    return DEPLOYMENT, _deployment(site, options, name, pod_labels)


def router_objects(site: Mapping[str, Any], options: RouterOptions,
                   pod_labels: Mapping[str, str] | None = None, secrets: Iterable[str] = ()
                   ) -> list[tuple[ResourceInfo, JsonDict]]:
    """ServiceAccount, Role (reading the ``secrets`` the router document names) and RoleBinding (unless the Site
    names its own service account), then the Deployment."""
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
    objects.append((DEPLOYMENT, _deployment(site, options, ROUTER_NAME, pod_labels)))
    return objects


def config_map(site: Mapping[str, Any], document: str, ports: str,
               name: str = ROUTER_NAME) -> tuple[ResourceInfo, JsonDict]:
    """The router ConfigMap: the router document, and the port allocations it was composed with."""
    return CONFIG_MAP, {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": _metadata(site, name, {LABEL_ROUTER_CONFIG: ""}),
        "data": {ROUTER_CONFIG_KEY: document, PORTS_KEY: ports},
    }
