"""Per-kind defaulting and validation on write: what the apiserver's registry strategies and admission do.

Covers name validation per kind, label syntax, Service defaulting with clusterIP/nodePort allocation,
CustomResourceDefinition acceptance (status conditions) and custom-object schema handling (through `schema.py`).
"""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING, Any

from kubesim import errors, validation
from kubesim.resources import ResourceType, types_from_crd

if TYPE_CHECKING:
    from kubesim.store import Store

Obj = dict[str, Any]

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_RBAC_KINDS = {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
NODE_PORT_RANGE = (30000, 32767)
_KEEP_STATUS_ON_CREATE = {"nodes", "namespaces", "customresourcedefinitions.apiextensions.k8s.io"}


def name_problem(rt: ResourceType, name: str) -> str | None:
    """Why `name` is not a valid name for this kind (None when valid)."""
    if rt.kind in _RBAC_KINDS:
        if name in (".", "..") or "/" in name or "%" in name:
            return f'"{name}" may not be "." or ".." and may not contain "/" or "%"'
        return None
    if rt.kind == "Service":
        if len(name) > 63 or not _DNS1035_LABEL.match(name):
            return (
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
                "alphabetic character, and end with an alphanumeric character (at most 63 characters)"
            )
        return None
    if rt.kind == "Namespace":
        if len(name) > 63 or not _DNS1123_LABEL.match(name):
            return (
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
                "start and end with an alphanumeric character (at most 63 characters)"
            )
        return None
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        return (
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
            "must start and end with an alphanumeric character (at most 253 characters)"
        )
    return None


def _metadata_causes(obj: Obj) -> list[dict[str, Any]]:
    from kubesim import selectors

    causes = []
    meta = obj.get("metadata") or {}
    labels = meta.get("labels")
    if labels is not None and not isinstance(labels, dict):
        causes.append(errors.cause("metadata.labels", "must be a map of strings", "FieldValueTypeInvalid"))
    for k, v in (labels or {}).items():
        try:
            selectors.validate_label_key(k)
            if not isinstance(v, str):
                raise ValueError("label values must be strings")
            selectors.validate_label_value(v)
        except ValueError as e:
            causes.append(errors.cause("metadata.labels", f"Invalid value: {k!r}: {e}"))
    ann = meta.get("annotations")
    if ann is not None and (not isinstance(ann, dict) or not all(isinstance(v, str) for v in ann.values())):
        causes.append(errors.cause("metadata.annotations", "must be a map of strings", "FieldValueTypeInvalid"))
    for ref in meta.get("ownerReferences") or []:
        if not isinstance(ref, dict) or not all(ref.get(k) for k in ("apiVersion", "kind", "name", "uid")):
            causes.append(
                errors.cause("metadata.ownerReferences", "apiVersion, kind, name and uid are required", "FieldValueRequired")
            )
    return causes


def _default_container(c: Any) -> None:
    if not isinstance(c, dict):
        return
    image = str(c.get("image", ""))
    tag = image.rsplit("/", 1)[-1]
    latest = "@" not in image and (":" not in tag or tag.endswith(":latest"))
    c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    c.setdefault("resources", {})
    for p in c.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")


def default_pod(pod: Obj) -> None:
    """The apiserver's Pod defaults that clients read back (phase Pending, restartPolicy, ...)."""
    spec = pod.get("spec")
    if isinstance(spec, dict):
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
        spec.setdefault("securityContext", {})
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        spec.setdefault("priority", 0)
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            _default_container(c)
    status = pod.get("status")
    if not isinstance(status, dict):
        status = pod["status"] = {}
    status.setdefault("phase", "Pending")
    status.setdefault("qosClass", "BestEffort")


def _default_workload(spec: dict[str, Any], kind: str) -> None:
    spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    if kind == "StatefulSet":
        spec.setdefault("podManagementPolicy", "OrderedReady")
        spec.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
        spec.setdefault("persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"})
    else:
        spec.setdefault("progressDeadlineSeconds", 600)
        spec.setdefault("strategy", {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
    template = spec.get("template")
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        pod_spec = template["spec"]
        pod_spec.setdefault("restartPolicy", "Always")
        pod_spec.setdefault("dnsPolicy", "ClusterFirst")
        pod_spec.setdefault("schedulerName", "default-scheduler")
        pod_spec.setdefault("terminationGracePeriodSeconds", 30)
        pod_spec.setdefault("securityContext", {})
        for c in (pod_spec.get("containers") or []) + (pod_spec.get("initContainers") or []):
            _default_container(c)


def _default_kind(rt: ResourceType, obj: Obj) -> None:
    """Field defaults of built-in kinds that clients and controllers read back."""
    if rt.key == "secrets":
        obj.setdefault("type", "Opaque")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    if rt.group == "apps" and rt.kind in ("StatefulSet", "Deployment"):
        _default_workload(spec, rt.kind)
    elif rt.key == "persistentvolumeclaims":
        spec.setdefault("volumeMode", "Filesystem")
    elif rt.key == "persistentvolumes":
        spec.setdefault("volumeMode", "Filesystem")
        spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
    elif rt.key == "services" and "status" not in obj:
        obj["status"] = {"loadBalancer": {}}


class ServiceAllocator:
    """clusterIPs from a CIDR and nodePorts from 30000-32767; allocations survive updates that omit them."""

    def __init__(self, cidr: str = "10.96.0.0/12") -> None:
        self.network = ipaddress.ip_network(cidr, strict=False)
        self._ips: set[str] = set()
        self._ports: set[int] = set()
        self._next_ip = 1
        self._next_port = NODE_PORT_RANGE[0]
        # The first address belongs to the `kubernetes` Service in a real cluster.
        self._ips.add(str(self.network.network_address + 1))

    def ip_in_use(self, ip: str) -> bool:
        return ip in self._ips

    def allocate_ip(self) -> str:
        size = self.network.num_addresses
        for _ in range(size):
            self._next_ip = self._next_ip + 1 if self._next_ip + 1 < size - 1 else 1
            ip = str(self.network.network_address + self._next_ip)
            if ip not in self._ips:
                self._ips.add(ip)
                return ip
        raise errors.ApiError(500, "InternalError", "Internal error occurred: failed to allocate a serviceIP: range is full")

    def allocate_port(self) -> int:
        lo, hi = NODE_PORT_RANGE
        for _ in range(hi - lo + 1):
            port = self._next_port
            self._next_port = port + 1 if port < hi else lo
            if port not in self._ports:
                self._ports.add(port)
                return port
        raise errors.ApiError(500, "InternalError", "Internal error occurred: failed to allocate a nodePort: range is full")

    def release_ip(self, ip: str) -> None:
        self._ips.discard(ip)

    def release_port(self, port: int) -> None:
        self._ports.discard(port)

    def claim_ip(self, ip: str) -> None:
        self._ips.add(ip)

    def claim_port(self, port: int) -> None:
        self._ports.add(port)

    def port_in_use(self, port: int) -> bool:
        return port in self._ports


def _wants_node_ports(spec: dict[str, Any]) -> bool:
    t = spec.get("type")
    return t == "NodePort" or (t == "LoadBalancer" and spec.get("allocateLoadBalancerNodePorts", True) is not False)


def _service_ips(svc: Obj | None) -> list[str]:
    spec = (svc or {}).get("spec") or {}
    return [ip for ip in spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else []) if ip and ip != "None"]


def _service_node_ports(svc: Obj | None) -> list[int]:
    spec = (svc or {}).get("spec") or {}
    out = [p["nodePort"] for p in spec.get("ports") or [] if isinstance(p, dict) and isinstance(p.get("nodePort"), int)]
    if isinstance(spec.get("healthCheckNodePort"), int):
        out.append(spec["healthCheckNodePort"])
    return out


class Admission:
    """Defaulting/validation hooks called by the store before it commits a write."""

    def __init__(self, *, service_cidr: str = "10.96.0.0/12") -> None:
        self.services = ServiceAllocator(service_cidr)

    # Store hooks ---------------------------------------------------------------------------------------

    def admit_create(self, store: Store, rt: ResourceType, obj: Obj, *, dry_run: bool) -> None:
        name = obj["metadata"]["name"]
        causes = []
        problem = name_problem(rt, name)
        if problem:
            causes.append(errors.cause("metadata.name", f"Invalid value: {name!r}: {problem}"))
        if rt.key == "secrets":
            validation.fold_string_data(obj)
        causes += _metadata_causes(obj) + validation.metadata_causes(obj)
        causes += self._kind_causes(store, rt, obj) + validation.builtin_causes(rt, obj, None)
        if causes:
            raise errors.invalid(rt.kind, rt.group, name, causes)
        if rt.kind == "Service" and rt.group == "":
            self._admit_service(rt, None, obj, dry_run=dry_run)
        if rt.has_status and rt.key not in _KEEP_STATUS_ON_CREATE:
            # Registry strategies reset status on create: it is written through /status only.
            obj.pop("status", None)
        if rt.key in ("persistentvolumes", "persistentvolumeclaims"):
            obj["status"] = {"phase": "Pending"}
        if rt.key == "pods":
            default_pod(obj)
        _default_kind(rt, obj)
        if rt.key == "namespaces":
            spec = obj.setdefault("spec", {})
            if isinstance(spec, dict):
                spec.setdefault("finalizers", ["kubernetes"])
            obj["status"] = {"phase": "Active"}

    def admit_update(self, store: Store, rt: ResourceType, old: Obj, new: Obj, *, dry_run: bool, subresource: str | None) -> None:
        name = new["metadata"]["name"]
        if rt.key == "secrets":
            validation.fold_string_data(new)
        causes = _metadata_causes(new) + validation.metadata_causes(new)
        if subresource is None:
            causes += self._kind_causes(store, rt, new) + validation.builtin_causes(rt, new, old)
        elif rt.schema is not None:
            causes += self._custom_causes(rt, new, status_only=True)
        if causes:
            raise errors.invalid(rt.kind, rt.group, name, causes)
        if rt.kind == "Service" and rt.group == "" and subresource is None:
            self._admit_service(rt, old, new, dry_run=dry_run)
        if subresource is None:
            _default_kind(rt, new)
        if rt.key == "namespaces" and not old["metadata"].get("deletionTimestamp"):
            new["status"] = dict(new.get("status") or {}, phase="Active")

    def released(self, store: Store, rt: ResourceType, obj: Obj) -> None:
        """An object is gone: free what it held."""
        if rt.kind == "Service" and rt.group == "":
            for ip in _service_ips(obj):
                self.services.release_ip(ip)
            for port in _service_node_ports(obj):
                self.services.release_port(port)

    # Kinds ------------------------------------------------------------------------------------------------

    def _kind_causes(self, store: Store, rt: ResourceType, obj: Obj) -> list[dict[str, Any]]:
        if rt.crd_name is not None and rt.schema is not None:
            return self._custom_causes(rt, obj, status_only=False)
        if rt.key == "customresourcedefinitions.apiextensions.k8s.io":
            return self._crd_causes(store, obj)
        return []

    def _custom_causes(self, rt: ResourceType, obj: Obj, *, status_only: bool) -> list[dict[str, Any]]:
        """Prune, default and validate a custom object against its CRD schema (in place)."""
        try:
            from kubesim import schema as crd_schema
        except ImportError:
            return []
        assert rt.schema is not None
        meta = obj.get("metadata")
        for fn_name in ("prune", "apply_defaults"):
            fn = getattr(crd_schema, fn_name, None)
            if fn is not None:
                result = fn(obj, rt.schema)
                if isinstance(result, dict) and result is not obj:
                    obj.clear()
                    obj.update(result)
        if meta is not None:
            obj["metadata"] = meta
        validate = getattr(crd_schema, "validate", None)
        if validate is None:
            return []
        causes: list[dict[str, Any]] = list(validate(obj, rt.schema))
        return causes

    def _crd_causes(self, store: Store, crd: Obj) -> list[dict[str, Any]]:
        causes = []
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        group = spec.get("group") or ""
        plural = names.get("plural") or ""
        if not group:
            causes.append(errors.cause("spec.group", "Required value", "FieldValueRequired"))
        if not plural:
            causes.append(errors.cause("spec.names.plural", "Required value", "FieldValueRequired"))
        if not names.get("kind"):
            causes.append(errors.cause("spec.names.kind", "Required value", "FieldValueRequired"))
        if spec.get("scope") not in ("Namespaced", "Cluster"):
            causes.append(errors.cause("spec.scope", 'Unsupported value: must be "Namespaced" or "Cluster"', "FieldValueNotSupported"))
        name = crd["metadata"]["name"]
        if group and plural and name != f"{plural}.{group}":
            causes.append(errors.cause("metadata.name", f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group'))
        versions = spec.get("versions") or []
        if not versions:
            causes.append(errors.cause("spec.versions", "Required value", "FieldValueRequired"))
        elif sum(1 for v in versions if v.get("storage")) != 1:
            causes.append(errors.cause("spec.versions", "Invalid value: must have exactly one version marked as storage version"))
        try:
            from kubesim import schema as crd_schema

            check = getattr(crd_schema, "check_crd", None) or getattr(crd_schema, "structural_causes", None)
            if check is not None:
                causes += list(check(crd))
        except ImportError:
            pass
        if not causes:
            existing = store.registry.by_key(f"{plural}.{group}")
            if existing is not None and existing.crd_name is None:
                causes.append(errors.cause("spec.names.plural", f"Invalid value: {plural}.{group} is a built-in resource"))
        if not causes:
            self._accept_crd(crd)
        return causes

    @staticmethod
    def _accept_crd(crd: Obj) -> None:
        """What the CRD controllers do at once: names accepted, Established, storedVersions."""
        spec = crd["spec"]
        status = crd.get("status")
        if not isinstance(status, dict):
            crd["status"] = status = {}
        from kubesim.store import now_iso

        ts = now_iso()
        status["acceptedNames"] = dict(spec["names"], singular=spec["names"].get("singular") or spec["names"]["kind"].lower())
        status["conditions"] = [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": ts},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": ts},
        ]
        stored = list(status.get("storedVersions") or [])
        storage = next((v["name"] for v in spec["versions"] if v.get("storage")), None)
        if storage and storage not in stored:
            stored.append(storage)
        status["storedVersions"] = stored
        types_from_crd(crd)  # raises nothing; keeps the CRD parseable before it is stored

    # Services ---------------------------------------------------------------------------------------------

    def _admit_service(self, rt: ResourceType, old: Obj | None, svc: Obj, *, dry_run: bool) -> None:
        name = svc["metadata"]["name"]
        spec = svc.get("spec")
        if not isinstance(spec, dict):
            spec = svc["spec"] = {}
        old_spec = (old or {}).get("spec") or {}
        spec.setdefault("type", "ClusterIP")
        t = spec["type"]
        if t not in ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"):
            raise errors.invalid(rt.kind, rt.group, name, [errors.cause("spec.type", f'Unsupported value: "{t}"', "FieldValueNotSupported")])
        spec.setdefault("sessionAffinity", "None")
        causes: list[dict[str, Any]] = []
        ports = spec.get("ports")
        if ports is None:
            ports = []
        if not isinstance(ports, list):
            raise errors.invalid(rt.kind, rt.group, name, [errors.cause("spec.ports", "must be a list", "FieldValueTypeInvalid")])
        if not ports and t != "ExternalName" and spec.get("clusterIP") != "None":
            causes.append(errors.cause("spec.ports", "Required value", "FieldValueRequired"))
        seen: set[tuple[int, str]] = set()
        for i, p in enumerate(ports):
            if not isinstance(p, dict) or not isinstance(p.get("port"), int) or not 1 <= p["port"] <= 65535:
                causes.append(errors.cause(f"spec.ports[{i}].port", "Invalid value: must be between 1 and 65535, inclusive"))
                continue
            p.setdefault("protocol", "TCP")
            p.setdefault("targetPort", p["port"])
            if (p["port"], p["protocol"]) in seen:
                causes.append(errors.cause(f"spec.ports[{i}]", f"Duplicate value: {{port: {p['port']}, protocol: {p['protocol']}}}", "FieldValueDuplicate"))
            seen.add((p["port"], p["protocol"]))
            if len(ports) > 1 and not p.get("name"):
                causes.append(errors.cause(f"spec.ports[{i}].name", "Required value", "FieldValueRequired"))
        if t in ("NodePort", "LoadBalancer"):
            spec.setdefault("externalTrafficPolicy", "Cluster")
        else:
            spec.pop("externalTrafficPolicy", None)
        if t == "LoadBalancer":
            spec.setdefault("allocateLoadBalancerNodePorts", True)
        if t != "ExternalName":
            spec.setdefault("internalTrafficPolicy", "Cluster")
        if causes:
            raise errors.invalid(rt.kind, rt.group, name, causes)
        claimed_ips: list[str] = []
        claimed_ports: list[int] = []
        try:
            self._service_ips(rt, name, old_spec, spec, claimed_ips, dry_run)
            self._service_ports(rt, name, old_spec, spec, claimed_ports, dry_run)
        except errors.ApiError:
            for ip in claimed_ips:
                self.services.release_ip(ip)
            for port in claimed_ports:
                self.services.release_port(port)
            raise
        if dry_run:
            for ip in claimed_ips:
                self.services.release_ip(ip)
            for port in claimed_ports:
                self.services.release_port(port)
            return
        # Free what the old version held and the new one no longer does.
        for ip in set(_service_ips(old)) - set(_service_ips(svc)):
            self.services.release_ip(ip)
        for port in set(_service_node_ports(old)) - set(_service_node_ports(svc)):
            self.services.release_port(port)

    def _service_ips(self, rt: ResourceType, name: str, old_spec: dict[str, Any], spec: dict[str, Any], claimed: list[str], dry_run: bool) -> None:
        if spec["type"] == "ExternalName":
            spec.pop("clusterIP", None)
            spec.pop("clusterIPs", None)
            return
        old_ip = old_spec.get("clusterIP")
        ip = spec.get("clusterIP") or (spec.get("clusterIPs") or [None])[0]
        if old_ip and not ip:
            ip = old_ip
        if old_ip and ip != old_ip:
            raise errors.invalid(rt.kind, rt.group, name, [errors.cause("spec.clusterIPs[0]", f'Invalid value: ["{ip}"]: may not change once set', "FieldValueInvalid")])
        if not ip:
            ip = self.services.allocate_ip()
            claimed.append(ip)
        elif ip != "None" and ip != old_ip:
            try:
                addr = ipaddress.ip_address(ip)
            except ValueError:
                raise errors.invalid(rt.kind, rt.group, name, [errors.cause("spec.clusterIPs[0]", f'Invalid value: "{ip}": must be a valid IP address')]) from None
            if addr not in self.services.network:
                raise errors.invalid(rt.kind, rt.group, name, [errors.cause("spec.clusterIPs", f'Invalid value: ["{ip}"]: failed to allocate IP {ip}: provided IP is not in the valid range. The range of valid IPs is {self.services.network}')])
            if self.services.ip_in_use(ip):
                raise errors.invalid(rt.kind, rt.group, name, [errors.cause("spec.clusterIPs", f'Invalid value: ["{ip}"]: failed to allocate IP {ip}: provided IP is already allocated')])
            self.services.claim_ip(ip)
            claimed.append(ip)
        spec["clusterIP"] = ip
        spec["clusterIPs"] = [ip]
        if ip != "None":
            spec.setdefault("ipFamilies", ["IPv4"] if self.services.network.version == 4 else ["IPv6"])
            spec.setdefault("ipFamilyPolicy", "SingleStack")
        else:
            spec.setdefault("ipFamilies", ["IPv4"] if self.services.network.version == 4 else ["IPv6"])
            spec.setdefault("ipFamilyPolicy", "SingleStack")

    def _service_ports(self, rt: ResourceType, name: str, old_spec: dict[str, Any], spec: dict[str, Any], claimed: list[int], dry_run: bool) -> None:
        ports = spec.get("ports") or []
        old_ports = [p for p in old_spec.get("ports") or [] if isinstance(p, dict)]
        old_held = set(_service_node_ports({"spec": old_spec}))
        want = _wants_node_ports(spec)
        if not want and spec["type"] == "ClusterIP":
            for p in ports:
                if old_spec.get("type") in ("NodePort", "LoadBalancer") and p.get("nodePort") in old_held:
                    p.pop("nodePort", None)
                elif p.get("nodePort"):
                    raise errors.invalid(rt.kind, rt.group, name, [errors.cause("spec.ports[0].nodePort", "Forbidden: may not be used when `type` is 'ClusterIP'", "FieldValueForbidden")])
        taken: set[int] = set()
        for i, p in enumerate(ports):
            node_port = p.get("nodePort")
            if node_port is None and want:
                prior = next((o for o in old_ports if o.get("port") == p.get("port") and o.get("protocol", "TCP") == p.get("protocol") and o.get("nodePort")), None)
                if prior is None and p.get("name"):
                    prior = next((o for o in old_ports if o.get("name") == p.get("name") and o.get("nodePort")), None)
                if prior is not None and prior["nodePort"] not in taken:
                    node_port = p["nodePort"] = prior["nodePort"]
            if node_port is None:
                if want:
                    port = self.services.allocate_port()
                    claimed.append(port)
                    p["nodePort"] = port
                    taken.add(port)
                continue
            if not isinstance(node_port, int) or not NODE_PORT_RANGE[0] <= node_port <= NODE_PORT_RANGE[1]:
                raise errors.invalid(rt.kind, rt.group, name, [errors.cause(f"spec.ports[{i}].nodePort", f"Invalid value: {node_port}: provided port is not in the valid range. The range of valid ports is 30000-32767")])
            if node_port in taken:
                raise errors.invalid(rt.kind, rt.group, name, [errors.cause(f"spec.ports[{i}].nodePort", f"Duplicate value: {node_port}", "FieldValueDuplicate")])
            if node_port not in old_held:
                if self.services.port_in_use(node_port):
                    raise errors.invalid(rt.kind, rt.group, name, [errors.cause(f"spec.ports[{i}].nodePort", f"Invalid value: {node_port}: provided port is already allocated")])
                self.services.claim_port(node_port)
                claimed.append(node_port)
            taken.add(node_port)
        if spec["type"] == "LoadBalancer" and spec.get("externalTrafficPolicy") == "Local":
            hc = spec.get("healthCheckNodePort") or old_spec.get("healthCheckNodePort")
            if not hc:
                hc = self.services.allocate_port()
                claimed.append(hc)
            elif hc not in old_held and hc not in taken:
                if self.services.port_in_use(hc):
                    raise errors.invalid(rt.kind, rt.group, name, [errors.cause("spec.healthCheckNodePort", f"Invalid value: {hc}: provided port is already allocated")])
                self.services.claim_port(hc)
                claimed.append(hc)
            spec["healthCheckNodePort"] = hc
        else:
            spec.pop("healthCheckNodePort", None)
