"""Protobuf request bodies (what `kubectl create namespace|configmap|secret` sends) are decoded for simple kinds."""

from __future__ import annotations

from kubesim.sim import KubeSim
from kubesim.testing import RawClient

PROTOBUF = "application/vnd.kubernetes.protobuf"


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(num: int, payload: bytes) -> bytes:
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = field(1, api_version.encode()) + field(2, kind.encode())
    return b"k8s\x00" + field(1, type_meta) + field(2, raw) + field(4, b"application/vnd.kubernetes.protobuf")


async def test_configmap_and_secret_from_protobuf(kubesim: KubeSim) -> None:
    meta = field(1, b"pb") + field(11, field(1, b"app") + field(2, b"x")) + field(3, b"")
    configmap = field(1, meta) + field(2, field(1, b"k") + field(2, b"v"))
    secret = field(1, field(1, b"s")) + field(2, field(1, b"p") + field(2, b"q")) + field(3, b"")
    async with RawClient(kubesim) as c:
        status, cm = await c.post(
            "/api/v1/namespaces/default/configmaps",
            envelope("v1", "ConfigMap", configmap),
            content_type=PROTOBUF,
        )
        assert status == 201, cm
        assert (
            cm["data"] == {"k": "v"}
            and cm["metadata"]["labels"] == {"app": "x"}
            and cm["metadata"]["name"] == "pb"
        )
        status, sec = await c.post(
            "/api/v1/namespaces/default/secrets", envelope("v1", "Secret", secret), content_type=PROTOBUF
        )
        assert status == 201 and sec["data"] == {"p": "cQ=="} and sec["type"] == "Opaque"


async def test_unsupported_protobuf_kind_is_415_and_garbage_is_400(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        status, body = await c.post(
            "/api/v1/namespaces/default/pods",
            envelope("v1", "Pod", field(1, field(1, b"p"))),
            content_type=PROTOBUF,
        )
        assert status == 415 and "kubectl apply" in body["message"]
        status, body = await c.post(
            "/api/v1/namespaces/default/configmaps", b"k8s\x00\x0a\xff", content_type=PROTOBUF
        )
        assert status == 400
