"""The objects the node driver writes, built from what it read, without I/O (behaviour.md "Per-volume Listener",
"PodListeners write").

Kept apart from the gRPC service so the desired state of each write can be read (and tested) on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from listener_operator.csi_server.errors import InvalidInput
from listener_operator.csi_server.validation import InvalidVolumeInput, check_port_name
from listener_operator.kinds import LISTENER, POD_LISTENERS
from listener_operator.messages import brief
from operator_runtime.objects import JsonDict, items, meta

__all__ = [
    "listener_ports",
    "per_volume_listener",
    "pod_listeners_entry",
    "pod_volume_for_claim",
]


def listener_ports(pod: Mapping[str, Any]) -> list[JsonDict]:
    """The Listener ports of a per-volume Listener: every containerPort of the regular containers, unnamed ones as ``port-<n>``.

    Identical entries from several containers collapse into one; one name used for different ports or protocols
    is refused, because the Service could not be built from it.
    """
    ports: dict[str, JsonDict] = {}
    for container in items(pod, "spec", "containers"):
        for container_port in items(container, "ports"):
            number = container_port.get("containerPort")
            name = container_port.get("name") or f"port-{number}"
            entry: JsonDict = {"name": name, "port": number}
            if container_port.get("protocol"):
                entry["protocol"] = container_port["protocol"]
            try:
                check_port_name(name)
            except InvalidVolumeInput as error:
                raise InvalidInput(f"container {brief(container.get('name'))} has an unusable port") from error
            previous = ports.get(name)
            if previous is not None and (previous.get("port"), previous.get("protocol", "TCP")) != (
                    number, entry.get("protocol", "TCP")):
                raise InvalidInput(f"port name {brief(name)} is used for different ports in the Pod's containers")
            ports.setdefault(name, entry)
    return list(ports.values())


def pod_volume_for_claim(pod: Mapping[str, Any], claim_name: str) -> str | None:
    """The name of the Pod volume backed by PVC ``claim_name`` (a claim reference or a generic ephemeral volume)."""
    pod_name = meta(pod).name
    for volume in items(pod, "spec", "volumes"):
        claim = volume.get("persistentVolumeClaim")
        if isinstance(claim, Mapping) and claim.get("claimName") == claim_name:
            return str(volume["name"])
        if volume.get("ephemeral") is not None and f"{pod_name}-{volume.get('name')}" == claim_name:
            return str(volume["name"])
    return None


def per_volume_listener(pv: Mapping[str, Any], pvc: Mapping[str, Any], pod: Mapping[str, Any], *, namespace: str,
                        class_name: str) -> JsonDict:
    """The Listener of a ``listener-class`` volume (behaviour.md "Per-volume Listener"): named after the PVC, owned by the PV (no controller
    flag), the PVC's labels copied, ports from the Pod's containers, ``publishNotReadyAddresses: true``."""
    pv_meta, pvc_meta = meta(pv), meta(pvc)
    metadata: JsonDict = {
        "name": pvc_meta.name,
        "namespace": namespace,
        "ownerReferences": [{"apiVersion": "v1", "kind": "PersistentVolume", "name": pv_meta.name,
                             "uid": pv_meta.uid}],
    }
    if pvc_meta.labels:
        metadata["labels"] = dict(pvc_meta.labels)
    return {
        "apiVersion": LISTENER.api_version,
        "kind": LISTENER.kind,
        "metadata": metadata,
        "spec": {"className": class_name, "ports": listener_ports(pod), "publishNotReadyAddresses": True},
    }


def pod_listeners_entry(pod: Mapping[str, Any], volume_name: str, entry: Mapping[str, Any]) -> JsonDict:
    """PodListeners ``pod-<uid>`` owned by the Pod, holding one volume's entry (behaviour.md "PodListeners"); used both to
    create the object and as the merge patch that adds or replaces that entry."""
    pod_meta = meta(pod)
    uid = pod_meta.uid
    return {
        "apiVersion": POD_LISTENERS.api_version,
        "kind": POD_LISTENERS.kind,
        "metadata": {"name": f"pod-{uid}", "namespace": pod_meta.namespace, "ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": pod_meta.name, "uid": uid}]},
        "spec": {"listeners": {volume_name: dict(entry)}},
    }
