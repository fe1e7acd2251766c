"""`listener-operator network-demo`: local clusters side by side as sites, linked with an AccessGrant and an
AccessToken, a client in West reaching a backend Pod in East, the statuses, and the link cut.

In process, the Pods that answered are checked against East's API (they are East's backend Pods, not anything in
West); as a person runs it (a subprocess, three sites), ``--once`` exits 0 having shown the path through Middle and
the cut, and leaves only logs behind."""

from __future__ import annotations

import io
import re
import subprocess
from pathlib import Path

from test_local import assert_clean, operator_command, workdir  # noqa: F401 - fixture by name

from devenv.multicluster import LocalSites, SiteOptions
from devenv.netdemo import RESOURCES, run_demo
from devenv.up import Console


async def test_demo_client_in_west_is_answered_by_east_pods_then_refused_after_the_cut(
        workdir: Path) -> None:  # noqa: F811
    output = io.StringIO()
    console = Console(output)
    async with LocalSites(("west", "east"), SiteOptions(state_dir=workdir / "s"), console) as sites:
        assert await run_demo(sites, console, 90)
        east_pods, _ = await sites.sim("east").api.list("pods", "east", label_selector="app=backend")
        west_pods, _ = await sites.sim("west").api.list("pods", "west")
        links_west, _ = await sites.sim("west").api.list(RESOURCES["Link"], "west")
        links_east, _ = await sites.sim("east").api.list(RESOURCES["Link"], "east")
    text = output.getvalue()
    answered = re.search(r"client in west -> backend\.west:8080 \(127\.\d+\.16\.\d+:8080\) -> answered by Pods in "
                         r"east: (.+)\n", text)
    assert answered, text
    names = set(re.findall(r"(\S+) \(\d+\)", answered.group(1)))
    assert names and names <= {p["metadata"]["name"] for p in east_pods}, (names, text)
    assert not names & {p["metadata"]["name"] for p in west_pods}
    # the grant was issued in West and redeemed in East: East's one Link was Ready with the remote site's name, and
    # West has none (the link East dialed carries West's client)
    assert "[west] AccessGrant to-east: url https://127." in text
    assert "[east] AccessToken to-west redeemed at west" in text
    assert re.search(r"east\s+Link\s+to-west\s+Ready\s+Operational=True; remote site west", text), text
    assert not re.search(r"west\s+Link\s+", text), text
    assert re.search(r"west\s+Listener\s+backend\s+Ready\s+hasMatchingConnector=true", text), text
    # the cut: the Link deleted; the client is refused and the statuses follow
    assert "deleted Link to-west in east" in text
    assert links_west == [] and links_east == []
    assert re.search(r"West's Listener: hasMatchingConnector=false after \d+\.\ds", text), text
    assert re.search(r"client in west -> refused after \d+\.\ds", text), text
    assert re.search(r"east\s+Site\s+east\s+Ready\s+sitesInNetwork=1 \(east\)", text), text


def test_network_demo_once_with_three_sites_goes_through_middle_and_leaves_only_logs(
        workdir: Path) -> None:  # noqa: F811
    state = workdir / "nd"
    result = subprocess.run(operator_command("network-demo", "--sites", "3", "--once", "--state-dir", str(state)),
                            cwd=workdir, capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "The client in West reached the backend in East." in output
    assert re.search(r"answered by Pods in east: backend-\S+ \(\d\)", output), output
    assert "router in west -> router in middle -> router in east -> backend Pod" in output
    blocks = re.findall(r"^  (west|middle|east)\s+(127\.\d+\.0\.0/16)", output, re.M)
    assert len({block for _, block in blocks}) == 3, output
    assert "[middle] AccessToken to-west redeemed at west" in output
    assert "[east] AccessToken to-middle redeemed at middle" in output
    assert re.search(r"west\s+Site\s+west\s+Ready\s+sitesInNetwork=3", output), output
    # the NetworkObserver in West sees the three sites and the demo's connections, exactly
    observer = re.search(r"Network observer \(NetworkObserver network-observer in west, West\): console "
                         r"(https://127\.[\d.]+:8443/) \(user skupper, password \S+; its certificate, from west's "
                         r"skupper-local-ca, names network-observer: a browser that trusts that CA opens it by "
                         r"that name\)\n.*\n"
                         r"  sees 3 sites \(east, middle, west\), 2 links up, 1 services, (\d+) processes; "
                         r"west -> east: 7 connections\n", output)
    assert observer, output
    assert "Cutting the link middle - east:" in output
    assert re.search(r"client in west -> refused after", output), output
    for site in ("west", "middle", "east"):
        assert_clean(state / site, output, stored=False)  # each site of the network demo starts new


def test_network_demo_system_links_a_host_site_to_a_cluster_with_skupper_commands(
        workdir: Path) -> None:  # noqa: F811
    state = workdir / "sd"
    result = subprocess.run(operator_command("network-demo", "--system", "--once", "--state-dir", str(state)),
                            cwd=workdir, capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # the walk as a user types it
    for command in ("$ skupper site create west --enable-link-access -n west", "$ skupper token issue west.token",
                    "$ skupper system apply -f west.token -n laptop", "$ skupper system setup -n laptop",
                    "$ skupper system uninstall --force"):
        assert command in output, output
    assert re.search(r"client in west -> host-greeter\.west:8080 \(127\.\d+\.16\.\d+:8080\) -> answered by: server "
                     r"on this host", output), output
    assert re.search(r"client on this host -> 127\.0\.0\.1:\d+ -> answered by Pod: backend-", output), output
    assert "Both clients got through." in output
    # uninstalled: the system site's files are gone and its router stopped
    assert not (state / "system-demo" / "data" / "skupper" / "namespaces" / "laptop").exists()
    processes = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(state / "system-demo") not in processes, processes
