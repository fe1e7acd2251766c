"""skupper-router's balancing rule across sites, through real routers: a new connection goes to the candidate
with the fewest open connections plus path cost (local targets cost 0; a remote site counts the connections this
router sent to that next hop for the key); ties go to the cheaper candidate, then take turns."""

from __future__ import annotations

from collections import Counter

from router_support import wait_until, who


def expected_choice(open_local: int, open_remote: int, cost: int) -> str:
    """The rule for one local target and one remote candidate (ties to the local one, as upstream)."""
    return "local" if open_local <= open_remote + cost else "remote"


async def test_local_target_preferred_until_its_open_connections_exceed_the_remote_cost(net, start_backend):
    west, east = net.router("west"), net.router("east")
    local = await start_backend("pod-west", west.host)
    remote = await start_backend("pod-east", east.host)
    west.connect("backend", [local])
    east.connect("backend", [remote])
    port = west.listen("backend")
    west.link_to(east, cost=3)
    await east.start()
    await west.start()
    await wait_until(lambda: west.routes().get("backend") == {"to-east": 3}, within=10, what="route to east")

    held = []
    counts = {"local": 0, "remote": 0}
    seen = []
    for _ in range(12):
        want = expected_choice(counts["local"], counts["remote"], 3)
        name, _, writer = await who(west.host, port)
        got = "local" if name == "pod-west" else "remote"
        seen.append(got)
        assert got == want, f"connection {len(seen)}: {seen} (open local {counts['local']}, remote {counts['remote']})"
        counts[got] += 1
        held.append(writer)
    # local until it holds 4 (= 0 + cost 3, tie to local), then alternating
    assert seen[:5] == ["local"] * 4 + ["remote"]

    # closing local connections makes the local target the choice again
    for w in held[:3]:
        w.close()
    # the router's own count of open connections to the target (the backend's drops a moment before it)
    want = counts["local"] - 3

    async def closes_seen() -> bool:
        return await west.metric("service_network_connector_connections_open", 'target="pod-west"') == want
    await wait_until(closes_seen, what="west saw the local closes")
    assert (await who(west.host, port))[0] == "pod-west"
    for w in held[3:]:
        w.close()


async def test_remote_candidates_are_balanced_per_next_hop_site_not_per_pod(net, start_backend):
    west, east, far = net.router("west"), net.router("east"), net.router("far")
    e1 = await start_backend("east-1", east.host)
    e2 = await start_backend("east-2", east.host)
    f1 = await start_backend("far-1", far.host)
    east.connect("backend", [e1], name="c1")
    east.connect("backend", [e2], name="c2")
    far.connect("backend", [f1])
    port = west.listen("backend")
    west.link_to(east, cost=1)
    west.link_to(far, cost=1)
    for r in (east, far, west):
        await r.start()
    await wait_until(lambda: west.routes().get("backend") == {"to-east": 1, "to-far": 1}, within=10,
                     what="routes to both sites")
    held = []
    names = []
    for _ in range(6):
        name, _, writer = await who(west.host, port)
        names.append(name)
        held.append(writer)
    per_site = Counter("east" if n.startswith("east") else "far" for n in names)
    assert per_site == Counter({"east": 3, "far": 3}), names       # one pod at far gets as much as two at east
    assert Counter(n for n in names if n.startswith("east")) == Counter({"east-1": 2, "east-2": 1}) or \
        Counter(n for n in names if n.startswith("east")) == Counter({"east-1": 1, "east-2": 2})
    for w in held:
        w.close()
