"""The threat model of site keys (docs/service-network-router.md, "Trust: proving a site"), line by line, on the
pure decision: what a token holder, a linked site and a network peer can and cannot do at a granting site."""

from __future__ import annotations

import base64
import json

import pytest

from service_network.site.identities import IdentityRecord, NetworkTrust, identity_decision, network_trust
from service_network.site.site_keys import (
    MAX_PROOF,
    ProofProblem,
    ProvenSite,
    Voucher,
    make_proof,
    make_voucher,
    new_site_key,
    parse_voucher,
    public_key,
    verify_proof,
    voucher_text,
)

URL = "https://127.1.3.1:9090/grant-uid"
NOW = 1_800_000_000
WEST, MIDDLE, EAST = new_site_key(), new_site_key(), new_site_key()
THIEF = new_site_key()


def _proven(key: bytes, identity: str, vouchers: list[Voucher] | tuple[Voucher, ...] = ()) -> ProvenSite:
    return verify_proof(make_proof(key, identity, URL, NOW, vouchers), subject=identity, url=URL, now=NOW)


def _decide(subject: str, *, proven: ProvenSite | None = None, record: IdentityRecord | None = None,
            trust: NetworkTrust | None = None) -> str | None:
    return identity_decision(subject, own_site_id="middle", trust=trust or NetworkTrust(), record=record,
                             records=1, proven=proven).problem


# Middle grants. West redeemed one of Middle's tokens earlier and proved its key; East redeemed West's token
# (West vouches for East's key) and East's routers advertise their link to West.
TRUST = network_trust(known=frozenset({"middle", "west", "east"}),
                      dials={"east": ["west"], "west": ["middle"]}, up_links={},
                      records=[IdentityRecord("west", "sha256:" + "a" * 64, "AccessGrant g", "t", public_key(WEST))],
                      own=("middle", public_key(MIDDLE)), held={})
EAST_BY_WEST = make_voucher("west", WEST, "east", public_key(EAST))


def test_a_proof_binds_the_identity_the_grant_and_the_time() -> None:
    proof = make_proof(EAST, "east", URL, NOW, [EAST_BY_WEST])
    proven = verify_proof(proof, subject="east", url=URL, now=NOW + 299)
    assert proven == ProvenSite("east", public_key(EAST), (EAST_BY_WEST,))
    with pytest.raises(ProofProblem, match="another identity"):
        verify_proof(proof, subject="west", url=URL, now=NOW)            # a proof replayed for another site
    with pytest.raises(ProofProblem, match="another grant"):
        verify_proof(proof, subject="east", url=URL + "x", now=NOW)      # ... or at another grant
    with pytest.raises(ProofProblem, match="300 s"):
        verify_proof(proof, subject="east", url=URL, now=NOW + 301)      # ... or later
    body = json.loads(base64.urlsafe_b64decode(proof))
    body["key"] = public_key(THIEF)                                      # someone else's key on East's signature
    with pytest.raises(ProofProblem, match="does not verify"):
        verify_proof(base64.urlsafe_b64encode(json.dumps(body).encode()).decode(), subject="east", url=URL, now=NOW)
    with pytest.raises(ProofProblem, match="not base64 JSON"):
        verify_proof("%%%", subject="east", url=URL, now=NOW)
    with pytest.raises(ProofProblem, match=f"longer than {MAX_PROOF}"):
        verify_proof("A" * (MAX_PROOF + 1), subject="east", url=URL, now=NOW)
    # a forged voucher (the signer's key, another key's signature) is dropped; the proof itself still holds
    forged = Voucher("west", public_key(WEST), "east", public_key(EAST), make_voucher("west", THIEF, "east",
                                                                                       public_key(EAST)).signature)
    assert _proven(EAST, "east", [forged]).vouchers == ()
    assert parse_voucher(voucher_text(EAST_BY_WEST)) == EAST_BY_WEST
    with pytest.raises(ProofProblem):
        parse_voucher(voucher_text(forged))


def test_a_token_holder_without_the_site_key_never_becomes_a_known_site() -> None:
    # upstream's redeemer (no proof) naming a known site: refused, with what to do
    assert _decide("east", trust=TRUST) == (
        "east is already a site or router of this network; an identity cannot be issued twice; a site that links "
        "again, or links to a second site of its network, proves it holds its site key: redeem the token with this "
        "project's skupper (upstream's redeemer sends no proof)")
    # a thief's own key, even carrying East's real voucher (which vouches for East's key, not the thief's)
    assert "none of the 1 vouchers" in (_decide("east", proven=_proven(THIEF, "east", [EAST_BY_WEST]),
                                                trust=TRUST) or "")
    # a voucher a thief signs itself for its key: the thief is no signer Middle bound
    self_made = make_voucher("west", THIEF, "east", public_key(THIEF))
    assert _decide("east", proven=_proven(THIEF, "east", [self_made]), trust=TRUST) is not None
    # an unknown identity is first come, as upstream: issued, binding the proven key (or none)
    assert identity_decision("newcomer", own_site_id="middle", trust=TRUST, record=None, records=0,
                             proven=_proven(THIEF, "newcomer")).site_key == public_key(THIEF)
    assert _decide("newcomer", trust=TRUST) is None


def test_a_site_proves_itself_at_a_site_that_knows_it_through_the_network() -> None:
    decision = identity_decision("east", own_site_id="middle", trust=TRUST, record=None, records=1,
                                 proven=_proven(EAST, "east", [EAST_BY_WEST]))
    assert (decision.problem, decision.site_key, decision.rebind) == (None, public_key(EAST), False)


def test_a_linked_site_vouches_only_for_sites_that_link_to_it() -> None:
    # West (a site Middle bound) vouches for a thief's key as East's: East's routers do not advertise a link to...
    lying = make_voucher("west", WEST, "east", public_key(THIEF))
    elsewhere = network_trust(known=TRUST.known, dials={"east": ["far"]}, up_links={},
                              records=[IdentityRecord("west", "", "AccessGrant g", "t", public_key(WEST))],
                              own=("middle", public_key(MIDDLE)), held={})
    assert _decide("east", proven=_proven(THIEF, "east", [lying]), trust=elsewhere) is not None
    # ... and a signer names itself: West's key cannot vouch as "far" (the key is bound to west)
    as_far = make_voucher("far", WEST, "east", public_key(THIEF))
    assert _decide("east", proven=_proven(THIEF, "east", [as_far]), trust=elsewhere) is not None


def test_a_site_whose_grant_was_redeemed_vouches_only_while_that_link_reaches_it() -> None:
    # Middle redeemed West's token "to-west" and holds West's voucher for Middle: West's key signs for East only
    # while the Link to-west is up to west (the router authenticated it)
    held = {"to-west": make_voucher("west", WEST, "middle", public_key(MIDDLE))}
    args = {"known": TRUST.known, "dials": {"east": ["west"]}, "records": [], "own": ("middle", public_key(MIDDLE)),
            "held": held}
    up = network_trust(up_links={"to-west": "west"}, **args)       # type: ignore[arg-type]
    down = network_trust(up_links={}, **args)                       # type: ignore[arg-type]
    elsewhere = network_trust(up_links={"to-west": "impostor"}, **args)   # type: ignore[arg-type]
    proven = _proven(EAST, "east", [EAST_BY_WEST])
    assert _decide("east", proven=proven, trust=up) is None
    assert _decide("east", proven=proven, trust=down) is not None
    assert _decide("east", proven=proven, trust=elsewhere) is not None


def test_a_site_links_again_with_its_key_and_only_with_it() -> None:
    record = IdentityRecord("east", "sha256:" + "b" * 64, "AccessGrant g", "2026-11-27T10:00:00Z", public_key(EAST))
    decision = identity_decision("east", own_site_id="middle", trust=TRUST, record=record, records=1,
                                 proven=_proven(EAST, "east"))
    assert (decision.problem, decision.rebind) == (None, True)
    assert _decide("east", proven=_proven(THIEF, "east"), record=record) == (
        f"a link certificate for east was already issued (AccessGrant g, 2026-11-27T10:00:00Z) to a site with "
        f"another site key ({_label(EAST)}; this proof's: {_label(THIEF)}): only that site can link as east")
    assert (_decide("east", record=record) or "").startswith(
        "a link certificate for east was already issued (AccessGrant g, 2026-11-27T10:00:00Z); an identity is "
        "issued once: the site that holds it keeps using it; a site that links again")
    # a record bound without a key (upstream's redeemer, or a first link): the words say how to free it
    keyless = IdentityRecord("east", "sha256:" + "b" * 64, "first link", "t")
    assert "delete its record here (kubectl delete configmap skupper-link-identity-" in (
        _decide("east", proven=_proven(EAST, "east"), record=keyless) or "")
    # ... unless this site itself vouched for the proven key before
    own = make_voucher("middle", MIDDLE, "east", public_key(EAST))
    assert _decide("east", proven=_proven(EAST, "east", [own]), record=keyless, trust=TRUST) is None


def _label(key: bytes) -> str:
    from service_network.site.site_keys import key_label
    return key_label(public_key(key))
