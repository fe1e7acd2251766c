"""Pure parts of part 3: address plan, image matching, agnhost's command line, restart and status composition,
downward-API files, probes' settings, name resolution."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kubesim.addresses import (
    AddressBlock,
    AddressBlockError,
    claim_address_block,
    is_loopback,
    not_loopback_reason,
    pick_free_block,
    reserve_block,
)
from kubesim.cluster.dns.names import resolve
from kubesim.cluster.runtime import default_registry, parse_image
from kubesim.cluster.runtime.agnhost import UsageError, parse_command
from kubesim.cluster.runtime.probes import resolve_port, timing
from kubesim.cluster.runtime.registry import ContainerSpec, ImageRef, RuntimeRegistry
from kubesim.cluster.runtime.status import pod_phase, runtime_status
from kubesim.cluster.runtime.supervisor import ContainerState, backoff_delay, should_restart
from kubesim.cluster.volumes.downward import downward_files
from kubesim.testing.traffic import Target, published_targets

# ---------------------------------------------------------------------------------------------- addresses


def test_block_layout() -> None:
    block = AddressBlock(7)
    assert str(block.network) == "127.7.0.0/16"
    assert block.node_internal_ip(2) == "127.7.1.2"
    assert block.node_external_ip(2) == "127.7.2.2"
    assert block.load_balancer_range == "127.7.3.1-127.7.3.254"
    assert block.client_ip(9) == "127.7.4.9"
    assert block.service_cidr == "127.7.16.0/20"
    assert block.pod_cidr == "127.7.128.0/17"
    for bad in (0, 255, -1):
        with pytest.raises(AddressBlockError, match="between 1 and 254"):
            AddressBlock(bad)
    with pytest.raises(AddressBlockError):
        block.node_internal_ip(255)


def test_loopback_check() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("127.254.16.2")
    for address in ("10.96.0.1", "192.0.2.1", "::1", "localhost", ""):
        assert not is_loopback(address)
    assert not_loopback_reason("127.1.2.3") is None
    reason = not_loopback_reason("10.96.0.1")
    assert reason is not None and "outside 127.0.0.0/8" in reason


def test_blocks_are_exclusive_and_the_lowest_free_one_is_picked(tmp_path: Path) -> None:
    first = claim_address_block(directory=tmp_path)
    second = claim_address_block(directory=tmp_path)
    assert (first.index, second.index) == (1, 2)
    assert pick_free_block(directory=tmp_path) == 3
    with pytest.raises(AddressBlockError, match=rf"address block 1 \(127.1.0.0/16\) is in use .*pid {os.getpid()}"):
        claim_address_block(1, directory=tmp_path)
    first.release()
    assert not first.held
    again = claim_address_block(directory=tmp_path)
    assert again.index == 1
    again.release()
    second.release()


def test_a_stored_clusters_block_is_passed_over_while_its_store_exists(tmp_path: Path) -> None:
    locks, store = tmp_path / "locks", tmp_path / "state" / "kubesim.db"
    store.parent.mkdir()
    store.write_bytes(b"")
    with claim_address_block(directory=locks) as stored:
        reserve_block(stored.index, store, directory=locks)
    assert stored.index == 1 and not stored.held
    # stopped: another cluster picking a free block takes 2, not the stored cluster's 1, which it then resumes
    with claim_address_block(directory=locks) as other, claim_address_block(1, directory=locks) as resumed:
        assert (other.index, resumed.index) == (2, 1)
    # started afresh in another block, the store's earlier reservation is gone
    with claim_address_block(directory=locks) as moved:
        assert moved.index == 2
        reserve_block(moved.index, store, directory=locks)
    assert pick_free_block(directory=locks) == 1
    # the store removed: its block is free again for anyone
    store.unlink()
    assert pick_free_block(directory=locks) == 1
    # every other block held: a reserved block is still better than none
    store.write_bytes(b"")
    reserve_block(1, store, directory=locks)
    held = [claim_address_block(b, directory=locks) for b in range(2, 255)]
    try:
        assert pick_free_block(directory=locks) == 1
    finally:
        for claim in held:
            claim.release()


# ------------------------------------------------------------------------------------------ image matching


def test_parse_image_references() -> None:
    assert parse_image("registry.k8s.io/e2e-test-images/agnhost:2.53") == ImageRef(
        "registry.k8s.io", "e2e-test-images/agnhost", "2.53"
    )
    assert parse_image("nginx") == ImageRef("docker.io", "nginx")
    assert parse_image("docker.io/library/nginx:1.27@sha256:abc") == ImageRef("docker.io", "nginx", "1.27", "sha256:abc")
    assert parse_image("localhost:5000/team/app:dev") == ImageRef("localhost:5000", "team/app", "dev")
    assert parse_image("nginxinc/nginx-unprivileged").candidates() == [
        "docker.io/nginxinc/nginx-unprivileged",
        "nginxinc/nginx-unprivileged",
        "nginx-unprivileged",
    ]


def test_registry_lookup_most_specific_first() -> None:
    registry = default_registry()
    agnhost = registry.lookup("agnhost")
    assert agnhost is not None
    assert registry.lookup("registry.k8s.io/e2e-test-images/agnhost:2.53") is agnhost
    assert registry.lookup("registry.k8s.io/pause:3.10") is registry.lookup("pause")
    assert registry.lookup("nginxinc/nginx-unprivileged:1.27") is not registry.lookup("nginx")
    assert registry.lookup("example.com/broker:1.0") is None and registry.lookup("") is None
    special = RuntimeRegistry()
    marker = object()
    special.register("example.com/team/app", marker)  # type: ignore[arg-type]
    assert special.lookup("example.com/team/app:1") is marker
    assert special.lookup("other.example.com/team/app:1") is None
    special.register("app", marker)  # type: ignore[arg-type]
    assert special.lookup("other.example.com/team/app:1") is marker
    with pytest.raises(ValueError):
        special.register(" ", marker)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------- agnhost


def test_agnhost_command_lines() -> None:
    sub, flags = parse_command([], ["serve-hostname"])
    assert (sub, flags.port, flags.http, flags.tcp) == ("serve-hostname", 9376, True, False)
    sub, flags = parse_command(["/agnhost"], ["serve-hostname", "--http=false", "--tcp", "--port", "80"])
    assert (flags.http, flags.tcp, flags.port) == (False, True, 80)
    sub, flags = parse_command(["/agnhost", "netexec", "--http-port=8081"], ["--udp-port=-1"])
    assert (sub, flags.http_port, flags.udp_port) == ("netexec", 8081, -1)
    assert parse_command([], ["pause"])[0] == "pause"
    for bad, message in (
        ([], "subcommand is required"),
        (["nope"], 'unknown command "nope"'),
        (["serve-hostname", "--tcp"], "Can't serve TCP/UDP mode and HTTP mode"),
        (["serve-hostname", "--bogus"], "unrecognized arguments"),
        (["netexec", "--http-port=70000"], "invalid port"),
    ):
        with pytest.raises(UsageError, match=message):
            parse_command([], bad)


# --------------------------------------------------------------------------------- restarts and statuses


def test_restart_policy_and_back_off() -> None:
    assert should_restart("Always", 0) and should_restart("Always", 1)
    assert not should_restart("OnFailure", 0) and should_restart("OnFailure", 2)
    assert not should_restart("Never", 1)
    assert [backoff_delay(n, 10, 300) for n in range(8)] == [0, 10, 20, 40, 80, 160, 300, 300]


def _state(name: str, **fields: object) -> ContainerState:
    return ContainerState(name=name, image="agnhost", simulated=False, **fields)  # type: ignore[arg-type]


def test_pod_phase_and_readiness_composition() -> None:
    assert pod_phase([_state("a")]) == "Pending"
    assert pod_phase([_state("a", state="running", ever_started=True)]) == "Running"
    assert pod_phase([_state("a", state="terminated", final=True, exit_code=0)]) == "Succeeded"
    assert pod_phase([_state("a", state="terminated", final=True, exit_code=0),
                      _state("b", state="terminated", final=True, exit_code=1)]) == "Failed"
    looping = _state("web", state="waiting", reason="CrashLoopBackOff", message="back-off 10s", restart_count=2,
                     ever_started=True, last_terminated={"exitCode": 1, "reason": "Error"})
    ready = _state("side", state="running", ready=True, ever_started=True, started_at="t")
    status = runtime_status([looping, ready], [{"name": "web"}, {"name": "side"}], "uid", None)
    assert status.phase == "Running" and not status.ready and status.not_ready == ["web"]
    web, side = status.container_statuses
    assert web["state"] == {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}}
    assert web["restartCount"] == 2 and web["lastState"] == {"terminated": {"exitCode": 1, "reason": "Error"}}
    assert side["ready"] and side["state"] == {"running": {"startedAt": "t"}}
    forced = runtime_status([ready], [{"name": "side"}], "uid", False)
    assert not forced.ready and forced.not_ready == ["side"]
    simulated = ContainerState("main", "x.example/app", simulated=True, state="running", ready=True)
    message = runtime_status([simulated], [{"name": "main", "image": "x.example/app" + "y" * 500}], "u", None)
    assert message.simulated_message is not None and len(message.simulated_message) < 500


# ------------------------------------------------------------------------------------ volumes and probes


def test_downward_api_files_and_paths() -> None:
    pod = {"metadata": {"name": "web-0", "namespace": "ns", "uid": "u1", "labels": {"b": "2", "a": "1"}},
           "spec": {"nodeName": "node-1"}}
    source = {"items": [
        {"path": "pod-name", "fieldRef": {"fieldPath": "metadata.name"}},
        {"path": "meta/labels", "fieldRef": {"fieldPath": "metadata.labels"}},
        {"path": "app", "fieldRef": {"fieldPath": "metadata.labels['a']"}},
        {"path": "../evil", "fieldRef": {"fieldPath": "metadata.name"}},
        {"path": "/abs", "fieldRef": {"fieldPath": "metadata.name"}},
        {"path": "cpu", "resourceFieldRef": {"resource": "limits.cpu"}},
    ]}
    assert downward_files(pod, source) == {"pod-name": "web-0", "meta/labels": 'a="1"\nb="2"', "app": "1"}


def test_container_paths_stay_inside_their_volumes(tmp_path: Path) -> None:
    html = tmp_path / "html"
    (html / "sub").mkdir(parents=True)
    (tmp_path / "secret").write_text("no")
    spec = ContainerSpec(
        pod={"metadata": {"name": "p"}},
        container={"name": "c", "volumeMounts": [{"name": "html", "mountPath": "/usr/share/nginx/html"},
                                                 {"name": "html", "mountPath": "/data", "subPath": "sub"},
                                                 {"name": "html", "mountPath": "/bad", "subPath": "../x"}]},
        pod_ip="127.1.128.1",
        node_name="n",
        volumes={"html": html},
    )
    assert spec.host_path("/usr/share/nginx/html/index.html") == html / "index.html"
    assert spec.host_path("/data/f") == html / "sub" / "f"
    assert spec.host_path("/usr/share/nginx/html/../../../secret") is None
    assert spec.host_path("/bad/x") is None
    (html / "link").symlink_to(tmp_path / "secret")
    assert spec.host_path("/usr/share/nginx/html/link") is None


def test_probe_settings() -> None:
    defaults = timing({})
    assert (defaults.period, defaults.timeout, defaults.success_threshold, defaults.failure_threshold) == (10, 1, 1, 3)
    assert timing({"periodSeconds": 0, "initialDelaySeconds": 2}).period == 1
    container = {"ports": [{"name": "http", "containerPort": 8080}]}
    assert resolve_port("http", container) == 8080
    assert resolve_port(81, container) == 81 and resolve_port("82", container) == 82
    assert resolve_port("nope", container) is None and resolve_port(0, container) is None


# ------------------------------------------------------------------------------------------ names, targets


def test_resolve_published_names() -> None:
    nodes = [{"metadata": {"name": "node-1"}, "status": {"addresses": [
        {"type": "InternalIP", "address": "127.3.1.1"}, {"type": "ExternalIP", "address": "127.3.2.1"},
        {"type": "InternalDNS", "address": "node-1.kubesim.internal"}, {"type": "Hostname", "address": "node-1"}]}}]
    services = [{"metadata": {"name": "web", "namespace": "ns"}, "spec": {"clusterIP": "127.3.16.5"},
                 "status": {"loadBalancer": {"ingress": [{"ip": "127.3.3.1"}, {"hostname": "lb.example.com"}]}}}]
    assert resolve("node-1", nodes, services) == "127.3.1.1"
    assert resolve("NODE-1.kubesim.internal.", nodes, services) == "127.3.1.1"
    assert resolve("web.ns.svc.cluster.local", nodes, services) == "127.3.16.5"
    assert resolve("web.ns.svc", nodes, services) == "127.3.16.5"
    assert resolve("lb.example.com", nodes, services) == "127.3.3.1"
    assert resolve("127.9.9.9", nodes, services) == "127.9.9.9"
    assert resolve("other.ns.svc.cluster.local", nodes, services) is None
    assert resolve("example.org", nodes, services) is None


def test_published_targets() -> None:
    addresses = [{"address": "127.3.1.2", "addressType": "IP", "ports": {"https": 31443, "http": 30080}},
                 {"address": "node-3", "addressType": "Hostname", "ports": {"http": 30080}}]
    assert published_targets(addresses) == [Target("127.3.1.2", "http", 30080), Target("127.3.1.2", "https", 31443),
                                            Target("node-3", "http", 30080)]
    assert str(Target("127.3.1.2", "http", 30080)) == "127.3.1.2:30080"


def test_the_address_block_says_node_external_ips_only_when_nodes_get_them() -> None:
    from kubesim.addresses import AddressBlock
    block = AddressBlock(7)
    assert "ExternalIP" not in block.describe()
    assert "nodes 127.7.1.x (ExternalIP 127.7.2.x)," in block.describe(node_external_ips=True)
