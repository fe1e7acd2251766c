"""What one NetworkObserver deploys, and its status (pure).

The objects are those of upstream's ``network-observer`` chart, made for this operator's observer (one container,
``service-network observer``, which serves TLS and basic authentication itself where upstream runs nginx beside it,
and reads the site's router through its metrics endpoint where upstream's reads AMQP):

- Deployment ``<fullname>`` (container ``network-observer``: the API, console and ``/metrics`` on port ``https``
  8443, ``/metrics`` alone on ``metrics`` 9000);
- ConfigMap ``<fullname>-routers``: where the site's routers answer (``routers.json``: their metrics URLs, ready
  ones first), kept current by the controller from its watch of router Pods, so that the observer needs no access
  to the namespace's Pods;
- ServiceAccount, Role (read that one ConfigMap, by name) and RoleBinding ``<fullname>``;
- Service ``<fullname>`` (``service.type``, ``service.port`` -> ``https``) and ``<fullname>-metrics`` (9000);
- Certificate ``<fullname>-tls`` signed by ``skupper-local-ca`` (``tls.skupperIssued`` without ``tls.secretName``),
  as upstream's chart; and the ``skupper-local-ca`` Certificate itself when the namespace has none (upstream's site
  controller keeps one for the router's local AMQP; this operator's routers have none, so the CA is made when a
  NetworkObserver first needs it);
- Secret ``<fullname>-auth`` (``auth.strategy: basic`` with ``auth.basic.create``): ``htpasswd`` with the user
  ``skupper`` and a random password, made once (owned, so it goes with the NetworkObserver) and never rewritten.

Every object but the CA is owned by the NetworkObserver; all but the CA and the Secret are applied whole
(server-side apply); the controller deletes nothing by hand: garbage collection removes them with their owner.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from operator_runtime.kinds import (
    CONFIG_MAP,
    DEPLOYMENT,
    ROLE,
    ROLE_BINDING,
    SECRET,
    SERVICE,
    SERVICE_ACCOUNT,
    ResourceInfo,
)
from operator_runtime.objects import JsonDict, mapping, meta

from ..constants import OBSERVABILITY_GROUP_VERSION
from ..kinds import CERTIFICATE
from ..observer.routers import ROUTERS_KEY
from .values import ObserverValues

__all__ = ["API_PORT", "AUTH_DIR", "LOCAL_CA", "MANAGED_BY", "METRICS_PORT", "PART_OF", "ROUTERS_KEY", "TLS_DIR",
           "ObserverOptions", "auth_secret", "conditions", "local_ca", "manifest", "observer_objects",
           "routers_config_map", "routers_object", "selector_labels"]

API_PORT = 8443
METRICS_PORT = 9000
LOCAL_CA = "skupper-local-ca"
TLS_DIR = "/etc/network-observer/tls"
AUTH_DIR = "/etc/network-observer/auth"
PART_OF = "skupper-network-observer"
MANAGED_BY = "service-network-controller"
BASIC_USER = "skupper"


@dataclass(frozen=True)
class ObserverOptions:
    """How observer Pods run (the controller's flags)."""

    image: str
    image_pull_policy: str = "IfNotPresent"


def selector_labels(values: ObserverValues) -> dict[str, str]:
    return {"app.kubernetes.io/name": values.name, "app.kubernetes.io/instance": values.release}


def _labels(values: ObserverValues, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    labels = {**values.common_labels, **selector_labels(values), "app.kubernetes.io/part-of": PART_OF}
    if values.management_labels:
        labels["app.kubernetes.io/managed-by"] = MANAGED_BY
    return {**labels, **(extra or {})}


def _owner(observer: Mapping[str, Any]) -> list[JsonDict]:
    m = meta(observer)
    return [{"apiVersion": OBSERVABILITY_GROUP_VERSION, "kind": "NetworkObserver", "name": m.name, "uid": m.uid,
             "controller": True, "blockOwnerDeletion": True}]


def _metadata(observer: Mapping[str, Any], values: ObserverValues, name: str, *, owned: bool = True,
              labels: Mapping[str, str] | None = None) -> JsonDict:
    body: JsonDict = {"name": name, "namespace": meta(observer).namespace, "labels": _labels(values, labels)}
    if values.common_annotations:
        body["annotations"] = dict(values.common_annotations)
    if owned:
        body["ownerReferences"] = _owner(observer)
    return body


def _args(values: ObserverValues) -> list[str]:
    # every interface, as upstream's proxy (kubectl port-forward dials localhost in the Pod)
    args = [f"--routers-config-map={routers_config_map(values)}", "--namespace=$(POD_NAMESPACE)", "--listen", f"0.0.0.0:{API_PORT}", "--listen-metrics",
            f"0.0.0.0:{METRICS_PORT}", f"--tls-cert={TLS_DIR}/tls.crt", f"--tls-key={TLS_DIR}/tls.key"]
    if values.auth_strategy == "basic":
        args.append(f"--htpasswd={AUTH_DIR}/htpasswd")
    return args + list(values.extra_args)


def _deployment(observer: Mapping[str, Any], values: ObserverValues, options: ObserverOptions) -> JsonDict:
    def field_env(name: str, path: str) -> JsonDict:
        return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}

    mounts: list[JsonDict] = [{"name": "tls", "mountPath": TLS_DIR, "readOnly": True}]
    volumes: list[JsonDict] = [{"name": "tls", "secret": {"secretName": values.tls_secret}}]
    if values.auth_strategy == "basic":
        mounts.append({"name": "auth", "mountPath": AUTH_DIR, "readOnly": True})
        volumes.append({"name": "auth", "secret": {"secretName": values.auth_secret}})
    container: JsonDict = {
        "name": "network-observer",
        "image": values.image or options.image,
        "imagePullPolicy": values.pull_policy or options.image_pull_policy,
        "command": ["service-network", "observer"],
        "args": _args(values),
        "env": [field_env("POD_NAMESPACE", "metadata.namespace")],
        "ports": [{"name": "https", "containerPort": API_PORT, "protocol": "TCP"},
                  {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "https", "scheme": "HTTPS"},
                           "periodSeconds": 5, "failureThreshold": 3},
        "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": mounts,
    }
    if values.resources:
        container["resources"] = dict(values.resources)
    template_meta: JsonDict = {"labels": {**values.pod_labels, **_labels(values)}}
    if values.pod_annotations:
        template_meta["annotations"] = dict(values.pod_annotations)
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": _metadata(observer, values, values.fullname),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector_labels(values)},
            "template": {"metadata": template_meta, "spec": {
                "serviceAccountName": values.fullname, "containers": [container], "volumes": volumes,
                "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}}},
        },
    }


def _services(observer: Mapping[str, Any], values: ObserverValues) -> list[JsonDict]:
    main: JsonDict = {
        "apiVersion": "v1", "kind": "Service", "metadata": _metadata(observer, values, values.fullname),
        "spec": {"type": values.service_type, "selector": selector_labels(values),
                 "ports": [{"name": "https", "port": values.service_port, "targetPort": "https",
                            "protocol": "TCP"}]}}
    metrics: JsonDict = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": _metadata(observer, values, f"{values.fullname}-metrics",
                              labels={"app.kubernetes.io/component": "metrics"}),
        "spec": {"type": "ClusterIP", "selector": selector_labels(values),
                 "ports": [{"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"}]}}
    return [main, metrics]


def routers_config_map(values: ObserverValues) -> str:
    return f"{values.fullname}-routers"


def _rbac(observer: Mapping[str, Any], values: ObserverValues) -> list[tuple[ResourceInfo, JsonDict]]:
    namespace, name = meta(observer).namespace, values.fullname
    return [
        (SERVICE_ACCOUNT, {"apiVersion": "v1", "kind": "ServiceAccount",
                           "metadata": _metadata(observer, values, name)}),
        # where the site's routers are: one ConfigMap, by name, and nothing else
        (ROLE, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": _metadata(observer, values, name),
                "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                           "resourceNames": [routers_config_map(values)], "verbs": ["get", "list", "watch"]}]}),
        (ROLE_BINDING, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                        "metadata": _metadata(observer, values, name),
                        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}}),
    ]


def _server_certificate(observer: Mapping[str, Any], values: ObserverValues) -> JsonDict:
    namespace, name = meta(observer).namespace, values.fullname
    return {"apiVersion": CERTIFICATE.api_version, "kind": "Certificate",
            "metadata": _metadata(observer, values, values.tls_secret),
            "spec": {"ca": LOCAL_CA, "subject": name, "server": True,
                     "hosts": [name, f"{name}.{namespace}", f"{name}.{namespace}.svc"]}}


def routers_object(observer: Mapping[str, Any], values: ObserverValues, urls: Sequence[str]) -> JsonDict:
    """The ConfigMap telling the observer where the site's routers answer."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _metadata(observer, values, routers_config_map(values)),
            "data": {ROUTERS_KEY: json.dumps(list(urls))}}


def observer_objects(observer: Mapping[str, Any], values: ObserverValues, options: ObserverOptions,
                     routers: Sequence[str] = ()) -> list[tuple[ResourceInfo, JsonDict]]:
    """Every object the NetworkObserver owns, in the order they are applied (what the Pod needs first);
    ``routers``: the metrics URLs of the site's router Pods."""
    objects = _rbac(observer, values)
    objects.append((CONFIG_MAP, routers_object(observer, values, routers)))
    if values.skupper_issued:
        objects.append((CERTIFICATE, _server_certificate(observer, values)))
    objects += [(SERVICE, body) for body in _services(observer, values)]
    objects.append((DEPLOYMENT, _deployment(observer, values, options)))
    return objects


def local_ca(observer: Mapping[str, Any], values: ObserverValues) -> JsonDict:
    """The namespace's ``skupper-local-ca`` (self-signed, signing), created when missing; not owned (it outlives
    the NetworkObserver, as a site's CA would)."""
    return {"apiVersion": CERTIFICATE.api_version, "kind": "Certificate",
            "metadata": {"name": LOCAL_CA, "namespace": meta(observer).namespace,
                         "labels": {"app.kubernetes.io/part-of": PART_OF}},
            "spec": {"ca": "", "subject": LOCAL_CA, "signing": True}}


def auth_secret(observer: Mapping[str, Any], values: ObserverValues, password: str) -> tuple[ResourceInfo, JsonDict]:
    """The basic-auth Secret: user ``skupper`` and ``password`` in upstream's ``{PLAIN}`` htpasswd form."""
    return SECRET, {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": _metadata(observer, values, values.auth_secret),
                    "stringData": {"htpasswd": f"{BASIC_USER}:{{PLAIN}}{password}\n"}}


def manifest(objects: Sequence[tuple[ResourceInfo, JsonDict]]) -> str:
    """``status.deployedRelease.manifest``: the applied objects as YAML (never a Secret's data)."""
    docs = [{k: v for k, v in body.items() if k not in ("data", "stringData")} for _, body in objects]
    return yaml.safe_dump_all(docs, sort_keys=False, explicit_start=True)


def _condition(type_: str, status: bool, reason: str, message: str, now: str,
               previous: Mapping[str, Mapping[str, Any]]) -> JsonDict:
    value = "True" if status else "False"
    before = previous.get(type_) or {}
    since = before.get("lastTransitionTime") if before.get("status") == value else None
    return {"type": type_, "status": value, "reason": reason, "message": message,
            "lastTransitionTime": since or now}


def conditions(observer: Mapping[str, Any], failure: str | None, failure_reason: str, now: str) -> list[JsonDict]:
    """The conditions a Helm operator keeps (``Initialized``, ``Deployed``, ``ReleaseFailed``), from what the last
    reconcile did: ``failure`` is None when everything was applied. A failure keeps ``Deployed`` as it was (the
    objects of the last good spec stay)."""
    previous = {str(c.get("type")): c for c in mapping(observer, "status").get("conditions") or []
                if isinstance(c, Mapping)}
    deployed_before = (previous.get("Deployed") or {}).get("status") == "True"
    result = [_condition("Initialized", True, "Initialized", "", now, previous)]
    if failure is None:
        failed_before = (previous.get("ReleaseFailed") or {}).get("status") == "True"
        if not deployed_before:
            reason = "InstallSuccessful"
        elif _same_generation(observer) and not failed_before:
            reason = str(previous["Deployed"].get("reason") or "InstallSuccessful")
        else:
            reason = "UpgradeSuccessful"
        result.append(_condition("Deployed", True, reason, "Release deployed", now, previous))
        result.append(_condition("ReleaseFailed", False, "", "", now, previous))
    else:
        if deployed_before:
            result.append(dict(previous["Deployed"]))
        else:
            result.append(_condition("Deployed", False, failure_reason, failure, now, previous))
        result.append(_condition("ReleaseFailed", True, failure_reason, failure, now, previous))
    return result


def _same_generation(observer: Mapping[str, Any]) -> bool:
    status = mapping(observer, "status")
    return status.get("observedGeneration") == meta(observer).generation
