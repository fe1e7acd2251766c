"""A container's environment as the kubelet builds it, and ``$(VAR)`` expansion (pure functions).

Order, as the kubelet's: the service variables (``KUBERNETES_SERVICE_HOST`` ...), then ``envFrom`` sources in order
(ConfigMaps and Secrets, with their ``prefix``; keys that are no valid variable names are skipped), then ``env``
entries in order, later ones overriding earlier ones. ``value`` may refer to variables defined before it as
``$(NAME)`` (``$$`` escapes a ``$``; a reference to an unknown variable stays as written). ``valueFrom`` supports
``fieldRef`` (the downward API's fields, plus ``status.podIP``/``status.podIPs``, ``status.hostIP``/``status.hostIPs``
and ``spec.serviceAccountName``), ``resourceFieldRef`` (requests and limits of cpu, memory and ephemeral-storage,
with ``divisor``; an unset limit is the node's allocatable), ``configMapKeyRef`` and ``secretKeyRef`` (``optional``
honoured). Missing sources raise ``EnvError`` with the kubelet's wording.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from kubesim.cluster.base.objects import quantity_value
from kubesim.cluster.volumes.downward import field_value
from kubesim.cluster.volumes.volumefiles import object_bytes

Obj = Mapping[str, Any]
_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_REFERENCE = re.compile(r"\$\$|\$\(([^)]*)\)")


class EnvError(Exception):
    """A referenced ConfigMap, Secret or key is missing, or a field cannot be resolved (kubelet's
    ``CreateContainerConfigError``)."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: known variables replaced, ``$$`` -> ``$``, unknown references kept."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _REFERENCE.sub(replace, text)


def referenced_objects(container: Obj) -> tuple[set[str], set[str]]:
    """Names of the ConfigMaps and Secrets the container's ``env``/``envFrom`` refer to."""
    config_maps: set[str] = set()
    secrets: set[str] = set()
    for source in container.get("envFrom") or []:
        if isinstance(source, dict):
            if isinstance(source.get("configMapRef"), dict):
                config_maps.add(str(source["configMapRef"].get("name", "")))
            if isinstance(source.get("secretRef"), dict):
                secrets.add(str(source["secretRef"].get("name", "")))
    for entry in container.get("env") or []:
        value_from = entry.get("valueFrom") if isinstance(entry, dict) else None
        if isinstance(value_from, dict):
            if isinstance(value_from.get("configMapKeyRef"), dict):
                config_maps.add(str(value_from["configMapKeyRef"].get("name", "")))
            if isinstance(value_from.get("secretKeyRef"), dict):
                secrets.add(str(value_from["secretKeyRef"].get("name", "")))
    return config_maps, secrets


def object_data(obj: Obj | None, *, secret: bool) -> dict[str, str] | None:
    """The string data of a ConfigMap (``data`` + ``binaryData``) or Secret (``data``, base64), None if absent."""
    data = object_bytes(obj, secret=secret)
    return None if data is None else {key: value.decode(errors="replace") for key, value in data.items()}


def _resource_value(container: Obj, ref: Obj, allocatable: Mapping[str, Any]) -> str:
    resource = str(ref.get("resource", ""))
    kind, _, name = resource.partition(".")
    if kind not in ("limits", "requests") or name not in ("cpu", "memory", "ephemeral-storage"):
        raise EnvError(f"unsupported container resource: {resource[:60]!r}")
    resources = container.get("resources") or {}
    raw = (resources.get(kind) or {}).get(name)
    if raw is None and kind == "requests":
        raw = (resources.get("limits") or {}).get(name)  # the API server defaults requests to limits
    if raw is None:
        raw = allocatable.get(name) if kind == "limits" else "0"
    try:
        value = quantity_value(raw)
        divisor = quantity_value(ref.get("divisor") or "1")
    except (ValueError, ArithmeticError):
        raise EnvError(f"invalid quantity in resourceFieldRef {resource[:60]!r}") from None
    if divisor <= 0:
        raise EnvError(f"resourceFieldRef {resource[:60]!r} has a divisor that is not positive")
    return str(math.ceil(value / divisor if value else Decimal(0)))


def _status_field(pod: Obj, path: str, pod_ip: str, host_ip: str) -> str | None:
    return {"status.podIP": pod_ip, "status.podIPs": pod_ip, "status.hostIP": host_ip,
            "status.hostIPs": host_ip}.get(path)


def container_env(pod: Obj, container: Obj, *, service_env: Mapping[str, str], pod_ip: str, host_ip: str,
                  config_maps: Mapping[str, Obj | None], secrets: Mapping[str, Obj | None],
                  allocatable: Mapping[str, Any]) -> dict[str, str]:
    """The environment of ``container`` (see the module docstring); ``config_maps``/``secrets`` hold the referenced
    objects by name (None: not found)."""
    env: dict[str, str] = dict(service_env)
    for source in container.get("envFrom") or []:
        if not isinstance(source, dict):
            continue
        prefix = str(source.get("prefix") or "")
        for key, secret in (("configMapRef", False), ("secretRef", True)):
            ref = source.get(key)
            if not isinstance(ref, dict):
                continue
            name = str(ref.get("name", ""))
            data = object_data((secrets if secret else config_maps).get(name), secret=secret)
            if data is None:
                if ref.get("optional"):
                    continue
                raise EnvError(f'{"secret" if secret else "configmap"} "{name}" not found')
            for data_key, value in sorted(data.items()):
                if _NAME.match(prefix + data_key):
                    env[prefix + data_key] = value
    for entry in container.get("env") or []:
        if not isinstance(entry, dict) or not entry.get("name"):
            continue
        name = str(entry["name"])
        value_from = entry.get("valueFrom")
        if not isinstance(value_from, dict):
            env[name] = expand(str(entry.get("value") or ""), env)
            continue
        resolved = _value_from(pod, container, value_from, pod_ip=pod_ip, host_ip=host_ip, config_maps=config_maps,
                               secrets=secrets, allocatable=allocatable)
        if resolved is not None:
            env[name] = resolved
    return env


def _value_from(pod: Obj, container: Obj, value_from: Obj, *, pod_ip: str, host_ip: str,
                config_maps: Mapping[str, Obj | None], secrets: Mapping[str, Obj | None],
                allocatable: Mapping[str, Any]) -> str | None:
    if isinstance(value_from.get("fieldRef"), dict):
        path = str(value_from["fieldRef"].get("fieldPath", ""))
        value = _status_field(pod, path, pod_ip, host_ip)
        if value is None:
            value = field_value(dict(pod), path)
        if value is None and path == "spec.serviceAccountName":
            value = "default"
        if value is None:
            raise EnvError(f"unsupported fieldRef fieldPath {path[:80]!r}")
        return value
    if isinstance(value_from.get("resourceFieldRef"), dict):
        return _resource_value(container, value_from["resourceFieldRef"], allocatable)
    for key, secret in (("configMapKeyRef", False), ("secretKeyRef", True)):
        ref = value_from.get(key)
        if not isinstance(ref, dict):
            continue
        name, data_key = str(ref.get("name", "")), str(ref.get("key", ""))
        data = object_data((secrets if secret else config_maps).get(name), secret=secret)
        kind = "secret" if secret else "configmap"
        if data is None:
            if ref.get("optional"):
                return None
            raise EnvError(f'{kind} "{name}" not found')
        if data_key not in data:
            if ref.get("optional"):
                return None
            raise EnvError(f"couldn't find key {data_key} in {'Secret' if secret else 'ConfigMap'} "
                           f"{pod.get('metadata', {}).get('namespace', '')}/{name}")
        return data[data_key]
    return None
