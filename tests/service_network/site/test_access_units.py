"""The pure parts of router access and grants: certificates, durations, grant state (code, redemptions left,
expiry), the redemption decision, the access plan (CA, RouterAccess, Service, endpoints, certificates), the
redemption messages' validation and the Link/Secret bodies."""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID
from pydantic import ValidationError

from operator_runtime.objects import meta
from service_network.site import pki
from service_network.site.access import (
    ANNOTATION_ACCESS,
    EDGE_SITE,
    AccessInputs,
    compose_access,
)
from service_network.site.grants import (
    AnswerProblem,
    LinkEndpoint,
    Redeemed,
    RedeemRequest,
    answer_documents,
    check_redemption,
    grant_of,
    grant_state,
    grant_status,
    link_names,
    link_objects,
    parse_answer,
    parse_duration,
)
from service_network.site.status import ready

UTC = datetime.UTC
CREATED = "2026-11-23T10:00:00Z"
T0 = datetime.datetime(2026, 11, 23, 10, 0, tzinfo=UTC)


# ---- certificates -----------------------------------------------------------------------------------------------

def test_issued_certificates_carry_their_names_and_are_signed_by_their_ca_only() -> None:
    ca, other = pki.new_ca("site-ca"), pki.new_ca("other-ca")
    server = pki.issue(ca, "skupper-router.west", dns=["*.key.service-network", "a.example"], ips=["127.1.3.1"],
                       server=True)
    info = pki.cert_info(server.cert)
    assert (info.subject, info.issuer, info.is_ca) == ("skupper-router.west", "site-ca", False)
    assert info.dns_names == {"*.key.service-network", "a.example"} and info.ip_addresses == {"127.1.3.1"}
    assert pki.cert_info(ca.cert).is_ca
    assert pki.signed_by(server.cert, ca.cert) and not pki.signed_by(server.cert, other.cert)
    assert not pki.signed_by(b"garbage", ca.cert)
    assert info.not_after <= pki.cert_info(ca.cert).not_after      # never outlives its CA


def _old_ca(key: Any, name_text: str) -> pki.KeyPair:
    """A CA made by an earlier version (Ed25519) or by hand (RSA), with ``key``."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name_text)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()))
    return pki.KeyPair(cert.public_bytes(serialization.Encoding.PEM), key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


def test_new_keys_are_p256_signed_with_sha256_and_older_cas_still_issue() -> None:
    """Every new key is ECDSA P-256 and every new signature ECDSA with SHA-256 (browsers accept neither an Ed25519
    leaf nor an Ed25519 CA); a CA an earlier version made (Ed25519) or an RSA one still issues, and a CA renewed
    keeps its key, whatever its type."""
    ca = pki.new_ca("site-ca")
    leaf = pki.issue(ca, "link", client=True)
    server = pki.make_certificate("console", issuer=ca, dns=["console"], server=True)
    for pair in (ca, leaf, server):
        key = pki.load_pair(pair)[1]
        assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1"
        cert = x509.load_pem_x509_certificate(pair.cert)
        assert cert.signature_algorithm_oid == x509.oid.SignatureAlgorithmOID.ECDSA_WITH_SHA256
    for old_key in (ed25519.Ed25519PrivateKey.generate(), rsa.generate_private_key(65537, 2048)):
        old_ca = _old_ca(old_key, "old-ca")
        issued = pki.issue(old_ca, "link", client=True)
        assert pki.signed_by(issued.cert, old_ca.cert) and not pki.signed_by(issued.cert, ca.cert)
        assert isinstance(pki.load_pair(issued)[1], ec.EllipticCurvePrivateKey)    # the new leaf's own key
        renewed = pki.make_certificate("old-ca", issuer=None, signing=True, key_pem=old_ca.key)
        assert pki.load_pair(renewed)[1].public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo) == old_key.public_key(
        ).public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def test_unusable_key_pairs_are_refused_with_a_reason() -> None:
    ca = pki.new_ca("ca")
    leaf = pki.issue(ca, "leaf", client=True)
    with pytest.raises(pki.CertificateError, match="key does not belong to the certificate"):
        pki.load_pair(pki.KeyPair(leaf.cert, ca.key))
    with pytest.raises(pki.CertificateError, match="is not a PEM certificate"):
        pki.load_pair(pki.KeyPair(b"-----BEGIN nothing", leaf.key))
    with pytest.raises(pki.CertificateError, match="not a CA"):
        pki.issue(leaf, "grandchild")


# ---- grants -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "seconds"), [("15m", 900), ("1h30m", 5400), ("90s", 90), ("2.5h", 9000),
                                               ("1h0m0s", 3600), ("500ms", 0.5)])
def test_durations_in_go_syntax(text: str, seconds: float) -> None:
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["", "15", "abc", "15 m", "-5m", "1d"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(text)


def _grant(spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None) -> dict[str, Any]:
    """A grant first processed at T0 with a 15 minute window (status.expirationTime written)."""
    return {"metadata": {"name": "g", "namespace": "west", "uid": "g-uid", "creationTimestamp": CREATED},
            "spec": spec or {}, "status": {"expirationTime": "2026-11-23T10:15:00Z", **(status or {})}}


def test_grant_defaults_one_redemption_within_10_minutes_of_first_processing() -> None:
    fresh = _grant(status={"code": "generated"})
    del fresh["status"]["expirationTime"]
    later = T0 + datetime.timedelta(minutes=3)             # first processed three minutes after its creation
    grant = grant_of(fresh, later)
    assert (grant.allowed, grant.redemptions, grant.remaining()) == (1, 0, 1)
    assert grant.expires == later + datetime.timedelta(minutes=10)
    assert grant.code == "generated"
    assert not grant.expired(later + datetime.timedelta(minutes=9, seconds=59))
    assert grant.expired(later + datetime.timedelta(minutes=10))
    assert grant_of(_grant({"code": MINE}, {"code": "generated"})).code == MINE
    # once written, the expiration stays: a later change of the window does not move it (as upstream)
    written = grant_of(_grant({"expirationWindow": "2h"}), T0 + datetime.timedelta(hours=1))
    assert written.expires == T0 + datetime.timedelta(minutes=15)


def test_remaining_redemptions_count_down_and_never_go_negative() -> None:
    spec = {"redemptionsAllowed": 3, "code": CODE}
    assert [grant_of(_grant(spec, {"redemptions": n})).remaining() for n in (0, 1, 2, 3, 4)] == [3, 2, 1, 0, 0]


SECRET = "secret-0123456789abcdefgh"       # hand-set codes have at least 24 characters (the CRD's minLength)
CODE = "c-0123456789abcdefghijklmn"
MINE = "mine-0123456789abcdefghijk"


def test_redemption_decision() -> None:
    now = T0 + datetime.timedelta(minutes=1)
    grant = grant_of(_grant({"code": SECRET, "redemptionsAllowed": 2}, {"redemptions": 1}))
    assert check_redemption(grant, SECRET, now) is None
    wrong = check_redemption(grant, "Secret", now)
    assert wrong is not None and (wrong.http_status, wrong.reason) == (403, "WrongCode")
    assert wrong.message == "Redemption of access token refused: AccessGrant west/g: the code is wrong"
    late = check_redemption(grant, SECRET, T0 + datetime.timedelta(hours=1))
    assert late is not None and late.reason == "Expired"
    assert late.message == "No such claim: AccessGrant west/g expired at 2026-11-23T10:15:00Z"
    used = check_redemption(grant_of(_grant({"code": SECRET, "redemptionsAllowed": 2}, {"redemptions": 2})),
                            SECRET, now)
    assert used is not None and used.message == (
        "No such access granted: AccessGrant west/g has no redemptions left (2 of 2 used)")
    # A grant whose code is not generated yet accepts no code, not even the empty one.
    assert check_redemption(grant_of(_grant()), "", now) is not None
    broken = check_redemption(grant_of(_grant({"code": CODE, "expirationWindow": "soon"})), CODE, now)
    assert broken is not None and broken.http_status == 409 and "spec.expirationWindow" in broken.message


def test_grant_state_and_status_keep_the_count_of_the_grant_server() -> None:
    now = T0 + datetime.timedelta(minutes=1)
    grant = grant_of(_grant({"code": CODE}, {"redemptions": 0}))
    assert grant_state(grant, now, site_problem=None, server=True).reason == "Ready"
    assert grant_state(grant, now, site_problem="No active site in namespace", server=True).message == (
        "No active site in namespace")
    assert "grant server is not enabled" in grant_state(grant, now, site_problem=None, server=False).message
    # expired or used up, a grant stays Ready (as upstream's): the grant server refuses the redemption
    assert grant_state(grant, T0 + datetime.timedelta(hours=1), site_problem=None, server=True) == ready()
    used_up = grant_of(_grant({"code": CODE, "redemptionsAllowed": 2}, {"redemptions": 2}))
    assert grant_state(used_up, now, site_problem=None, server=True) == ready()
    status = grant_status({"redemptions": 1}, grant, state=grant_state(grant, now, site_problem=None, server=True),
                          url="https://127.1.4.254:1/g-uid", ca="PEM", generation=1, now="t")
    assert status["redemptions"] == 1 and status["url"] == "https://127.1.4.254:1/g-uid"
    assert (status["status"], status["message"], status["expirationTime"]) == ("Ready", "OK",
                                                                             "2026-11-23T10:15:00Z")


# ---- redemption messages --------------------------------------------------------------------------------------

def _redeemed(ca: pki.KeyPair, *hosts: tuple[str, str | None]) -> Redeemed:
    pair = pki.issue(ca, "east-uid", client=True)
    return Redeemed(endpoints=[LinkEndpoint(host=h, port=55671, group=g) for h, g in hosts or [("127.2.3.1", None)]],
                    ca=ca.cert.decode(), cert=pair.cert.decode(), key=pair.key.decode())


def test_a_redemption_request_is_upstreams_code_name_and_subject() -> None:
    request = RedeemRequest.model_validate({"code": CODE, "name": "to-west", "subject": "0b7f-uid"})
    assert (request.code, request.name, request.subject) == (CODE, "to-west", "0b7f-uid")
    for bad in ({"name": "To West"}, {"name": "x" * 64}, {"subject": "a\nb"}, {"subject": ""}, {"code": ""}):
        with pytest.raises(ValidationError):
            RedeemRequest.model_validate({"code": CODE, "name": "to-west", "subject": "uid", **bad})


def test_the_answer_is_upstreams_yaml_stream_one_link_per_endpoint_group() -> None:
    ca = pki.new_ca("ca")
    redeemed = _redeemed(ca, ("127.2.3.1", "skupper-router"), ("127.2.3.2", "skupper-router-2"))
    documents = list(yaml.safe_load_all(answer_documents("to-west", redeemed)))
    assert [(d["kind"], d["metadata"]["name"]) for d in documents] == [
        ("Secret", "to-west"), ("Link", "to-west"), ("Link", "to-west-2")]
    assert documents[0]["type"] == "kubernetes.io/tls" and set(documents[0]["data"]) == {"ca.crt", "tls.crt",
                                                                                         "tls.key"}
    assert documents[2]["spec"] == {"endpoints": [{"name": "inter-router", "host": "127.2.3.2", "port": "55671",
                                                   "group": "skupper-router-2"}],
                                    "tlsCredentials": "to-west", "cost": 1}
    # read back by the redeeming side: the credentials and each Link's endpoints, in order
    answer = parse_answer(answer_documents("to-west", redeemed))
    assert answer.problem() is None and answer.cert == redeemed.cert
    assert [[e.host for e in link] for link in answer.links] == [["127.2.3.1"], ["127.2.3.2"]]


@pytest.mark.parametrize("host", ["evil\nbind :1", "a b", "", "x" * 300])
def test_hostile_endpoint_hosts_in_an_answer_are_refused(host: str) -> None:
    text = answer_documents("t", _redeemed(pki.new_ca("ca"))).replace("127.2.3.1", json.dumps(host))
    with pytest.raises(AnswerProblem):
        parse_answer(text)


@pytest.mark.parametrize("text", [
    "not: [yaml", "--- 1\n", "---\nkind: Link\napiVersion: skupper.io/v2alpha1\n",           # no Secret
    "---\n{kind: Secret, apiVersion: v1, data: {ca.crt: '!!'}}\n",                           # not base64
    "".join("---\n{kind: Secret, apiVersion: v1}\n" for _ in range(20)),                       # too many
    "---\n{kind: ConfigMap, apiVersion: v1}\n",
])
def test_unusable_answers_are_refused_with_a_short_reason(text: str) -> None:
    with pytest.raises(AnswerProblem) as refused:
        parse_answer(text)
    assert len(str(refused.value)) <= 300


def test_link_objects_are_named_by_the_receiver_and_cost_below_one_counts_as_one() -> None:
    ca = pki.new_ca("ca")
    answer = parse_answer(answer_documents("anything", _redeemed(ca, ("127.2.3.1", "g1"), ("127.2.3.2", "g2"))))
    secret, link, second = link_objects("west", "east", answer, cost=0, annotations={"a": "b"},
                                        owners=[{"kind": "Site", "name": "west"}])
    assert [o["metadata"]["name"] for o in (secret, link, second)] == ["east", "east", "east-2"]
    assert secret["metadata"] == link["metadata"] == {"name": "east", "namespace": "west", "annotations": {"a": "b"},
                                                      "ownerReferences": [{"kind": "Site", "name": "west"}]}
    assert set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key"} and secret["type"] == "kubernetes.io/tls"
    assert link["spec"] == {"endpoints": [{"name": "inter-router", "host": "127.2.3.1", "port": "55671",
                                           "group": "g1"}],
                            "tlsCredentials": "east", "cost": 1}
    assert link_names("x" * 63, 2) == ["x" * 63, "x" * 61 + "-2"]


# ---- access plan ------------------------------------------------------------------------------------------------

def _site(link_access: str | None = "default") -> dict[str, Any]:
    spec = {"linkAccess": link_access} if link_access is not None else {}
    return {"metadata": {"name": "west", "namespace": "west", "uid": "site-uid"}, "spec": spec}


def _router_access(name: str = "skupper-router", access_type: str = "loadbalancer",
                   created: str = CREATED) -> dict[str, Any]:
    return {"apiVersion": "skupper.io/v2alpha1", "kind": "RouterAccess",
            "metadata": {"name": name, "namespace": "west", "uid": f"{name}-uid", "creationTimestamp": created},
            "spec": {"accessType": access_type, "generateTlsCredentials": True, "issuer": "skupper-site-ca",
                     "roles": [{"name": "inter-router", "port": 55671}], "tlsCredentials": "skupper-site-server"}}


def _secret(name: str, uid: str = "", **annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "west", "uid": uid or f"{name}-uid", "annotations": annotations},
            "type": "kubernetes.io/tls", "data": {"ca.crt": "", "tls.crt": "", "tls.key": ""}}


def _service(service_type: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "skupper-router", "namespace": "west",
                         "annotations": {ANNOTATION_ACCESS: "skupper-router"}},
            "spec": {"type": service_type, "ports": [{"name": "inter-router", "port": 55671, "nodePort": 31000}]},
            "status": status}


def test_link_access_default_asks_for_the_ca_and_a_load_balanced_router_access() -> None:
    plan = compose_access(AccessInputs(_site("default"), [], {}, {}, []))
    [ca] = plan.certificates                  # the site CA, as a Certificate owned by the Site
    assert (ca["metadata"]["name"], ca["spec"]) == ("skupper-site-ca", {"ca": "", "subject": "skupper-site-ca",
                                                                         "signing": True})
    assert ca["metadata"]["ownerReferences"][0]["uid"] == "site-uid"
    assert plan.router_access is not None and plan.router_access["spec"]["accessType"] == "loadbalancer"
    assert plan.router_access["metadata"]["ownerReferences"][0]["uid"] == "site-uid"
    assert plan.resolved is not None and plan.resolved.reason == "Pending"
    assert plan.document_access == [] and plan.states == []          # nothing in the cluster yet


def test_resolved_load_balancer_gives_the_endpoint_the_document_entry_and_a_certificate_naming_it() -> None:
    inputs = AccessInputs(_site("default"), [_router_access()], {"skupper-site-ca": _secret("skupper-site-ca")},
                          {"skupper-router": _service("LoadBalancer", loadBalancer={"ingress": [{"ip": "127.1.3.1"}]})},
                          [])
    plan = compose_access(inputs)
    assert plan.endpoints == [{"name": "inter-router", "host": "127.1.3.1", "port": "55671",
                               "group": "skupper-router"}]
    assert plan.services[0]["spec"]["type"] == "LoadBalancer"
    server = {c["metadata"]["name"]: c for c in plan.certificates}["skupper-site-server"]
    assert server["spec"]["ca"] == "skupper-site-ca" and server["spec"]["server"] is True
    assert server["spec"]["subject"] == "site-uid"
    assert "127.1.3.1" in server["spec"]["hosts"] and "*.key.service-network" in server["spec"]["hosts"]
    assert server["metadata"]["ownerReferences"][0]["kind"] == "RouterAccess"
    assert plan.document_access == []                              # withheld until the Secret exists
    assert plan.states[0].configured.message.startswith("waiting for the TLS credentials Secret")

    # With the Secret issued (by the Certificate reconcile): the access is in the document.
    secrets = {"skupper-site-ca": _secret("skupper-site-ca"), "skupper-site-server": _secret("skupper-site-server")}
    plan = compose_access(AccessInputs(inputs.site, inputs.router_accesses, secrets, inputs.services, []))
    assert plan.document_access == [{"name": "skupper-router", "role": "inter-router", "host": "", "port": 55671,
                                     "tlsProfile": "skupper-site-server"}]
    assert plan.resolved is not None and plan.resolved.reason == "Ready"


def test_nodeport_endpoint_is_the_router_pods_node_and_the_node_port() -> None:
    pod = {"metadata": {"name": "skupper-router-1", "labels": {"skupper.io/group": "skupper-router"}},
           "status": {"hostIP": "127.1.1.1"}}
    plan = compose_access(AccessInputs(_site("nodeport"), [_router_access(access_type="nodeport")], {},
                                       {"skupper-router": _service("NodePort")}, [pod]))
    assert plan.endpoints[0]["host"] == "127.1.1.1" and plan.endpoints[0]["port"] == "31000"
    waiting = compose_access(AccessInputs(_site("nodeport"), [_router_access(access_type="nodeport")], {},
                                          {"skupper-router": _service("NodePort")}, []))
    assert waiting.states[0].resolved is not None and "router Pod on a node" in waiting.states[0].resolved.message


def test_unsupported_access_a_second_router_access_and_a_foreign_service_are_reported() -> None:
    plan = compose_access(AccessInputs(_site("route"), [], {}, {}, []))
    assert plan.resolved is not None and plan.resolved.reason == "Error" and "not supported" in plan.resolved.message
    assert plan.router_access is None
    plan = compose_access(AccessInputs(_site(None), [_router_access(), _router_access("extra", created=
                                                                                       "2026-11-23T11:00:00Z")],
                                       {}, {}, []))
    assert plan.resolved is None                                     # no linkAccess: the Site needs no Resolved
    assert plan.states[1].configured.message == ("only one RouterAccess per site is supported; skupper-router is "
                                                 "in use")
    foreign = {"metadata": {"name": "skupper-router", "namespace": "west"}, "spec": {"type": "ClusterIP"}}
    plan = compose_access(AccessInputs(_site("default"), [_router_access()], {}, {"skupper-router": foreign}, []))
    assert plan.states[0].configured.message == "Service skupper-router already exists in namespace"
    assert plan.services == []


def test_the_sites_router_access_is_stale_once_link_access_is_none() -> None:
    ours = _router_access()
    ours["metadata"]["ownerReferences"] = [{"kind": "Site", "name": "west", "uid": "site-uid"}]
    services = {"skupper-router": _service("LoadBalancer", loadBalancer={"ingress": [{"ip": "127.1.3.1"}]})}
    plan = compose_access(AccessInputs(_site("none"), [ours], {}, services, []))
    assert plan.stale_router_access is ours
    assert plan.states == [] and plan.document_access == [] and plan.endpoints == []
    users = _router_access("mine")                          # one a user wrote stays in use
    plan = compose_access(AccessInputs(_site("none"), [users], {}, {}, []))
    assert plan.stale_router_access is None and [meta(s.obj).name for s in plan.states] == ["mine"]


BOTH_ROLES = [{"name": "inter-router", "port": 55671}, {"name": "edge", "port": 45671}]


def test_the_sites_router_access_offers_inter_router_and_edge_as_upstreams_interior() -> None:
    """``skupper-router`` has upstream's two roles; its Service exposes both ports (named by role), the endpoints
    list both per router, and the document has an entry per role with one TLS profile."""
    plan = compose_access(AccessInputs(_site("default"), [], {}, {}, []))
    assert plan.router_access is not None and plan.router_access["spec"]["roles"] == BOTH_ROLES
    access = _router_access()
    access["spec"]["roles"] = BOTH_ROLES
    service = _service("LoadBalancer", loadBalancer={"ingress": [{"ip": "127.1.3.1"}]})
    secrets = {"skupper-site-ca": _secret("skupper-site-ca"), "skupper-site-server": _secret("skupper-site-server")}
    plan = compose_access(AccessInputs(_site("default"), [access], secrets, {"skupper-router": service}, []))
    assert [(p["name"], p["port"], p["targetPort"]) for p in plan.services[0]["spec"]["ports"]] == [
        ("inter-router", 55671, 55671), ("edge", 45671, 45671)]
    assert plan.endpoints == [{"name": "inter-router", "host": "127.1.3.1", "port": "55671", "group": "skupper-router"},
                              {"name": "edge", "host": "127.1.3.1", "port": "45671", "group": "skupper-router"}]
    assert plan.document_access == [
        {"name": "skupper-router", "role": "inter-router", "host": "", "port": 55671, "tlsProfile": "skupper-site-server"},
        {"name": "skupper-router", "role": "edge", "host": "", "port": 45671, "tlsProfile": "skupper-site-server"}]
    # the server certificate names the host the two roles share once (upstream's getHosts is a set)
    [server] = [c for c in plan.certificates if c["metadata"]["name"] == "skupper-site-server"]
    assert server["spec"]["hosts"].count("127.1.3.1") == 1, server["spec"]["hosts"]
    # a NodePort access: each role's endpoint is its own node port
    node_service = _service("NodePort")
    node_service["spec"]["ports"].append({"name": "edge", "port": 45671, "nodePort": 31001})
    pod = {"metadata": {"name": "r", "labels": {"skupper.io/group": "skupper-router"}}, "status": {"hostIP": "127.1.1.1"}}
    access["spec"]["accessType"] = "nodeport"
    plan = compose_access(AccessInputs(_site("nodeport"), [access], secrets, {"skupper-router": node_service}, [pod]))
    assert [(e["name"], e["port"]) for e in plan.endpoints] == [("inter-router", "31000"), ("edge", "31001")]
    # an edge-only RouterAccess (upstream's CRD allows one): served alone, on the edge port
    access = _router_access()
    access["spec"]["roles"] = [{"name": "edge"}]
    plan = compose_access(AccessInputs(_site(None), [access], secrets, {"skupper-router": service}, []))
    assert [(d["role"], d["port"]) for d in plan.document_access] == [("edge", 45671)]


@pytest.mark.parametrize(("roles", "message"), [
    ([{"name": "normal"}], "no role inter-router or edge: the router access serves only these"),
    ([{"name": "inter-router"}, {"name": "edge", "port": 5000}],
     "edge port 5000 is not supported: the router access serves edge on 45671"),
    ([{"name": "inter-router", "port": 1234}],
     "inter-router port 1234 is not supported: the router access serves inter-router on 55671"),
])
def test_router_access_roles_it_cannot_serve_are_refused_with_the_reason(roles: list[Any], message: str) -> None:
    access = _router_access()
    access["spec"]["roles"] = roles
    plan = compose_access(AccessInputs(_site(None), [access], {}, {}, []))
    assert plan.states[0].configured.reason == "Error" and plan.states[0].configured.message == message
    assert plan.document_access == [] and plan.services == []


def test_an_edge_site_has_no_link_access() -> None:
    """Upstream: "Edge sites cannot accept links from remote sites": no RouterAccess from its linkAccess (the Site's
    Resolved says why), its own one from an earlier linkAccess is stale, and one a user wrote is not served."""
    site = _site("default")
    site["spec"]["edge"] = True
    ours = _router_access()
    ours["metadata"]["ownerReferences"] = [{"kind": "Site", "name": "west", "uid": "site-uid"}]
    secrets = {"skupper-site-ca": _secret("skupper-site-ca"), "skupper-site-server": _secret("skupper-site-server")}
    plan = compose_access(AccessInputs(site, [ours], secrets, {}, []))
    assert plan.router_access is None and plan.stale_router_access is ours
    assert plan.resolved is not None and (plan.resolved.reason, plan.resolved.message) == ("Error", EDGE_SITE)
    assert plan.document_access == [] and plan.endpoints == [] and plan.services == []
    assert EDGE_SITE.startswith("Edge sites cannot accept links from remote sites")
    users = _router_access("mine")
    plan = compose_access(AccessInputs(_site(None) | {"spec": {"edge": True}}, [users], secrets, {}, []))
    assert [(meta(s.obj).name, s.configured.message) for s in plan.states] == [("mine", EDGE_SITE)]
    assert plan.document_access == [] and plan.services == [] and plan.resolved is None


# ---- link identities (docs/service-network-router.md, "Trust") -----------------------------------------------------

def test_an_identity_is_issued_once_and_never_one_the_network_knows() -> None:
    from service_network.site.identities import (
        MAX_IDENTITIES,
        IdentityRecord,
        identity_object_name,
        identity_problem,
        known_ids,
    )

    known = known_ids(["west-uid", "east-uid"], ["west-uid", "east-uid/skupper-router-2", "middle-uid"])
    assert known == {"west-uid", "east-uid", "middle-uid"}
    record = IdentityRecord("east-uid", "sha256:" + "a" * 64, "AccessGrant g", "2026-11-27T10:00:00Z")

    def problem(subject: str, *, record: IdentityRecord | None = None, records: int = 0) -> str | None:
        return identity_problem(subject, own_site_id="west-uid", known=known, record=record, records=records)

    assert problem("west-uid") == "a site cannot link to itself"
    assert problem("east-uid", record=record) == (
        "a link certificate for east-uid was already issued (AccessGrant g, 2026-11-27T10:00:00Z); an identity is "
        "issued once: the site that holds it keeps using it; it was bound without a site key, so no redemption can "
        "prove it: to link that site again, delete its record here (kubectl delete configmap "
        f"{identity_object_name('east-uid')}) once its old link is gone")
    # known in the network (a site, or the identity of one of its routers): refused even without a record
    assert problem("middle-uid") == (
        "middle-uid is already a site or router of this network; an identity cannot be issued twice; a site that "
        "links again, or links to a second site of its network, proves it holds its site key: redeem the token "
        "with this project's skupper (upstream's redeemer sends no proof)")
    assert problem("east-uid") is not None
    assert problem("x" * 254) == "an identity is at most 253 characters (this one has 254)"
    assert problem("newcomer", records=MAX_IDENTITIES) == (
        f"this site already keeps {MAX_IDENTITIES} link identities (the limit)")
    assert problem("newcomer", records=MAX_IDENTITIES - 1) is None


def test_identity_records_are_configmaps_named_by_a_hash_and_unreadable_ones_keep_their_identity() -> None:
    from service_network.site.identities import (
        IdentityRecord,
        first_link_records,
        identity_config_map,
        identity_object_name,
        parse_identity,
        peers,
    )

    site = {"apiVersion": "skupper.io/v2alpha1", "kind": "Site",
            "metadata": {"name": "west", "namespace": "west", "uid": "west-uid"}}
    record = IdentityRecord("east_uid.1", "sha256:" + "b" * 64, "AccessGrant g", "2026-11-27T10:00:00Z")
    config_map = identity_config_map(site, record)
    assert config_map["metadata"]["name"] == identity_object_name("east_uid.1")
    assert re.fullmatch(r"skupper-link-identity-[0-9a-f]{32}", config_map["metadata"]["name"])
    assert config_map["metadata"]["labels"] == {"internal.skupper.io/router-config": "link-identity"}
    assert parse_identity(config_map) == record
    damaged = {**config_map, "data": {**config_map["data"], "certificate": "garbage"}}
    assert parse_identity(damaged) == IdentityRecord("east_uid.1", "", "AccessGrant g", "2026-11-27T10:00:00Z")
    renamed = {**config_map, "metadata": {**config_map["metadata"], "name": "skupper-link-identity-0"}}
    assert parse_identity(renamed) is None           # a ConfigMap claiming an identity it is not named after
    assert peers([record, parse_identity(damaged) or record]) == [
        {"certificate": "sha256:" + "b" * 64, "identity": "east_uid.1"}]
    # first links: identities without a record are bound to the certificate their link came with, once
    fresh = first_link_records([("east_uid.1", "sha256:" + "c" * 64), ("far", "sha256:" + "d" * 64),
                                ("far", "sha256:" + "e" * 64), ("odd", "not-a-fingerprint")],
                               {"east_uid.1": record}, "now")
    assert fresh == [IdentityRecord("far", "sha256:" + "d" * 64, "first link", "now")]
