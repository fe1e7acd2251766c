"""Load-balancer controller: fills ``status.loadBalancer.ingress`` for LoadBalancer Services.

Only Services without ``spec.loadBalancerClass`` are handled (other classes belong to whoever implements them,
e.g. a test acting as a custom controller). Each Service gets one address from the IP pool and/or one from the
hostname pool; allocations are stable while the Service stays a LoadBalancer and are released afterwards.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable
from typing import Any

from kubesim.cluster.base.context import SERVICES, Context
from kubesim.cluster.base.events import EventRecorder
from kubesim.cluster.base.informer import Key
from kubesim.cluster.base.objects import Obj, name_of, uid_of
from kubesim.cluster.base.workqueue import Reconciler

log = logging.getLogger(__name__)


def expand_pool(entries: Iterable[str]) -> list[str]:
    """IPs from ``a.b.c.d``, ``a.b.c.d-a.b.c.e`` ranges and CIDRs (network and broadcast excluded)."""
    result: list[str] = []
    for entry in entries:
        entry = entry.strip()
        if "-" in entry:
            first_text, last_text = entry.split("-", 1)
            first, last = ipaddress.ip_address(first_text.strip()), ipaddress.ip_address(last_text.strip())
            if first.version != last.version or int(last) < int(first):
                raise ValueError(f"invalid address range {entry!r}")
            if int(last) - int(first) > 65536:
                raise ValueError(f"address range {entry!r} is too large")
            result.extend(str(ipaddress.ip_address(n)) for n in range(int(first), int(last) + 1))
        elif "/" in entry:
            network = ipaddress.ip_network(entry, strict=False)
            if network.num_addresses > 65536:
                raise ValueError(f"address range {entry!r} is too large")
            hosts = list(network.hosts()) or list(network)
            result.extend(str(h) for h in hosts)
        else:
            result.append(str(ipaddress.ip_address(entry)))
    return list(dict.fromkeys(result))


class _Pool:
    def __init__(self, values: list[str]) -> None:
        self.values = values
        self.owner: dict[str, str] = {}  # value -> Service uid

    def take(self, uid: str, current: str | None) -> str | None:
        if current is not None and current in self.values and self.owner.get(current) in (None, uid):
            self.owner[current] = uid
            return current
        for value, owner in self.owner.items():
            if owner == uid:
                return value
        for value in self.values:
            if value not in self.owner:
                self.owner[value] = uid
                return value
        return None

    def release(self, uid: str) -> bool:
        """Free the Service's values; True when something was freed."""
        freed = [v for v, o in self.owner.items() if o == uid]
        for value in freed:
            del self.owner[value]
        return bool(freed)


class LoadBalancerController:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.events = EventRecorder(ctx.api, "service-controller")
        self.ips = _Pool(expand_pool(ctx.load_balancer_ips))
        self.hostnames = _Pool(list(dict.fromkeys(ctx.options.load_balancer_hostnames)))
        self.queue: Reconciler[Key] = Reconciler("load-balancer", self._reconcile, workers=1)
        self._uids: dict[Key, str] = {}
        self._waiting: set[Key] = set()
        self._warned: set[str] = set()
        ctx.informer(SERVICES).add_handler(self._on_service)

    def start(self) -> None:
        # adopt what earlier runs allocated before handing out anything new
        for service in self.ctx.informer(SERVICES).items():
            if self._handles(service):
                for entry in (service.get("status", {}).get("loadBalancer") or {}).get("ingress") or []:
                    if entry.get("ip") in self.ips.values:
                        self.ips.owner.setdefault(entry["ip"], uid_of(service))
                    if entry.get("hostname") in self.hostnames.values:
                        self.hostnames.owner.setdefault(entry["hostname"], uid_of(service))
        self.queue.start()
        for service in self.ctx.informer(SERVICES).items():
            self.queue.add((service["metadata"].get("namespace", ""), name_of(service)))

    async def stop(self) -> None:
        await self.queue.stop()

    @staticmethod
    def _handles(service: Obj) -> bool:
        spec = service.get("spec", {})
        return spec.get("type") == "LoadBalancer" and not spec.get("loadBalancerClass")

    def _on_service(self, event: str, service: Obj, old: Obj | None) -> None:
        key = (service["metadata"].get("namespace", ""), name_of(service))
        if event == "DELETED":
            self._release(uid_of(service))
            self._uids.pop(key, None)
            self._waiting.discard(key)
            self._warned.discard(uid_of(service))
            return
        self.queue.add(key)

    async def _reconcile(self, key: Key) -> None:
        service = self.ctx.informer(SERVICES).get(*key)
        if service is None:
            return
        uid = uid_of(service)
        previous_uid = self._uids.get(key)
        if previous_uid and previous_uid != uid:
            self._release(previous_uid)
        self._uids[key] = uid
        current = (service.get("status", {}).get("loadBalancer") or {}).get("ingress") or []
        if not self._handles(service):
            self._release(uid)
            self._waiting.discard(key)
            if current and service.get("spec", {}).get("type") != "LoadBalancer":
                await self._write(service, [])
            return
        current_ip = next((e["ip"] for e in current if e.get("ip")), None)
        current_host = next((e["hostname"] for e in current if e.get("hostname")), None)
        ingress: list[dict[str, Any]] = []
        if self.ips.values:
            ip = self.ips.take(uid, current_ip)
            if ip is not None:
                ingress.append({"ip": ip, "ipMode": "VIP"})
        if self.hostnames.values:
            hostname = self.hostnames.take(uid, current_host)
            if hostname is not None:
                ingress.append({"hostname": hostname})
        if not ingress:
            # waits without a timer: freeing an address requeues every Service still waiting
            self._waiting.add(key)
            if uid not in self._warned:
                self._warned.add(uid)
                await self.events.record(
                    service,
                    "Service",
                    "v1",
                    "Warning",
                    "AllocationFailed",
                    "no load-balancer address left in the pool",
                )
            return
        self._waiting.discard(key)
        self._warned.discard(uid)
        if current == ingress:
            return
        await self._write(service, ingress)
        await self.events.record(
            service, "Service", "v1", "Normal", "EnsuredLoadBalancer", "Ensured load balancer"
        )

    def _release(self, uid: str) -> None:
        freed_ips = self.ips.release(uid)
        freed_hostnames = self.hostnames.release(uid)
        if freed_ips or freed_hostnames:
            for waiting in list(self._waiting):
                self.queue.add(waiting)

    async def _write(self, service: Obj, ingress: list[dict[str, Any]]) -> None:
        await self.ctx.patch_status(SERVICES, service, {"loadBalancer": {"ingress": ingress or None}})
