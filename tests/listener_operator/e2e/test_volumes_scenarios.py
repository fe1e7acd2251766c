"""Scenarios (1), (3), (4), (5), (6) of listener volumes end to end on kubesim (issue 5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_volumes_harness import (  # noqa: F401 - the fixture is used by name
    CLASSES,
    GV,
    LISTENERS,
    NS,
    POD_LISTENERS,
    VolumeEnv,
    claim_template,
    expected_tree,
    listener_class,
    statefulset,
    volume_env_factory,
    web_container,
)

from listener_operator.constants import ANNOTATION_LISTENER_CLASS, ANNOTATION_LISTENER_NAME


def ephemeral_volume(annotation: str, value: str) -> dict[str, Any]:
    template = claim_template(annotation, value)
    return {"name": "listener", "ephemeral": {"volumeClaimTemplate": {
        "metadata": {"annotations": template["metadata"]["annotations"]}, "spec": template["spec"]}}}


def pod(name: str, *, labels: dict[str, str], volumes: list[dict[str, Any]],
        containers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A bare Pod; by default one web container that mounts ``listener`` when there is such a volume."""
    if containers is None:
        container = web_container()
        if not volumes:
            del container["volumeMounts"]
        containers = [container]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {"containers": containers, "volumes": volumes}}


async def endpoint_pods(env: VolumeEnv, service: str) -> set[str]:
    endpoints = await env.get("endpoints", service)
    names: set[str] = set()
    for subset in (endpoints or {}).get("subsets") or []:
        for address in (subset.get("addresses") or []) + (subset.get("notReadyAddresses") or []):
            names.add((address.get("targetRef") or {}).get("name"))
    return names


async def test_shared_listener_mounted_by_three_pods(volume_env_factory) -> None:  # noqa: F811
    """(1) Every Pod's files match the Listener status; only mounting Pods are endpoints of its Service."""
    env: VolumeEnv = await volume_env_factory(nodes=3)
    await env.api.create(LISTENERS, {
        "apiVersion": GV, "kind": "Listener", "metadata": {"name": "shared", "namespace": NS},
        "spec": {"className": "cluster-internal", "ports": [{"name": "http", "port": 8080}],
                 "extraPodSelectorLabels": {"app": "web"}}}, NS)
    for name in ("web-a", "web-b", "web-c"):
        await env.api.create("pods", pod(name, labels={"app": "web"},
                                         volumes=[ephemeral_volume(ANNOTATION_LISTENER_NAME, "shared")]), NS)
    await env.api.create("pods", pod("intruder", labels={"app": "web"}, volumes=[]), NS)
    status = (await env.wait_for(lambda: _with_addresses(env, "shared"), what="Listener status"))["status"]
    for name in ("web-a", "web-b", "web-c"):
        ready = await env.wait_for(lambda n=name: env.ready_pod(n), what=f"{name} Ready")
        assert await env.pod_files(ready) == expected_tree(status["ingressAddresses"])
        pod_listeners = await env.api.get(POD_LISTENERS, f"pod-{ready['metadata']['uid']}", NS)
        assert pod_listeners["spec"]["listeners"]["listener"] == {"scope": "Cluster",
                                                                  "ingressAddresses": status["ingressAddresses"]}
    await env.wait_for(lambda: env.ready_pod("intruder"), what="intruder Ready")
    await env.wait_for(lambda: _equals(endpoint_pods(env, "shared"), {"web-a", "web-b", "web-c"}),
                       what="endpoints of the shared Service")
    assert "intruder" not in await endpoint_pods(env, "shared")


async def _with_addresses(env: VolumeEnv, name: str) -> dict[str, Any] | None:
    listener = await env.get(LISTENERS, name)
    return listener if listener and (listener.get("status") or {}).get("ingressAddresses") else None


async def _equals(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


async def test_ephemeral_volumes_give_a_listener_per_pod_deleted_with_it(volume_env_factory) -> None:  # noqa: F811
    """(3) Generic ephemeral volumes: one Listener per Pod, gone with the Pod."""
    env: VolumeEnv = await volume_env_factory(nodes=3, preset="stable-nodes", node_external_ips=True)
    await env.api.create("statefulsets.apps", statefulset(
        "eph", 2, volumes=[ephemeral_volume(ANNOTATION_LISTENER_CLASS, "external-stable")]), NS)
    uids: dict[str, str] = {}
    for ordinal in range(2):
        ready = await env.wait_for(lambda o=ordinal: env.ready_pod(f"eph-{o}"), what=f"eph-{ordinal} Ready")
        listener = await env.api.get(LISTENERS, f"eph-{ordinal}-listener", NS)
        node = await env.api.get("nodes", ready["spec"]["nodeName"])
        external = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "ExternalIP")
        assert await env.pod_files(ready) == expected_tree(
            [{"address": external, "ports": listener["status"]["nodePorts"]}])
        uids[f"eph-{ordinal}"] = listener["metadata"]["uid"]

    old_pod = await env.api.get("pods", "eph-0", NS)
    await env.api.delete("pods", "eph-0", NS)
    # the old Listener goes away with its Pod (Pod -> PVC -> PV -> Listener -> Service)
    await env.wait_for(lambda: _listener_uid_differs(env, "eph-0-listener", uids["eph-0"]),
                       what="the deleted Pod's Listener to disappear")
    ready = await env.wait_for(lambda: _replaced(env, "eph-0", old_pod["metadata"]["uid"]), what="eph-0 recreated")
    fresh = await env.api.get(LISTENERS, "eph-0-listener", NS)
    assert fresh["metadata"]["uid"] != uids["eph-0"]
    assert await env.get("services", "eph-0-listener") is not None
    assert (await env.pod_files(ready))["addresses"]
    assert (await env.api.get(LISTENERS, "eph-1-listener", NS))["metadata"]["uid"] == uids["eph-1"]

    await env.api.patch("statefulsets.apps", "eph", {"spec": {"replicas": 0}}, namespace=NS)
    await env.wait_for(lambda: _no_listeners(env), what="every Listener deleted with its Pod")


async def _listener_uid_differs(env: VolumeEnv, name: str, uid: str) -> bool:
    listener = await env.get(LISTENERS, name)
    return listener is None or listener["metadata"]["uid"] != uid


async def _replaced(env: VolumeEnv, name: str, old_uid: str) -> dict[str, Any] | None:
    ready = await env.ready_pod(name)
    return ready if ready is not None and ready["metadata"]["uid"] != old_uid else None


async def _no_listeners(env: VolumeEnv) -> bool:
    items, _ = await env.api.list(LISTENERS, NS)
    return not items


async def test_load_balancer_mount_waits_for_the_address(volume_env_factory) -> None:  # noqa: F811
    """(4) UNAVAILABLE + FailedMount Events until the load balancer has an address, then the files appear."""
    env: VolumeEnv = await volume_env_factory(nodes=2, listener_wait_seconds=0.2)
    # a class the simulated LB controller ignores: this test is the load balancer
    await env.api.create(CLASSES, listener_class("manual-lb", "LoadBalancer", loadBalancerClass="example.com/manual"))
    await env.api.create("statefulsets.apps", statefulset(
        "lb", 1, claim_templates=[claim_template(ANNOTATION_LISTENER_CLASS, "manual-lb")]), NS)
    events = await env.wait_for(lambda: _failed_mounts(env, "lb-0"), what="FailedMount events")
    assert any("code = Unavailable" in text and "Listener default/listener-lb-0 has no addresses yet" in text
               for text in (e.get("message") or e.get("note") or "" for e in events))
    assert await env.ready_pod("lb-0") is None
    # where a person looks: the Pod says what it waits for, the Listener says who waits for it
    assert "ListenerNotReady" in {e.get("reason") for e in await env.events_for("Pod", "lb-0")}
    assert "MountWaiting" in {e.get("reason") for e in await env.events_for("Listener", "listener-lb-0")}
    service = await env.wait_for(lambda: env.get("services", "listener-lb-0"), what="the Listener's Service")
    assert service["spec"]["type"] == "LoadBalancer"
    await env.api.patch("services", "listener-lb-0", {"status": {"loadBalancer": {"ingress": [
        {"ip": "198.51.100.7"}]}}}, namespace=NS, subresource="status")
    ready = await env.wait_for(lambda: env.ready_pod("lb-0"), what="lb-0 Ready after the LB address appeared")
    assert await env.pod_files(ready) == expected_tree([{"address": "198.51.100.7", "ports": {"http": 8080}}])


async def _failed_mounts(env: VolumeEnv, pod_name: str) -> list[dict[str, Any]]:
    return [e for e in await env.events_for("Pod", pod_name) if e.get("reason") == "FailedMount"]


async def test_unpinned_node_port_addresses_follow_the_pod(volume_env_factory) -> None:  # noqa: F811
    """(5) external-unstable (NodePort, not pinned): a rescheduled Pod sees its new node's address."""
    env: VolumeEnv = await volume_env_factory(nodes=2, node_external_ips=True)
    await env.api.create("statefulsets.apps", statefulset(
        "np", 1, claim_templates=[claim_template(ANNOTATION_LISTENER_CLASS, "external-unstable")]), NS)
    first = await env.wait_for(lambda: env.ready_pod("np-0"), what="np-0 Ready")
    listener = await env.api.get(LISTENERS, "listener-np-0", NS)
    node_ports = listener["status"]["nodePorts"]
    first_node = first["spec"]["nodeName"]
    assert await env.pod_files(first) == expected_tree([{"address": await _external_ip(env, first_node),
                                                         "ports": node_ports}])
    pvc = await env.api.get("persistentvolumeclaims", "listener-np-0", NS)
    pv = await env.api.get("persistentvolumes", pvc["spec"]["volumeName"])
    assert not pv["spec"].get("nodeAffinity")
    await env.cluster.cordon_node(first_node)
    await env.api.delete("pods", "np-0", NS)
    moved = await env.wait_for(lambda: _replaced(env, "np-0", first["metadata"]["uid"]), what="np-0 rescheduled")
    assert moved["spec"]["nodeName"] != first_node
    assert await env.pod_files(moved) == expected_tree([{"address": await _external_ip(env, moved["spec"]["nodeName"]),
                                                         "ports": node_ports}])


async def _external_ip(env: VolumeEnv, node_name: str) -> str:
    node = await env.api.get("nodes", node_name)
    return str(next(a["address"] for a in node["status"]["addresses"] if a["type"] == "ExternalIP"))


async def test_path_escape_attempts_are_refused_and_write_nothing(volume_env_factory) -> None:  # noqa: F811
    """(6) A hostile load-balancer hostname and a hostile port name in a Listener status never become paths.

    (Hostile target paths are refused at the socket: tests/csi/test_conformance.py.)"""
    env: VolumeEnv = await volume_env_factory(nodes=1, listener_wait_seconds=0.2)
    escape = Path(env.work_dir) / "escaped"
    await env.api.create(CLASSES, listener_class("manual-lb", "LoadBalancer", loadBalancerClass="example.com/manual"))
    await env.api.create("statefulsets.apps", statefulset(
        "evil", 1, claim_templates=[claim_template(ANNOTATION_LISTENER_CLASS, "manual-lb")]), NS)
    await env.wait_for(lambda: env.get("services", "listener-evil-0"), what="the Listener's Service")
    hostile = "../" * 40 + str(escape).lstrip("/")  # enough levels to reach / from any volume directory
    await env.api.patch("services", "listener-evil-0", {"status": {"loadBalancer": {"ingress": [
        {"hostname": hostile}]}}}, namespace=NS, subresource="status")
    await env.wait_for(lambda: _failed_mount_mentions(env, "evil-0", ("InvalidArgument",
                                                                      "neither an IP address nor a DNS name")),
                       what="FailedMount naming the refusal")
    assert await env.ready_pod("evil-0") is None
    assert not escape.exists()
    evil_pod = await env.api.get("pods", "evil-0", NS)
    target = await env.volume_target(evil_pod, "listener")
    assert not (target / "addresses").exists()

    # Port names become file names. The API server already refuses hostile container port names, so the way in
    # is a Listener status written by someone else than the controller (here: while the operator is stopped).
    await env.api.create(LISTENERS, {
        "apiVersion": GV, "kind": "Listener", "metadata": {"name": "tampered", "namespace": NS},
        "spec": {"className": "cluster-internal", "ports": [{"name": "http", "port": 8080}]}}, NS)
    await env.api.create("statefulsets.apps", statefulset(
        "tamper", 1, claim_templates=[claim_template(ANNOTATION_LISTENER_NAME, "tampered")]), NS)
    first = await env.wait_for(lambda: env.ready_pod("tamper-0"), what="tamper-0 Ready")
    assert (await env.pod_files(first))["addresses"]
    await env.stop_operator()
    await env.api.patch(LISTENERS, "tampered", {"status": {"ingressAddresses": [
        {"address": "10.0.0.1", "addressType": "IP", "ports": {hostile: 8080}}]}},
        namespace=NS, subresource="status")
    await env.api.delete("pods", "tamper-0", NS)
    second = await env.wait_for(lambda: _recreated(env, "tamper-0", first["metadata"]["uid"]),
                                what="tamper-0 recreated")
    await env.wait_for(lambda: _failed_mount_mentions(env, "tamper-0", ("InvalidArgument", "not a valid port name")),
                       what="FailedMount naming the bad port")
    assert await env.ready_pod("tamper-0") is None
    assert not escape.exists()
    assert not (await env.volume_target(second, "listener")).exists()
    pod_listeners = await env.get(POD_LISTENERS, f"pod-{second['metadata']['uid']}")
    assert pod_listeners is None


async def _recreated(env: VolumeEnv, name: str, old_uid: str) -> dict[str, Any] | None:
    pod = await env.get("pods", name)
    return pod if pod is not None and pod["metadata"]["uid"] != old_uid and pod["spec"].get("nodeName") else None


async def _failed_mount_mentions(env: VolumeEnv, pod_name: str, needles: tuple[str, ...]) -> bool:
    for event in await _failed_mounts(env, pod_name):
        text = event.get("message") or event.get("note") or ""
        if all(needle in text for needle in needles):
            return True
    return False


async def test_csi_inline_volume_fails_early_pointing_to_generic_ephemeral(volume_env_factory) -> None:  # noqa: F811
    """CSI inline volumes have no PV: refused with INVALID_ARGUMENT and a hint, before any object is touched."""
    env: VolumeEnv = await volume_env_factory(nodes=1)
    inline = {"name": "listener", "csi": {"driver": "listeners.stackable.tech",
                                          "volumeAttributes": {ANNOTATION_LISTENER_CLASS: "cluster-internal"}}}
    await env.api.create("pods", pod("inline", labels={}, volumes=[inline]), NS)
    await env.wait_for(lambda: _failed_mount_mentions(env, "inline", ("InvalidArgument", "generic ephemeral volume")),
                       what="FailedMount with the hint")
    listeners, _ = await env.api.list(LISTENERS, NS)
    assert listeners == []


async def test_a_port_change_reaches_the_files_of_a_mounted_volume(volume_env_factory) -> None:  # noqa: F811
    """behaviour.md "Volume files stay current": after the Listener's ports change, the running Pod reads the new
    ports in the volume it mounted (upstream leaves the files as they were at mount)."""
    env: VolumeEnv = await volume_env_factory(nodes=1)
    await env.api.create(LISTENERS, {
        "apiVersion": GV, "kind": "Listener", "metadata": {"name": "shared", "namespace": NS},
        "spec": {"className": "cluster-internal", "ports": [{"name": "http", "port": 8080}]}}, NS)
    await env.api.create("pods", pod("web", labels={"app": "web"},
                                     volumes=[ephemeral_volume(ANNOTATION_LISTENER_NAME, "shared")]), NS)
    ready = await env.wait_for(lambda: env.ready_pod("web"), what="web Ready")
    host = "shared.default.svc.cluster.local"
    assert await env.pod_files(ready) == {"default": host,
                                          "addresses": {host: {"address": host, "http": "8080"}}}
    listener = await env.api.get(LISTENERS, "shared", NS)
    listener["spec"]["ports"] = [{"name": "http", "port": 8081}, {"name": "metrics", "port": 9090}]
    await env.api.update(LISTENERS, listener)
    expected = {"default": host, "addresses": {host: {"address": host, "http": "8081", "metrics": "9090"}}}
    assert await env.wait_for(lambda: _files_equal(env, ready, expected), what="the new ports in the volume")
    pod_listeners = await env.api.get(POD_LISTENERS, f"pod-{ready['metadata']['uid']}", NS)
    assert pod_listeners["spec"]["listeners"]["listener"]["ingressAddresses"][0]["ports"] == {
        "http": 8081, "metrics": 9090}


async def _files_equal(env: VolumeEnv, pod_obj: dict[str, Any], expected: dict[str, Any]) -> bool:
    return await env.pod_files(pod_obj) == expected
