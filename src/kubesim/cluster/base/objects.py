"""Small helpers over plain-dict Kubernetes objects (metadata access, conditions, quantities, names)."""

from __future__ import annotations

import datetime
import hashlib
import re
from decimal import Decimal
from typing import Any

Obj = dict[str, Any]

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def meta(obj: Obj) -> dict[str, Any]:
    return obj.setdefault("metadata", {}) if isinstance(obj, dict) else {}


def name_of(obj: Obj) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def namespace_of(obj: Obj) -> str:
    return str(obj.get("metadata", {}).get("namespace") or "")


def uid_of(obj: Obj) -> str:
    return str(obj.get("metadata", {}).get("uid", ""))


def labels_of(obj: Obj) -> dict[str, str]:
    return dict(obj.get("metadata", {}).get("labels") or {})


def annotations_of(obj: Obj) -> dict[str, str]:
    return dict(obj.get("metadata", {}).get("annotations") or {})


def is_terminating(obj: Obj) -> bool:
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))


def controller_of(obj: Obj) -> dict[str, Any] | None:
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def owner_reference(owner: Obj, api_version: str, kind: str, *, controller: bool = True) -> dict[str, Any]:
    ref: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": kind,
        "name": name_of(owner),
        "uid": uid_of(owner),
    }
    if controller:
        ref["controller"] = True
        ref["blockOwnerDeletion"] = True
    return ref


def object_reference(obj: Obj, api_version: str, kind: str) -> dict[str, Any]:
    ref: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "name": name_of(obj), "uid": uid_of(obj)}
    if namespace_of(obj):
        ref["namespace"] = namespace_of(obj)
    return ref


def condition(obj: Obj, kind: str) -> dict[str, Any] | None:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def condition_true(obj: Obj, kind: str) -> bool:
    cond = condition(obj, kind)
    return bool(cond and cond.get("status") == "True")


def set_condition(
    conditions: list[dict[str, Any]], kind: str, status: str, reason: str = "", message: str = ""
) -> list[dict[str, Any]]:
    """Return ``conditions`` with ``kind`` set; the transition time only moves when the status changes."""
    result = []
    found = False
    for cond in conditions:
        if cond.get("type") == kind:
            found = True
            changed = cond.get("status") != status
            cond = {**cond, "status": status}
            if changed or "lastTransitionTime" not in cond:
                cond["lastTransitionTime"] = now()
            if reason:
                cond["reason"] = reason
            else:
                cond.pop("reason", None)
            if message:
                cond["message"] = message
            else:
                cond.pop("message", None)
        result.append(cond)
    if not found:
        new: dict[str, Any] = {"type": kind, "status": status, "lastTransitionTime": now()}
        if reason:
            new["reason"] = reason
        if message:
            new["message"] = message
        result.append(new)
    return result


def without_times(conditions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Conditions minus timestamps, to decide whether a status write would change anything."""
    return [
        {
            k: v
            for k, v in cond.items()
            if k not in ("lastTransitionTime", "lastProbeTime", "lastHeartbeatTime")
        }
        for cond in conditions
    ]


_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIX = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def quantity_value(value: str | int | None) -> Decimal:
    """The exact value of a Kubernetes quantity (``"500m"`` is 0.5); 0 if unset; ``ValueError`` if malformed."""
    if value is None or value == "":
        return Decimal(0)
    if isinstance(value, int):
        return Decimal(value)
    text = str(value).strip()
    if text.endswith("m") and _QUANTITY.match(text[:-1]):
        return Decimal(text[:-1]) / 1000
    match = _QUANTITY.match(text)
    if not match or match.group(2) not in _SUFFIX:
        raise ValueError(f"invalid quantity {value!r}")
    return Decimal(match.group(1)) * _SUFFIX[match.group(2)]


def parse_quantity(value: str | int | None) -> int:
    """Bytes of a Kubernetes quantity (``"1"``, ``"10Gi"``, ``"1.5G"``, ``"500m"``), rounded up; 0 if unset."""
    number = quantity_value(value)
    integral = int(number)
    return integral + (1 if number > integral else 0)


def check_dns_subdomain(value: str, what: str) -> str:
    """Names that end up in paths and labels: reject anything that is not a DNS subdomain."""
    if not value or len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        raise ValueError(f"{what} {value!r} is not a valid DNS subdomain name")
    return value


def short_hash(*parts: str, length: int = 10) -> str:
    digest = hashlib.sha256("\x00".join(parts).encode()).hexdigest()
    return digest[:length]


_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def safe_suffix(*parts: str, length: int = 5) -> str:
    """A deterministic suffix in Kubernetes' generateName alphabet (no vowels, no ambiguous digits)."""
    digest = hashlib.sha256("\x00".join(parts).encode()).digest()
    return "".join(_SAFE_ALPHABET[b % len(_SAFE_ALPHABET)] for b in digest[:length])
