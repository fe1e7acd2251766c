"""Link-state database and path computation (pure): sequence numbers, shortest paths by summed cost over directed
links, no loops, first-hop choice, routes per key and link, membership of the network."""

from __future__ import annotations

import json

from service_network.router.config import RemoteRoute, parse_config
from service_network.router.linkstate import (
    Advert,
    AdvertLink,
    LinkStateDb,
    ServiceEntry,
    SiteInfo,
    connected_routers,
    remote_routes,
    shortest_paths,
)
from service_network.router.spec import StateLayout, compose


def ad(router: str, seq: int = 1, links: dict[str, tuple[str, int]] | None = None, keys: tuple[str, ...] = (),
       peers: tuple[str, ...] = ()) -> Advert:
    """``links``: link name -> (remote router, cost)."""
    return Advert(router=router, site=SiteInfo(id=router, name=router), seq=seq,
                  links=tuple(AdvertLink(to=to, cost=c, name=n) for n, (to, c) in (links or {}).items()),
                  peers=peers,
                  services=tuple(ServiceEntry(key=k, connectors=(f"c@{router}",)) for k in keys))


def db(*ads: Advert) -> dict[str, Advert]:
    d = LinkStateDb()
    for a in ads:
        d.offer(a)
    return d.adverts


def test_newer_sequence_wins_older_and_equal_are_ignored():
    d = LinkStateDb()
    assert d.offer(ad("a", 5))
    assert not d.offer(ad("a", 5, keys=("x",)))
    assert not d.offer(ad("a", 4, keys=("x",)))
    assert d.offer(ad("a", 6, keys=("x",)))
    assert d.adverts["a"].services[0].key == "x"
    assert d.purge(["b"]) == ["a"] and not d.adverts


def test_chain_two_hops_and_cheaper_direct_link():
    # west -> middle -> east, costs 1 + 1; direct west -> east cost 5, then 1
    chain = [ad("middle", links={"m-e": ("east", 1)}), ad("east", keys=("backend",))]
    west = ad("west", links={"to-middle": ("middle", 1), "to-east": ("east", 5)})
    paths = shortest_paths(db(west, *chain), "west")
    assert paths["east"].cost == 2 and paths["east"].first_link == "to-middle"
    assert remote_routes(db(west, *chain), "west") == (RemoteRoute(routing_key="backend", link="to-middle", cost=2),)
    cheaper = ad("west", 2, links={"to-middle": ("middle", 1), "to-east": ("east", 1)})
    assert remote_routes(db(cheaper, *chain), "west") == (RemoteRoute(routing_key="backend", link="to-east", cost=1),)
    # the middle router forwards to east itself
    assert remote_routes(db(cheaper, *chain), "middle") == (RemoteRoute(routing_key="backend", link="m-e", cost=1),)


def test_links_carry_data_in_their_direction_only():
    # east dialled west: west cannot send over it, east can
    adverts = db(ad("west", keys=("w-key",), peers=("east",)), ad("east", links={"to-west": ("west", 1)},
                                                                   keys=("e-key",)))
    assert remote_routes(adverts, "west") == ()
    assert remote_routes(adverts, "east") == (RemoteRoute(routing_key="w-key", link="to-west", cost=1),)
    assert connected_routers(adverts, "west") == {"west", "east"}


def test_one_route_per_first_link_with_the_nearest_destination():
    # a key at two routers behind the same first link: the cheaper one counts; a second link is another candidate
    adverts = db(ad("me", links={"l1": ("b", 1), "l2": ("d", 4)}),
                 ad("b", links={"b-c": ("c", 1)}, keys=("k",)), ad("c", keys=("k",)), ad("d", keys=("k",)))
    assert remote_routes(adverts, "me") == (RemoteRoute(routing_key="k", link="l1", cost=1),
                                            RemoteRoute(routing_key="k", link="l2", cost=4))


def test_no_path_through_a_router_without_advertisement_and_no_loop_back():
    adverts = db(ad("me", links={"l": ("x", 1)}), ad("y", keys=("k",)))   # x unknown: nothing behind it
    assert shortest_paths(adverts, "me") == {}
    # a ring: the path to every router is the cheaper direction, never through this router again
    ring = db(ad("a", links={"ab": ("b", 1), "ac": ("c", 1)}), ad("b", links={"bc": ("c", 1), "ba": ("a", 1)}),
              ad("c", links={"ca": ("a", 1), "cb": ("b", 1)}, keys=("k",)))
    paths = shortest_paths(ring, "a")
    assert paths["c"].first_link == "ac" and paths["c"].cost == 1
    assert "a" not in paths


def test_equal_cost_paths_choose_a_stable_first_link():
    adverts = db(ad("me", links={"zeta": ("b", 1), "alpha": ("c", 1)}), ad("b", links={"bd": ("d", 1)}),
                 ad("c", links={"cd": ("d", 1)}), ad("d", keys=("k",)))
    assert remote_routes(adverts, "me") == (RemoteRoute(routing_key="k", link="alpha", cost=2),)


def test_connected_routers_excludes_a_partitioned_router():
    adverts = db(ad("a", links={"ab": ("b", 1)}), ad("b", peers=("a",)), ad("gone", keys=("k",)))
    assert connected_routers(adverts, "a") == {"a", "b"}


def test_a_link_counts_only_while_both_ends_report_it():
    """middle cut its link to east: east's last advertisement (nobody can replace it) still names middle as a
    peer, but middle no longer lists the link, so east is out of the network at once; and the other way round."""
    west = ad("west", links={"w-m": ("middle", 1)})
    stale_east = ad("east", peers=("middle",), keys=("k",))
    middle = ad("middle", peers=("west",))
    assert connected_routers(db(west, middle, stale_east), "west") == {"west", "middle"}
    dead_dialler = ad("d", links={"d-m": ("middle", 1)})          # middle no longer has d as a peer
    assert connected_routers(db(west, middle, dead_dialler), "west") == {"west", "middle"}
    linked = ad("middle", 2, links={"m-e": ("east", 1)}, peers=("west",))
    assert connected_routers(db(west, linked, stale_east), "west") == {"west", "middle", "east"}


def test_hostile_key_from_a_remote_router_becomes_safe_names(tmp_path):
    """A routing key learned from another router (any text) never appears raw in haproxy.cfg or the maps."""
    key = 'x\n    server evil 10.0.0.1:80\n" ; # ä'
    doc = {"version": 1, "site": {"id": "w", "name": "w"},
           "tlsProfiles": [{"name": "p", "files": {"ca": "/c", "cert": "/c", "key": "/k"}}],
           "links": [{"name": "l", "host": "127.0.0.1", "tlsProfile": "p"}],
           "listeners": [{"name": "l1", "routingKey": key, "port": 1024}]}
    from service_network.router.haproxy_config import map_text, render
    from service_network.router.tls import ProfileFiles

    config = parse_config(json.dumps(doc)).with_routes((RemoteRoute(routing_key=key, link="l", cost=3),))
    files = {"p": ProfileFiles(ca_file=tmp_path / "ca.pem", cert_file=tmp_path / "cert.pem")}
    spec, problems = compose(config, files, StateLayout(tmp_path))
    assert not problems
    text = render(spec) + map_text(spec.route_map) + map_text(spec.sni_map)
    assert "server evil" not in text and " 10.0.0.1:80" not in text and '"' not in text
    assert all(" " not in k for k, _ in spec.route_map + spec.sni_map)
    assert spec.frontends[0].enabled, "a route to the key opens the Listener"
