"""End-to-end: the Listener controller, in-process, against kubesim (objects checked through the API)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest_asyncio
from polling import poll_until

from kubesim.errors import ApiError
from kubesim.sim import KubeSim
from kubesim.testing.patience import patience
from listener_operator.controller_command import Operator, OperatorOptions
from listener_operator.crd.generate import all_crds
from operator_runtime.api import WRITE_VERBS

LISTENERS = "listeners.listeners.stackable.tech"
CLASSES = "listenerclasses.listeners.stackable.tech"
GV = "listeners.stackable.tech/v1alpha1"
NS = "ns"


class RunningOperator:
    def __init__(self, operator: Operator, task: asyncio.Task[int], stop: asyncio.Event,
                 requests: list[tuple[str, str]]) -> None:
        self.operator = operator
        self.task = task
        self.stop_event = stop
        self.requests = requests

    def writes(self, resource: str | None = None) -> list[tuple[str, str]]:
        return [r for r in self.requests if r[0] in WRITE_VERBS and (resource is None or r[1] == resource)]

    async def stop(self) -> int:
        self.stop_event.set()
        return await asyncio.wait_for(self.task, 15)


class Env:
    def __init__(self, sim: KubeSim) -> None:
        self.sim = sim
        self.api = sim.api
        self.operators: list[RunningOperator] = []

    async def start_operator(self, **options: Any) -> RunningOperator:
        settings: dict[str, Any] = {"kubeconfig": str(self.sim.kubeconfig_path), "http_address": None,
                                    "leader_elect": False, "workers": 4}
        settings.update(options)
        requests: list[tuple[str, str]] = []
        operator = Operator(OperatorOptions(**settings), on_request=lambda verb, res: requests.append((verb, res)))
        stop = asyncio.Event()
        running = RunningOperator(operator, asyncio.create_task(operator.run(stop)), stop, requests)
        self.operators.append(running)
        return running

    async def wait_for(self, check: Callable[[], Awaitable[Any]], within: float = 15.0, what: str = "") -> Any:
        return await poll_until(check, within, what)

    async def listener(self, name: str) -> dict[str, Any]:
        return await self.api.get(LISTENERS, name, NS)

    async def service(self, name: str) -> dict[str, Any]:
        return await self.api.get("services", name, NS)

    async def status(self, name: str) -> dict[str, Any]:
        return (await self.listener(name)).get("status") or {}

    async def addresses(self, name: str) -> list[str]:
        return sorted(a["address"] for a in (await self.status(name)).get("ingressAddresses") or [])

    async def ready(self, name: str) -> dict[str, Any]:
        conditions = (await self.status(name)).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Ready"), {})

    async def create_class(self, name: str, **spec: Any) -> dict[str, Any]:
        return await self.api.create(CLASSES, {"apiVersion": GV, "kind": "ListenerClass",
                                               "metadata": {"name": name}, "spec": spec})

    async def update_class_spec(self, name: str, **fields: Any) -> dict[str, Any]:
        listener_class = await self.api.get(CLASSES, name)
        listener_class["spec"].update(fields)
        return await self.api.update(CLASSES, listener_class)

    async def create_listener(self, name: str, class_name: str | None, ports: list[dict[str, Any]] | None = None,
                              **spec: Any) -> dict[str, Any]:
        body_spec: dict[str, Any] = {"ports": ports or [{"name": "http", "port": 80}], **spec}
        if class_name is not None:
            body_spec["className"] = class_name
        return await self.api.create(LISTENERS, {"apiVersion": GV, "kind": "Listener",
                                                 "metadata": {"name": name, "namespace": NS}, "spec": body_spec}, NS)

    async def create_node(self, name: str, *addresses: tuple[str, str]) -> dict[str, Any]:
        node = await self.api.create("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        node["status"] = {"addresses": [{"type": t, "address": a} for t, a in addresses]}
        return await self.api.update("nodes", node, subresource="status")

    async def create_endpoints(self, service: str, nodes: list[str], ready: bool = True) -> dict[str, Any]:
        return await self.api.create("endpointslices.discovery.k8s.io", {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{service}-abc", "namespace": NS,
                         "labels": {"kubernetes.io/service-name": service}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [f"10.244.0.{i + 1}"], "nodeName": node, "conditions": {"ready": ready}}
                          for i, node in enumerate(nodes)],
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
        }, NS)

    async def create_pinned_pv(self, name: str, listener: str, node: str) -> dict[str, Any]:
        return await self.api.create("persistentvolumes", {
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name, "labels": {"listeners.stackable.tech/listener-namespace": NS,
                                                  "listeners.stackable.tech/listener-name": listener}},
            "spec": {"capacity": {"storage": "1"}, "accessModes": ["ReadWriteMany"],
                     "csi": {"driver": "listeners.stackable.tech", "volumeHandle": name},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "listeners.stackable.tech/hostname", "operator": "In", "values": [node]}]}]}}},
        })

    async def events(self, reason: str | None = None) -> list[dict[str, Any]]:
        items, _ = await self.api.list("events.events.k8s.io", NS)
        return [e for e in items if reason is None or e.get("reason") == reason]


@contextlib.asynccontextmanager
async def environment(**sim_options: Any) -> AsyncIterator[Env]:
    """kubesim with the CRDs and namespace installed; operators started through it are stopped at the end."""
    async with KubeSim(**sim_options) as sim:
        for crd in all_crds():
            await sim.api.create("customresourcedefinitions.apiextensions.k8s.io", crd)
        await sim.api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        environment = Env(sim)
        try:
            yield environment
        finally:
            for running in environment.operators:
                if not running.task.done():
                    await running.stop()


@pytest_asyncio.fixture
async def env() -> AsyncIterator[Env]:
    async with environment() as environment_:
        yield environment_


# ---- service types -------------------------------------------------------------------------------------------------


async def test_cluster_ip_hostname_by_default_and_cluster_ips_when_preferred(env: Env) -> None:
    await env.create_class("internal", serviceType="ClusterIP")
    await env.create_class("internal-ip", serviceType="ClusterIP", preferredAddressType="IP")
    await env.start_operator(cluster_domain="example.org")
    await env.create_listener("web", "internal", ports=[{"name": "http", "port": 8080}])
    await env.create_listener("db", "internal-ip")

    assert await env.wait_for(lambda: env.addresses("web")) == ["web.ns.svc.example.org"]
    status = await env.status("web")
    assert status["serviceName"] == "web"
    assert status["ingressAddresses"][0] == {"address": "web.ns.svc.example.org", "addressType": "Hostname",
                                             "ports": {"http": 8080}}
    assert "nodePorts" not in status
    ready = await env.ready("web")
    assert ready["status"] == "True" and ready["observedGeneration"] == 1
    assert status["observedGeneration"] == 1

    service = await env.service("web")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"][0]["port"] == 8080 and "nodePort" not in service["spec"]["ports"][0]
    assert service["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "listeners.stackable.tech_listener"
    owner = service["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "Listener" and owner["controller"] is True
    assert owner["uid"] == (await env.listener("web"))["metadata"]["uid"]

    db_ips = await env.wait_for(lambda: env.addresses("db"))
    assert db_ips == (await env.service("db"))["spec"]["clusterIPs"]
    assert (await env.status("db"))["ingressAddresses"][0]["addressType"] == "IP"


async def test_no_backing_nodes_says_why_when_pods_run_unready_or_unselected(env: Env) -> None:
    """Pods that run but are not ready, or that mount the Listener without its extraPodSelectorLabels (so its
    Service does not select them), are named as the reason, not "no Pod runs on a node yet"."""
    await env.create_class("np", serviceType="NodePort")
    await env.create_node("node-a", ("InternalIP", "192.168.0.1"))
    await env.start_operator()
    await env.create_listener("kafka", "np", ports=[{"name": "kafka", "port": 9092}],
                              extraPodSelectorLabels={"role": "broker"})

    async def message() -> str | None:
        ready = await env.ready("kafka")
        return ready.get("message") if ready.get("reason") == "NoBackingNodes" else None
    unselected = await env.wait_for(message)
    uid = (await env.listener("kafka"))["metadata"]["uid"]
    assert unselected == (f"no Pod selected by Service kafka (listener.stackable.tech/mnt.{uid.replace('-', '')}"
                          "=kafka, role=broker) runs on a node, and no volume is pinned to a node; Pods that mount "
                          "this Listener without carrying its extraPodSelectorLabels are not selected")
    await env.create_endpoints("kafka", ["node-a", "node-a"], ready=False)
    assert await env.wait_for(lambda: _when_changed(message(), unselected)) == (
        "2 Pod(s) selected by Service kafka are not ready; a node backs this Listener once a ready Pod runs on it, "
        "or a volume is pinned to it")


async def test_node_port_publishes_backing_nodes_with_node_ports(env: Env) -> None:
    await env.create_class("np", serviceType="NodePort")
    await env.create_node("node-a", ("InternalIP", "192.168.0.1"), ("ExternalIP", "203.0.113.1"),
                          ("Hostname", "node-a"))
    await env.create_node("node-b", ("InternalIP", "192.168.0.2"), ("Hostname", "node-b"))
    await env.create_node("node-c", ("InternalIP", "192.168.0.3"))
    await env.start_operator()
    await env.create_listener("kafka", "np", ports=[{"name": "kafka", "port": 9092}])

    status = await env.wait_for(lambda: _status_with(env, "kafka", "nodePorts"))
    node_port = (await env.service("kafka"))["spec"]["ports"][0]["nodePort"]
    assert status["nodePorts"] == {"kafka": node_port}
    assert status["ingressAddresses"] == []
    assert (await env.ready("kafka"))["reason"] == "NoBackingNodes"

    await env.create_endpoints("kafka", ["node-a", "node-b"])
    assert await env.wait_for(lambda: _when_len(env.addresses("kafka"), 2)) == ["192.168.0.2", "203.0.113.1"]
    entry = (await env.status("kafka"))["ingressAddresses"][0]
    assert entry["addressType"] == "IP" and entry["ports"] == {"kafka": node_port}
    # a pinned PV adds its node even without a running Pod there
    await env.create_pinned_pv("pv-1", "kafka", "node-c")
    assert await env.wait_for(lambda: _when_len(env.addresses("kafka"), 3)) == [
        "192.168.0.2", "192.168.0.3", "203.0.113.1"]
    assert (await env.ready("kafka"))["status"] == "True"


async def test_load_balancer_custom_class_follows_the_service_status(env: Env) -> None:
    await env.create_class("lb", serviceType="LoadBalancer", loadBalancerClass="example.com/lb",
                           loadBalancerAllocateNodePorts=False, serviceExternalTrafficPolicy="Local")
    await env.start_operator()
    await env.create_listener("api", "lb", ports=[{"name": "https", "port": 443}])
    service = await env.wait_for(lambda: env.service("api"))
    assert service["spec"]["loadBalancerClass"] == "example.com/lb"
    assert service["spec"]["allocateLoadBalancerNodePorts"] is False
    assert service["spec"]["externalTrafficPolicy"] == "Local"
    await env.wait_for(lambda: _ready_reason(env, "api", "AwaitingLoadBalancer"))
    assert (await env.status("api"))["ingressAddresses"] == []

    # as a custom load-balancer controller would
    service["status"] = {"loadBalancer": {"ingress": [{"ip": "198.51.100.7"},
                                                      {"ip": "198.51.100.8", "hostname": "lb.example.com"}]}}
    await env.api.update("services", service, subresource="status")
    assert await env.wait_for(lambda: _when_len(env.addresses("api"), 2)) == ["198.51.100.7", "lb.example.com"]
    entries = (await env.status("api"))["ingressAddresses"]
    assert {e["addressType"] for e in entries} == {"IP", "Hostname"}
    assert all(e["ports"] == {"https": 443} for e in entries)
    assert (await env.ready("api"))["status"] == "True"


async def test_overrides_precedence(env: Env) -> None:
    """Upstream scenario `overrides` (behaviour.md "Overrides")."""
    await env.create_class("overrides", serviceType="ClusterIP",
                           serviceAnnotations={"deprecated": "was here", "winner": "deprecated"},
                           serviceOverrides={"metadata": {"annotations": {"serviceOverrides": "was here",
                                                                          "winner": "serviceOverrides"}},
                                             "spec": {"sessionAffinity": "ClientIP"}})
    await env.start_operator()
    await env.create_listener("listener", "overrides", objectOverrides=[{
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "listener", "namespace": NS,
                                                            "annotations": {"listener": "was here",
                                                                            "winner": "listener"}},
        "spec": {"internalTrafficPolicy": "Local"}}])
    service = await env.wait_for(lambda: env.service("listener"))
    annotations = service["metadata"]["annotations"]
    assert annotations["deprecated"] == annotations["serviceOverrides"] == annotations["listener"] == "was here"
    assert annotations["winner"] == "listener"
    assert service["spec"]["type"] == "ClusterIP"
    assert [(p["name"], p["port"]) for p in service["spec"]["ports"]] == [("http", 80)]
    assert service["spec"]["sessionAffinity"] == "ClientIP"
    assert service["spec"]["internalTrafficPolicy"] == "Local"


async def test_class_change_of_a_live_listener(env: Env) -> None:
    await env.create_class("internal", serviceType="ClusterIP")
    await env.create_class("np", serviceType="NodePort")
    await env.start_operator()
    listener = await env.create_listener("app", "internal")
    await env.wait_for(lambda: env.addresses("app"))
    cluster_ip = (await env.service("app"))["spec"]["clusterIP"]

    listener = await env.listener("app")
    listener["spec"]["className"] = "np"
    await env.api.update(LISTENERS, listener)
    status = await env.wait_for(lambda: _status_with(env, "app", "nodePorts"))
    service = await env.service("app")
    assert service["spec"]["type"] == "NodePort"
    assert service["spec"]["clusterIP"] == cluster_ip  # allocated values survive the re-apply
    assert status["nodePorts"] == {"http": service["spec"]["ports"][0]["nodePort"]}
    assert status["observedGeneration"] == 2

    listener = await env.listener("app")
    listener["spec"]["className"] = "internal"  # and back: the node ports go away with the type
    await env.api.update(LISTENERS, listener)
    status = await env.wait_for(lambda: _observed(env, "app", 3))
    service = await env.service("app")
    assert service["spec"]["type"] == "ClusterIP" and "nodePort" not in service["spec"]["ports"][0]
    assert "nodePorts" not in status
    assert [a["address"] for a in status["ingressAddresses"]] == ["app.ns.svc.cluster.local"]


async def test_class_spec_change_reaches_its_listeners(env: Env) -> None:
    await env.create_class("internal", serviceType="ClusterIP")
    await env.start_operator()
    await env.create_listener("app", "internal")
    await env.wait_for(lambda: env.addresses("app"))
    await env.update_class_spec("internal", serviceAnnotations={"example.com/team": "blue"})
    await env.wait_for(lambda: _annotation(env, "app", "example.com/team"))
    # removing it again removes it from the Service (the apply drops fields we no longer set)
    await env.update_class_spec("internal", serviceAnnotations={})
    await env.wait_for(lambda: _no_annotation(env, "app", "example.com/team"))


# ---- better than upstream ------------------------------------------------------------------------------------------


async def test_node_address_change_propagates(env: Env) -> None:
    await env.create_class("np", serviceType="NodePort")
    await env.create_class("stable", serviceType="NodePort", pinnedNodePorts=True)
    await env.create_node("node-a", ("InternalIP", "192.168.0.1"))
    await env.create_node("node-b", ("InternalIP", "192.168.0.2"))
    await env.start_operator()
    await env.create_listener("app", "np")
    await env.create_listener("pinned", "stable")
    await env.create_listener("elsewhere", "np")
    await env.create_endpoints("app", ["node-a"])
    await env.create_pinned_pv("pv-pinned", "pinned", "node-a")  # a Listener using the node only through a PV
    await env.create_endpoints("elsewhere", ["node-b"])
    for name in ("app", "pinned"):
        assert await env.wait_for(lambda name=name: env.addresses(name)) == ["192.168.0.1"]  # type: ignore[misc]
    assert await env.wait_for(lambda: env.addresses("elsewhere")) == ["192.168.0.2"]
    untouched = (await env.listener("elsewhere"))["metadata"]["resourceVersion"]

    node = await env.api.get("nodes", "node-a")
    node["status"]["addresses"] = [{"type": "InternalIP", "address": "192.168.0.99"}]
    await env.api.update("nodes", node, subresource="status")
    for name in ("app", "pinned"):  # every Listener using the node
        assert await env.wait_for(lambda name=name: _addresses_equal(  # type: ignore[misc]
            env, name, ["192.168.0.99"])) == ["192.168.0.99"]
    assert (await env.listener("elsewhere"))["metadata"]["resourceVersion"] == untouched


async def test_missing_node_is_skipped_and_reported(env: Env) -> None:
    await env.create_class("stable", serviceType="NodePort", pinnedNodePorts=True)
    await env.create_node("node-a", ("InternalIP", "192.168.0.1"))
    await env.create_node("node-gone", ("InternalIP", "192.168.0.2"))
    await env.start_operator()
    await env.create_listener("app", "stable")
    await env.create_pinned_pv("pv-a", "app", "node-a")
    await env.create_pinned_pv("pv-gone", "app", "node-gone")
    assert await env.wait_for(lambda: _when_len(env.addresses("app"), 2)) == ["192.168.0.1", "192.168.0.2"]

    await env.api.delete("nodes", "node-gone")
    assert await env.wait_for(lambda: _addresses_equal(env, "app", ["192.168.0.1"])) == ["192.168.0.1"]
    ready = await env.ready("app")
    assert ready["status"] == "True" and ready["reason"] == "NodesMissing" and "node-gone" in ready["message"]
    events = await env.wait_for(lambda: env.events("NodesMissing"))
    assert events[0]["type"] == "Warning" and "node-gone" in events[0]["note"]
    assert events[0]["regarding"]["name"] == "app"


async def test_foreign_service_is_refused(env: Env) -> None:
    await env.create_class("internal", serviceType="ClusterIP")
    foreign = await env.api.create("services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "victim", "namespace": NS,
                                                            "labels": {"owner": "someone-else"}},
        "spec": {"type": "ClusterIP", "ports": [{"name": "x", "port": 1234}], "selector": {"app": "victim"}}}, NS)
    await env.start_operator()
    await env.create_listener("victim", "internal")
    ready = await env.wait_for(lambda: _ready_reason(env, "victim", "RefuseToOverwriteForeignService"))
    assert ready["status"] == "False" and "victim" in ready["message"]
    events = await env.wait_for(lambda: env.events("RefuseToOverwriteForeignService"))
    assert events[0]["type"] == "Warning"
    assert events[0]["related"]["kind"] == "Service" and events[0]["related"]["name"] == "victim"
    after = await env.service("victim")
    assert after["metadata"]["resourceVersion"] == foreign["metadata"]["resourceVersion"]
    assert after["spec"]["selector"] == {"app": "victim"}
    # once the foreign Service is gone the Listener takes the name
    await env.api.delete("services", "victim", NS)
    await env.wait_for(lambda: _ready_reason(env, "victim", "AddressesPublished"))


# Each way around the class's policy through objectOverrides: (class, override spec, the field it changes).
BYPASSES = [
    ("internal", {"type": "LoadBalancer"}, "spec.type"),
    ("internal", {"externalIPs": ["203.0.113.9"]}, "spec.externalIPs"),
    ("lb", {"loadBalancerIP": "203.0.113.10"}, "spec.loadBalancerIP"),
    ("lb", {"loadBalancerSourceRanges": ["0.0.0.0/0"]}, "spec.loadBalancerSourceRanges"),
    ("lb", {"loadBalancerClass": "example.com/public"}, "spec.loadBalancerClass"),
    ("lb", {"allocateLoadBalancerNodePorts": True}, "spec.allocateLoadBalancerNodePorts"),
    ("internal", {"selector": {"app": "anything"}}, "spec.selector"),
]


def _service_override(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NS}, "spec": spec}


async def test_override_bypasses_are_refused_until_the_class_allows_them(env: Env) -> None:
    """behaviour.md "Override policy": a Listener may not widen what its class decides through objectOverrides;
    each refusal is a Warning Event naming the field path and Ready=False; allowed in the class, it applies."""
    await env.create_class("internal", serviceType="ClusterIP")
    await env.create_class("lb", serviceType="LoadBalancer", loadBalancerClass="example.com/internal",
                           loadBalancerAllocateNodePorts=False,
                           serviceOverrides={"spec": {"loadBalancerSourceRanges": ["10.1.0.0/16"]}})
    await env.start_operator(listener_class_preset="none")
    names = [f"bypass-{index}" for index in range(len(BYPASSES))]
    for name, (class_name, override, _) in zip(names, BYPASSES, strict=True):
        await env.create_listener(name, class_name, objectOverrides=[_service_override(name, **override)])
    for name, (class_name, _, field) in zip(names, BYPASSES, strict=True):
        path = f"spec.objectOverrides[0].{field}"
        ready = await env.wait_for(lambda name=name: _ready_reason(env, name, "ServiceOverrideNotAllowed"),  # type: ignore[misc]
                                   what=name)
        assert ready["status"] == "False" and ready["message"].startswith(f"{path}: "), ready
        event = await env.wait_for(lambda name=name: _event_about(env, "ServiceOverrideNotAllowed", name),  # type: ignore[misc]
                                   what=f"event of {name}")
        assert event["type"] == "Warning" and event["note"].startswith(f"{path}: "), event
        assert (event["related"]["kind"], event["related"]["name"]) == ("ListenerClass", class_name)
        assert await _gone(env, name)  # nothing was applied
    # The administrator allows every field: the same Listeners now get their overrides.
    every_field = sorted({field for _, _, field in BYPASSES})
    for class_name in ("internal", "lb"):
        await env.update_class_spec(class_name, allowedServiceOverrides=every_field)
    for name, (_, override, _) in zip(names, BYPASSES, strict=True):
        service = await env.wait_for(lambda name=name: env.service(name), what=name)  # type: ignore[misc]
        for key, value in override.items():
            assert service["spec"][key] == value, (name, service["spec"])


async def test_overrides_that_widen_nothing_apply_with_the_preset_classes(env: Env) -> None:
    """What upstream users rely on (issue: a Listener of the preset class external-unstable setting
    externalTrafficPolicy: Local) applies as upstream merges it, with the presets' empty allowedServiceOverrides:
    the Service gets the override, annotations and labels too, and the Listener is Ready."""
    await env.create_node("node-a", ("InternalIP", "192.168.0.1"))
    await env.start_operator()
    override = _service_override("edge", externalTrafficPolicy="Local")
    override["metadata"].update(annotations={"example.com/team": "data"}, labels={"tier": "edge"})
    await env.create_listener("edge", "external-unstable", objectOverrides=[override])
    service = await env.wait_for(lambda: env.service("edge"), what="the Listener's Service")
    assert service["spec"]["externalTrafficPolicy"] == "Local"
    assert service["metadata"]["annotations"]["example.com/team"] == "data"
    assert service["metadata"]["labels"]["tier"] == "edge"
    await env.create_endpoints("edge", ["node-a"])
    await env.wait_for(lambda: _ready_reason(env, "edge", "AddressesPublished"))


async def test_a_refused_override_keeps_the_service_as_last_applied(env: Env) -> None:
    await env.create_class("internal", serviceType="ClusterIP")
    await env.start_operator(listener_class_preset="none")
    await env.create_listener("app", "internal")
    await env.wait_for(lambda: _ready_reason(env, "app", "AddressesPublished"))
    before = await env.service("app")
    listener = await env.listener("app")
    listener["spec"]["objectOverrides"] = [_service_override("app", externalIPs=["203.0.113.9"])]
    await env.api.update(LISTENERS, listener)
    ready = await env.wait_for(lambda: _ready_reason(env, "app", "ServiceOverrideNotAllowed"))
    assert "spec.objectOverrides[0].spec.externalIPs" in ready["message"]
    assert "kept as last applied" in ready["message"]
    after = await env.service("app")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert "externalIPs" not in after["spec"]
    # the published address stays, and the condition says it may be stale
    assert await env.addresses("app") == ["app.ns.svc.cluster.local"]
    assert "may be stale" in ready["message"]


async def test_a_deleted_class_keeps_the_service_and_says_the_addresses_may_be_stale(env: Env) -> None:
    """behaviour.md "Ready condition": after its class is deleted the Listener keeps its Service and its addresses
    (they may still work), Ready=False with a reason that names the problem and a message saying "stale"."""
    await env.create_class("internal", serviceType="ClusterIP")
    await env.start_operator(listener_class_preset="none")
    await env.create_listener("app", "internal")
    await env.wait_for(lambda: _ready_reason(env, "app", "AddressesPublished"))
    service_uid = (await env.service("app"))["metadata"]["uid"]
    await env.api.delete(CLASSES, "internal")
    ready = await env.wait_for(lambda: _ready_reason(env, "app", "ListenerClassNotFound"))
    assert ready["status"] == "False"
    assert ready["message"].startswith("ListenerClass 'internal' does not exist; the published addresses are kept "
                                       "from the last successful reconcile and may be stale"), ready["message"]
    assert await env.addresses("app") == ["app.ns.svc.cluster.local"]
    assert (await env.service("app"))["metadata"]["uid"] == service_uid


async def test_malformed_overrides_get_a_condition_and_an_event(env: Env) -> None:
    await env.create_class("internal", serviceType="ClusterIP")
    await env.start_operator(listener_class_preset="none")
    await env.create_listener("string-metadata", "internal", objectOverrides=[
        {"apiVersion": "v1", "kind": "Service", "metadata": "string-metadata"}])
    await env.create_listener("list-spec", "internal", objectOverrides=[
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": NS}},
        {**_service_override("list-spec"), "spec": ["type", "NodePort"]}])
    for name, path in (("string-metadata", "spec.objectOverrides[0].metadata"),
                       ("list-spec", "spec.objectOverrides[1].spec")):
        ready = await env.wait_for(lambda name=name: _ready_reason(env, name, "InvalidServiceOverrides"),  # type: ignore[misc]
                                   what=name)
        assert ready["status"] == "False" and ready["message"].startswith(f"{path} must be a map"), ready
        event = await env.wait_for(lambda name=name: _event_about(env, "InvalidServiceOverrides", name),  # type: ignore[misc]
                                   what=f"event of {name}")
        assert event["note"].startswith(path)


async def _quiet_count(count: Callable[[], int], *, quiet: float, within: float) -> int:
    """``count()`` once it has not changed for ``quiet`` seconds; AssertionError when it keeps changing for
    ``within`` seconds (stretched on a busy machine)."""
    deadline = time.monotonic() + patience(within)
    last, since = count(), time.monotonic()
    while time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        now, current = time.monotonic(), count()
        if current != last:
            last, since = current, now
        elif now - since >= quiet:
            return current
    raise AssertionError(f"still changing after {within}s: {last}")


async def test_an_api_rejection_is_reported_without_hot_retries(env: Env) -> None:
    await env.create_class("internal", serviceType="ClusterIP", serviceOverrides={"spec": {"clusterIP": "1.2.3"}})
    running = await env.start_operator()
    await env.create_listener("app", "internal")
    ready = await env.wait_for(lambda: _ready_reason(env, "app", "ApplyService"))
    assert ready["status"] == "False" and "1.2.3" in ready["message"]
    events = await env.wait_for(lambda: env.events("ApplyService"))
    assert "rejected Service ns/app" in events[0]["note"] and events[0]["related"]["kind"] == "Service"
    # An invalid object is not re-sent in a loop, nor retried with backoff (0.5 s, 1 s, 2 s, ...): the Service's
    # applies go quiet after the first and at most the one more that the Listener's own status change brings (when
    # the controller sees it depends on the machine's load, so the quiet spell is waited for, within a bound).
    applies = await _quiet_count(lambda: len(running.writes("services")), quiet=1.5, within=15)
    assert applies <= 2, running.writes("services")
    # fixing the class heals the Listener
    await env.update_class_spec("internal", serviceOverrides={})
    await env.wait_for(lambda: _ready_reason(env, "app", "AddressesPublished"))


async def test_a_full_node_port_range_is_reported_once_and_waits_for_a_freed_port() -> None:
    async with environment(service_node_port_range="30000-30001") as env:
        await env.create_class("np", serviceType="NodePort")
        running = await env.start_operator()
        await env.create_listener("a", "np")
        await env.create_listener("b", "np")
        await env.wait_for(lambda: _ready_reason(env, "b", "NoBackingNodes"))
        await env.wait_for(lambda: _ready_reason(env, "a", "NoBackingNodes"))
        await env.create_listener("c", "np")
        ready = await env.wait_for(lambda: _ready_reason(env, "c", "NodePortRangeFull"))
        assert ready["status"] == "False"
        assert "no free node port for Service ns/c" in ready["message"]
        assert "--service-node-port-range" in ready["message"]
        events = await env.wait_for(lambda: env.events("NodePortRangeFull"))
        assert len(events) == 1 and events[0]["related"] == {"apiVersion": "v1", "kind": "Service", "name": "c",
                                                              "namespace": NS}
        # no retry loop against the full range, nor retries with backoff (0.5 s, 1 s, 2 s, ...): the Service's applies
        # go quiet after at most the one more that the Listener's own status change brings (when the controller sees
        # it depends on the machine's load, so the quiet spell is waited for, within a bound)
        applies_seen = len(running.writes("services"))
        applies = await _quiet_count(lambda: len(running.writes("services")), quiet=2.5, within=15)
        assert applies - applies_seen <= 1, running.writes("services")
        # a deleted Listener's Service frees its port: the waiting Listener gets it at once, not minutes later
        await env.api.delete(LISTENERS, "a", NS)
        await env.wait_for(lambda: _ready_reason(env, "c", "NoBackingNodes"), within=10)
        assert (await env.service("c"))["spec"]["ports"][0]["nodePort"] in (30000, 30001)
        assert len(await env.events("NodePortRangeFull")) == 1


async def test_orphaned_owned_service_is_deleted(env: Env) -> None:
    await env.create_class("internal", serviceType="ClusterIP")
    await env.start_operator()
    listener = await env.create_listener("app", "internal")
    await env.wait_for(lambda: env.addresses("app"))
    owner = {"apiVersion": GV, "kind": "Listener", "name": "app", "uid": listener["metadata"]["uid"],
             "controller": True}
    labels = {"app.kubernetes.io/name": "listener", "app.kubernetes.io/instance": "app",
              "app.kubernetes.io/managed-by": "listeners.stackable.tech_listener"}
    spec = {"type": "ClusterIP", "ports": [{"name": "x", "port": 1}]}
    await env.api.create("services", {"apiVersion": "v1", "kind": "Service", "metadata": {
        "name": "app-stale", "namespace": NS, "labels": labels, "ownerReferences": [owner]}, "spec": spec}, NS)
    await env.api.create("services", {"apiVersion": "v1", "kind": "Service", "metadata": {
        "name": "unrelated", "namespace": NS, "labels": labels}, "spec": spec}, NS)
    await env.wait_for(lambda: _gone(env, "app-stale"), what="orphan deleted")
    assert (await env.service("unrelated"))["metadata"]["name"] == "unrelated"
    assert (await env.service("app"))["metadata"]["name"] == "app"


async def test_deleting_a_listener_deletes_its_service(env: Env) -> None:
    await env.create_class("internal", serviceType="ClusterIP")
    await env.start_operator()
    await env.create_listener("app", "internal")
    await env.wait_for(lambda: env.service("app"))
    await env.api.delete(LISTENERS, "app", NS)
    await env.wait_for(lambda: _gone(env, "app"), what="Service garbage-collected")


async def test_a_no_op_reconcile_makes_zero_writes(env: Env) -> None:
    await env.create_class("internal", serviceType="ClusterIP")
    await env.create_class("np", serviceType="NodePort")
    await env.create_node("node-a", ("InternalIP", "192.168.0.1"))
    running = await env.start_operator()
    names = ("web", "np", "stale")
    await env.create_listener("web", "internal")
    await env.create_listener("np", "np")
    await env.create_listener("stale", "np")
    await env.create_endpoints("np", ["node-a"])
    await env.create_pinned_pv("pv-stale-a", "stale", "node-a")
    await env.create_pinned_pv("pv-stale-gone", "stale", "node-gone")  # a node that does not exist
    await env.wait_for(lambda: env.addresses("web"))
    await env.wait_for(lambda: env.addresses("np"))
    await env.wait_for(lambda: _ready_reason(env, "stale", "NodesMissing"))
    await asyncio.sleep(0.5)
    versions = {name: (await env.listener(name))["metadata"]["resourceVersion"] for name in names}
    service_versions = {name: (await env.service(name))["metadata"]["resourceVersion"] for name in names}
    before = len(running.writes())
    reconciles_before = _reconciles(running)

    # triggers that change nothing the Listeners publish: an annotation on each Listener, a Node heartbeat-like
    # label, ListenerClass metadata
    for name in names:
        listener = await env.listener(name)
        listener["metadata"].setdefault("annotations", {})["touched"] = "yes"
        await env.api.update(LISTENERS, listener)
    node = await env.api.get("nodes", "node-a")
    node["metadata"].setdefault("labels", {})["touched"] = "yes"
    await env.api.update("nodes", node)
    cls = await env.api.get(CLASSES, "np")
    cls["metadata"].setdefault("labels", {})["touched"] = "yes"
    await env.api.update(CLASSES, cls)
    revision = env.sim.store.revision  # the server's global revision: any write by anyone bumps it
    await asyncio.sleep(1.0)
    assert env.sim.store.revision == revision
    assert _reconciles(running) >= reconciles_before + 3  # every Listener reconciled (queued keys are merged)
    assert running.writes()[before:] == []
    for name in names:
        assert (await env.service(name))["metadata"]["resourceVersion"] == service_versions[name]
        assert (await env.listener(name))["metadata"]["resourceVersion"] != versions[name]  # our own touch only


async def test_periodic_resync_reconciles_everything_and_writes_nothing(env: Env) -> None:
    await env.create_class("internal", serviceType="ClusterIP")
    running = await env.start_operator(resync_period=0.2)
    for name in ("a", "b", "c"):
        await env.create_listener(name, "internal")
    for name in ("a", "b", "c"):
        await env.wait_for(lambda name=name: env.addresses(name))  # type: ignore[misc]
    await asyncio.sleep(0.3)
    writes, reconciles, revision = len(running.writes()), _reconciles(running), env.sim.store.revision
    await asyncio.sleep(1.0)
    assert _reconciles(running) >= reconciles + 6  # at least two resync rounds of three Listeners
    assert running.writes()[writes:] == []
    assert env.sim.store.revision == revision


async def test_reconciles_read_only_the_caches(env: Env) -> None:
    """After the caches are synced, no reconcile lists or gets anything: every trigger is served from the watches."""
    await env.create_class("internal", serviceType="ClusterIP")
    await env.create_class("np", serviceType="NodePort")
    await env.create_node("node-a", ("InternalIP", "192.168.0.1"))
    running = await env.start_operator(listener_class_preset="none")
    await env.create_listener("first", "internal")
    await env.wait_for(lambda: env.addresses("first"))
    start = len(running.requests)

    await env.create_listener("np", "np")
    await env.create_listener("orphaned-class", "missing")
    await env.create_endpoints("np", ["node-a"])
    await env.create_pinned_pv("pv-np", "np", "node-a")
    assert await env.wait_for(lambda: env.addresses("np")) == ["192.168.0.1"]
    node = await env.api.get("nodes", "node-a")
    node["status"]["addresses"] = [{"type": "InternalIP", "address": "192.168.0.2"}]
    await env.api.update("nodes", node, subresource="status")
    assert await env.wait_for(lambda: _addresses_equal(env, "np", ["192.168.0.2"])) == ["192.168.0.2"]
    await env.wait_for(lambda: _ready_reason(env, "orphaned-class", "ListenerClassNotFound"))
    await env.create_class("missing", serviceType="ClusterIP")
    await env.wait_for(lambda: _ready_reason(env, "orphaned-class", "AddressesPublished"))

    verbs = {verb for verb, _ in running.requests[start:]}
    assert verbs <= {"apply", "create", "watch"}, running.requests[start:]  # writes (and Events), no reads
    assert ("apply", "services") in running.requests[start:]


async def test_owned_service_edits_are_reverted_and_a_deleted_service_is_recreated(env: Env) -> None:
    await env.create_class("internal", serviceType="ClusterIP")
    await env.start_operator()
    await env.create_listener("app", "internal")
    service = await env.wait_for(lambda: env.service("app"))
    assert service["spec"]["publishNotReadyAddresses"] is True

    service["spec"]["publishNotReadyAddresses"] = False  # someone edits a field the Listener decides
    await env.api.update("services", service)
    await env.wait_for(lambda: _service_field(env, "app", "publishNotReadyAddresses", True))

    old_uid = service["metadata"]["uid"]
    await env.api.delete("services", "app", NS)
    recreated = await env.wait_for(lambda: _service_with_other_uid(env, "app", old_uid))
    assert recreated["metadata"]["ownerReferences"][0]["name"] == "app"
    assert await env.addresses("app") == ["app.ns.svc.cluster.local"]


async def test_endpoint_slices_of_a_same_named_service_elsewhere_are_ignored(env: Env) -> None:
    """Upstream maps Endpoints by name only (behaviour.md "EndpointSlices by namespace and name"); we match namespace and Service name."""
    await env.create_class("np", serviceType="NodePort")
    await env.create_node("node-a", ("InternalIP", "192.168.0.1"))
    await env.create_node("node-b", ("InternalIP", "192.168.0.2"))
    await env.api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
    await env.api.create("endpointslices.discovery.k8s.io", {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "app-elsewhere", "namespace": "other", "labels": {"kubernetes.io/service-name": "app"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.244.9.9"], "nodeName": "node-b", "conditions": {"ready": True}}]}, "other")
    await env.create_endpoints("app", ["node-a"])
    await env.start_operator()
    await env.create_listener("app", "np")
    assert await env.wait_for(lambda: env.addresses("app")) == ["192.168.0.1"]


async def test_every_failure_gets_a_warning_event_in_plain_words(env: Env) -> None:
    await env.create_class("bad-annotations", serviceType="ClusterIP", serviceAnnotations={"not a key!": "x"})
    await env.start_operator(listener_class_preset="none")
    await env.create_listener("no-class", None)
    await env.create_listener("unknown-class", "does-not-exist")
    await env.create_listener("annotated", "bad-annotations")
    await env.create_class("internal", serviceType="ClusterIP")
    await env.api.create(LISTENERS, {"apiVersion": GV, "kind": "Listener", "metadata": {"name": "no-ports",
                                                                                    "namespace": NS},
                                     "spec": {"className": "internal", "ports": []}}, NS)
    expectations = {
        "NoListenerClass": ("no-class", "Listener has no spec.className", None),
        "ListenerClassNotFound": ("unknown-class", "ListenerClass 'does-not-exist' does not exist", "ListenerClass"),
        "ValidateListenerClassAnnotations": ("annotated", "serviceAnnotations key 'not a key!' is invalid",
                                             "ListenerClass"),
        "NoPorts": ("no-ports", "Listener has no ports", None),
    }
    for reason, (name, words, related) in expectations.items():
        events = await env.wait_for(lambda reason=reason: env.events(reason), what=reason)  # type: ignore[misc]
        event = next(e for e in events if e["regarding"]["name"] == name)
        assert event["type"] == "Warning" and event["action"] == "Reconcile"
        assert event["reportingController"] == "listener.listeners.stackable.tech"
        assert words in event["note"], event["note"]
        assert (event.get("related") or {}).get("kind") == related
        ready = await env.wait_for(lambda name=name, reason=reason: _ready_reason(env, name, reason))  # type: ignore[misc]
        assert ready["status"] == "False" and words in ready["message"]
    assert await _gone(env, "no-ports")  # refused up front, not sent as a Service the server would reject
    # creating the missing class heals that Listener without any restart
    await env.create_class("does-not-exist", serviceType="ClusterIP")
    await env.wait_for(lambda: _ready_reason(env, "unknown-class", "AddressesPublished"))


# ---- helpers -------------------------------------------------------------------------------------------------------


def _reconciles(running: RunningOperator) -> float:
    value = running.operator.metrics.registry.get_sample_value("listener_operator_reconciles_total",
                                                               {"result": "success"})
    return value or 0.0


async def _status_with(env: Env, name: str, field: str) -> dict[str, Any] | None:
    status = await env.status(name)
    return status if field in status else None


async def _observed(env: Env, name: str, generation: int) -> dict[str, Any] | None:
    status = await env.status(name)
    return status if status.get("observedGeneration") == generation else None


async def _when_len(addresses: Awaitable[list[str]], n: int) -> list[str] | None:
    value = await addresses
    return value if len(value) == n else None


async def _addresses_equal(env: Env, name: str, expected: list[str]) -> list[str] | None:
    value = await env.addresses(name)
    return value if value == expected else None


async def _ready_reason(env: Env, name: str, reason: str) -> dict[str, Any] | None:
    ready = await env.ready(name)
    return ready if ready.get("reason") == reason else None


async def _event_about(env: Env, reason: str, name: str) -> dict[str, Any] | None:
    return next((e for e in await env.events(reason) if e["regarding"]["name"] == name), None)


async def _annotation(env: Env, name: str, key: str) -> str | None:
    return ((await env.service(name))["metadata"].get("annotations") or {}).get(key)


async def _no_annotation(env: Env, name: str, key: str) -> bool:
    return key not in ((await env.service(name))["metadata"].get("annotations") or {})


async def _service_field(env: Env, name: str, field: str, value: Any) -> bool:
    return bool((await env.service(name))["spec"].get(field) == value)


async def _service_with_other_uid(env: Env, name: str, uid: str) -> dict[str, Any] | None:
    service = await env.service(name)
    return service if service["metadata"]["uid"] != uid else None


async def _gone(env: Env, name: str) -> bool:
    try:
        await env.service(name)
    except ApiError as error:
        if error.code == 404:
            return True
        raise
    return False


async def test_load_balancer_default_class_gets_addresses_from_the_simulated_cluster() -> None:
    async with environment(nodes=2) as env:
        await env.start_operator()  # preset ephemeral-nodes: external-stable is a LoadBalancer class
        await env.wait_for(lambda: env.api.get(CLASSES, "external-stable"))
        await env.create_listener("web", "external-stable", ports=[{"name": "https", "port": 443}])
        addresses = await env.wait_for(lambda: env.addresses("web"), within=20)
        service = await env.service("web")
        ingress = service["status"]["loadBalancer"]["ingress"]
        assert addresses == sorted(e.get("hostname") or e["ip"] for e in ingress)
        entry = (await env.status("web"))["ingressAddresses"][0]
        assert entry["ports"] == {"https": 443}
        assert service["spec"]["allocateLoadBalancerNodePorts"] is True


async def _when_changed(value: Awaitable[Any], old: Any) -> Any:
    got = await value
    return got if got is not None and got != old else None


async def _check_overrides(env: Env, kubeconfig: str | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "listener_operator.cli", "check", "overrides", "--kubeconfig",
        kubeconfig or str(env.sim.kubeconfig_path), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), patience(60))
    return process.returncode or 0, out.decode(), err.decode()


async def test_check_overrides_lists_the_listeners_a_migration_would_refuse(env: Env) -> None:
    """The check a migrating user runs against the cluster before switching (docs/migrating-from-upstream.md): the
    Listeners whose objectOverrides this operator refuses, by name and field path, exit code 1; none, exit 0."""
    await env.create_class("np", serviceType="NodePort")
    await env.create_class("lb", serviceType="LoadBalancer")
    await env.create_listener("plain", "np")
    await env.create_listener("local", "np", objectOverrides=[_service_override("local", externalTrafficPolicy="Local")])
    await env.create_listener("public", "np", objectOverrides=[_service_override("public", type="LoadBalancer")])
    await env.create_listener("pinned", "lb", objectOverrides=[
        _service_override("pinned", loadBalancerSourceRanges=["10.0.0.0/8"]),
        _service_override("pinned", loadBalancerIP="203.0.113.10")])
    code, out, err = await _check_overrides(env)
    assert (code, err) == (1, ""), out
    lines = out.splitlines()
    assert lines[0].startswith(f"{NS}/pinned: ServiceOverrideNotAllowed: spec.objectOverrides[1].spec.loadBalancerIP: "
                               "ListenerClass 'lb' decides spec.loadBalancerIP"), out
    assert lines[1].startswith(f"{NS}/public: ServiceOverrideNotAllowed: spec.objectOverrides[0].spec.type: "), out
    assert lines[2:] == ["2 of 4 Listener(s) have objectOverrides this operator refuses: allow the fields in their "
                         "ListenerClass's spec.allowedServiceOverrides, or change the overrides, before switching"]
    await env.update_class_spec("np", allowedServiceOverrides=["spec.type"])
    await env.api.delete(LISTENERS, "pinned", NS)
    assert await _check_overrides(env) == (0, "the objectOverrides of all 2 Listener(s) that have some apply under "
                                              "this operator (3 Listener(s) read)\n", "")
    code, out, err = await _check_overrides(env, "/nonexistent/kubeconfig")
    assert (code, out) == (2, "") and err.startswith("error: "), err
