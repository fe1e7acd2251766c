"""Certificate resources: what a Certificate needs (pure), the certificates made (signed by their CA or
self-signed, names, key usages, CA or not), and end to end with the controller: Secrets issued and owned by their
Certificate, reissued when the hosts change, renewed after two thirds of their lifetime, an owner's Secret never
overwritten, a missing CA awaited."""

from __future__ import annotations

import asyncio
import base64
import datetime
from collections.abc import AsyncIterator
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from site_support import GV, SiteEnv, site_environment

from service_network.site import pki
from service_network.site.certificates import (
    ANNOTATION_NOT_AFTER,
    ANNOTATION_NOT_BEFORE,
    plan_certificate,
    renewal_time,
    timestamp,
)

NOW = datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.UTC)
CERTIFICATES = "certificates.skupper.io"


def certificate(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": GV, "kind": "Certificate",
            "metadata": {"name": name, "namespace": "west", "uid": f"uid-{name}", "generation": 1},
            "spec": {"ca": "", "subject": name, **spec}}


def secret_view(name: str, annotations: dict[str, str] | None = None, uid: str = "") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "west", "uid": uid or f"s-{name}",
                         "annotations": annotations or {}},
            "type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": "", "ca.crt": ""}}


# ---- pure ------------------------------------------------------------------------------------------------------

def test_a_missing_secret_is_issued_and_a_current_one_left_alone() -> None:
    cert = certificate("server", ca="site-ca", hosts=["router.example", "127.0.0.5", "*.key.example"], server=True)
    waiting = plan_certificate(cert, {}, NOW)
    assert (waiting.state.reason, waiting.state.message, waiting.issue) == (
        "Pending", 'waiting for the CA Secret "site-ca"', None)
    ca = secret_view("site-ca")
    plan = plan_certificate(cert, {"site-ca": ca}, NOW)
    assert plan.issue is not None and plan.issue.replace is False
    assert (plan.issue.dns, plan.issue.ips, plan.issue.server, plan.issue.client) == (
        ("*.key.example", "router.example", "127.0.0.5"), ("127.0.0.5",), True, False)  # the IP a DNS name too
    issued = secret_view("server", {
        "internal.skupper.io/certificate-names": plan.issue.marker,
        ANNOTATION_NOT_BEFORE: timestamp(NOW), ANNOTATION_NOT_AFTER: timestamp(NOW + datetime.timedelta(days=3))})
    current = plan_certificate(cert, {"site-ca": ca, "server": issued}, NOW + datetime.timedelta(days=1))
    assert (current.issue, current.state.reason, current.expiration) == (None, "Ready", "2026-11-29T12:00:00Z")
    assert current.renew_at == NOW + datetime.timedelta(days=2)
    # two thirds of the lifetime passed: renewed in place
    due = plan_certificate(cert, {"site-ca": ca, "server": issued}, NOW + datetime.timedelta(days=2, seconds=1))
    assert due.issue is not None and due.issue.replace is True and due.issue.keep_key is False
    root = certificate("root", signing=True)
    root_issued = plan_certificate(root, {}, NOW).issue
    assert root_issued is not None
    root_secret = secret_view("root", {
        "internal.skupper.io/certificate-names": root_issued.marker,
        ANNOTATION_NOT_BEFORE: timestamp(NOW), ANNOTATION_NOT_AFTER: timestamp(NOW + datetime.timedelta(days=3))})
    root_due = plan_certificate(root, {"root": root_secret}, NOW + datetime.timedelta(days=2, seconds=1)).issue
    assert root_due is not None and root_due.keep_key is True           # a CA renewed keeps its key
    # what it must say changed (hosts, or another CA Secret): reissued
    moved = certificate("server", ca="site-ca", hosts=["router.example"], server=True)
    assert plan_certificate(moved, {"site-ca": ca, "server": issued}, NOW).issue is not None
    new_ca = secret_view("site-ca", uid="another")
    assert plan_certificate(cert, {"site-ca": new_ca, "server": issued}, NOW).issue is not None
    renewed_ca = {**ca, "metadata": {**ca["metadata"], "resourceVersion": "7"}}
    assert plan_certificate(cert, {"site-ca": renewed_ca, "server": issued}, NOW).issue is not None


def test_an_owners_secret_is_used_as_it_is() -> None:
    plan = plan_certificate(certificate("mine"), {"mine": secret_view("mine")}, NOW)
    assert (plan.issue, plan.state.reason, plan.expiration) == (None, "Ready", None)


@pytest.mark.parametrize(("spec", "message"), [
    ({"ca": "self"}, "Certificate self cannot be signed by its own Secret"),
    ({"hosts": ["bad host"]}, 'host "bad host" is neither an IP address nor a DNS name'),
    ({"hosts": ["*.*.example"]}, 'host "*.*.example" is neither an IP address nor a DNS name'),
    ({"subject": "x" * 65}, "subject must be 1 to 64 characters (a certificate's common name)"),
    ({"hosts": "not-a-list"}, "spec.hosts: Input should be a valid list"),
])
def test_bad_specs_are_errors(spec: dict[str, Any], message: str) -> None:
    plan = plan_certificate(certificate("self", **spec), {}, NOW)
    assert (plan.state.reason, plan.state.message, plan.issue) == ("Error", message, None)


def test_a_certificate_naming_no_ca_is_signed_by_the_sites_default_issuer() -> None:
    """What upstream's ``skupper link generate`` writes when the Site publishes no ``defaultIssuer`` (``ca: ""``):
    signed by the namespace's Site's default issuer; with no Site to say which, an error (never self-signed)."""
    link = certificate("link-west", client=True)
    plan = plan_certificate(link, {"skupper-site-ca": secret_view("skupper-site-ca")}, NOW, "skupper-site-ca")
    assert plan.issue is not None and plan.issue.ca == "skupper-site-ca" and plan.issue.client
    alone = plan_certificate(link, {}, NOW)
    assert (alone.state.reason, alone.state.message, alone.issue) == (
        "Error", "spec.ca is empty and no Site in the namespace has a default issuer: name the CA Secret that "
                 "signs this certificate", None)
    # a CA naming none is self-signed, as before
    assert plan_certificate(certificate("root", signing=True), {}, NOW, "skupper-site-ca").issue.ca is None  # type: ignore[union-attr]


def test_renewal_is_two_thirds_into_the_lifetime() -> None:
    assert renewal_time(NOW, NOW + datetime.timedelta(seconds=6)) == NOW + datetime.timedelta(seconds=4)


def test_certificates_made_for_each_kind() -> None:
    root = pki.make_certificate("root", issuer=None, signing=True)
    assert pki.cert_info(root.cert).is_ca and pki.signed_by(root.cert, root.cert)
    intermediate = pki.make_certificate("intermediate", issuer=root, signing=True)
    assert pki.cert_info(intermediate.cert).is_ca and pki.signed_by(intermediate.cert, root.cert)
    leaf = pki.make_certificate("leaf", issuer=intermediate, dns=["a.example"], ips=["127.0.0.9"], server=True,
                                client=True)
    info = pki.cert_info(leaf.cert)
    assert (info.subject, info.issuer, info.is_ca) == ("leaf", "intermediate", False)
    assert (info.dns_names, info.ip_addresses) == ({"a.example"}, {"127.0.0.9"})
    usages = x509.load_pem_x509_certificate(leaf.cert).extensions.get_extension_for_class(x509.ExtendedKeyUsage)
    assert set(usages.value) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    alone = pki.make_certificate("alone", issuer=None, dns=["b.example"], server=True)
    assert pki.signed_by(alone.cert, alone.cert) and not pki.cert_info(alone.cert).is_ca
    with pytest.raises(pki.CertificateError):
        pki.make_certificate("x", issuer=leaf)          # a leaf cannot sign


# ---- with the controller ---------------------------------------------------------------------------------------

@pytest.fixture
async def env() -> AsyncIterator[SiteEnv]:
    async with site_environment() as environment:
        await environment.start_controller(certificate_validity=datetime.timedelta(seconds=6))
        yield environment


def _decoded(secret: dict[str, Any], key: str) -> bytes:
    return base64.b64decode(secret["data"][key])


async def _ready(env: SiteEnv, name: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        obj = await env.api.get(CERTIFICATES, name, env.namespace)
        status = obj.get("status") or {}
        return status if status.get("status") == "Ready" else None
    result: dict[str, Any] = await env.wait_for(check, 30, f"Certificate {name} Ready")
    return result


async def test_certificates_are_issued_reissued_renewed_and_an_owners_secret_kept(env: SiteEnv) -> None:
    api, ns = env.api, env.namespace

    async def create(name: str, **spec: Any) -> None:
        await api.create(CERTIFICATES, {"apiVersion": GV, "kind": "Certificate",
                                        "metadata": {"name": name, "namespace": ns},
                                        "spec": {"ca": "", "subject": name, **spec}}, ns)

    # a server certificate whose CA does not exist yet: Pending, then issued once the CA is
    await create("server", ca="team-ca", hosts=["backend.example", "127.0.0.7"], server=True)
    await env.wait_for(lambda: _status_is(env, "server", "Pending", 'waiting for the CA Secret "team-ca"'), 30,
                       "server waits for its CA")
    await create("team-ca", signing=True)
    ca_status = await _ready(env, "team-ca")
    server_status = await _ready(env, "server")
    ca = await api.get("secrets", "team-ca", ns)
    server = await api.get("secrets", "server", ns)
    assert server["type"] == "kubernetes.io/tls"
    assert [(r["kind"], r["name"]) for r in server["metadata"]["ownerReferences"]] == [("Certificate", "server")]
    assert pki.signed_by(_decoded(server, "tls.crt"), _decoded(ca, "tls.crt"))
    assert _decoded(server, "ca.crt") == _decoded(ca, "tls.crt")
    info = pki.cert_info(_decoded(server, "tls.crt"))
    # the IP a DNS name too: upstream's router checks the host it dials against the DNS names only
    assert (info.dns_names, info.ip_addresses, info.is_ca) == ({"backend.example", "127.0.0.7"}, {"127.0.0.7"}, False)
    assert pki.cert_info(_decoded(ca, "tls.crt")).is_ca
    assert server_status["expiration"] == timestamp(info.not_after)
    assert ca_status["expiration"]

    # renewed two thirds into their (here 6 s) lifetime: the CA keeps its key (what it signed and whoever trusts
    # it stay valid), the server certificate is reissued under the renewed CA with a later expiration
    async def renewed() -> tuple[dict[str, Any], dict[str, Any]] | None:
        current_ca = await api.get("secrets", "team-ca", ns)
        current = await api.get("secrets", "server", ns)
        later = pki.cert_info(_decoded(current, "tls.crt")).not_after > info.not_after
        return (current_ca, current) if later and current_ca["data"]["tls.crt"] != ca["data"]["tls.crt"] else None
    new_ca, again = await env.wait_for(renewed, 30, "the CA and the server certificate renewed")
    assert _decoded(new_ca, "tls.key") == _decoded(ca, "tls.key")
    assert pki.signed_by(_decoded(again, "tls.crt"), _decoded(new_ca, "tls.crt"))
    assert pki.signed_by(_decoded(again, "tls.crt"), _decoded(ca, "tls.crt"))      # the old CA still verifies it
    assert pki.signed_by(_decoded(server, "tls.crt"), _decoded(new_ca, "tls.crt"))  # and the new one the old

    # the hosts change: reissued with the new names
    obj = await api.get(CERTIFICATES, "server", ns)
    obj["spec"]["hosts"] = ["other.example"]
    await api.update(CERTIFICATES, obj)

    async def new_names() -> bool:
        current = await api.get("secrets", "server", ns)
        return pki.cert_info(_decoded(current, "tls.crt")).dns_names == {"other.example"}
    await env.wait_for(new_names, 30, "reissued for the new hosts")

    # an owner's Secret of the same name is used as it is
    own = pki.make_certificate("mine", issuer=None, server=True)
    await api.create("secrets", {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                                 "metadata": {"name": "mine", "namespace": ns},
                                 "data": {"tls.crt": base64.b64encode(own.cert).decode(),
                                          "tls.key": base64.b64encode(own.key).decode()}}, ns)
    await create("mine", server=True)
    mine_status = await _ready(env, "mine")
    assert "expiration" not in mine_status
    await asyncio.sleep(1)
    kept = await api.get("secrets", "mine", ns)
    assert _decoded(kept, "tls.crt") == own.cert and "ownerReferences" not in kept["metadata"]


async def _status_is(env: SiteEnv, name: str, status: str, message: str) -> bool:
    obj = await env.api.get(CERTIFICATES, name, env.namespace)
    current = obj.get("status") or {}
    return current.get("status") == status and current.get("message") == message
