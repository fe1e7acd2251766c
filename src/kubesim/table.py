"""``meta.k8s.io`` Table rendering: what ``kubectl get`` prints.

Table: the apiserver answers a list/get with a Table when the client asks for
``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``. Columns come from a CRD's ``additionalPrinterColumns``
(evaluated with a small JSONPath subset; only the first match is shown, as the apiserver does), from the built-in printers below (pods, services, nodes, PVCs, PVs, configmaps, secrets,
namespaces, statefulsets, deployments, storageclasses, leases), or default to ``Name`` and ``Age``. Server-side
printing is always "wide": priority-1 columns are included and kubectl hides them unless ``-o wide``.

Printer-column paths are evaluated by `jsonpath.py`; the OpenAPI documents live in `openapi.py`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from kubesim.gofmt import go_text
from kubesim.jsonpath import JSONPathError, evaluate_json_path, parse_json_path

Column = dict[str, Any]
CellFunction = Callable[[dict[str, Any], datetime], Any]

_NAME_COLUMN: Column = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name of the object, unique within its namespace (or the cluster for cluster-scoped kinds).",
    "priority": 0,
}
_AGE_DESCRIPTION = "Time since the object was created (metadata.creationTimestamp)."


# --------------------------------------------------------------------------------------------------------------
# durations and timestamps


def human_duration(seconds: float) -> str:
    """An age as kubectl prints it: ``5s``, ``3m2s``, ``15m``, ``4h10m``, ``20h``, ``3d4h``, ``90d``, ``2y10d``.

    More precision for recent times, coarser for older ones; slightly negative ages (clock skew) read ``0s``.
    """
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        rest = whole % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        years = hours // 24 // 365
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{hours // 24 // 365}y"


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _aware(now: datetime) -> datetime:
    return now if now.tzinfo else now.replace(tzinfo=UTC)


def _age(value: Any, now: datetime) -> str:
    """A timestamp as a ``date`` cell: its age, ``<unknown>`` when absent, ``<invalid>`` when unparsable."""
    if value is None or value == "":
        return "<unknown>"
    parsed = _parse_time(value)
    if parsed is None:
        return "<invalid>"
    return human_duration((_aware(now) - parsed).total_seconds())


def _typed_cell(column_type: str, value: Any, now: datetime) -> Any:
    """Convert a column value to its declared type; ``None`` (an empty cell) when it does not fit."""
    if value is None:
        return None
    match column_type:
        case "integer":
            if isinstance(value, bool):
                return None
            if isinstance(value, int):
                return value
            if isinstance(value, float) and math.isfinite(value):
                return int(value)
        case "number":
            if isinstance(value, int | float) and not isinstance(value, bool):
                return float(value)
        case "boolean":
            if isinstance(value, bool):
                return value
        case "string":
            if isinstance(value, str):
                return value
        case "date":
            if isinstance(value, str):
                return _age(value, now)
    return None


def _json_path_cell(column: Column, obj: dict[str, Any], now: datetime) -> Any:
    steps = column.get("_steps")
    if steps is None:
        try:
            steps = parse_json_path(str(column.get("jsonPath", "")))
        except JSONPathError:
            return None  # an unsupported path shows an empty cell rather than failing the whole list
    results = evaluate_json_path(steps, obj)
    if not results:
        return None
    # Like the apiserver, only the first match counts (a `[*]` column shows the first element).
    value = results[0]
    column_type = str(column.get("type", "string"))
    if column_type == "string":
        if value is None:
            return None
        return value if isinstance(value, str) else go_text(value)
    return _typed_cell(column_type, value, now)


# --------------------------------------------------------------------------------------------------------------
# Table


def table_version(accept_header: str | None) -> str | None:
    """``"v1"``/``"v1beta1"`` if the Accept header asks for a ``meta.k8s.io`` Table as JSON, else ``None``.

    Media ranges are taken in the order given (kubectl lists its preference first).
    """
    for media_range in (accept_header or "").split(","):
        parts = [p.strip() for p in media_range.split(";")]
        if parts[0].lower() not in ("application/json", "*/*", "application/*"):
            continue
        params = {}
        for part in parts[1:]:
            key, _, val = part.partition("=")
            params[key.strip().lower()] = val.strip().strip('"')
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io" and params.get("v") in ("v1", "v1beta1"):
            return params["v"]
    return None


def parse_accept_table(accept_header: str | None) -> bool:
    """Whether the client asks for ``as=Table;g=meta.k8s.io`` (``v=v1`` or ``v1beta1``) in JSON."""
    return table_version(accept_header) is not None


def render_table(
    items: list[dict[str, Any]],
    *,
    columns: list[Column] | None,
    include_object: str = "Metadata",
    now: datetime,
    list_meta: Mapping[str, Any],
    api_version: str = "meta.k8s.io/v1",
) -> dict[str, Any]:
    """A ``Table`` for ``items``: ``Name`` followed by ``columns`` (or ``Age`` when there are none).

    ``columns`` are CRD ``additionalPrinterColumns`` (``name``, ``type``, ``format``, ``description``,
    ``priority``, ``jsonPath``) or ``builtin_columns(...)`` (which compute cells with a ``cell`` function).
    ``include_object``: ``None`` (row ``object`` is null), ``Metadata`` (a ``PartialObjectMetadata``, the default)
    or ``Object`` (the whole object). ``list_meta`` becomes the Table's ``metadata`` (resourceVersion, continue).
    """
    if include_object not in ("None", "Metadata", "Object", ""):
        raise ValueError(f"includeObject must be None, Metadata or Object, not {include_object!r}")
    chosen = list(columns) if columns else [_age_column()]
    prepared = [_prepare(column) for column in chosen]
    definitions = [_NAME_COLUMN, *(_definition(column) for column in prepared)]
    rows = []
    for item in items:
        metadata = item.get("metadata") or {}
        cells = [metadata.get("name", "")]
        for column in prepared:
            cell_fn = column.get("cell")
            cells.append(cell_fn(item, now) if callable(cell_fn) else _json_path_cell(column, item, now))
        rows.append({"cells": cells, "object": _row_object(item, include_object, api_version)})
    return {
        "kind": "Table",
        "apiVersion": api_version,
        "metadata": dict(list_meta),
        "columnDefinitions": definitions,
        "rows": rows,
    }


def _age_column() -> Column:
    return {
        "name": "Age",
        "type": "date",
        "description": _AGE_DESCRIPTION,
        "jsonPath": ".metadata.creationTimestamp",
    }


def _prepare(column: Column) -> Column:
    """Parse a column's JSONPath once per table instead of once per row."""
    if "cell" in column or "jsonPath" not in column:
        return column
    try:
        return {**column, "_steps": parse_json_path(str(column["jsonPath"]))}
    except JSONPathError:
        return column


def _definition(column: Column) -> Column:
    return {
        "name": column.get("name", ""),
        "type": column.get("type", "string"),
        "format": column.get("format", ""),
        "description": column.get("description", ""),
        "priority": int(column.get("priority", 0) or 0),
    }


def _row_object(item: dict[str, Any], include_object: str, api_version: str) -> dict[str, Any] | None:
    if include_object == "None":
        return None
    if include_object == "Object":
        return item
    return {"kind": "PartialObjectMetadata", "apiVersion": api_version, "metadata": item.get("metadata") or {}}


# --------------------------------------------------------------------------------------------------------------
# built-in printers (cells as kubectl shows them)


def _col(name: str, cell: CellFunction, *, type_: str = "string", priority: int = 0, description: str = "") -> Column:
    return {"name": name, "type": type_, "format": "", "description": description, "priority": priority, "cell": cell}


def _age_cell(obj: dict[str, Any], now: datetime) -> str:
    return _age((obj.get("metadata") or {}).get("creationTimestamp"), now)


def _get(obj: Any, *path: str) -> Any:
    for name in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(name)
    return obj


def _or_none(value: Any) -> str:
    return str(value) if value not in (None, "") else "<none>"


def _pod_ready(pod: dict[str, Any], now: datetime) -> str:
    containers = _get(pod, "spec", "containers") or []
    statuses = _get(pod, "status", "containerStatuses") or []
    ready = sum(1 for s in statuses if s.get("ready") and "running" in (s.get("state") or {}))
    return f"{ready}/{len(containers)}"


def _exit_reason(prefix: str, terminated: dict[str, Any]) -> str:
    if terminated.get("reason"):
        return prefix + str(terminated["reason"])
    if terminated.get("signal"):
        return f"{prefix}Signal:{terminated['signal']}"
    return f"{prefix}ExitCode:{terminated.get('exitCode', 0)}"


def _condition_true(obj: dict[str, Any], condition_type: str) -> bool:
    return any(
        c.get("type") == condition_type and c.get("status") == "True" for c in _get(obj, "status", "conditions") or []
    )


def _pod_status(pod: dict[str, Any], now: datetime) -> str:
    """The STATUS column: phase, refined by the reason of the first failing init container or a waiting one."""
    status = pod.get("status") or {}
    reason = str(status.get("reason") or status.get("phase") or "")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"
    init_containers = _get(pod, "spec", "initContainers") or []
    initializing = False
    for i, container in enumerate(status.get("initContainerStatuses") or []):
        state = container.get("state") or {}
        terminated = state.get("terminated")
        waiting = state.get("waiting")
        if terminated and terminated.get("exitCode", 0) == 0:
            continue
        if container.get("started") and i < len(init_containers) and init_containers[i].get("restartPolicy") == "Always":
            continue  # a running sidecar
        if terminated:
            reason = _exit_reason("Init:", terminated)
        elif waiting and waiting.get("reason") and waiting.get("reason") != "PodInitializing":
            reason = f"Init:{waiting['reason']}"
        else:
            reason = f"Init:{i}/{len(init_containers)}"
        initializing = True
        break
    if not initializing or _condition_true(pod, "Initialized"):
        has_running = False
        for container in reversed(status.get("containerStatuses") or []):
            state = container.get("state") or {}
            waiting, terminated = state.get("waiting"), state.get("terminated")
            if waiting and waiting.get("reason"):
                reason = str(waiting["reason"])
            elif terminated and terminated.get("reason"):
                reason = str(terminated["reason"])
            elif terminated:
                reason = _exit_reason("", terminated)
            elif container.get("ready") and "running" in state:
                has_running = True
        if reason == "Completed" and has_running:
            reason = "Running" if _condition_true(pod, "Ready") else "NotReady"
    metadata = pod.get("metadata") or {}
    if metadata.get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason


def _pod_restarts(pod: dict[str, Any], now: datetime) -> str:
    """Total restarts, with the age of the most recent one: ``3 (5m ago)``."""
    restarts = 0
    last: datetime | None = None
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in _get(pod, "status", key) or []:
            restarts += int(container.get("restartCount") or 0)
            finished = _parse_time(_get(container, "lastState", "terminated", "finishedAt"))
            if finished and (last is None or finished > last):
                last = finished
    if last is not None and restarts:
        return f"{restarts} ({human_duration((_aware(now) - last).total_seconds())} ago)"
    return str(restarts)


def _pod_readiness_gates(pod: dict[str, Any], now: datetime) -> str:
    gates = _get(pod, "spec", "readinessGates") or []
    if not gates:
        return "<none>"
    wanted = {g.get("conditionType") for g in gates}
    met = sum(1 for c in _get(pod, "status", "conditions") or [] if c.get("type") in wanted and c.get("status") == "True")
    return f"{met}/{len(gates)}"


_POD_COLUMNS: list[Column] = [
    _col("Ready", _pod_ready, description="The number of ready containers out of all containers."),
    _col("Status", _pod_status, description="The aggregate status of the containers in this pod."),
    _col("Restarts", _pod_restarts, description="The number of times the containers in this pod have restarted."),
    _col("Age", _age_cell, type_="string", description=_AGE_DESCRIPTION),
    _col("IP", lambda p, now: _or_none(_get(p, "status", "podIP")), priority=1, description="The pod's IP address."),
    _col("Node", lambda p, now: _or_none(_get(p, "spec", "nodeName")), priority=1, description="The node the pod runs on."),
    _col("Nominated Node", lambda p, now: _or_none(_get(p, "status", "nominatedNodeName")), priority=1,
         description="The node nominated by the scheduler for preemption."),
    _col("Readiness Gates", _pod_readiness_gates, priority=1, description="Readiness gates met out of all."),
]  # fmt: skip


def _service_external_ip(svc: dict[str, Any], now: datetime) -> str:
    spec = svc.get("spec") or {}
    kind = spec.get("type") or "ClusterIP"
    external_ips = [str(ip) for ip in spec.get("externalIPs") or []]
    if kind in ("ClusterIP", "NodePort"):
        return ",".join(external_ips) if external_ips else "<none>"
    if kind == "LoadBalancer":
        ingress = _get(svc, "status", "loadBalancer", "ingress") or []
        addresses = [str(i.get("ip") or i.get("hostname")) for i in ingress if i.get("ip") or i.get("hostname")]
        addresses += external_ips
        return ",".join(addresses) if addresses else "<pending>"
    if kind == "ExternalName":
        return str(spec.get("externalName") or "")
    return "<unknown>"


def _service_ports(svc: dict[str, Any], now: datetime) -> str:
    ports = []
    for port in _get(svc, "spec", "ports") or []:
        protocol = port.get("protocol") or "TCP"
        if port.get("nodePort"):
            ports.append(f"{port.get('port')}:{port['nodePort']}/{protocol}")
        else:
            ports.append(f"{port.get('port')}/{protocol}")
    return ",".join(ports) if ports else "<none>"


def _selector(svc: dict[str, Any], now: datetime) -> str:
    selector = _get(svc, "spec", "selector") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items())) if selector else "<none>"


_SERVICE_COLUMNS: list[Column] = [
    _col("Type", lambda s, now: str(_get(s, "spec", "type") or "ClusterIP"), description="The type of the service."),
    _col("Cluster-IP", lambda s, now: _or_none(_get(s, "spec", "clusterIP")), description="The cluster IP."),
    _col("External-IP", _service_external_ip, description="External addresses of the service."),
    _col("Port(s)", _service_ports, description="The ports the service exposes."),
    _col("Age", _age_cell, description=_AGE_DESCRIPTION),
    _col("Selector", _selector, priority=1, description="The label selector of the service's pods."),
]


def _node_status(node: dict[str, Any], now: datetime) -> str:
    parts = []
    for condition in _get(node, "status", "conditions") or []:
        if condition.get("type") == "Ready":
            parts = ["Ready" if condition.get("status") == "True" else "NotReady"]
    if not parts:
        parts = ["Unknown"]
    if _get(node, "spec", "unschedulable"):
        parts.append("SchedulingDisabled")
    return ",".join(parts)


def _node_roles(node: dict[str, Any], now: datetime) -> str:
    roles = set()
    for key, value in (_get(node, "metadata", "labels") or {}).items():
        if key.startswith("node-role.kubernetes.io/") and key.split("/", 1)[1]:
            roles.add(key.split("/", 1)[1])
        elif key == "kubernetes.io/role" and value:
            roles.add(str(value))
    return ",".join(sorted(roles)) if roles else "<none>"


def _node_address(address_type: str) -> CellFunction:
    def cell(node: dict[str, Any], now: datetime) -> str:
        for address in _get(node, "status", "addresses") or []:
            if address.get("type") == address_type:
                return str(address.get("address"))
        return "<none>"

    return cell


def _node_info(key: str) -> CellFunction:
    def cell(node: dict[str, Any], now: datetime) -> str:
        return str(_get(node, "status", "nodeInfo", key) or "<unknown>")

    return cell


_NODE_COLUMNS: list[Column] = [
    _col("Status", _node_status, description="Whether the node is Ready."),
    _col("Roles", _node_roles, description="The node's roles from node-role.kubernetes.io/* labels."),
    _col("Age", _age_cell, description=_AGE_DESCRIPTION),
    _col("Version", lambda n, now: str(_get(n, "status", "nodeInfo", "kubeletVersion") or ""), description="Kubelet version."),
    _col("Internal-IP", _node_address("InternalIP"), priority=1, description="The node's internal IP."),
    _col("External-IP", _node_address("ExternalIP"), priority=1, description="The node's external IP."),
    _col("OS-Image", _node_info("osImage"), priority=1, description="The OS image."),
    _col("Kernel-Version", _node_info("kernelVersion"), priority=1, description="The kernel version."),
    _col("Container-Runtime", _node_info("containerRuntimeVersion"), priority=1, description="The container runtime."),
]

_ACCESS_MODES = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}


def _access_modes(modes: Any) -> str:
    given = set(modes or [])
    return ",".join(short for mode, short in _ACCESS_MODES.items() if mode in given)


def _phase_or_terminating(obj: dict[str, Any], now: datetime) -> str:
    if _get(obj, "metadata", "deletionTimestamp"):
        return "Terminating"
    return str(_get(obj, "status", "phase") or "")


def _pvc_bound(value: Callable[[dict[str, Any]], str]) -> CellFunction:
    """Capacity and access modes of a claim are shown only once it is bound to a volume."""

    def cell(pvc: dict[str, Any], now: datetime) -> str:
        return value(pvc) if _get(pvc, "spec", "volumeName") else ""

    return cell


def _storage_class(obj: dict[str, Any], now: datetime) -> str:
    name = _get(obj, "spec", "storageClassName") or _get(
        obj, "metadata", "annotations", "volume.beta.kubernetes.io/storage-class"
    )
    return str(name) if name else "<unset>"


def _unset(*path: str) -> CellFunction:
    def cell(obj: dict[str, Any], now: datetime) -> str:
        value = _get(obj, *path)
        return str(value) if value else "<unset>"

    return cell


_PVC_COLUMNS: list[Column] = [
    _col("Status", _phase_or_terminating, description="The phase of the claim."),
    _col("Volume", lambda c, now: str(_get(c, "spec", "volumeName") or ""), description="The bound volume."),
    _col("Capacity", _pvc_bound(lambda c: str(_get(c, "status", "capacity", "storage") or "")), description="Capacity."),
    _col("Access Modes", _pvc_bound(lambda c: _access_modes(_get(c, "status", "accessModes"))), description="Access modes."),
    _col("StorageClass", _storage_class, description="The storage class."),
    _col("VolumeAttributesClass", _unset("spec", "volumeAttributesClassName"), description="The volume attributes class."),
    _col("Age", _age_cell, description=_AGE_DESCRIPTION),
    _col("VolumeMode", _unset("spec", "volumeMode"), priority=1, description="Filesystem or Block."),
]


def _pv_claim(pv: dict[str, Any], now: datetime) -> str:
    ref = _get(pv, "spec", "claimRef") or {}
    if not ref.get("name"):
        return ""
    return f"{ref.get('namespace', '')}/{ref['name']}"


_PV_COLUMNS: list[Column] = [
    _col("Capacity", lambda v, now: str(_get(v, "spec", "capacity", "storage") or ""), description="Capacity."),
    _col("Access Modes", lambda v, now: _access_modes(_get(v, "spec", "accessModes")), description="Access modes."),
    _col("Reclaim Policy", lambda v, now: str(_get(v, "spec", "persistentVolumeReclaimPolicy") or ""),
         description="What happens to the volume when its claim is deleted."),
    _col("Status", _phase_or_terminating, description="The phase of the volume."),
    _col("Claim", _pv_claim, description="The bound claim as namespace/name."),
    _col("StorageClass", lambda v, now: str(_get(v, "spec", "storageClassName") or ""), description="The storage class."),
    _col("VolumeAttributesClass", _unset("spec", "volumeAttributesClassName"), description="The volume attributes class."),
    _col("Reason", lambda v, now: str(_get(v, "status", "reason") or ""), description="Why the volume is in its phase."),
    _col("Age", _age_cell, description=_AGE_DESCRIPTION),
    _col("VolumeMode", _unset("spec", "volumeMode"), priority=1, description="Filesystem or Block."),
]  # fmt: skip



def _data_count(obj: dict[str, Any], now: datetime) -> int:
    return len(obj.get("data") or {}) + len(obj.get("binaryData") or {})


def _ready_replicas(obj: dict[str, Any], now: datetime) -> str:
    return f"{_get(obj, 'status', 'readyReplicas') or 0}/{_get(obj, 'spec', 'replicas') or 0}"


def _int_at(*path: str) -> CellFunction:
    def cell(obj: dict[str, Any], now: datetime) -> int:
        return int(_get(obj, *path) or 0)

    return cell


def _containers(field_name: str) -> CellFunction:
    def cell(obj: dict[str, Any], now: datetime) -> str:
        containers = _get(obj, "spec", "template", "spec", "containers") or []
        return ",".join(str(c.get(field_name, "")) for c in containers)

    return cell


def _label_selector(obj: dict[str, Any], now: datetime) -> str:
    selector = _get(obj, "spec", "selector") or {}
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
    _col("Data", _data_count, description="The number of data keys."),
    _col("Age", _age_cell, description=_AGE_DESCRIPTION),
]
_SECRET_COLUMNS: list[Column] = [
    _col("Type", lambda o, now: str(o.get("type") or "Opaque"), description="The type of the secret."),
    _col("Data", _data_count, description="The number of data keys."),
    _col("Age", _age_cell, description=_AGE_DESCRIPTION),
]
_NAMESPACE_COLUMNS: list[Column] = [
    _col("Status", lambda o, now: str(_get(o, "status", "phase") or ""), description="Active or Terminating."),
    _col("Age", _age_cell, description=_AGE_DESCRIPTION),
]
_STATEFULSET_COLUMNS: list[Column] = [
    _col("Ready", _ready_replicas, description="Ready replicas out of desired."),
    _col("Age", _age_cell, description=_AGE_DESCRIPTION),
    _col("Containers", _containers("name"), priority=1, description="Container names."),
    _col("Images", _containers("image"), priority=1, description="Container images."),
]
_DEPLOYMENT_COLUMNS: list[Column] = [
    _col("Ready", _ready_replicas, description="Ready replicas out of desired."),
    _col("Up-to-date", _int_at("status", "updatedReplicas"), type_="integer", description="Updated replicas."),
    _col("Available", _int_at("status", "availableReplicas"), type_="integer", description="Available replicas."),
    _col("Age", _age_cell, description=_AGE_DESCRIPTION),
    _col("Containers", _containers("name"), priority=1, description="Container names."),
    _col("Images", _containers("image"), priority=1, description="Container images."),
    _col("Selector", _label_selector, priority=1, description="The pod selector."),
]
_STORAGECLASS_COLUMNS: list[Column] = [
    _col("Provisioner", lambda o, now: str(o.get("provisioner") or ""), description="The volume plugin."),
    _col("ReclaimPolicy", lambda o, now: str(o.get("reclaimPolicy") or "Delete"), description="Reclaim policy."),
    _col("VolumeBindingMode", lambda o, now: str(o.get("volumeBindingMode") or "Immediate"),
         description="When volumes are bound."),
    _col("AllowVolumeExpansion", lambda o, now: bool(o.get("allowVolumeExpansion")), type_="boolean",
         description="Whether claims may grow."),
    _col("Age", _age_cell, description=_AGE_DESCRIPTION),
]  # fmt: skip
_LEASE_COLUMNS: list[Column] = [
    _col("Holder", lambda o, now: str(_get(o, "spec", "holderIdentity") or ""), description="The current holder."),
    _col("Age", _age_cell, description=_AGE_DESCRIPTION),
]

_BUILTIN_COLUMNS: dict[tuple[str, str], list[Column]] = {
    ("", "Pod"): _POD_COLUMNS,
    ("", "Service"): _SERVICE_COLUMNS,
    ("", "Node"): _NODE_COLUMNS,
    ("", "PersistentVolumeClaim"): _PVC_COLUMNS,
    ("", "PersistentVolume"): _PV_COLUMNS,
    ("", "ConfigMap"): _CONFIGMAP_COLUMNS,
    ("", "Secret"): _SECRET_COLUMNS,
    ("", "Namespace"): _NAMESPACE_COLUMNS,
    ("apps", "StatefulSet"): _STATEFULSET_COLUMNS,
    ("apps", "Deployment"): _DEPLOYMENT_COLUMNS,
    ("storage.k8s.io", "StorageClass"): _STORAGECLASS_COLUMNS,
    ("coordination.k8s.io", "Lease"): _LEASE_COLUMNS,
}


def builtin_columns(group: str, kind: str) -> list[Column] | None:
    """The columns after ``Name`` that kubectl shows for a built-in kind; ``None`` means Name + Age."""
    columns = _BUILTIN_COLUMNS.get((group, kind))
    return list(columns) if columns is not None else None
