"""The cache transforms keep every field the reconcile reads: reconciling on transformed caches writes, reports and
decides exactly what reconciling on whole objects does.

Whole objects come from kubesim after a real operator run (managedFields and all); the states below then differ
from the converged one in the ways a reconcile must notice (a missing status, a Service changed by someone else, a
node that moved, an endpoint that turned unready, a PV pin, class overrides). For each state, every Listener is
reconciled twice, by a controller whose reflectors transform objects (as in production) and by one whose reflectors
keep them whole, both against a recording API; the recorded writes, Events and outcomes must be equal. If a
transform drops a field the reconcile reads, some state here reconciles differently and the test fails.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from kubesim.sim import KubeSim
from listener_operator import addresses
from listener_operator.controller_command import Operator, OperatorOptions
from listener_operator.crd.generate import all_crds
from listener_operator.listener_controller import controller as controller_module
from listener_operator.listener_controller.controller import ListenerController
from operator_runtime.events import EventRecorder
from operator_runtime.kinds import ResourceInfo
from operator_runtime.objects import JsonDict, object_key
from operator_runtime.reflector import Reflector

GV = "listeners.stackable.tech/v1alpha1"
NS = "ns"
LISTENERS = "listeners.listeners.stackable.tech"
CLASSES = "listenerclasses.listeners.stackable.tech"
SLICES = "endpointslices.discovery.k8s.io"
PVS = "persistentvolumes"
# reflector attribute -> kubesim resource
CACHED = {"listeners": LISTENERS, "classes": CLASSES, "services": "services", "slices": SLICES, "pvs": PVS,
          "nodes": "nodes"}

Snapshot = dict[str, list[JsonDict]]


class StaticSource:
    """A list of fixed objects and a watch that never reports anything."""

    def __init__(self, objects: list[JsonDict]) -> None:
        self.objects = objects

    async def list(self) -> tuple[list[JsonDict], str]:
        return copy.deepcopy(self.objects), "1"

    async def watch(self, resource_version: str) -> AsyncIterator[tuple[str, JsonDict]]:
        await asyncio.Event().wait()
        yield "BOOKMARK", {}  # pragma: no cover


class RecordingApi:
    """Records every write; answers an apply with the object as the snapshot holds it, updated by the body."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.calls: list[tuple[Any, ...]] = []

    def _stored(self, plural: str, name: str, namespace: str | None) -> JsonDict | None:
        resource = next((r for r in self.snapshot if r.split(".")[0] == plural), plural)
        for obj in self.snapshot.get(resource, []):
            meta = obj["metadata"]
            if meta["name"] == name and meta.get("namespace") == namespace:
                return copy.deepcopy(obj)
        return None

    async def apply(self, info: ResourceInfo, body: JsonDict, *, name: str, namespace: str | None = None,
                    field_manager: str, force: bool = True, subresource: str | None = None) -> JsonDict:
        self.calls.append(("apply", info.plural, name, namespace, subresource, field_manager, copy.deepcopy(body)))
        answer = self._stored(info.plural, name, namespace) or {"metadata": {"name": name, "namespace": namespace}}
        for key, value in body.items():
            if key != "metadata":
                answer[key] = copy.deepcopy(value)
        answer["metadata"]["resourceVersion"] = "999999999"
        return answer

    async def delete(self, info: ResourceInfo, name: str, namespace: str | None = None, *, uid: str | None = None,
                     propagation_policy: str | None = None) -> None:
        self.calls.append(("delete", info.plural, name, namespace, uid))

    async def create(self, info: ResourceInfo, body: JsonDict, namespace: str | None = None) -> JsonDict:
        event = {k: body.get(k) for k in ("type", "reason", "note", "action", "regarding", "related")}
        self.calls.append(("create", info.plural, namespace, event))
        return body

    async def merge_patch(self, info: ResourceInfo, body: JsonDict, *, name: str, namespace: str | None = None,
                          subresource: str | None = None) -> JsonDict:
        self.calls.append(("patch", info.plural, namespace, body.get("series", {}).get("count")))
        return body


async def _reconcile_all(snapshot: Snapshot, transformed: bool) -> list[tuple[Any, ...]]:
    api = RecordingApi(snapshot)
    recorder = EventRecorder(api, "listener-operator", "test")  # type: ignore[arg-type]
    controller = ListenerController(api, recorder=recorder, cluster_domain="cluster.local")  # type: ignore[arg-type]
    reflectors: list[Reflector] = []
    for attribute, resource in CACHED.items():
        reflector: Reflector = getattr(controller, attribute)
        assert reflector.transform is not None, f"the {attribute} cache keeps whole objects"
        if not transformed:
            reflector.transform = None
        reflector.source = StaticSource(snapshot.get(resource, []))
        reflectors.append(reflector)
    tasks = [asyncio.create_task(r.run()) for r in reflectors]
    try:
        await asyncio.wait_for(asyncio.gather(*(r.wait_synced() for r in reflectors)), 10)
        outcomes: list[tuple[Any, ...]] = []
        for key in sorted(controller.listeners.keys()):
            listener = controller.listeners.get(key)
            assert listener is not None
            try:
                action = await controller.reconcile(listener)
                outcomes.append((key, "ok", action))
            except Exception as error:
                outcomes.append((key, type(error).__name__, str(error)))
            outcomes.append((key, "nodes", sorted(controller._listener_nodes.get(key, ()))))
        return outcomes + api.calls
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _converged_snapshot() -> Snapshot:
    """Objects as kubesim holds them after the operator reconciled a varied set of Listeners."""
    async with KubeSim() as sim:
        api = sim.api
        for crd in all_crds():
            await api.create("customresourcedefinitions.apiextensions.k8s.io", crd)
        await api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        for name, addresses in (("node-a", [("InternalIP", "127.9.1.1"), ("ExternalIP", "127.9.2.1"),
                                            ("Hostname", "node-a")]),
                                ("node-b", [("InternalIP", "127.9.1.2")]),
                                ("node-c", [("Hostname", "node-c.example")])):
            node = await api.create("nodes", {"apiVersion": "v1", "kind": "Node",
                                              "metadata": {"name": name, "labels": {"zone": "z1"}}})
            node["status"] = {"addresses": [{"type": t, "address": a} for t, a in addresses],
                              "capacity": {"cpu": "4"}, "conditions": [{"type": "Ready", "status": "True"}]}
            await api.update("nodes", node, subresource="status")
        classes = {
            "np": {"serviceType": "NodePort"},
            "np-host": {"serviceType": "NodePort", "preferredAddressType": "Hostname",
                        "serviceAnnotations": {"a": "b"}, "serviceExternalTrafficPolicy": "Local"},
            "cip": {"serviceType": "ClusterIP", "preferredAddressType": "IP",
                    "serviceOverrides": {"apiVersion": "v1", "kind": "Service",
                                         "metadata": {"labels": {"team": "data"}},
                                         "spec": {"sessionAffinity": "ClientIP"}}},
            "cip-host": {"serviceType": "ClusterIP"},
            "lb": {"serviceType": "LoadBalancer", "loadBalancerAllocateNodePorts": False},
        }
        for name, spec in classes.items():
            await api.create(CLASSES, {"apiVersion": GV, "kind": "ListenerClass", "metadata": {"name": name},
                                       "spec": spec})
        listeners = {
            "np-1": {"className": "np", "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]},
            "np-2": {"className": "np-host", "ports": [{"name": "http", "port": 80}],
                     "extraPodSelectorLabels": {"app": "x"}},
            "np-pinned": {"className": "np", "ports": [{"name": "http", "port": 80}]},
            "cip-1": {"className": "cip", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                      "publishNotReadyAddresses": False},
            "cip-2": {"className": "cip-host", "ports": [{"name": "http", "port": 80}],
                      "objectOverrides": [{"apiVersion": "v1", "kind": "Service",
                                           "metadata": {"name": "cip-2", "namespace": NS,
                                                        "annotations": {"x": "y"}}}]},
            "lb-1": {"className": "lb", "ports": [{"name": "http", "port": 80}]},
            "no-class": {"className": "missing", "ports": [{"name": "http", "port": 80}]},
        }
        for name, spec in listeners.items():
            await api.create(LISTENERS, {"apiVersion": GV, "kind": "Listener",
                                         "metadata": {"name": name, "namespace": NS, "labels": {"l": name}},
                                         "spec": spec}, NS)
        for service, nodes, ready in (("np-1", ["node-a", "node-b"], True), ("np-2", ["node-c"], True),
                                      ("np-1", ["node-c"], False)):
            await api.create(SLICES, {
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"generateName": f"{service}-", "namespace": NS,
                             "labels": {"kubernetes.io/service-name": service}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [f"10.244.0.{i + 1}"], "nodeName": node, "conditions": {"ready": ready},
                               "targetRef": {"kind": "Pod", "name": f"pod-{i}", "namespace": NS}}
                              for i, node in enumerate(nodes)],
                "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}, NS)
        await api.create(PVS, {
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": "pv-1", "labels": {"listeners.stackable.tech/listener-namespace": NS,
                                                    "listeners.stackable.tech/listener-name": "np-pinned"}},
            "spec": {"capacity": {"storage": "1"}, "accessModes": ["ReadWriteMany"],
                     "csi": {"driver": "listeners.stackable.tech", "volumeHandle": "pv-1"},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "listeners.stackable.tech/hostname", "operator": "In", "values": ["node-b"]}]}]}}}})

        operator = Operator(OperatorOptions(kubeconfig=str(sim.kubeconfig_path), http_address=None,
                                            leader_elect=False, workers=4, listener_class_preset="none"))
        stop = asyncio.Event()
        task = asyncio.create_task(operator.run(stop))
        try:
            deadline = asyncio.get_running_loop().time() + 30
            while True:
                items, _ = await api.list(LISTENERS, NS)
                if all((o.get("status") or {}).get("conditions") for o in items):
                    break
                assert asyncio.get_running_loop().time() < deadline, "the operator did not reconcile everything"
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)  # trailing status writes
        finally:
            stop.set()
            await asyncio.wait_for(task, 15)
        snapshot: Snapshot = {}
        for resource in CACHED.values():
            namespace = NS if resource not in ("nodes", PVS, CLASSES) else None
            snapshot[resource] = (await api.list(resource, namespace))[0]
        return snapshot


def _find(snapshot: Snapshot, resource: str, name: str) -> JsonDict:
    return next(o for o in snapshot[resource] if o["metadata"]["name"] == name)


def _drop_status(s: Snapshot) -> None:
    for listener in s[LISTENERS]:
        listener.pop("status", None)


def _service_changed_by_someone_else(s: Snapshot) -> None:
    service = _find(s, "services", "np-1")
    service["spec"]["ports"][0]["port"] = 81
    _find(s, "services", "cip-1")["spec"]["sessionAffinity"] = "None"
    _find(s, "services", "cip-2")["metadata"].setdefault("annotations", {})["x"] = "changed"
    _find(s, "services", "np-2")["metadata"]["labels"]["extra"] = "kept"  # not ours: still a no-op


def _node_moved(s: Snapshot) -> None:
    _find(s, "nodes", "node-a")["status"]["addresses"][1]["address"] = "127.9.2.99"
    _find(s, "nodes", "node-b")["status"]["addresses"] = []


def _endpoint_unready(s: Snapshot) -> None:
    for slice_ in s[SLICES]:
        for endpoint in slice_.get("endpoints") or []:
            if endpoint.get("nodeName") == "node-b":
                endpoint["conditions"]["ready"] = False
            if endpoint.get("nodeName") == "node-c":
                endpoint["conditions"].pop("ready", None)


def _pin_moved(s: Snapshot) -> None:
    pv = _find(s, PVS, "pv-1")
    pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] = ["node-gone"]


def _class_changed(s: Snapshot) -> None:
    _find(s, CLASSES, "np")["spec"]["serviceAnnotations"] = {"new": "annotation"}
    del _find(s, CLASSES, "np-host")["spec"]["serviceAnnotations"]  # a field we applied before must go
    _find(s, CLASSES, "cip")["spec"]["serviceOverrides"]["spec"]["sessionAffinity"] = "None"
    _find(s, LISTENERS, "np-pinned")["spec"]["ports"].append({"name": "extra", "port": 90})
    _find(s, LISTENERS, "np-pinned")["metadata"]["generation"] = 2


def _class_invalid(s: Snapshot) -> None:
    _find(s, CLASSES, "cip-host")["spec"]["serviceType"] = "Nonsense"  # the Event names the class (uid included)


def _orphan_and_foreign(s: Snapshot) -> None:
    orphan = copy.deepcopy(_find(s, "services", "np-1"))
    orphan["metadata"]["name"] = "np-1-old"
    orphan["metadata"]["uid"] = "orphan-uid"
    s["services"].append(orphan)
    foreign = _find(s, "services", "cip-1")
    foreign["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "x",
                                               "uid": "x", "controller": True}]


STATES: dict[str, Callable[[Snapshot], None]] = {
    "converged": lambda s: None,
    "no-status": _drop_status,
    "service-changed": _service_changed_by_someone_else,
    "node-moved": _node_moved,
    "endpoint-unready": _endpoint_unready,
    "pin-moved": _pin_moved,
    "class-changed": _class_changed,
    "class-invalid": _class_invalid,
    "orphan-and-foreign": _orphan_and_foreign,
}


@pytest.fixture(scope="module")
def converged() -> Snapshot:
    return asyncio.run(_converged_snapshot())


@pytest.mark.parametrize("state", list(STATES))
async def test_reconciles_on_transformed_caches_equal_reconciles_on_whole_objects(
        converged: Snapshot, state: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controller_module, "_now", lambda: "2030-01-01T00:00:00Z")
    snapshot = copy.deepcopy(converged)
    STATES[state](snapshot)
    whole = await _reconcile_all(snapshot, transformed=False)
    transformed = await _reconcile_all(snapshot, transformed=True)
    assert transformed == whole
    writes = [c for c in whole if c[0] in ("apply", "delete")]
    if state == "converged":
        assert writes == [], "a converged cluster must reconcile without writes"
    else:
        assert writes, f"state {state!r} should make the reconcile write something"


def test_transformed_caches_are_smaller(converged: Snapshot) -> None:
    """What the transforms are for: managedFields and unread fields are gone."""
    for attribute, resource in CACHED.items():
        for obj in converged[resource]:
            kept = _transform(attribute)(copy.deepcopy(obj))
            assert object_key(kept) == object_key(obj)
            assert kept["metadata"].get("resourceVersion") == obj["metadata"].get("resourceVersion")
            managed = kept["metadata"].get("managedFields") or []
            assert all(e.get("operation") == "Apply" for e in managed), attribute
            assert len(repr(kept)) <= len(repr(obj))
    node = _transform("nodes")(copy.deepcopy(_find(converged, "nodes", "node-a")))
    assert set(node) == {"apiVersion", "kind", "metadata", "status"} and set(node["status"]) == {"addresses"}


def _transform(attribute: str) -> Callable[[JsonDict], JsonDict]:
    transforms = {"listeners": controller_module.LISTENER_CACHE, "classes": controller_module.LISTENER_CLASS_CACHE,
                  "services": controller_module.SERVICE_CACHE, "slices": addresses.ENDPOINT_SLICE_CACHE,
                  "pvs": addresses.PV_CACHE, "nodes": addresses.NODE_CACHE}
    return transforms[attribute]
