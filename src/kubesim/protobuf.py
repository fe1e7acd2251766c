"""Decode the few Kubernetes protobuf request bodies kubectl and Helm send.

`kubectl create namespace|configmap|secret|serviceaccount|token` and `kubectl auth can-i` post
`application/vnd.kubernetes.protobuf` and do not fall back to JSON on 415; Helm sends the `DeleteOptions` of a
DELETE (purging a release's Secrets) as protobuf too. No protobuf package ships the
Kubernetes `generated.proto` types, so this module carries the field numbers of just those kinds (facts from the
Kubernetes API's generated.proto) and a small wire-format reader. Other kinds answer 415 with a hint to use `kubectl apply`/`create -f` (JSON).
"""

from __future__ import annotations

import base64
import time
from typing import Any

from kubesim import errors

MAGIC = b"k8s\x00"

# Field schema: number -> (json name, type). Types: "s" string, "b" bytes (base64 in JSON), "i" int, "?" bool,
# "t" Time, ("m", type) map<string, type>, ("r", type) repeated, or a nested schema dict.
Schema = dict[int, tuple[str, Any]]

_TIME: Schema = {1: ("seconds", "i"), 2: ("nanos", "i")}
_OWNER_REF: Schema = {
    1: ("kind", "s"),
    3: ("name", "s"),
    4: ("uid", "s"),
    5: ("apiVersion", "s"),
    6: ("controller", "?"),
    7: ("blockOwnerDeletion", "?"),
}
_OBJECT_META: Schema = {
    1: ("name", "s"),
    2: ("generateName", "s"),
    3: ("namespace", "s"),
    5: ("uid", "s"),
    6: ("resourceVersion", "s"),
    7: ("generation", "i"),
    8: ("creationTimestamp", "t"),
    10: ("deletionGracePeriodSeconds", "i"),
    11: ("labels", ("m", "s")),
    12: ("annotations", ("m", "s")),
    13: ("ownerReferences", ("r", _OWNER_REF)),
    14: ("finalizers", ("r", "s")),
}
_OBJECT_REF: Schema = {
    1: ("kind", "s"),
    2: ("namespace", "s"),
    3: ("name", "s"),
    4: ("uid", "s"),
    5: ("apiVersion", "s"),
}
KINDS: dict[tuple[str, str], Schema] = {
    ("v1", "Namespace"): {
        1: ("metadata", _OBJECT_META),
        2: ("spec", {1: ("finalizers", ("r", "s"))}),
        3: ("status", {1: ("phase", "s")}),
    },
    ("v1", "ConfigMap"): {
        1: ("metadata", _OBJECT_META),
        2: ("data", ("m", "s")),
        3: ("binaryData", ("m", "b")),
        4: ("immutable", "?"),
    },
    ("v1", "Secret"): {
        1: ("metadata", _OBJECT_META),
        2: ("data", ("m", "b")),
        3: ("type", "s"),
        4: ("stringData", ("m", "s")),
        5: ("immutable", "?"),
    },
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): {
        1: ("metadata", _OBJECT_META),
        2: (
            "spec",
            {
                1: (
                    "resourceAttributes",
                    {
                        1: ("namespace", "s"),
                        2: ("verb", "s"),
                        3: ("group", "s"),
                        4: ("version", "s"),
                        5: ("resource", "s"),
                        6: ("subresource", "s"),
                        7: ("name", "s"),
                    },
                ),
                2: ("nonResourceAttributes", {1: ("path", "s"), 2: ("verb", "s")}),
            },
        ),
    },
    ("authentication.k8s.io/v1", "TokenRequest"): {
        1: ("metadata", _OBJECT_META),
        2: (
            "spec",
            {
                1: ("audiences", ("r", "s")),
                3: ("boundObjectRef", {1: ("kind", "s"), 2: ("apiVersion", "s"), 3: ("name", "s"), 4: ("uid", "s")}),
                4: ("expirationSeconds", "i"),
            },
        ),
    },
    ("v1", "ServiceAccount"): {
        1: ("metadata", _OBJECT_META),
        2: ("secrets", ("r", _OBJECT_REF)),
        3: ("imagePullSecrets", ("r", {1: ("name", "s")})),
        4: ("automountServiceAccountToken", "?"),
    },
}


def _fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) triples of one message."""
    out: list[tuple[int, int, Any]] = []
    i, n = 0, len(buf)

    def varint() -> int:
        nonlocal i
        shift = result = 0
        while True:
            if i >= n:
                raise ValueError("truncated varint")
            b = buf[i]
            i += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    while i < n:
        key = varint()
        num, wire = key >> 3, key & 7
        if wire == 0:
            out.append((num, wire, varint()))
        elif wire == 2:
            length = varint()
            if i + length > n:
                raise ValueError("truncated field")
            out.append((num, wire, buf[i : i + length]))
            i += length
        elif wire == 1:
            out.append((num, wire, buf[i : i + 8]))
            i += 8
        elif wire == 5:
            out.append((num, wire, buf[i : i + 4]))
            i += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return out


def _scalar(kind: Any, value: Any) -> Any:
    if kind == "s":
        return bytes(value).decode()
    if kind == "b":
        return base64.b64encode(bytes(value)).decode()
    if kind == "i":
        return value - (1 << 64) if value >= 1 << 63 else value
    if kind == "?":
        return bool(value)
    if kind == "t":
        seconds = _message(_TIME, value).get("seconds", 0)
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
    if isinstance(kind, dict):
        return _message(kind, value)
    raise ValueError(f"unknown field type {kind!r}")


#: meta/v1 DeleteOptions: optional fields whose presence matters (gracePeriodSeconds 0 means "now").
DELETE_OPTIONS: Schema = {
    1: ("gracePeriodSeconds", "i"),
    2: ("preconditions", {1: ("uid", "s"), 2: ("resourceVersion", "s")}),
    3: ("orphanDependents", "?"),
    4: ("propagationPolicy", "s"),
    5: ("dryRun", ("r", "s")),
    6: ("ignoreStoreReadErrorWithClusterBreakingPotential", "?"),
}


def _message(schema: Schema, buf: bytes, *, omit_empty: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for num, _, value in _fields(buf):
        if num not in schema:
            continue
        name, kind = schema[num]
        if isinstance(kind, tuple) and kind[0] == "m":
            entry = {k: v for k, _, v in _fields(value)}
            key = bytes(entry.get(1, b"")).decode()
            out.setdefault(name, {})[key] = _scalar(
                kind[1], entry.get(2, b"" if kind[1] in ("s", "b") else 0)
            )
        elif isinstance(kind, tuple) and kind[0] == "r":
            out.setdefault(name, []).append(_scalar(kind[1], value))
        else:
            out[name] = _scalar(kind, value)
    if not omit_empty:
        return out
    # Go's JSON encoding omits empty optional fields (omitempty); proto2 still sends them.
    return {k: v for k, v in out.items() if v not in ("", 0, False, {}, [])}


def _envelope(body: bytes) -> tuple[str, str, bytes]:
    """(apiVersion, kind, raw message) of a `k8s\\0` envelope (runtime.Unknown)."""
    if not body.startswith(MAGIC):
        raise errors.bad_request("protobuf body without the k8s envelope")
    unknown = {num: value for num, _, value in _fields(body[len(MAGIC) :])}
    type_meta = {num: bytes(value).decode() for num, _, value in _fields(unknown.get(1, b""))}
    return type_meta.get(1, ""), type_meta.get(2, ""), bytes(unknown.get(2, b""))


def decode_delete_options(body: bytes) -> dict[str, Any]:
    """The JSON-equivalent DeleteOptions of a protobuf DELETE body: set fields only, zero values kept (proto2 sends
    only what the client set); ApiError 400 when it is something else or not decodable."""
    try:
        api_version, kind, raw = _envelope(body)
        if kind != "DeleteOptions":
            raise errors.bad_request(f"invalid DeleteOptions: the protobuf body is a {kind or 'message without kind'}")
        options = _message(DELETE_OPTIONS, raw, omit_empty=False)
    except ValueError as e:
        raise errors.bad_request(f"invalid DeleteOptions: the protobuf body could not be decoded: {e}") from None
    return {"apiVersion": api_version or "v1", "kind": "DeleteOptions", **options}


def decode(body: bytes) -> dict[str, Any]:
    """The JSON-equivalent object of a protobuf request body; `ApiError` 415/400 when not decodable."""
    try:
        api_version, kind, raw = _envelope(body)
        schema = KINDS.get((api_version, kind))
        if schema is None:
            raise errors.unsupported_media_type(
                f"application/vnd.kubernetes.protobuf ({api_version} {kind}); kubesim decodes protobuf only for "
                "Namespace, ConfigMap, Secret, ServiceAccount, SelfSubjectAccessReview and TokenRequest: send JSON (kubectl apply / create -f)"
            )
        obj = _message(schema, raw)
    except ValueError as e:
        raise errors.bad_request(f"the protobuf body could not be decoded: {e}") from None
    return {"apiVersion": api_version, "kind": kind, **obj}
