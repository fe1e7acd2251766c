"""A NetworkObserver's spec, checked (pure): the values of upstream's ``network-observer`` chart that this operator
acts on, with the chart's defaults, and the names the chart derives from them.

A NetworkObserver's ``spec`` is upstream's chart values (the resource is upstream's chart run by a Helm operator),
so a ``spec`` copied from upstream's ``values.yaml`` or sample is accepted as it is. What it takes:

- ``nameOverride``, ``fullnameOverride``: the chart's naming (the object names are ``<fullname>``,
  ``<fullname>-metrics``, ``<fullname>-tls``, ``<fullname>-auth``);
- ``auth.strategy`` (``none``, ``basic``; ``openshift`` is refused: it needs OpenShift's OAuth proxy),
  ``auth.basic.create``, ``auth.basic.secretName``;
- ``tls.secretName``, ``tls.skupperIssued``;
- ``service.type``, ``service.port``;
- ``image.repository``/``tag``/``pullPolicy`` (upstream's own image is not this operator's observer: its
  repository stands for "the default", the operator's image);
- ``extraArgs`` (flags of ``service-network observer``), ``containerResources.networkObserver`` (else the
  deprecated ``resources``), ``commonLabels``, ``commonAnnotations``, ``podLabels``, ``podAnnotations``,
  ``skipManagementLabels``.

Switched-on features this operator does not provide (``ingress.enabled``, ``route.enabled``,
``tls.openshiftIssued``, ``prometheus.persistence.enabled``) are listed in :attr:`ObserverValues.unsupported`: the
controller says so in a Warning Event and deploys the rest. Every other key (``router``, ``prometheus``, ``nginx``,
probes, security contexts, ...) is accepted and has no effect (docs/service-network-observer.md lists why).

Every value that becomes a name, label, annotation or argument is checked here; a problem is a
:class:`ValuesError` naming the field path (``spec.auth.strategy``) and never echoing more than a short prefix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CHART_NAME", "UPSTREAM_IMAGE", "ObserverValues", "ValuesError", "parse_values"]

#: The chart's name (upstream's ``network-observer``): the default ``nameOverride`` and part of the fullname.
CHART_NAME = "network-observer"
#: Upstream's image repository: a spec that names it means "the observer image" (this operator's).
UPSTREAM_IMAGE = "quay.io/skupper/network-observer"
AUTH_STRATEGIES = ("none", "basic")
SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
MAX_EXTRA_ARGS = 32
MAX_ARG_LENGTH = 1024
MAX_MAP_ENTRIES = 64
MAX_ANNOTATION_BYTES = 16 * 1024

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*")


class ValuesError(ValueError):
    """A value of the spec that cannot be used: where (``spec.<path>``) and why."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def _brief(value: object) -> str:
    text = str(value)
    return repr(text if len(text) <= 40 else text[:40] + "...")


@dataclass(frozen=True)
class ObserverValues:
    """What the operator does for one NetworkObserver."""

    release: str                   # the NetworkObserver's name (the chart's release name)
    name: str                      # app.kubernetes.io/name
    fullname: str
    auth_strategy: str = "basic"
    create_auth_secret: bool = True
    auth_secret: str = ""          # the htpasswd Secret (basic)
    tls_secret: str = ""           # the server certificate's Secret
    skupper_issued: bool = True    # a skupper.io Certificate writes it
    service_type: str = "ClusterIP"
    service_port: int = 443
    image: str | None = None       # None: the operator's observer image
    pull_policy: str | None = None
    extra_args: tuple[str, ...] = ()
    resources: Mapping[str, Any] = field(default_factory=dict)
    common_labels: Mapping[str, str] = field(default_factory=dict)
    common_annotations: Mapping[str, str] = field(default_factory=dict)
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    pod_annotations: Mapping[str, str] = field(default_factory=dict)
    management_labels: bool = True
    unsupported: tuple[str, ...] = ()


def _section(spec: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    node: Any = spec
    for part in path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
        if node is None:
            return {}
        if not isinstance(node, Mapping):
            raise ValuesError(f"spec.{path}", "must be an object")
    return node


def _string(section: Mapping[str, Any], key: str, path: str, default: str = "") -> str:
    value = section.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ValuesError(f"spec.{path}", "must be a string")
    return value


def _bool(section: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
    value = section.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValuesError(f"spec.{path}", "must be true or false")
    return value


def _one_of(value: str, choices: tuple[str, ...], path: str) -> str:
    if value not in choices:
        raise ValuesError(f"spec.{path}", f"{_brief(value)} is not one of {', '.join(choices)}")
    return value


def _dns_name(value: str, path: str, limit: int = 253) -> str:
    if len(value) > limit or not _SUBDOMAIN.fullmatch(value):
        raise ValuesError(f"spec.{path}", f"{_brief(value)} is not a valid name (lowercase letters, digits, '-' and "
                                          f"'.', at most {limit} characters)")
    return value


def _key_problem(key: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _SUBDOMAIN.fullmatch(prefix)):
        return "its prefix is not a DNS subdomain"
    if len(name) > 63 or not _NAME_PART.fullmatch(name):
        return "its name must be 1-63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
    return None


#: Label keys a spec may not set: the router Pods' selector (Listener Services select it) and Skupper's own.
RESERVED_LABEL_KEYS = ("application",)
RESERVED_LABEL_PREFIXES = ("skupper.io/", "internal.skupper.io/")


def _string_map(spec: Mapping[str, Any], key: str, *, labels: bool) -> dict[str, str]:
    value = spec.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValuesError(f"spec.{key}", "must be an object of strings")
    if len(value) > MAX_MAP_ENTRIES:
        raise ValuesError(f"spec.{key}", f"has more than {MAX_MAP_ENTRIES} entries")
    result: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ValuesError(f"spec.{key}", "must be an object of strings")
        problem = _key_problem(k)
        if problem:
            raise ValuesError(f"spec.{key}", f"key {_brief(k)}: {problem}")
        if labels and (k in RESERVED_LABEL_KEYS or k.startswith(RESERVED_LABEL_PREFIXES)):
            raise ValuesError(f"spec.{key}.{k}", "is reserved: router Pods and Skupper's objects carry it")
        if labels and (len(v) > 63 or not _LABEL_VALUE.fullmatch(v)):
            raise ValuesError(f"spec.{key}.{k}", f"{_brief(v)} is not a valid label value")
        result[k] = v
    if not labels and sum(len(k) + len(v) for k, v in result.items()) > MAX_ANNOTATION_BYTES:
        raise ValuesError(f"spec.{key}", f"is larger than {MAX_ANNOTATION_BYTES} bytes")
    return result


def _fullname(release: str, spec: Mapping[str, Any]) -> tuple[str, str]:
    """(name, fullname) as the chart's helpers make them (truncated to 63, no trailing '-')."""
    name = (_string(spec, "nameOverride", "nameOverride") or CHART_NAME)[:63].rstrip("-")
    override = _string(spec, "fullnameOverride", "fullnameOverride")
    if override:
        fullname = override[:63].rstrip("-")
        path = "fullnameOverride"
    else:
        base = _string(spec, "nameOverride", "nameOverride") or CHART_NAME
        fullname = (release if base in release else f"{release}-{base}")[:63].rstrip("-")
        path = "nameOverride"
    if not _DNS_LABEL.fullmatch(fullname) or not fullname[0].isalpha():
        raise ValuesError(f"spec.{path}", f"makes the name {_brief(fullname)}, which is not a DNS-1035 label")
    if len(name) > 63 or not _LABEL_VALUE.fullmatch(name):
        raise ValuesError("spec.nameOverride", f"{_brief(name)} is not a valid label value")
    return name, fullname


def _image(spec: Mapping[str, Any]) -> tuple[str | None, str | None]:
    image = _section(spec, "image")
    repository = _string(image, "repository", "image.repository")
    tag = _string(image, "tag", "image.tag")
    policy = _string(image, "pullPolicy", "image.pullPolicy") or None
    if policy is not None:
        _one_of(policy, PULL_POLICIES, "image.pullPolicy")
    if not repository or repository == UPSTREAM_IMAGE:
        return None, policy if repository else None
    reference = f"{repository}:{tag}" if tag else repository
    if len(reference) > 512 or not _IMAGE.fullmatch(reference):
        raise ValuesError("spec.image.repository", f"{_brief(reference)} is not an image reference")
    return reference, policy


def _extra_args(spec: Mapping[str, Any]) -> tuple[str, ...]:
    value = spec.get("extraArgs")
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise ValuesError("spec.extraArgs", "must be a list of strings")
    if len(value) > MAX_EXTRA_ARGS:
        raise ValuesError("spec.extraArgs", f"has more than {MAX_EXTRA_ARGS} arguments")
    for i, arg in enumerate(value):
        if len(arg) > MAX_ARG_LENGTH or "\0" in arg:
            raise ValuesError(f"spec.extraArgs[{i}]", f"is longer than {MAX_ARG_LENGTH} characters or holds NUL")
    return tuple(value)


_QUANTITY = re.compile(r"([0-9]+(\.[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")


def _quantity(value: object, path: str) -> str:
    """A resource quantity as the API server writes it back for the plain forms (``1`` -> ``"1"``, ``0.5`` and
    ``"0.5"`` -> ``"500m"``), so that what is applied compares equal to what is stored (no write per reconcile);
    other valid forms are kept as written."""
    text = str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
    if not isinstance(text, str) or len(text) > 64 or not _QUANTITY.fullmatch(text):
        raise ValuesError(path, f"{_brief(value)} is not a resource quantity (e.g. 250m, 1, 512Mi)")
    number, fraction, suffix = _QUANTITY.fullmatch(text).groups()  # type: ignore[union-attr]
    if fraction and not suffix:
        millis = round(float(number) * 1000)
        if abs(float(number) * 1000 - millis) < 1e-9:
            return f"{millis // 1000}" if millis % 1000 == 0 else f"{millis}m"
    return text


def _resources(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    path = "spec.containerResources.networkObserver"
    chosen = _section(spec, "containerResources.networkObserver") or _section(spec, "resources")
    result: dict[str, dict[str, str]] = {}
    for key, value in chosen.items():
        if key not in ("requests", "limits") or not isinstance(value, Mapping):
            raise ValuesError(path, f"{_brief(key)} is not requests or limits")
        if len(value) > 8 or not all(isinstance(k, str) and _key_problem(k) is None for k in value):
            raise ValuesError(f"{path}.{key}", "must name at most 8 resources (cpu, memory, ...)")
        result[key] = {k: _quantity(v, f"{path}.{key}.{k}") for k, v in value.items()}
    return result


def _unsupported(spec: Mapping[str, Any]) -> tuple[str, ...]:
    found = []
    for path in ("ingress.enabled", "route.enabled", "tls.openshiftIssued", "prometheus.persistence.enabled"):
        section, _, key = path.rpartition(".")
        if _section(spec, section).get(key) is True:
            found.append(f"spec.{path}")
    return tuple(found)


def parse_values(release: str, spec: Any) -> ObserverValues:
    """The values of NetworkObserver ``release`` from its ``spec`` (None or missing: every default)."""
    if len(release) > 63 or not _DNS_LABEL.fullmatch(release):
        raise ValuesError("metadata.name", f"{_brief(release)} must be a DNS label (at most 63 lowercase letters, "
                                           "digits and '-'): it is the release's label value and part of its names")
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        raise ValuesError("spec", "must be an object (the network-observer chart's values)")
    name, fullname = _fullname(release, spec)
    auth = _section(spec, "auth")
    strategy = _string(auth, "strategy", "auth.strategy", "basic")
    if strategy == "openshift":
        raise ValuesError("spec.auth.strategy", "openshift needs OpenShift's OAuth proxy, which this operator does not "
                                                "run; use basic or none")
    _one_of(strategy, AUTH_STRATEGIES, "auth.strategy")
    basic = _section(spec, "auth.basic")
    auth_secret = _string(basic, "secretName", "auth.basic.secretName") or f"{fullname}-auth"
    tls = _section(spec, "tls")
    tls_secret = _string(tls, "secretName", "tls.secretName")
    service = _section(spec, "service")
    port = service.get("port", 443)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValuesError("spec.service.port", "must be a port number (1-65535)")
    image, policy = _image(spec)
    return ObserverValues(
        release=release, name=name, fullname=fullname, auth_strategy=strategy,
        create_auth_secret=_bool(basic, "create", "auth.basic.create", True),
        auth_secret=_dns_name(auth_secret, "auth.basic.secretName"),
        tls_secret=_dns_name(tls_secret or f"{fullname}-tls", "tls.secretName"),
        skupper_issued=not tls_secret and _bool(tls, "skupperIssued", "tls.skupperIssued", True),
        service_type=_one_of(_string(service, "type", "service.type", "ClusterIP"), SERVICE_TYPES, "service.type"),
        service_port=port, image=image, pull_policy=policy, extra_args=_extra_args(spec),
        resources=_resources(spec),
        common_labels=_string_map(spec, "commonLabels", labels=True),
        common_annotations=_string_map(spec, "commonAnnotations", labels=False),
        pod_labels=_string_map(spec, "podLabels", labels=True),
        pod_annotations=_string_map(spec, "podAnnotations", labels=False),
        management_labels=not _bool(spec, "skipManagementLabels", "skipManagementLabels", False),
        unsupported=_unsupported(spec))
