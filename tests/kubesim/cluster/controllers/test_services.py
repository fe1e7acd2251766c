"""Endpoints / EndpointSlices follow Pod readiness; the load-balancer controller serves only the default class;
Deployments run Pods directly."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from clusterhelpers import Env, pod_ready, wait_for
from traffichelpers import container
from traffichelpers import deployment as traffic_deployment

NS = "default"


def service(
    name: str, *, selector: dict[str, str], publish_not_ready: bool = False, **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NS, "labels": {"team": "a"}},
        "spec": {
            "selector": selector,
            "ports": [{"name": "http", "port": 80, "targetPort": "web"}],
            "publishNotReadyAddresses": publish_not_ready,
            **spec,
        },
    }


def deployment(name: str, replicas: int) -> dict[str, Any]:
    return traffic_deployment(name, replicas, container("main", image="nginx", ports=[("web", 8080)]))


def _addresses(endpoints: dict[str, Any] | None) -> tuple[list[str], list[str]]:
    ready: list[str] = []
    not_ready: list[str] = []
    for subset in (endpoints or {}).get("subsets") or []:
        ready += [a["ip"] for a in subset.get("addresses") or []]
        not_ready += [a["ip"] for a in subset.get("notReadyAddresses") or []]
    return sorted(ready), sorted(not_ready)


async def _slice_conditions(
    api: Any, service_name: str, predicate: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The Service's endpoint conditions by address, once ``predicate`` holds for them (follows a watch)."""

    def conditions_of(slices: list[dict[str, Any]]) -> dict[str, Any]:
        return {e["addresses"][0]: e["conditions"] for s in slices for e in s.get("endpoints") or []}

    async def run() -> dict[str, Any]:
        selector = f"kubernetes.io/service-name={service_name}"
        items, version = await api.list("endpointslices.discovery.k8s.io", NS, label_selector=selector)
        slices = {s["metadata"]["name"]: s for s in items}
        while not predicate(conditions_of(list(slices.values()))):
            async for event, obj in api.watch(
                "endpointslices.discovery.k8s.io", NS, label_selector=selector, resource_version=version
            ):
                version = obj["metadata"]["resourceVersion"]
                if event == "DELETED":
                    slices.pop(obj["metadata"]["name"], None)
                else:
                    slices[obj["metadata"]["name"]] = obj
                if predicate(conditions_of(list(slices.values()))):
                    break
        return conditions_of(list(slices.values()))

    return await asyncio.wait_for(run(), 20.0)


async def _running_pods(env: Env, app: str, count: int) -> list[dict[str, Any]]:
    await wait_for(
        env.api,
        "deployments.apps",
        app,
        NS,
        lambda d: bool(d) and d.get("status", {}).get("readyReplicas") == count,
    )
    pods, _ = await env.api.list("pods", NS, label_selector=f"app={app}")
    assert len(pods) == count and all(pod_ready(p) for p in pods)
    return sorted(pods, key=lambda p: p["status"]["podIP"])


async def test_deployment_creates_owned_pods_and_scales(env: Env) -> None:
    api = env.api
    await api.create("deployments.apps", deployment("api", 3), namespace=NS)
    pods = await _running_pods(env, "api", 3)
    [replica_set], _ = await api.list("replicasets.apps", NS)
    [rs_owner] = replica_set["metadata"]["ownerReferences"]
    assert rs_owner["kind"] == "Deployment" and rs_owner["name"] == "api"
    pod_hash = replica_set["metadata"]["labels"]["pod-template-hash"]
    assert replica_set["metadata"]["name"] == f"api-{pod_hash}"
    for pod in pods:
        [owner] = pod["metadata"]["ownerReferences"]
        assert owner["kind"] == "ReplicaSet" and owner["name"] == f"api-{pod_hash}"
        assert pod["metadata"]["name"].startswith(f"api-{pod_hash}-")
        assert pod["metadata"]["labels"]["pod-template-hash"] == pod_hash
        assert pod["status"]["containerStatuses"][0]["ready"] is True
    await api.patch("deployments.apps", "api", {"spec": {"replicas": 1}}, namespace=NS)
    await wait_for(
        api,
        "deployments.apps",
        "api",
        NS,
        lambda d: (
            bool(d) and d.get("status", {}).get("replicas") == 1 and d["status"].get("readyReplicas") == 1
        ),
    )
    gone = 0
    for pod in pods:
        final = await wait_for(
            api,
            "pods",
            pod["metadata"]["name"],
            NS,
            lambda p: p is None or (pod_ready(p) and not p["metadata"].get("deletionTimestamp")),
        )
        gone += final is None
    assert gone == 2
    remaining, _ = await api.list("pods", NS, label_selector="app=api")
    assert len(remaining) == 1 and pod_ready(remaining[0])


async def test_endpoints_follow_readiness(env: Env) -> None:
    api = env.api
    await api.create("deployments.apps", deployment("web", 2), namespace=NS)
    pods = await _running_pods(env, "web", 2)
    ips = [p["status"]["podIP"] for p in pods]
    await api.create("services", service("web", selector={"app": "web"}), namespace=NS)
    await api.create(
        "services", service("web-all", selector={"app": "web"}, publish_not_ready=True), namespace=NS
    )

    endpoints = await wait_for(api, "endpoints", "web", NS, lambda e: _addresses(e) == (ips, []))
    assert endpoints is not None
    [subset] = endpoints["subsets"]
    assert subset["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    by_ip = {a["ip"]: a for a in subset["addresses"]}
    for pod in pods:
        address = by_ip[pod["status"]["podIP"]]
        assert address["nodeName"] == pod["spec"]["nodeName"]
        assert address["targetRef"] == {
            "kind": "Pod",
            "namespace": NS,
            "name": pod["metadata"]["name"],
            "uid": pod["metadata"]["uid"],
        }

    # flip one Pod to not ready
    flipped = pods[0]
    await env.cluster.set_pod_ready(NS, flipped["metadata"]["name"], False)
    await wait_for(api, "endpoints", "web", NS, lambda e: _addresses(e) == ([ips[1]], [ips[0]]))
    await wait_for(api, "endpoints", "web-all", NS, lambda e: _addresses(e) == (ips, []))
    conditions = await _slice_conditions(api, "web", lambda c: c.get(ips[0], {}).get("ready") is False)
    assert conditions[ips[0]] == {"ready": False, "serving": False, "terminating": False}
    slices, _ = await api.list(
        "endpointslices.discovery.k8s.io", NS, label_selector="kubernetes.io/service-name=web"
    )
    [slice_] = slices
    assert conditions[ips[1]]["ready"] is True
    by_address = {e["addresses"][0]: e for e in slice_["endpoints"]}
    for pod in pods:
        endpoint = by_address[pod["status"]["podIP"]]
        assert endpoint["nodeName"] == pod["spec"]["nodeName"]
        assert endpoint["targetRef"]["uid"] == pod["metadata"]["uid"]
    assert slice_["addressType"] == "IPv4"
    assert slice_["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    assert slice_["metadata"]["ownerReferences"][0]["name"] == "web"
    all_slices, _ = await api.list(
        "endpointslices.discovery.k8s.io", NS, label_selector="kubernetes.io/service-name=web-all"
    )
    assert all(e["conditions"]["ready"] for e in all_slices[0]["endpoints"])
    pod = await api.get("pods", flipped["metadata"]["name"], NS)
    assert not pod_ready(pod)

    # and back
    await env.cluster.set_pod_ready(NS, flipped["metadata"]["name"], True)
    await wait_for(api, "endpoints", "web", NS, lambda e: _addresses(e) == (ips, []))

    # a terminating Pod (held here by a finalizer) leaves Endpoints but stays in the slice as terminating,
    # serving while it is ready; with publishNotReadyAddresses it stays everywhere and ready
    template = deployment("web", 1)["spec"]["template"]
    solo = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "solo", "namespace": NS, **template["metadata"]},
    }
    solo["metadata"]["finalizers"] = ["example.com/hold"]
    solo["spec"] = template["spec"]
    await api.create("pods", solo, namespace=NS)
    running = await wait_for(api, "pods", "solo", NS, pod_ready)
    assert running is not None
    solo_ip = running["status"]["podIP"]
    await wait_for(api, "endpoints", "web", NS, lambda e: _addresses(e) == (sorted([*ips, solo_ip]), []))
    await api.delete("pods", "solo", NS)
    await wait_for(api, "endpoints", "web", NS, lambda e: _addresses(e) == (ips, []))
    conditions = await _slice_conditions(api, "web", lambda c: c.get(solo_ip, {}).get("terminating") is True)
    assert conditions[solo_ip] == {"ready": False, "serving": True, "terminating": True}
    assert conditions[ips[0]] == {"ready": True, "serving": True, "terminating": False}
    await wait_for(api, "endpoints", "web-all", NS, lambda e: _addresses(e) == (sorted([*ips, solo_ip]), []))
    conditions = await _slice_conditions(
        api, "web-all", lambda c: c.get(solo_ip, {}).get("terminating") is True
    )
    assert conditions[solo_ip] == {"ready": True, "serving": True, "terminating": True}
    await api.patch("pods", "solo", {"metadata": {"finalizers": None}}, namespace=NS)
    await wait_for(api, "endpoints", "web-all", NS, lambda e: _addresses(e) == (ips, []))

    # what someone else changes in the controller's output is put back (it watches what it writes)
    await api.delete("endpoints", "web", NS)
    await wait_for(api, "endpoints", "web", NS, lambda e: _addresses(e) == (ips, []))
    [slice_] = [
        s
        for s in (await api.list("endpointslices.discovery.k8s.io", NS))[0]
        if s["metadata"]["labels"].get("kubernetes.io/service-name") == "web"
    ]
    await api.update("endpointslices.discovery.k8s.io", {**slice_, "endpoints": []})
    restored = await _slice_conditions(api, "web", lambda c: sorted(c) == sorted(ips))
    assert all(c == {"ready": True, "serving": True, "terminating": False} for c in restored.values())

    # deleting the Service removes its Endpoints
    await api.delete("services", "web", NS)
    await wait_for(api, "endpoints", "web", NS, lambda e: e is None)


async def test_load_balancer_status_only_for_the_default_class(env: Env) -> None:
    api = env.api
    await api.create(
        "services",
        service("lb", selector={"app": "x"}, type="LoadBalancer"),
        namespace=NS,
    )
    await api.create(
        "services",
        service("custom", selector={"app": "x"}, type="LoadBalancer", loadBalancerClass="example.com/custom"),
        namespace=NS,
    )
    await api.create("services", service("plain", selector={"app": "x"}), namespace=NS)
    lb = await wait_for(
        api,
        "services",
        "lb",
        NS,
        lambda s: bool(s) and bool(s.get("status", {}).get("loadBalancer", {}).get("ingress")),
    )
    assert lb is not None
    first_lb_ip = f"127.{env.cluster.address_block.index}.3.1"
    assert lb["status"]["loadBalancer"]["ingress"] == [{"ip": first_lb_ip, "ipMode": "VIP"}]

    # switching away from LoadBalancer clears the status and frees the address
    await api.patch("services", "lb", {"spec": {"type": "ClusterIP"}}, namespace=NS)
    await wait_for(
        api,
        "services",
        "lb",
        NS,
        lambda s: bool(s) and not (s.get("status", {}).get("loadBalancer") or {}).get("ingress"),
    )
    await api.create("services", service("lb2", selector={"app": "x"}, type="LoadBalancer"), namespace=NS)
    lb2 = await wait_for(
        api,
        "services",
        "lb2",
        NS,
        lambda s: bool(s) and bool(s.get("status", {}).get("loadBalancer", {}).get("ingress")),
    )
    assert lb2 is not None and lb2["status"]["loadBalancer"]["ingress"][0]["ip"] == first_lb_ip
    # the controller works through Services in order on one worker: lb2 being served means "custom" and
    # "plain" (created earlier) were looked at and deliberately left alone
    custom = await api.get("services", "custom", NS)
    assert not (custom.get("status", {}).get("loadBalancer") or {}).get("ingress")
    plain = await api.get("services", "plain", NS)
    assert not (plain.get("status", {}).get("loadBalancer") or {}).get("ingress")
