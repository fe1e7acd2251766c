"""Event recorder, leader election and the no-op apply check, against a small in-memory API fake."""

from __future__ import annotations

import argparse
import asyncio
import copy
from typing import Any

import pytest

from listener_operator.controller_command import add_arguments
from operator_runtime.api import KubeApi
from operator_runtime.applied import (
    SERVICE_ATOMIC_MAPS,
    apply_is_noop,
    is_subset,
    stale_owned_fields,
)
from operator_runtime.errors import ApiFailure, failure
from operator_runtime.events import EventRecorder, truncate_note
from operator_runtime.kinds import SERVICE, ResourceInfo
from operator_runtime.leader import LeaderElector
from operator_runtime.objects import object_reference


class FakeApi(KubeApi):
    """Objects by (plural, namespace, name) with resourceVersion checks on replace, like the API server."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.version = 0
        self.fail_with: ApiFailure | None = None

    def _check(self, verb: str, info: ResourceInfo) -> None:
        self.calls.append((verb, info.plural))
        if self.fail_with is not None:
            raise self.fail_with

    def _bump(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        return copy.deepcopy(obj)

    async def get(self, info: ResourceInfo, name: str, namespace: str | None = None) -> dict[str, Any]:
        self._check("get", info)
        try:
            return copy.deepcopy(self.objects[(info.plural, namespace, name)])
        except KeyError:
            raise failure(404, "NotFound", f"{info.plural} {name!r} not found") from None

    async def create(self, info: ResourceInfo, body: dict[str, Any], namespace: str | None = None
                     ) -> dict[str, Any]:
        self._check("create", info)
        key = (info.plural, namespace, body["metadata"]["name"])
        if key in self.objects:
            raise failure(409, "AlreadyExists", "exists")
        self.objects[key] = copy.deepcopy(body)
        return self._bump(self.objects[key])

    async def replace(self, info: ResourceInfo, body: dict[str, Any], *, name: str, namespace: str | None = None,
                      subresource: str | None = None) -> dict[str, Any]:
        self._check("update", info)
        key = (info.plural, namespace, name)
        current = self.objects.get(key)
        if current is None:
            raise failure(404, "NotFound", "gone")
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise failure(409, "Conflict", "the object has been modified")
        self.objects[key] = copy.deepcopy(body)
        return self._bump(self.objects[key])

    async def merge_patch(self, info: ResourceInfo, body: dict[str, Any], *, name: str,
                          namespace: str | None = None, subresource: str | None = None) -> dict[str, Any]:
        self._check("patch", info)
        key = (info.plural, namespace, name)
        if key not in self.objects:
            raise failure(404, "NotFound", "gone")
        self.objects[key].update(copy.deepcopy(body))
        return self._bump(self.objects[key])


# ---- events --------------------------------------------------------------------------------------------------------

LISTENER = {"apiVersion": "listeners.stackable.tech/v1alpha1", "kind": "Listener",
            "metadata": {"name": "web", "namespace": "ns", "uid": "u-1", "labels": {"x": "y"}}}


async def test_event_shape_and_aggregation_into_a_series() -> None:
    api = FakeApi()
    recorder = EventRecorder(api, "listener.listeners.stackable.tech", "pod-1", series_interval=0)
    related = {"apiVersion": "v1", "kind": "Service", "name": "web", "namespace": "ns"}
    for _ in range(3):
        await recorder.publish(LISTENER, type="Warning", reason="RefuseToOverwriteForeignService",
                               note="refusing", action="Reconcile", related=related)
    events = [obj for (plural, _, _), obj in api.objects.items() if plural == "events"]
    assert len(events) == 1
    event = events[0]
    assert event["regarding"] == {"apiVersion": "listeners.stackable.tech/v1alpha1", "kind": "Listener",
                                  "name": "web", "namespace": "ns", "uid": "u-1"}
    assert event["related"] == related
    assert event["metadata"]["namespace"] == "ns" and event["metadata"]["name"].startswith("web.")
    assert (event["type"], event["reason"], event["action"]) == ("Warning", "RefuseToOverwriteForeignService",
                                                                 "Reconcile")
    assert event["reportingController"] == "listener.listeners.stackable.tech"
    assert event["reportingInstance"] == "pod-1"
    assert event["series"]["count"] == 3
    # a different note is a different event
    await recorder.publish(LISTENER, type="Warning", reason="RefuseToOverwriteForeignService", note="other",
                           action="Reconcile")
    assert sum(1 for (plural, _, _) in api.objects if plural == "events") == 2


async def test_repeats_within_the_interval_are_counted_but_not_written() -> None:
    api = FakeApi()
    recorder = EventRecorder(api, "c", "i", series_interval=3600)
    for _ in range(10):
        await recorder.publish(LISTENER, type="Warning", reason="GetObject", note="n", action="Reconcile")
    assert api.calls.count(("create", "events")) == 1
    assert api.calls.count(("patch", "events")) == 0


async def test_a_series_counts_every_occurrence_in_one_object_and_survives_many_other_events() -> None:
    """One Event object per series, its count the number of occurrences; the recorder forgets the least recently
    repeated events first, so a Listener failing again and again keeps its series while thousands of others fail."""
    api = FakeApi()
    recorder = EventRecorder(api, "c", "i", series_interval=0, max_tracked=3)

    async def fail(name: str) -> None:
        listener = {**LISTENER, "metadata": {**LISTENER["metadata"], "name": name, "uid": f"u-{name}"}}
        await recorder.publish(listener, type="Warning", reason="NodePortRangeFull", note="full", action="Reconcile")

    for round_ in range(4):
        await fail("hot")
        for other in range(2):
            await fail(f"other-{round_}-{other}")  # new events, each tracked for a while
    events = {obj["regarding"]["name"]: obj for (plural, _, _), obj in api.objects.items() if plural == "events"}
    assert events["hot"]["series"]["count"] == 4
    assert api.calls.count(("create", "events")) == 1 + 8  # hot once, each other event once
    assert api.calls.count(("patch", "events")) == 3  # hot's repeats
    assert events["hot"]["series"]["lastObservedTime"].endswith("Z")


async def test_recorder_never_raises() -> None:
    api = FakeApi()
    api.fail_with = failure(403, "Forbidden", "events are forbidden")
    recorder = EventRecorder(api, "c", "i")
    await recorder.publish(LISTENER, type="Warning", reason="X", note="n", action="Reconcile")
    await recorder.publish({"not": "an object"}, type="Warning", reason="X", note="n", action="Reconcile")


def test_note_is_truncated_to_1024_bytes_on_a_character_boundary() -> None:
    note = "é" * 1000
    cut = truncate_note(note)
    assert len(cut.encode()) <= 1024 and cut.endswith("…")
    assert truncate_note("short") == "short"


def test_object_reference_from_object_or_reference() -> None:
    assert object_reference(LISTENER)["uid"] == "u-1"
    assert object_reference({"kind": "Node", "name": "n1"}) == {"kind": "Node", "name": "n1"}


# ---- leader election -----------------------------------------------------------------------------------------------


def elector(api: FakeApi, identity: str) -> LeaderElector:
    return LeaderElector(api, name="lock", namespace="ns", identity=identity, lease_duration=15, renew_deadline=10,
                         retry_period=2)


async def test_first_candidate_creates_the_lease_and_the_second_waits() -> None:
    api = FakeApi()
    one, two = elector(api, "one"), elector(api, "two")
    assert await one.try_acquire_or_renew()
    assert not await two.try_acquire_or_renew()
    lease = api.objects[("leases", "ns", "lock")]["spec"]
    assert lease["holderIdentity"] == "one" and lease["leaseTransitions"] == 0
    assert lease["leaseDurationSeconds"] == 15 and lease["acquireTime"] and lease["renewTime"]
    assert await one.try_acquire_or_renew()  # renew keeps acquireTime
    assert api.objects[("leases", "ns", "lock")]["spec"]["acquireTime"] == lease["acquireTime"]


async def test_released_lease_is_taken_over_with_a_transition() -> None:
    api = FakeApi()
    one, two = elector(api, "one"), elector(api, "two")
    assert await one.try_acquire_or_renew()
    await one.release()
    assert not one.is_leader
    assert await two.try_acquire_or_renew()
    spec = api.objects[("leases", "ns", "lock")]["spec"]
    assert spec["holderIdentity"] == "two" and spec["leaseTransitions"] == 1


async def test_expired_lease_of_a_dead_holder_is_taken() -> None:
    api = FakeApi()
    await api.create(ResourceInfo("coordination.k8s.io/v1", "Lease", "leases", True), {
        "metadata": {"name": "lock", "namespace": "ns"},
        "spec": {"holderIdentity": "dead", "leaseDurationSeconds": 15, "renewTime": "2020-01-01T00:00:00.000000Z",
                 "leaseTransitions": 4}}, "ns")
    candidate = elector(api, "alive")
    assert await candidate.try_acquire_or_renew()
    assert api.objects[("leases", "ns", "lock")]["spec"]["leaseTransitions"] == 5


async def test_losing_an_update_race_is_not_leadership() -> None:
    api = FakeApi()
    one = elector(api, "one")
    assert await one.try_acquire_or_renew()
    original_replace = api.replace

    async def racing_replace(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise failure(409, "Conflict", "modified")

    api.replace = racing_replace  # type: ignore[method-assign]
    assert not await one.try_acquire_or_renew()
    assert not one.is_leader
    api.replace = original_replace  # type: ignore[method-assign]


async def test_campaign_survives_api_errors_and_releases_on_exit() -> None:
    api = FakeApi()
    api.fail_with = failure(500, "InternalError", "etcd is sad")
    candidate = LeaderElector(api, name="lock", namespace="ns", identity="me", lease_duration=0.5,
                              renew_deadline=0.3, retry_period=0.01)
    leading = asyncio.Event()

    async def lead() -> None:
        leading.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(candidate.run(lead))
    await asyncio.sleep(0.05)
    assert not leading.is_set() and not task.done()
    api.fail_with = None
    await asyncio.wait_for(leading.wait(), 2)
    assert candidate.is_leader
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert api.objects[("leases", "ns", "lock")]["spec"]["holderIdentity"] == ""


def test_elector_timing_must_be_ordered() -> None:
    with pytest.raises(ValueError):
        LeaderElector(FakeApi(), name="l", namespace="n", identity="i", lease_duration=5, renew_deadline=10)


# ---- no-op apply detection -----------------------------------------------------------------------------------------


def test_is_subset_ignores_server_defaults_but_not_changes() -> None:
    desired = {"spec": {"ports": [{"name": "http", "port": 80}], "type": "NodePort"}}
    live = {"spec": {"ports": [{"name": "http", "port": 80, "nodePort": 31000, "protocol": "TCP"}],
                     "type": "NodePort", "clusterIP": "10.0.0.1"}}
    assert is_subset(desired, live)
    assert not is_subset({"spec": {"type": "ClusterIP"}}, live)
    assert not is_subset({"spec": {"ports": [{"name": "http", "port": 80}, {"name": "x", "port": 1}]}}, live)
    assert not is_subset({"spec": {"publishNotReadyAddresses": True}}, {"spec": {"publishNotReadyAddresses": 1}})


def test_an_atomic_map_with_an_extra_live_key_needs_the_apply() -> None:
    """A Service selector is replaced whole by an apply: a key someone added must be removed, so no no-op."""
    desired = {"spec": {"selector": {"app": "web"}, "type": "ClusterIP"}}
    widened = {"spec": {"selector": {"app": "web", "extra": "x"}, "type": "ClusterIP"}}
    assert apply_is_noop(desired, widened, "m")  # granular maps: extra keys are someone else's business
    assert not apply_is_noop(desired, widened, "m", atomic_maps=SERVICE_ATOMIC_MAPS)
    assert apply_is_noop(desired, {"spec": {"selector": {"app": "web"}, "type": "ClusterIP", "clusterIP": "1.2.3.4"}},
                         "m", atomic_maps=SERVICE_ATOMIC_MAPS)
    assert not apply_is_noop(desired, {"spec": {"selector": {"app": "db"}, "type": "ClusterIP"}}, "m",
                             atomic_maps=SERVICE_ATOMIC_MAPS)


def test_fields_we_own_but_no_longer_set_make_the_apply_necessary() -> None:
    manager = "listeners.stackable.tech/listeners.stackable.tech_listener"
    live = {"metadata": {"name": "web", "namespace": "ns", "annotations": {"team": "blue", "other": "x"},
                         "managedFields": [{"manager": manager, "operation": "Apply", "fieldsV1": {
                             "f:metadata": {"f:annotations": {".": {}, "f:team": {}}},
                             "f:spec": {"f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}}},
                                        "f:type": {}}}}]},
            "spec": {"type": "ClusterIP", "ports": [{"port": 80}]}}
    keep: dict[str, Any] = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "ns",
                                                                "annotations": {"team": "blue"}},
            "spec": {"type": "ClusterIP", "ports": [{"port": 80}]}}
    assert stale_owned_fields(keep, live, manager) == []
    assert apply_is_noop(keep, live, manager)
    drop = copy.deepcopy(keep)
    del drop["metadata"]["annotations"]
    assert stale_owned_fields(drop, live, manager) == [("metadata", "annotations", "team")]
    assert not apply_is_noop(drop, live, manager)
    assert not apply_is_noop(keep, None, manager)


def test_kinds_build_safe_paths() -> None:
    from listener_operator.kinds import LISTENER_CLASS

    service = SERVICE
    assert service.path("ns", "web", "status") == "/api/v1/namespaces/ns/services/web/status"
    assert LISTENER_CLASS.path(None, "x") == "/apis/listeners.stackable.tech/v1alpha1/listenerclasses/x"
    assert service.path("ns", "a/b") == "/api/v1/namespaces/ns/services/a%2Fb"
    with pytest.raises(ValueError):
        service.path("ns", "..")


# ---- command line --------------------------------------------------------------------------------------------------


def test_flags_default_from_the_upstream_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CSI_ENDPOINT", "/csi/csi.sock")
    monkeypatch.setenv("LISTENER_CLASS_PRESET", "stable-nodes")
    monkeypatch.setenv("KUBERNETES_CLUSTER_DOMAIN", "corp.internal")
    monkeypatch.setenv("CONSOLE_LOG_FORMAT", "json")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([])
    assert (args.csi_endpoint, args.listener_class_preset, args.cluster_domain, args.log_format) == (
        "/csi/csi.sock", "stable-nodes", "corp.internal", "json")
    assert args.leader_elect is True
    args = parser.parse_args(["--no-leader-elect", "--cluster-domain", "x.y", "--http-address", "127.0.0.1:0"])
    assert args.leader_elect is False and args.cluster_domain == "x.y" and args.http_address == ("127.0.0.1", 0)
    with pytest.raises(SystemExit):
        parser.parse_args(["--http-address", "nonsense"])


@pytest.mark.parametrize(("env", "file_text", "expected"), [
    ({"LEADER_ELECTION_NAMESPACE": "a", "OPERATOR_NAMESPACE": "b", "POD_NAMESPACE": "c"}, "d", "a"),
    ({"OPERATOR_NAMESPACE": "b", "POD_NAMESPACE": "c"}, "d", "b"),
    ({"POD_NAMESPACE": "c"}, "d", "c"),          # what the chart sets (downward API)
    ({}, "listener-operator\n", "listener-operator"),  # in a Pod without any of them
    ({}, None, "default"),
])
def test_the_lease_lives_in_the_operators_own_namespace(monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
                                                        env: dict[str, str], file_text: str | None,
                                                        expected: str) -> None:
    for name in ("LEADER_ELECTION_NAMESPACE", "OPERATOR_NAMESPACE", "POD_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    namespace_file = tmp_path / "namespace"
    if file_text is not None:
        namespace_file.write_text(file_text)
    monkeypatch.setenv("KUBERNETES_SERVICE_ACCOUNT_DIR", str(tmp_path))  # where in-cluster credentials are
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args([]).leader_election_namespace == expected
