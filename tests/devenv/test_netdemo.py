"""The network demo's pure parts: what it applies per site, the token it makes from a grant, which Links a cut
deletes, how statuses and the client's result read. (The demo itself runs in tests/devenv/e2e/test_network_demo.py.)"""

from __future__ import annotations

from ipaddress import IPv4Network

import pytest

from devenv.multicluster import site_names
from devenv.netdemo import (
    ClientResult,
    details_of,
    format_rows,
    link_pairs,
    links_between,
    site_objects,
    status_rows,
    token_object,
)


def test_sites_are_west_east_or_a_chain_through_middle() -> None:
    assert site_names(2) == ("west", "east")
    assert site_names(3) == ("west", "middle", "east")
    with pytest.raises(ValueError, match="2 or 3 sites, not 4"):
        site_names(4)
    assert link_pairs(site_names(2)) == [("west", "east")]
    assert link_pairs(site_names(3)) == [("west", "middle"), ("middle", "east")]


def test_west_gets_the_listener_and_east_the_backends_and_connector() -> None:
    west = {(o["kind"], o["metadata"]["name"]) for o in site_objects("west", listener=True, backend=False)}
    east = site_objects("east", listener=False, backend=True)
    assert west == {("Namespace", "west"), ("Site", "west"), ("Listener", "backend")}
    kinds = {o["kind"]: o for o in east}
    assert set(kinds) == {"Namespace", "Site", "Deployment", "Connector"}
    assert kinds["Site"]["spec"] == {"linkAccess": "default"}
    assert kinds["Connector"]["spec"]["selector"] == "app=backend"
    labels = kinds["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert kinds["Connector"]["spec"]["port"] == kinds["Deployment"]["spec"]["template"]["spec"]["containers"][0][
        "ports"][0]["containerPort"]
    assert labels == {"app": "backend"}
    assert all(o["metadata"].get("namespace", o["metadata"]["name"]) == "east" for o in east)


def test_the_token_is_made_only_from_a_complete_grant_status() -> None:
    grant = {"metadata": {"name": "to-east", "namespace": "west"},
             "status": {"url": "https://127.2.3.1:8081/abc", "code": "secret"}}
    assert token_object(grant, "west", "east") is None
    grant["status"]["ca"] = "-----BEGIN CERTIFICATE-----"
    token = token_object(grant, "west", "east")
    assert token is not None
    assert token["kind"] == "AccessToken"
    assert token["metadata"] == {"name": "to-west", "namespace": "east"}
    assert token["spec"] == {"url": "https://127.2.3.1:8081/abc", "code": "secret",
                             "ca": "-----BEGIN CERTIFICATE-----"}


def test_a_cut_picks_the_links_whose_endpoints_are_in_the_other_clusters_block() -> None:
    links = [
        {"metadata": {"name": "to-east"}, "spec": {"endpoints": [{"name": "inter-router", "host": "127.3.3.1",
                                                                  "port": "55671"}]}},
        {"metadata": {"name": "to-middle"}, "spec": {"endpoints": [{"name": "inter-router", "host": "127.4.3.1"}]}},
        {"metadata": {"name": "by-name"}, "spec": {"endpoints": [{"host": "east.example"}]}},
        {"metadata": {"name": "empty"}, "spec": {}},
    ]
    assert links_between(links, IPv4Network("127.3.0.0/16")) == ["to-east"]
    assert links_between(links, IPv4Network("127.9.0.0/16")) == []


def test_statuses_read_as_a_person_wants_them() -> None:
    link = {"metadata": {"name": "to-west"},
            "spec": {"endpoints": [{"name": "inter-router", "host": "127.2.3.1", "port": "55671"}], "cost": 2},
            "status": {"status": "Pending", "message": "connection refused", "remoteSiteName": "west",
                       "conditions": [{"type": "Operational", "status": "False", "reason": "Error"}]}}
    assert details_of("Link", link) == ("Operational=False (Error); remote site west; to 127.2.3.1:55671; cost 2; "
                                        "connection refused")
    site = {"metadata": {"name": "west"}, "status": {"status": "Ready", "message": "OK", "sitesInNetwork": 2,
                                                     "network": [{"name": "west"}, {"name": "east"}]}}
    assert details_of("Site", site) == "sitesInNetwork=2 (west, east)"
    rows = status_rows("west", [("Site", site), ("Link", link)])
    lines = format_rows(rows)
    assert lines[0].split() == ["SITE", "KIND", "NAME", "STATUS", "DETAILS"]
    assert lines[1].startswith("west  Site  west     Ready    sitesInNetwork=2")
    assert lines[2].startswith("west  Link  to-west  Pending  Operational=False")
    listener = {"metadata": {"name": "backend"}, "status": {"hasMatchingConnector": True}}
    assert details_of("Listener", listener) == "hasMatchingConnector=true"
    grant = {"metadata": {"name": "g"}, "spec": {"redemptionsAllowed": 3},
             "status": {"redemptions": 1, "url": "https://x", "code": "never-shown"}}
    assert "never-shown" not in details_of("AccessGrant", grant)
    assert details_of("AccessGrant", grant) == "redemptions 1/3; url https://x"


def test_the_client_got_through_only_when_east_pods_answered() -> None:
    east = {"backend-a", "backend-b"}
    assert ClientResult("t", ["backend-a", "backend-b", "backend-a"]).ok_for(east)
    assert not ClientResult("t", []).ok_for(east)
    assert not ClientResult("t", ["backend-a", "someone-else"]).ok_for(east)
    assert not ClientResult("t", ["backend-a"], error="reset").ok_for(east)
    assert ClientResult("t", ["backend-a", "backend-a", "backend-b"]).describe("east") == (
        "client in west -> t -> answered by Pods in east: backend-a (2), backend-b (1)")
    assert ClientResult("t", error="refused").describe("east") == "client in west -> t -> FAILED: refused"
