"""Decode the few Kubernetes protobuf request bodies kubectl and Helm send.

`kubectl create namespace|configmap|secret|serviceaccount|token|deployment|service`, `kubectl scale` and `kubectl
auth can-i` post `application/vnd.kubernetes.protobuf` and do not fall back to JSON on 415; Helm sends the
`DeleteOptions` of a DELETE (purging a release's Secrets) as protobuf too. No protobuf package ships the Kubernetes
`generated.proto` types, so :mod:`kubesim.server.codecs.protobuf_schemas` carries the field numbers of just those kinds (facts
from the Kubernetes API's generated.proto) and this module a small wire-format reader. Other kinds, and fields of these
kinds that the tables do not have, answer 415 with a hint to send JSON: nothing set is silently dropped.
"""

from __future__ import annotations

import base64
import time
from typing import Any

from kubesim import errors
from kubesim.server.codecs.protobuf_schemas import DELETE_OPTIONS, KINDS, TIME, Schema

MAGIC = b"k8s\x00"


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


def _scalar(kind: Any, value: Any, path: str) -> Any:
    if kind == "s":
        return bytes(value).decode()
    if kind == "b":
        return base64.b64encode(bytes(value)).decode()
    if kind == "i":
        return value - (1 << 64) if value >= 1 << 63 else value
    if kind == "?":
        return bool(value)
    if kind == "t":
        seconds = _message(TIME, value, path).get("seconds", 0)
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds)) if seconds else ""
    if kind == "mt":  # MicroTime: RFC 3339 with microseconds
        parts = _message(TIME, value, path)
        seconds, nanos = parts.get("seconds", 0), parts.get("nanos", 0)
        return (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos // 1000:06d}Z"
                if seconds or nanos else "")
    if kind == "q":
        return str(_message({1: ("string", "s")}, value, path).get("string", ""))
    if kind == "io":
        parts = _message({1: ("type", "i"), 2: ("intVal", "i"), 3: ("strVal", "s")}, value, path)
        return parts.get("strVal", "") if parts.get("type") == 1 else parts.get("intVal", 0)
    if isinstance(kind, dict):
        return _message(kind, value, path)
    raise ValueError(f"unknown field type {kind!r}")


def _empty(wire: int, value: Any) -> bool:
    """Whether an unknown field carries nothing: a zero, or a message whose fields are all zero (Go's protobuf
    marshalling writes value fields even when they are zero, as JSON's ``omitempty`` would leave them out)."""
    if wire == 0:
        return bool(value == 0)
    if wire in (1, 5):
        return not any(value)
    if not value:
        return True
    try:
        return all(_empty(w, v) for _, w, v in _fields(bytes(value)))
    except ValueError:
        return False


def _message(schema: Schema, buf: bytes, path: str = "", *, omit_empty: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {}
    keep: set[str] = set()
    for num, wire, value in _fields(buf):
        if num not in schema:
            if _empty(wire, value):
                continue
            raise errors.unsupported_media_type(
                f"application/vnd.kubernetes.protobuf with field {num} of {path or 'the object'} set, which kubesim "
                "does not decode from protobuf: send JSON (kubectl apply / create -f)")
        name, kind = schema[num]
        if kind == "-":
            continue
        where = f"{path}.{name}" if path else name
        if isinstance(kind, str) and kind.endswith("!"):
            kind = kind[:-1]
            keep.add(name)
        if isinstance(kind, tuple) and kind[0] == "m":
            entry = {k: v for k, _, v in _fields(value)}
            key = bytes(entry.get(1, b"")).decode()
            out.setdefault(name, {})[key] = _scalar(
                kind[1], entry.get(2, 0 if kind[1] in ("i", "?") else b""), f"{where}[{key[:64]}]"
            )
        elif isinstance(kind, tuple) and kind[0] == "r":
            out.setdefault(name, []).append(_scalar(kind[1], value, f"{where}[{len(out.get(name, []))}]"))
        else:
            out[name] = _scalar(kind, value, where)
    if not omit_empty:
        return out
    # Go's JSON encoding omits empty optional fields (omitempty); protobuf still sends them. Pointer fields are
    # sent only when set, so their zero values are kept.
    return {k: v for k, v in out.items() if k in keep or v not in ("", 0, False, {}, [])}


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
        options = _message(DELETE_OPTIONS, raw, "DeleteOptions", omit_empty=False)
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
                f"{', '.join(sorted(kind for _, kind in KINDS))}: send JSON (kubectl apply / create -f)"
            )
        obj = _message(schema, raw, kind)
    except ValueError as e:
        raise errors.bad_request(f"the protobuf body could not be decoded: {e}") from None
    return {"apiVersion": api_version, "kind": kind, **obj}
