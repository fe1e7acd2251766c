"""Endpoints and EndpointSlice controllers for Services with a selector.

A Pod with an IP that matches the selector is a ready address when its ``Ready`` condition is true, otherwise a
not-ready one (ready anyway with ``publishNotReadyAddresses``). Terminating Pods stay in EndpointSlices with
``terminating: true``, ``serving`` = their readiness and ``ready: false`` (unless ``publishNotReadyAddresses``);
Endpoints drop them unless ``publishNotReadyAddresses``, as Kubernetes' two controllers do. Named target
ports are resolved per Pod, so Pods exposing different numbers land in different subsets / slices.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from kubesim.cluster.base.context import ENDPOINT_SLICES, ENDPOINTS, PODS, SERVICES, Context
from kubesim.cluster.base.indexes import SERVICE_NAME_LABEL, SLICES_BY_SERVICE, slice_service
from kubesim.cluster.base.informer import Key
from kubesim.cluster.base.objects import (
    Obj,
    condition_true,
    is_terminating,
    labels_of,
    name_of,
    owner_reference,
    short_hash,
    uid_of,
)
from kubesim.cluster.base.workqueue import Reconciler
from kubesim.errors import ApiError
from kubesim.selectors import selector_from_label_selector_object

log = logging.getLogger(__name__)

MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
MANAGED_BY = "endpointslice-controller.k8s.io"

PortKey = tuple[tuple[str, int, str], ...]  # (name, port, protocol) per Service port


@dataclass(frozen=True)
class Member:
    """One Pod behind the Service and the state both controllers derive their conditions from."""

    pod: Obj
    ready: bool  # the Pod's Ready condition
    terminating: bool

    @property
    def ip(self) -> str:
        return str(self.pod["status"]["podIP"])


def _resolve_ports(service: Obj, pod: Obj) -> PortKey | None:
    ports = []
    containers = pod.get("spec", {}).get("containers") or []
    for port in service.get("spec", {}).get("ports") or []:
        target = port.get("targetPort", port.get("port"))
        protocol = port.get("protocol", "TCP")
        if isinstance(target, str) and not target.isdigit():
            number = next(
                (
                    cp.get("containerPort")
                    for c in containers
                    for cp in c.get("ports") or []
                    if cp.get("name") == target and cp.get("protocol", "TCP") == protocol
                ),
                None,
            )
            if number is None:
                continue
        else:
            number = int(target)
        ports.append((port.get("name", ""), int(number), protocol))
    return tuple(ports)


def _pod_ref(pod: Obj) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "namespace": pod["metadata"].get("namespace", ""),
        "name": name_of(pod),
        "uid": uid_of(pod),
    }


class EndpointsController:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.queue: Reconciler[Key] = Reconciler("endpoints", self._reconcile, workers=2)
        ctx.informer(SERVICES).add_handler(self._on_service)
        ctx.informer(PODS).add_handler(self._on_pod)
        # what we wrote comes back through these; a change by anyone else is repaired
        ctx.informer(ENDPOINTS).add_handler(self._on_endpoints)
        ctx.informer(ENDPOINT_SLICES).add_handler(self._on_slice)
        ctx.informer(ENDPOINT_SLICES).add_index(SLICES_BY_SERVICE, slice_service)

    def start(self) -> None:
        self.queue.start()
        for service in self.ctx.informer(SERVICES).items():
            self.queue.add((service["metadata"].get("namespace", ""), name_of(service)))

    async def stop(self) -> None:
        await self.queue.stop()

    def _on_service(self, event: str, service: Obj, old: Obj | None) -> None:
        self.queue.add((service["metadata"].get("namespace", ""), name_of(service)))

    def _on_endpoints(self, event: str, endpoints: Obj, old: Obj | None) -> None:
        namespace = endpoints["metadata"].get("namespace", "")
        service = self.ctx.informer(SERVICES).get(namespace, name_of(endpoints))
        if service is not None and service.get("spec", {}).get("selector"):  # others are not ours
            self.queue.add((namespace, name_of(endpoints)))

    def _on_slice(self, event: str, slice_: Obj, old: Obj | None) -> None:
        labels = labels_of(slice_)
        if labels.get(MANAGED_BY_LABEL) == MANAGED_BY and labels.get(SERVICE_NAME_LABEL):
            self.queue.add((slice_["metadata"].get("namespace", ""), labels[SERVICE_NAME_LABEL]))

    def _on_pod(self, event: str, pod: Obj, old: Obj | None) -> None:
        namespace = pod["metadata"].get("namespace", "")
        label_sets = [labels_of(pod)] + ([labels_of(old)] if old is not None else [])
        for service in self.ctx.informer(SERVICES).items(namespace):
            selector = service.get("spec", {}).get("selector")
            if not selector:
                continue
            if any(all(labels.get(k) == v for k, v in selector.items()) for labels in label_sets):
                self.queue.add((namespace, name_of(service)))

    async def _reconcile(self, key: Key) -> None:
        namespace, name = key
        service = self.ctx.informer(SERVICES).get(namespace, name)
        if service is None or not service.get("spec", {}).get("selector"):
            if service is None:
                await self._delete_owned(namespace, name)
            return
        spec = service["spec"]
        selector = selector_from_label_selector_object({"matchLabels": spec["selector"]})
        publish_not_ready = bool(spec.get("publishNotReadyAddresses"))
        groups: dict[PortKey, list[Member]] = {}
        for pod in self.ctx.informer(PODS).items(namespace):
            if not pod.get("status", {}).get("podIP"):
                continue
            if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                continue
            if not selector.matches(labels_of(pod)):
                continue
            ports = _resolve_ports(service, pod)
            if ports is None:
                continue
            member = Member(pod, condition_true(pod, "Ready"), is_terminating(pod))
            groups.setdefault(ports, []).append(member)
        # the slices first: kube-proxy follows them (Kubernetes runs the two controllers side by side)
        await self._write_slices(service, groups, publish_not_ready)
        await self._write_endpoints(service, groups, publish_not_ready)

    async def _write_endpoints(
        self, service: Obj, groups: dict[PortKey, list[Member]], publish_not_ready: bool
    ) -> None:
        namespace, name = service["metadata"].get("namespace", ""), name_of(service)
        subsets = []
        for ports, members in sorted(groups.items()):
            ready: list[dict[str, Any]] = []
            not_ready: list[dict[str, Any]] = []
            for member in sorted(members, key=lambda m: m.ip):
                if member.terminating and not publish_not_ready:
                    continue
                pod = member.pod
                address: dict[str, Any] = {"ip": member.ip, "targetRef": _pod_ref(pod)}
                if pod.get("spec", {}).get("nodeName"):
                    address["nodeName"] = pod["spec"]["nodeName"]
                if pod.get("spec", {}).get("hostname"):
                    address["hostname"] = pod["spec"]["hostname"]
                (ready if member.ready or publish_not_ready else not_ready).append(address)
            if not ready and not not_ready:
                continue
            subset: dict[str, Any] = {"ports": [_port(n, p, proto) for n, p, proto in ports]}
            if ready:
                subset["addresses"] = ready
            if not_ready:
                subset["notReadyAddresses"] = not_ready
            subsets.append(subset)
        labels = labels_of(service)
        existing = self.ctx.informer(ENDPOINTS).get(namespace, name)
        if existing is None:
            metadata: dict[str, Any] = {"name": name, "namespace": namespace}
            if labels:
                metadata["labels"] = labels
            body: Obj = {"apiVersion": "v1", "kind": "Endpoints", "metadata": metadata}
            if subsets:
                body["subsets"] = subsets
            await _create_ignoring_conflict(self.ctx, ENDPOINTS, body, namespace)
            return
        if (existing.get("subsets") or []) == subsets and labels_of(existing) == labels:
            return
        updated = {**existing, "subsets": subsets}
        updated["metadata"] = {**existing["metadata"], "labels": labels}
        await self.ctx.api.update(ENDPOINTS, updated)

    async def _write_slices(
        self, service: Obj, groups: dict[PortKey, list[Member]], publish_not_ready: bool
    ) -> None:
        namespace, name = service["metadata"].get("namespace", ""), name_of(service)
        wanted: dict[str, Obj] = {}
        for ports, members in sorted(groups.items()):
            slice_name = f"{name}-{short_hash(name, repr(ports), length=5)}"
            endpoints = []
            for member in sorted(members, key=lambda m: m.ip):
                pod = member.pod
                endpoint: dict[str, Any] = {
                    "addresses": [member.ip],
                    "conditions": {
                        "ready": publish_not_ready or (member.ready and not member.terminating),
                        "serving": member.ready,
                        "terminating": member.terminating,
                    },
                    "targetRef": _pod_ref(pod),
                }
                if pod.get("spec", {}).get("nodeName"):
                    endpoint["nodeName"] = pod["spec"]["nodeName"]
                if pod.get("spec", {}).get("hostname"):
                    endpoint["hostname"] = pod["spec"]["hostname"]
                endpoints.append(endpoint)
            wanted[slice_name] = _slice_body(service, slice_name, endpoints, ports)
        if not wanted:  # a Service without endpoints still gets one empty slice, as in Kubernetes
            slice_name = f"{name}-{short_hash(name, 'empty', length=5)}"
            wanted[slice_name] = _slice_body(service, slice_name, [], ())
        by_name = {name_of(s): s for s in self._owned_slices(namespace, name)}
        for slice_name, body in wanted.items():
            current = by_name.pop(slice_name, None)
            if current is None:
                await _create_ignoring_conflict(self.ctx, ENDPOINT_SLICES, body, namespace)
                continue
            if (
                all(current.get(k) == body[k] for k in ("endpoints", "ports", "addressType"))
                and labels_of(current) == body["metadata"]["labels"]
            ):
                continue
            updated = {**current, **{k: body[k] for k in ("endpoints", "ports", "addressType")}}
            updated["metadata"] = {**current["metadata"], "labels": body["metadata"]["labels"]}
            await self.ctx.api.update(ENDPOINT_SLICES, updated)
        for stale in by_name:
            await _delete_ignoring_missing(self.ctx, ENDPOINT_SLICES, stale, namespace)

    def _owned_slices(self, namespace: str, service: str) -> list[Obj]:
        return [
            s
            for s in self.ctx.informer(ENDPOINT_SLICES).by_index(SLICES_BY_SERVICE, f"{namespace}/{service}")
            if labels_of(s).get(MANAGED_BY_LABEL) == MANAGED_BY
        ]

    async def _delete_owned(self, namespace: str, name: str) -> None:
        await _delete_ignoring_missing(self.ctx, ENDPOINTS, name, namespace)
        for item in self._owned_slices(namespace, name):
            await _delete_ignoring_missing(self.ctx, ENDPOINT_SLICES, name_of(item), namespace)


def _slice_body(service: Obj, slice_name: str, endpoints: list[dict[str, Any]], ports: PortKey) -> Obj:
    name = name_of(service)
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": slice_name,
            "namespace": service["metadata"].get("namespace", ""),
            "labels": {**labels_of(service), SERVICE_NAME_LABEL: name, MANAGED_BY_LABEL: MANAGED_BY},
            "ownerReferences": [owner_reference(service, "v1", "Service")],
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [_port(n, p, proto) for n, p, proto in ports],
    }


def _port(name: str, port: int, protocol: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"port": port, "protocol": protocol}
    if name:
        entry["name"] = name
    return entry


async def _create_ignoring_conflict(ctx: Context, resource: str, body: Obj, namespace: str) -> None:
    try:
        await ctx.api.create(resource, body, namespace=namespace)
    except ApiError as error:
        if error.code != 409:
            raise


async def _delete_ignoring_missing(ctx: Context, resource: str, name: str, namespace: str) -> None:
    try:
        await ctx.api.delete(resource, name, namespace)
    except ApiError as error:
        if error.code != 404:
            raise
