"""Node objects of the simulated cluster: creation with addresses, readiness and cordoning."""

from __future__ import annotations

from typing import Any

from kubesim.cluster.base.apitypes import Api
from kubesim.cluster.base.objects import now, set_condition
from kubesim.errors import ApiError
from kubesim.version import GIT_VERSION

KUBELET_VERSION = GIT_VERSION  # the API server's version too


def node_addresses(
    name: str, internal_ip: str, external_ip: str | None, internal_dns: str | None
) -> list[dict[str, str]]:
    addresses = [{"type": "InternalIP", "address": internal_ip}]
    if external_ip:
        addresses.append({"type": "ExternalIP", "address": external_ip})
    if internal_dns:
        addresses.append({"type": "InternalDNS", "address": internal_dns})
    addresses.append({"type": "Hostname", "address": name})
    return addresses


def _with_ready(conditions: list[dict[str, Any]], ready: bool, message: str) -> list[dict[str, Any]]:
    if ready:
        return set_condition(conditions, "Ready", "True", "KubeletReady", "kubelet is posting ready status")
    return set_condition(conditions, "Ready", "False", "KubeletNotReady", message)


def _ready_conditions(ready: bool, message: str) -> list[dict[str, Any]]:
    conditions: list[dict[str, Any]] = []
    for kind, reason in (
        ("MemoryPressure", "KubeletHasSufficientMemory"),
        ("DiskPressure", "KubeletHasNoDiskPressure"),
        ("PIDPressure", "KubeletHasSufficientPID"),
    ):
        conditions = set_condition(conditions, kind, "False", reason)
    conditions = _with_ready(conditions, ready, message)
    for cond in conditions:
        cond["lastHeartbeatTime"] = now()
    return conditions


async def create_node(
    api: Api,
    name: str,
    *,
    addresses: list[dict[str, str]],
    labels: dict[str, str] | None = None,
    boot_id: str | None = None,
) -> dict[str, Any]:
    """Create (or take over) the Node object and publish its status as a starting kubelet does (``boot_id``: a new
    one for every start of the node, as after a reboot)."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                **(labels or {}),
            },
        },
        "spec": {},
    }
    try:
        await api.create("nodes", body)
    except ApiError as error:
        if error.code != 409:
            raise
        await api.patch("nodes", name, {"metadata": {"labels": body["metadata"]["labels"]}})
    resources = {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    status = {
        "addresses": addresses,
        "conditions": _ready_conditions(True, ""),
        "capacity": resources,
        "allocatable": resources,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "architecture": "amd64",
            "operatingSystem": "linux",
            "osImage": "kubesim",
            "kernelVersion": "kubesim",
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": KUBELET_VERSION,
            "containerRuntimeVersion": "kubesim://1",
            "machineID": name,
            "systemUUID": name,
            "bootID": boot_id or name,
        },
    }
    return await api.patch("nodes", name, {"status": status}, subresource="status")


async def set_node_ready(api: Api, name: str, ready: bool, message: str = "") -> None:
    node = await api.get("nodes", name)
    conditions = node.get("status", {}).get("conditions") or _ready_conditions(ready, message)
    conditions = _with_ready(conditions, ready, message)
    await api.patch("nodes", name, {"status": {"conditions": conditions}}, subresource="status")


async def set_node_unschedulable(api: Api, name: str, unschedulable: bool) -> None:
    node = await api.get("nodes", name)
    taints = [
        t
        for t in node.get("spec", {}).get("taints") or []
        if t.get("key") != "node.kubernetes.io/unschedulable"
    ]
    if unschedulable:
        taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": now()})
    await api.patch(
        "nodes", name, {"spec": {"unschedulable": unschedulable or None, "taints": taints or None}}
    )
