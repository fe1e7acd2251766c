"""Protobuf request bodies (what `kubectl create namespace|configmap|secret` sends) are decoded for simple kinds."""

from __future__ import annotations

from kubesim.sim import KubeSim
from kubesim.testing.rawhttp import RawClient

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


def varint_field(num: int, value: int) -> bytes:
    return varint(num << 3) + varint(value)


async def test_protobuf_delete_options_as_helm_sends_them(kubesim: KubeSim) -> None:
    """Helm purges a release's Secrets with a protobuf DeleteOptions body (here: exactly the bytes Helm 4.3.1 sent);
    its fields take effect like JSON ones."""
    async with RawClient(kubesim) as c:
        for name in ("helm-release", "orphaned", "precondition"):
            status, _ = await c.post("/api/v1/namespaces/default/configmaps",
                                     {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
            assert status == 201
        helm_body = b'k8s\x00\n\x13\n\x02v1\x12\rDeleteOptions\x12\x00\x1a\x00"\x00'
        status, body = await c.delete("/api/v1/namespaces/default/configmaps/helm-release", helm_body,
                                      content_type=PROTOBUF)
        assert status == 200, body
        status, _ = await c.get("/api/v1/namespaces/default/configmaps/helm-release")
        assert status == 404

        # A uid precondition that does not match refuses the delete (409), as in JSON.
        precondition = field(2, field(1, b"not-the-uid"))
        status, body = await c.delete("/api/v1/namespaces/default/configmaps/precondition",
                                      envelope("v1", "DeleteOptions", precondition), content_type=PROTOBUF)
        assert status == 409 and "precondition" in body["message"].lower(), body
        # gracePeriodSeconds 0 and orphan propagation are read (zero values are meaningful in DeleteOptions).
        options = varint_field(1, 0) + field(4, b"Orphan")
        status, body = await c.delete("/api/v1/namespaces/default/configmaps/orphaned",
                                      envelope("v1", "DeleteOptions", options), content_type=PROTOBUF)
        assert status == 200, body
        # Something else than DeleteOptions, or garbage, is a 400 naming DeleteOptions.
        status, body = await c.delete("/api/v1/namespaces/default/configmaps/precondition",
                                      envelope("v1", "ConfigMap", b""), content_type=PROTOBUF)
        assert status == 400 and "invalid DeleteOptions" in body["message"]
        status, body = await c.delete("/api/v1/namespaces/default/configmaps/precondition", b"k8s\x00\x0a\xff",
                                      content_type=PROTOBUF)
        assert status == 400 and "invalid DeleteOptions" in body["message"]


def test_delete_options_keep_zero_values() -> None:
    from kubesim.server.codecs.protobuf import decode_delete_options

    options = decode_delete_options(envelope("v1", "DeleteOptions", varint_field(1, 0) + varint_field(3, 0)))
    assert options == {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                       "orphanDependents": False}


async def test_a_field_kubesim_cannot_decode_is_refused_not_dropped(kubesim: KubeSim) -> None:
    """A protobuf Deployment whose Pod template sets a field the tables lack (volumes, field 1 of the PodSpec)
    answers 415 naming where it is; the same field left empty (as Go marshals zero values) is fine."""
    volume = field(1, field(1, b"data"))
    def deployment(pod_spec: bytes) -> bytes:
        template = field(1, field(11, field(1, b"app") + field(2, b"d"))) + field(2, pod_spec)
        spec = field(2, field(1, field(1, b"app") + field(2, b"d"))) + field(3, template)
        return envelope("apps/v1", "Deployment", field(1, field(1, b"d")) + field(2, spec))
    container = field(2, field(1, b"c") + field(2, b"img") + field(8, b"") + field(15, b""))
    async with RawClient(kubesim) as c:
        status, body = await c.post("/apis/apps/v1/namespaces/default/deployments",
                                    deployment(container + volume), content_type=PROTOBUF)
        assert status == 415, body
        assert "field 1 of Deployment.spec.template.spec set" in body["message"]
        status, body = await c.post("/apis/apps/v1/namespaces/default/deployments",
                                    deployment(container + field(14, b"")), content_type=PROTOBUF)
        assert status == 201, body
        assert body["spec"]["template"]["spec"]["containers"][0]["image"] == "img"


async def test_rbac_role_and_binding_from_protobuf(kubesim: KubeSim) -> None:
    """client-go sends rbac/v1 Roles and RoleBindings as protobuf (upstream Skupper's controller creating its
    router's RBAC): rules, subjects and roleRef arrive as sent."""
    rule = field(1, b"get") + field(1, b"list") + field(2, b"") + field(3, b"secrets") + field(4, b"one")
    role = field(1, field(1, b"reader")) + field(2, rule)
    subject = field(1, b"ServiceAccount") + field(3, b"skupper-router")
    binding = field(1, field(1, b"reader")) + field(2, subject) + field(3, field(2, b"Role") + field(3, b"reader"))
    base = "/apis/rbac.authorization.k8s.io/v1/namespaces/default"
    async with RawClient(kubesim) as c:
        status, body = await c.post(f"{base}/roles", envelope("rbac.authorization.k8s.io/v1", "Role", role),
                                    content_type=PROTOBUF)
        assert status == 201, body
        assert body["rules"] == [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["secrets"],
                                  "resourceNames": ["one"]}]
        status, body = await c.post(f"{base}/rolebindings",
                                    envelope("rbac.authorization.k8s.io/v1", "RoleBinding", binding),
                                    content_type=PROTOBUF)
        assert status == 201, body
        assert body["subjects"] == [{"kind": "ServiceAccount", "name": "skupper-router"}]
        assert body["roleRef"]["kind"] == "Role" and body["roleRef"]["name"] == "reader"


async def test_an_update_sending_back_managed_fields_is_accepted(kubesim: KubeSim) -> None:
    """client-go updates read-modify-write the object with its managedFields (field 17 of ObjectMeta): the update
    lands, and the live managedFields stay the server's."""
    async with RawClient(kubesim) as c:
        status, created = await c.post("/api/v1/namespaces/default/secrets", envelope(
            "v1", "Secret", field(1, field(1, b"tls")) + field(2, field(1, b"k") + field(2, b"v"))),
            content_type=PROTOBUF)
        assert status == 201, created
        entry = field(1, b"skupper-controller") + field(2, b"Update") + field(3, b"v1") + field(7, field(1, b"{}"))
        meta = (field(1, b"tls") + field(6, created["metadata"]["resourceVersion"].encode())
                + field(12, field(1, b"profile") + field(2, b"yes")) + field(17, entry))
        status, updated = await c.put("/api/v1/namespaces/default/secrets/tls", envelope(
            "v1", "Secret", field(1, meta) + field(2, field(1, b"k") + field(2, b"v")) + field(3, b"Opaque")),
            content_type=PROTOBUF)
        assert status == 200, updated.get("message")
        assert updated["metadata"]["annotations"] == {"profile": "yes"}
        assert all(m["manager"] != "skupper-controller" for m in updated["metadata"].get("managedFields", []))


async def test_a_lease_from_protobuf(kubesim: KubeSim) -> None:
    """client-go's leader election writes its Lease as protobuf (upstream Skupper's kube-adaptor): the holder, the
    duration and the MicroTime renew time arrive as sent; a zero duration is kept (a pointer field)."""
    spec = field(1, b"adaptor-1") + varint_field(2, 0) + field(4, varint_field(1, 1_700_000_000)
                                                               + varint_field(2, 5000))
    lease = field(1, field(1, b"skupper-site-leader")) + field(2, spec)
    async with RawClient(kubesim) as c:
        status, body = await c.post("/apis/coordination.k8s.io/v1/namespaces/default/leases",
                                    envelope("coordination.k8s.io/v1", "Lease", lease), content_type=PROTOBUF)
        assert status == 201, body
        assert body["spec"] == {"holderIdentity": "adaptor-1", "leaseDurationSeconds": 0,
                                "renewTime": "2023-11-14T22:13:20.000005Z"}
