"""The built-in printers of the other kinds kubectl users list (services, nodes, claims and volumes, configmaps,
secrets, namespaces, workloads, storage classes, leases) and ``builtin_columns``, the lookup by group and kind."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubesim.table.cells import (
    AGE_DESCRIPTION,
    CellFunction,
    Column,
    age,
    age_cell,
    col,
    dig,
    human_duration,
    or_none,
)
from kubesim.table.pods import POD_COLUMNS


def _service_external_ip(svc: dict[str, Any], now: datetime) -> str:
    spec = svc.get("spec") or {}
    kind = spec.get("type") or "ClusterIP"
    external_ips = [str(ip) for ip in spec.get("externalIPs") or []]
    if kind in ("ClusterIP", "NodePort"):
        return ",".join(external_ips) if external_ips else "<none>"
    if kind == "LoadBalancer":
        ingress = dig(svc, "status", "loadBalancer", "ingress") or []
        addresses = [str(i.get("ip") or i.get("hostname")) for i in ingress if i.get("ip") or i.get("hostname")]
        addresses += external_ips
        return ",".join(addresses) if addresses else "<pending>"
    if kind == "ExternalName":
        return str(spec.get("externalName") or "")
    return "<unknown>"


def _service_ports(svc: dict[str, Any], now: datetime) -> str:
    ports = []
    for port in dig(svc, "spec", "ports") or []:
        protocol = port.get("protocol") or "TCP"
        if port.get("nodePort"):
            ports.append(f"{port.get('port')}:{port['nodePort']}/{protocol}")
        else:
            ports.append(f"{port.get('port')}/{protocol}")
    return ",".join(ports) if ports else "<none>"


def _selector(svc: dict[str, Any], now: datetime) -> str:
    selector = dig(svc, "spec", "selector") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items())) if selector else "<none>"


_SERVICE_COLUMNS: list[Column] = [
    col("Type", lambda s, now: str(dig(s, "spec", "type") or "ClusterIP"), description="The type of the service."),
    col("Cluster-IP", lambda s, now: or_none(dig(s, "spec", "clusterIP")), description="The cluster IP."),
    col("External-IP", _service_external_ip, description="External addresses of the service."),
    col("Port(s)", _service_ports, description="The ports the service exposes."),
    col("Age", age_cell, description=AGE_DESCRIPTION),
    col("Selector", _selector, priority=1, description="The label selector of the service's pods."),
]


def _node_status(node: dict[str, Any], now: datetime) -> str:
    parts = []
    for condition in dig(node, "status", "conditions") or []:
        if condition.get("type") == "Ready":
            parts = ["Ready" if condition.get("status") == "True" else "NotReady"]
    if not parts:
        parts = ["Unknown"]
    if dig(node, "spec", "unschedulable"):
        parts.append("SchedulingDisabled")
    return ",".join(parts)


def _node_roles(node: dict[str, Any], now: datetime) -> str:
    roles = set()
    for key, value in (dig(node, "metadata", "labels") or {}).items():
        if key.startswith("node-role.kubernetes.io/") and key.split("/", 1)[1]:
            roles.add(key.split("/", 1)[1])
        elif key == "kubernetes.io/role" and value:
            roles.add(str(value))
    return ",".join(sorted(roles)) if roles else "<none>"


def _node_address(address_type: str) -> CellFunction:
    def cell(node: dict[str, Any], now: datetime) -> str:
        for address in dig(node, "status", "addresses") or []:
            if address.get("type") == address_type:
                return str(address.get("address"))
        return "<none>"

    return cell


def _node_info(key: str) -> CellFunction:
    def cell(node: dict[str, Any], now: datetime) -> str:
        return str(dig(node, "status", "nodeInfo", key) or "<unknown>")

    return cell


_NODE_COLUMNS: list[Column] = [
    col("Status", _node_status, description="Whether the node is Ready."),
    col("Roles", _node_roles, description="The node's roles from node-role.kubernetes.io/* labels."),
    col("Age", age_cell, description=AGE_DESCRIPTION),
    col("Version", lambda n, now: str(dig(n, "status", "nodeInfo", "kubeletVersion") or ""), description="Kubelet version."),
    col("Internal-IP", _node_address("InternalIP"), priority=1, description="The node's internal IP."),
    col("External-IP", _node_address("ExternalIP"), priority=1, description="The node's external IP."),
    col("OS-Image", _node_info("osImage"), priority=1, description="The OS image."),
    col("Kernel-Version", _node_info("kernelVersion"), priority=1, description="The kernel version."),
    col("Container-Runtime", _node_info("containerRuntimeVersion"), priority=1, description="The container runtime."),
]

_ACCESS_MODES = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}


def _access_modes(modes: Any) -> str:
    given = set(modes or [])
    return ",".join(short for mode, short in _ACCESS_MODES.items() if mode in given)


def _phase_or_terminating(obj: dict[str, Any], now: datetime) -> str:
    if dig(obj, "metadata", "deletionTimestamp"):
        return "Terminating"
    return str(dig(obj, "status", "phase") or "")


def _pvc_bound(value: Callable[[dict[str, Any]], str]) -> CellFunction:
    """Capacity and access modes of a claim are shown only once it is bound to a volume."""

    def cell(pvc: dict[str, Any], now: datetime) -> str:
        return value(pvc) if dig(pvc, "spec", "volumeName") else ""

    return cell


def _storage_class(obj: dict[str, Any], now: datetime) -> str:
    name = dig(obj, "spec", "storageClassName") or dig(
        obj, "metadata", "annotations", "volume.beta.kubernetes.io/storage-class"
    )
    return str(name) if name else "<unset>"


def _unset(*path: str) -> CellFunction:
    def cell(obj: dict[str, Any], now: datetime) -> str:
        value = dig(obj, *path)
        return str(value) if value else "<unset>"

    return cell


_PVC_COLUMNS: list[Column] = [
    col("Status", _phase_or_terminating, description="The phase of the claim."),
    col("Volume", lambda c, now: str(dig(c, "spec", "volumeName") or ""), description="The bound volume."),
    col("Capacity", _pvc_bound(lambda c: str(dig(c, "status", "capacity", "storage") or "")), description="Capacity."),
    col("Access Modes", _pvc_bound(lambda c: _access_modes(dig(c, "status", "accessModes"))), description="Access modes."),
    col("StorageClass", _storage_class, description="The storage class."),
    col("VolumeAttributesClass", _unset("spec", "volumeAttributesClassName"), description="The volume attributes class."),
    col("Age", age_cell, description=AGE_DESCRIPTION),
    col("VolumeMode", _unset("spec", "volumeMode"), priority=1, description="Filesystem or Block."),
]


def _pv_claim(pv: dict[str, Any], now: datetime) -> str:
    ref = dig(pv, "spec", "claimRef") or {}
    if not ref.get("name"):
        return ""
    return f"{ref.get('namespace', '')}/{ref['name']}"


_PV_COLUMNS: list[Column] = [
    col("Capacity", lambda v, now: str(dig(v, "spec", "capacity", "storage") or ""), description="Capacity."),
    col("Access Modes", lambda v, now: _access_modes(dig(v, "spec", "accessModes")), description="Access modes."),
    col("Reclaim Policy", lambda v, now: str(dig(v, "spec", "persistentVolumeReclaimPolicy") or ""),
         description="What happens to the volume when its claim is deleted."),
    col("Status", _phase_or_terminating, description="The phase of the volume."),
    col("Claim", _pv_claim, description="The bound claim as namespace/name."),
    col("StorageClass", lambda v, now: str(dig(v, "spec", "storageClassName") or ""), description="The storage class."),
    col("VolumeAttributesClass", _unset("spec", "volumeAttributesClassName"), description="The volume attributes class."),
    col("Reason", lambda v, now: str(dig(v, "status", "reason") or ""), description="Why the volume is in its phase."),
    col("Age", age_cell, description=AGE_DESCRIPTION),
    col("VolumeMode", _unset("spec", "volumeMode"), priority=1, description="Filesystem or Block."),
]  # fmt: skip


def _data_count(obj: dict[str, Any], now: datetime) -> int:
    return len(obj.get("data") or {}) + len(obj.get("binaryData") or {})


def _ready_replicas(obj: dict[str, Any], now: datetime) -> str:
    return f"{dig(obj, 'status', 'readyReplicas') or 0}/{dig(obj, 'spec', 'replicas') or 0}"


def _int_at(*path: str) -> CellFunction:
    def cell(obj: dict[str, Any], now: datetime) -> int:
        return int(dig(obj, *path) or 0)

    return cell


def _containers(field_name: str) -> CellFunction:
    def cell(obj: dict[str, Any], now: datetime) -> str:
        containers = dig(obj, "spec", "template", "spec", "containers") or []
        return ",".join(str(c.get(field_name, "")) for c in containers)

    return cell


def _label_selector(obj: dict[str, Any], now: datetime) -> str:
    selector = dig(obj, "spec", "selector") or {}
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for req in selector.get("matchExpressions") or []:
        values = ",".join(req.get("values") or [])
        operator = req.get("operator")
        if operator == "Exists":
            parts.append(str(req.get("key")))
        elif operator == "DoesNotExist":
            parts.append(f"!{req.get('key')}")
        else:
            parts.append(f"{req.get('key')} {str(operator).lower()} ({values})")
    return ",".join(parts) if parts else "<none>"


_CONFIGMAP_COLUMNS: list[Column] = [
    col("Data", _data_count, description="The number of data keys."),
    col("Age", age_cell, description=AGE_DESCRIPTION),
]

_SECRET_COLUMNS: list[Column] = [
    col("Type", lambda o, now: str(o.get("type") or "Opaque"), description="The type of the secret."),
    col("Data", _data_count, description="The number of data keys."),
    col("Age", age_cell, description=AGE_DESCRIPTION),
]

_NAMESPACE_COLUMNS: list[Column] = [
    col("Status", lambda o, now: str(dig(o, "status", "phase") or ""), description="Active or Terminating."),
    col("Age", age_cell, description=AGE_DESCRIPTION),
]

_STATEFULSET_COLUMNS: list[Column] = [
    col("Ready", _ready_replicas, description="Ready replicas out of desired."),
    col("Age", age_cell, description=AGE_DESCRIPTION),
    col("Containers", _containers("name"), priority=1, description="Container names."),
    col("Images", _containers("image"), priority=1, description="Container images."),
]

_DEPLOYMENT_COLUMNS: list[Column] = [
    col("Ready", _ready_replicas, description="Ready replicas out of desired."),
    col("Up-to-date", _int_at("status", "updatedReplicas"), type_="integer", description="Updated replicas."),
    col("Available", _int_at("status", "availableReplicas"), type_="integer", description="Available replicas."),
    col("Age", age_cell, description=AGE_DESCRIPTION),
    col("Containers", _containers("name"), priority=1, description="Container names."),
    col("Images", _containers("image"), priority=1, description="Container images."),
    col("Selector", _label_selector, priority=1, description="The pod selector."),
]

_REPLICASET_COLUMNS: list[Column] = [
    col("Desired", _int_at("spec", "replicas"), type_="integer", description="Number of desired pods."),
    col("Current", _int_at("status", "replicas"), type_="integer", description="Number of actually running pods."),
    col("Ready", _int_at("status", "readyReplicas"), type_="integer", description="Number of ready pods."),
    col("Age", age_cell, description=AGE_DESCRIPTION),
    col("Containers", _containers("name"), priority=1, description="Container names."),
    col("Images", _containers("image"), priority=1, description="Container images."),
    col("Selector", _label_selector, priority=1, description="The pod selector."),
]


def _has_condition(obj: dict[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in dig(obj, "status", "conditions") or [])


def _job_status(job: dict[str, Any], now: datetime) -> str:
    if _has_condition(job, "Complete"):
        return "Complete"
    if _has_condition(job, "Failed"):
        return "Failed"
    if dig(job, "metadata", "deletionTimestamp"):
        return "Terminating"
    if _has_condition(job, "Suspended"):
        return "Suspended"
    if _has_condition(job, "FailureTarget"):
        return "FailureTarget"
    return "Running"


def _job_completions(job: dict[str, Any], now: datetime) -> str:
    succeeded = int(dig(job, "status", "succeeded") or 0)
    completions = dig(job, "spec", "completions")
    if isinstance(completions, int):
        return f"{succeeded}/{completions}"
    parallelism = dig(job, "spec", "parallelism") or 0
    return f"{succeeded}/1 of {parallelism}" if isinstance(parallelism, int) and parallelism > 1 else f"{succeeded}/1"


def _job_duration(job: dict[str, Any], now: datetime) -> str:
    started = dig(job, "status", "startTime")
    if not started:
        return ""
    finished = dig(job, "status", "completionTime")
    end = _stamp(finished) if finished else now
    begin = _stamp(started)
    return human_duration((end - begin).total_seconds()) if begin is not None and end is not None else ""


def _stamp(text: Any) -> datetime | None:
    try:
        return datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


_JOB_COLUMNS: list[Column] = [
    col("Status", _job_status, description="Status of the job."),
    col("Completions", _job_completions, description="The completion status of the job."),
    col("Duration", _job_duration, description="Time required to complete the job."),
    col("Age", age_cell, description=AGE_DESCRIPTION),
    col("Containers", _containers("name"), priority=1, description="Container names."),
    col("Images", _containers("image"), priority=1, description="Container images."),
    col("Selector", _label_selector, priority=1, description="The pod selector."),
]

_STORAGECLASS_COLUMNS: list[Column] = [
    col("Provisioner", lambda o, now: str(o.get("provisioner") or ""), description="The volume plugin."),
    col("ReclaimPolicy", lambda o, now: str(o.get("reclaimPolicy") or "Delete"), description="Reclaim policy."),
    col("VolumeBindingMode", lambda o, now: str(o.get("volumeBindingMode") or "Immediate"),
         description="When volumes are bound."),
    col("AllowVolumeExpansion", lambda o, now: bool(o.get("allowVolumeExpansion")), type_="boolean",
         description="Whether claims may grow."),
    col("Age", age_cell, description=AGE_DESCRIPTION),
]  # fmt: skip

_LEASE_COLUMNS: list[Column] = [
    col("Holder", lambda o, now: str(dig(o, "spec", "holderIdentity") or ""), description="The current holder."),
    col("Age", age_cell, description=AGE_DESCRIPTION),
]

def _ds_node_selector(obj: dict[str, Any], now: datetime) -> str:
    selector = dig(obj, "spec", "template", "spec", "nodeSelector") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items())) if selector else "<none>"


_DAEMONSET_COLUMNS: list[Column] = [
    col("Desired", _int_at("status", "desiredNumberScheduled"), type_="integer",
        description="The number of nodes that should be running the daemon pod."),
    col("Current", _int_at("status", "currentNumberScheduled"), type_="integer",
        description="The number of nodes running at least one daemon pod."),
    col("Ready", _int_at("status", "numberReady"), type_="integer",
        description="The number of nodes that should be running the daemon pod and have one ready."),
    col("Up-to-date", _int_at("status", "updatedNumberScheduled"), type_="integer",
        description="The number of nodes running the updated daemon pod."),
    col("Available", _int_at("status", "numberAvailable"), type_="integer",
        description="The number of nodes with a daemon pod available."),
    col("Node Selector", _ds_node_selector, description="The node selector of the daemon pods."),
    col("Age", age_cell, description=AGE_DESCRIPTION),
    col("Containers", _containers("name"), priority=1, description="Container names."),
    col("Images", _containers("image"), priority=1, description="Container images."),
    col("Selector", _label_selector, priority=1, description="The pod selector."),
]


def _event_time(*fields: str) -> CellFunction:
    """The first timestamp set among ``fields`` (core/v1 and events.k8s.io/v1 names), as a duration since."""
    def cell(obj: dict[str, Any], now: datetime) -> str:
        for name in fields:
            value = obj.get(name)
            if value:
                return age(value, now)
        return "<unknown>"
    return cell


def _event_object(obj: dict[str, Any], now: datetime) -> str:
    involved = obj.get("involvedObject") or obj.get("regarding") or {}
    return f"{str(involved.get('kind') or '').lower()}/{involved.get('name') or ''}"


def _event_source(obj: dict[str, Any], now: datetime) -> str:
    source = obj.get("source") or obj.get("deprecatedSource") or {}
    component = source.get("component") or obj.get("reportingController") or ""
    host = source.get("host") or obj.get("reportingInstance") or ""
    return f"{component}, {host}" if component and host else str(component or host or "")


def _event_count(obj: dict[str, Any], now: datetime) -> str:
    series = obj.get("series") or {}
    count = obj.get("count") or obj.get("deprecatedCount") or series.get("count") or 1
    return str(count)


#: Events, as the apiserver prints them: Name is not the first column (NAME_LAST_KINDS)
_EVENT_COLUMNS: list[Column] = [
    col("Last Seen", _event_time("lastTimestamp", "deprecatedLastTimestamp", "eventTime", "firstTimestamp"),
        description="Time when this event was last seen."),
    col("Type", lambda o, now: str(o.get("type") or ""), description="Normal or Warning."),
    col("Reason", lambda o, now: str(o.get("reason") or ""), description="Why the event happened."),
    col("Object", _event_object, description="The object the event is about."),
    col("Subobject", lambda o, now: str((o.get("involvedObject") or o.get("regarding") or {}).get("fieldPath")
                                        or ""), priority=1, description="The part of the object."),
    col("Source", _event_source, priority=1, description="The component reporting the event."),
    col("Message", lambda o, now: str(o.get("message") or o.get("note") or ""),
        description="A human-readable description."),
    col("First Seen", _event_time("firstTimestamp", "deprecatedFirstTimestamp", "eventTime"), priority=1,
        description="Time when this event was first seen."),
    col("Count", _event_count, priority=1, description="How often this event happened."),
    col("Name", lambda o, now: str(dig(o, "metadata", "name") or ""), priority=1, description="The event's name."),
]

#: kinds whose table does not start with Name
NAME_LAST_KINDS = frozenset({("", "Event"), ("events.k8s.io", "Event")})

_BUILTIN_COLUMNS: dict[tuple[str, str], list[Column]] = {
    ("", "Pod"): POD_COLUMNS,
    ("", "Service"): _SERVICE_COLUMNS,
    ("", "Node"): _NODE_COLUMNS,
    ("", "PersistentVolumeClaim"): _PVC_COLUMNS,
    ("", "PersistentVolume"): _PV_COLUMNS,
    ("", "ConfigMap"): _CONFIGMAP_COLUMNS,
    ("", "Secret"): _SECRET_COLUMNS,
    ("", "Namespace"): _NAMESPACE_COLUMNS,
    ("apps", "StatefulSet"): _STATEFULSET_COLUMNS,
    ("apps", "Deployment"): _DEPLOYMENT_COLUMNS,
    ("apps", "DaemonSet"): _DAEMONSET_COLUMNS,
    ("apps", "ReplicaSet"): _REPLICASET_COLUMNS,
    ("batch", "Job"): _JOB_COLUMNS,
    ("", "Event"): _EVENT_COLUMNS,
    ("events.k8s.io", "Event"): _EVENT_COLUMNS,
    ("storage.k8s.io", "StorageClass"): _STORAGECLASS_COLUMNS,
    ("coordination.k8s.io", "Lease"): _LEASE_COLUMNS,
}


def builtin_columns(group: str, kind: str) -> list[Column] | None:
    """The columns after ``Name`` that kubectl shows for a built-in kind; ``None`` means Name + Age."""
    columns = _BUILTIN_COLUMNS.get((group, kind))
    return list(columns) if columns is not None else None
