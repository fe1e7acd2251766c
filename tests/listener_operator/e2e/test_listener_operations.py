"""End-to-end operations of ``run controller``: restart, leader election, health/metrics, presets, SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest_asyncio
from test_listener_controller import CLASSES, LISTENERS, NS, Env, _gone, environment

from kubesim.errors import ApiError


@pytest_asyncio.fixture
async def env() -> AsyncIterator[Env]:
    async with environment() as environment_:
        yield environment_


async def _count_addressed(env: Env, names: list[str]) -> int:
    count = 0
    for name in names:
        if (await env.status(name)).get("ingressAddresses"):
            count += 1
    return count


async def _all_addressed(env: Env, names: list[str]) -> bool:
    return await _count_addressed(env, names) == len(names)


async def test_restart_mid_way_converges_without_duplicates(env: Env) -> None:
    await env.create_class("internal", serviceType="ClusterIP")
    names = [f"app-{i}" for i in range(40)]
    for name in names:
        await env.create_listener(name, "internal")
    first = await env.start_operator(workers=1)
    await env.wait_for(lambda: _at_least(env, names, 3))
    assert await first.stop() == 0
    converged_before = await _count_addressed(env, names)

    second = await env.start_operator(workers=4)
    await env.wait_for(lambda: _all_addressed(env, names), within=30)
    services, _ = await env.api.list("services", NS)
    owned = [s for s in services if s["metadata"].get("ownerReferences")]
    assert sorted(s["metadata"]["name"] for s in owned) == sorted(names)
    for service in owned:
        listener = await env.listener(service["metadata"]["name"])
        assert service["metadata"]["ownerReferences"][0]["uid"] == listener["metadata"]["uid"]
    # the second operator only wrote for Listeners the first had not finished
    assert len(second.writes("services")) <= len(names) - converged_before + 1


async def _at_least(env: Env, names: list[str], n: int) -> bool:
    return await _count_addressed(env, names) >= n


async def test_two_replicas_only_the_leader_writes_and_the_standby_takes_over(env: Env) -> None:
    await env.create_class("internal", serviceType="ClusterIP")
    lease = {"leader_elect": True, "lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.2,
             "leader_election_namespace": NS}
    one = await env.start_operator(identity="replica-one", **lease)
    await env.wait_for(lambda: _lease_holder(env, "replica-one"))
    two = await env.start_operator(identity="replica-two", **lease)
    for i in range(5):
        await env.create_listener(f"app-{i}", "internal")
    await env.wait_for(lambda: _all_addressed(env, [f"app-{i}" for i in range(5)]))
    await asyncio.sleep(0.5)
    assert len(one.writes("services")) == 5
    assert [w for w in two.writes() if w[1] != "listenerclasses"] == []  # the standby wrote nothing

    assert await one.stop() == 0  # clean stop releases the lease
    await env.wait_for(lambda: _lease_holder(env, "replica-two"), within=10)
    await env.create_listener("after-failover", "internal")
    await env.wait_for(lambda: env.addresses("after-failover"))
    assert two.writes("services") == [("apply", "services")]
    lease_obj = await env.api.get("leases.coordination.k8s.io", "listener-operator-controller", NS)
    assert lease_obj["spec"]["leaseTransitions"] >= 1


async def _lease_holder(env: Env, identity: str) -> bool:
    lease = await env.api.get("leases.coordination.k8s.io", "listener-operator-controller", NS)
    return bool(lease["spec"].get("holderIdentity") == identity)


async def test_metrics_health_and_readiness_endpoints(env: Env) -> None:
    await env.create_class("internal", serviceType="ClusterIP")
    running = await env.start_operator(http_address=("127.0.0.1", 0))
    await env.create_listener("app", "internal")
    await env.create_listener("broken", None)
    await env.wait_for(lambda: env.addresses("app"))
    await env.wait_for(lambda: _ready_false(env, "broken"))
    health = running.operator.health
    assert health is not None
    base = f"http://127.0.0.1:{health.port}"
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{base}/healthz") as resp:
            assert resp.status == 200
        async with session.get(f"{base}/readyz") as resp:
            assert resp.status == 200

        async def settled() -> str | None:
            # the gauges are read from the cache and the queue when scraped: they follow the objects waited for
            # above once the watch has brought them and the reconciles they caused are done
            async with session.get(f"{base}/metrics") as resp:
                assert resp.status == 200
                text = await resp.text()
            quiet = "listener_operator_queue_depth 0.0" in text and "listener_operator_listeners_ready 1.0" in text
            return text if quiet else None
        text = await env.wait_for(settled)
    assert 'listener_operator_reconciles_total{result="success"}' in text
    assert 'listener_operator_reconcile_errors_total{reason="NoListenerClass"}' in text
    assert "listener_operator_reconcile_duration_seconds_bucket" in text
    assert "listener_operator_queue_depth 0.0" in text
    assert 'listener_operator_cache_objects{kind="listeners"} 2.0' in text
    assert "listener_operator_listeners_ready 1.0" in text
    assert 'listener_operator_api_requests_total{resource="services",verb="apply"}' in text


async def _ready_false(env: Env, name: str) -> bool:
    return bool((await env.ready(name)).get("status") == "False")


async def test_presets_are_created_if_missing_and_never_updated(env: Env) -> None:
    await env.create_class("external-stable", serviceType="LoadBalancer", loadBalancerClass="mine")
    await env.start_operator(listener_class_preset="stable-nodes")
    unstable = await env.wait_for(lambda: env.api.get(CLASSES, "external-unstable"))
    assert unstable["spec"]["serviceType"] == "NodePort"
    internal = await env.api.get(CLASSES, "cluster-internal")
    assert internal["spec"]["serviceType"] == "ClusterIP"
    stable = await env.api.get(CLASSES, "external-stable")
    assert stable["spec"]["serviceType"] == "LoadBalancer"  # the administrator's class is left alone


async def test_preset_none_creates_nothing(env: Env) -> None:
    running = await env.start_operator(listener_class_preset="none")
    await env.wait_for(lambda: _presets_done(running))
    items, _ = await env.api.list(CLASSES)
    assert items == []


async def _presets_done(running: Any) -> bool:
    return bool(running.operator.presets_done.is_set())


async def test_sigterm_stops_the_cli_cleanly_and_releases_the_lease(env: Env) -> None:
    await env.create_class("internal", serviceType="ClusterIP")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "listener_operator.cli", "run", "controller",
        "--kubeconfig", str(env.sim.kubeconfig_path), "--http-address", "127.0.0.1:0",
        "--leader-election-namespace", NS, "--identity", "cli-replica", "--log-format", "json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "LISTENER_CLASS_PRESET": "none"})
    try:
        await env.wait_for(lambda: _lease_holder(env, "cli-replica"), within=30)
        await env.create_listener("app", "internal")
        await env.wait_for(lambda: env.addresses("app"), within=30)
        proc.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(proc.communicate(), 20)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, stderr.decode()[-2000:]
    assert b'"message": "shutting down"' in stderr
    lease = await env.api.get("leases.coordination.k8s.io", "listener-operator-controller", NS)
    assert lease["spec"]["holderIdentity"] in ("", None)


async def test_bad_flags_fail_clearly() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "listener_operator.cli", "run", "controller", "--listener-class-preset", "bogus",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert b"invalid choice: 'bogus'" in stderr


async def test_triggers_for_a_deleted_listener_write_nothing(env: Env) -> None:
    """Once a Listener is gone, events that still map to its key (its EndpointSlice, its old Service name) must not
    bring its Service back, and the queue keeps serving other Listeners."""
    await env.create_class("internal", serviceType="ClusterIP")
    running = await env.start_operator()
    await env.create_listener("app", "internal")
    await env.wait_for(lambda: env.service("app"))
    await env.api.delete(LISTENERS, "app", NS)
    await env.wait_for(lambda: _gone(env, "app"), what="Service garbage-collected")
    applies = len(running.writes("services"))

    await env.create_endpoints("app", ["node-a"])  # maps to the key ns/app
    await env.create_listener("next", "internal")
    await env.wait_for(lambda: env.addresses("next"))
    assert await _gone(env, "app")
    assert len(running.writes("services")) == applies + 1  # only the Service of "next"


async def test_a_replica_that_loses_its_lease_stops_writing_until_it_wins_it_back(env: Env) -> None:
    await env.create_class("internal", serviceType="ClusterIP")
    running = await env.start_operator(identity="replica", leader_elect=True, lease_duration=3.0,
                                       renew_deadline=2.0, retry_period=0.2, leader_election_namespace=NS)
    await env.wait_for(lambda: _lease_holder(env, "replica"))
    lease = await env.api.get("leases.coordination.k8s.io", "listener-operator-controller", NS)
    lease["spec"]["holderIdentity"] = "intruder"  # another replica won a race (as after a network partition)
    lease["spec"]["leaseDurationSeconds"] = 30
    await env.api.update("leases.coordination.k8s.io", lease)
    elector = running.operator.elector
    assert elector is not None
    await env.wait_for(lambda: _not_leader(elector))
    await env.create_listener("app", "internal")
    await asyncio.sleep(1.0)
    try:
        await env.service("app")
        raise AssertionError("a replica without the lease wrote a Service")
    except ApiError as error:
        assert error.code == 404
    lease = await env.api.get("leases.coordination.k8s.io", "listener-operator-controller", NS)
    lease["spec"]["holderIdentity"] = ""  # the intruder steps down
    await env.api.update("leases.coordination.k8s.io", lease)
    await env.wait_for(lambda: env.addresses("app"), within=10)


async def _not_leader(elector: Any) -> bool:
    return not elector.is_leader


async def test_converges_through_api_errors_watch_cuts_and_expired_watches(env: Env) -> None:
    await env.create_class("internal", serviceType="ClusterIP")
    env.sim.faults.update({"seed": 7, "watch_max_events": 3, "expire_next_watch": True,
                           "errors": [{"rate": 0.3, "code": 500, "verbs": ["patch"],
                                       "resources": ["services", "listeners.listeners.stackable.tech"]}]})
    running = await env.start_operator()
    names = [f"app-{i}" for i in range(20)]
    for name in names:
        await env.create_listener(name, "internal")
    await env.wait_for(lambda: _all_addressed(env, names), within=60)
    env.sim.faults.reset()
    services, _ = await env.api.list("services", NS)
    assert sorted(s["metadata"]["name"] for s in services) == sorted(names)
    failures = running.operator.metrics.registry.get_sample_value(
        "listener_operator_reconcile_errors_total", {"reason": "ApplyService"}) or 0
    failures += running.operator.metrics.registry.get_sample_value(
        "listener_operator_reconcile_errors_total", {"reason": "ApplyStatus"}) or 0
    assert failures > 0  # the faults did hit, and were retried
    for name in names:
        assert (await env.ready(name))["status"] == "True"


async def test_csi_identity_and_controller_are_served_next_to_the_controller(env: Env, tmp_path: Any) -> None:
    import grpc

    from csi_proto import csi_pb2, csi_pb2_grpc

    socket_path = tmp_path / "csi.sock"
    await env.start_operator(csi_endpoint=f"unix://{socket_path}")
    await env.wait_for(lambda: _exists(socket_path))
    async with grpc.aio.insecure_channel(f"unix://{socket_path}") as channel:
        identity = csi_pb2_grpc.IdentityStub(channel)
        info = await identity.GetPluginInfo(csi_pb2.GetPluginInfoRequest())
        assert info.name == "listeners.stackable.tech"
        controller = csi_pb2_grpc.ControllerStub(channel)
        caps = await controller.ControllerGetCapabilities(csi_pb2.ControllerGetCapabilitiesRequest())
        assert caps.capabilities


async def _exists(path: Any) -> bool:
    return bool(path.exists())
