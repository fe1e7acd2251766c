"""kube-proxy for kubesim: Services carry real TCP connections on loopback addresses.

This is test infrastructure, not a network data plane: a user-space asyncio relay inside the kubesim process that
makes every ``clusterIP:port``, ``nodeAddress:nodePort`` and LoadBalancer ``ingressIP:port`` of the cluster a
listening socket forwarding each new connection to one endpoint. It is driven by the shared informers of
Services, EndpointSlices and Nodes (no polling): every change re-evaluates the affected Services with the pure
``rules.service_rules`` and opens, updates or closes listeners to match. Per connection, an endpoint is chosen
round-robin (or pinned per client address with ``sessionAffinity: ClientIP``); a connection whose endpoint left
the Service's EndpointSlices is reset. An address with nothing to forward to is not listened on, so clients get
"connection refused", as kube-proxy's REJECT rules give them. Addresses outside 127.0.0.0/8 are never bound or
dialled; the Service gets a Warning Event saying why.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from dataclasses import dataclass, field

from kubesim.addresses import is_loopback
from kubesim.cluster.base.background import BackgroundTasks
from kubesim.cluster.base.context import ENDPOINT_SLICES, NODES, SERVICES, Context
from kubesim.cluster.base.events import EventRecorder
from kubesim.cluster.base.indexes import SERVICES_BY_TYPE, SLICES_BY_SERVICE, service_type, slice_service
from kubesim.cluster.base.informer import Key
from kubesim.cluster.base.objects import Obj, labels_of, name_of
from kubesim.cluster.base.workqueue import Reconciler, Retry
from kubesim.cluster.proxy.relay import Relay, reset
from kubesim.cluster.proxy.rules import (
    SERVICE_NAME_LABEL,
    SOURCE_BACKEND_NODE,
    SOURCE_CLIENT,
    Endpoint,
    Frontend,
    Node,
    service_rules,
)

log = logging.getLogger(__name__)

Address = tuple[str, int]
CONNECT_TIMEOUT = 5.0
BACKLOG = 1024
MAX_AFFINITY_ENTRIES = 4096
WORKERS = 32


@dataclass
class _Listener:
    owner: Key
    frontend: Frontend
    server: asyncio.Server | None = None
    next_index: int = 0
    affinity: dict[str, tuple[Address, float]] = field(default_factory=dict)

    def choose(self, client_ip: str) -> Endpoint | None:
        backends = self.frontend.backends
        if not backends:
            return None
        seconds = self.frontend.affinity_seconds
        now = time.monotonic()
        if seconds:
            pinned = self.affinity.get(client_ip)
            if pinned is not None and pinned[1] > now:
                match = next((b for b in backends if (b.ip, b.port) == pinned[0]), None)
                if match is not None:
                    self.affinity[client_ip] = (pinned[0], now + seconds)
                    return match
        backend = backends[self.next_index % len(backends)]
        self.next_index += 1
        if seconds:
            if len(self.affinity) >= MAX_AFFINITY_ENTRIES:
                self.affinity = {k: v for k, v in self.affinity.items() if v[1] > now}
            self.affinity[client_ip] = ((backend.ip, backend.port), now + seconds)
        return backend


class _Accepted(asyncio.Protocol):
    """A connection kube-proxy just accepted: pick an endpoint, then hand the transport to a Relay."""

    def __init__(self, proxy: KubeProxy, listener: _Listener) -> None:
        self.proxy = proxy
        self.listener = listener

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()
        peer = transport.get_extra_info("peername")
        client_ip = str(peer[0]) if peer else ""
        backend = self.listener.choose(client_ip)
        if backend is None:
            reset(transport)
            return
        relay = Relay(backend, self.proxy._relay_done)
        transport.set_protocol(relay.client)
        relay.client.connection_made(transport)
        self.proxy._track(self.listener.owner, relay)
        source = self.proxy._source_for(self.listener.frontend, backend, client_ip)
        self.proxy._background.spawn(relay.connect(source, CONNECT_TIMEOUT))

    def connection_lost(self, exc: Exception | None) -> None:
        pass


class KubeProxy:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.events = EventRecorder(ctx.api, "kube-proxy")
        # several workers: opening a listener waits for a turn of the event loop, and when a Pod behind a thousand
        # Services is Ready again, one worker would open their listeners one loop turn after the other
        self.queue: Reconciler[Key] = Reconciler("kube-proxy", self._reconcile, workers=WORKERS)
        self._listeners: dict[Address, _Listener] = {}
        self._owned: dict[Key, set[Address]] = {}
        self._relays: dict[Key, set[Relay]] = {}
        self._relay_owner: dict[Relay, Key] = {}
        self._reported: dict[Key, set[str]] = {}  # messages already sent as Events, per Service
        self._nodes: dict[str, Node] = {}
        self._stopped: set[str] = set()  # nodes that are down: their addresses are not served
        self._background = BackgroundTasks()
        self._running = False
        ctx.informer(SERVICES).add_handler(self._on_service)
        ctx.informer(ENDPOINT_SLICES).add_handler(self._on_slice)
        ctx.informer(ENDPOINT_SLICES).add_index(SLICES_BY_SERVICE, slice_service)
        ctx.informer(SERVICES).add_index(SERVICES_BY_TYPE, service_type)
        ctx.informer(NODES).add_handler(self._on_node)

    # ------------------------------------------------------------------ lifecycle

    def node_running(self, name: str, running: bool) -> None:
        """A node stopped (its kube-proxy with it: nothing answers on its addresses) or started again."""
        if running:
            self._stopped.discard(name)
        elif name in self._stopped:
            return
        else:
            self._stopped.add(name)
        services = self.ctx.informer(SERVICES)
        for service in services.by_index(SERVICES_BY_TYPE, "NodePort") + services.by_index(
            SERVICES_BY_TYPE, "LoadBalancer"
        ):
            self.queue.add(_key(service))

    def start(self) -> None:
        self._running = True
        self._nodes = {name_of(n): Node.from_object(n) for n in self.ctx.informer(NODES).items()}
        self.queue.start()
        for service in self.ctx.informer(SERVICES).items():
            self.queue.add(_key(service))

    async def stop(self) -> None:
        """Close every listener and reset every relayed connection."""
        self._running = False
        await self.queue.stop()
        for listener in self._listeners.values():
            if listener.server is not None:
                listener.server.close()
        for relays in self._relays.values():
            for relay in list(relays):
                relay.abort()
        await self._background.cancel_all()
        for listener in self._listeners.values():
            if listener.server is not None:
                await listener.server.wait_closed()
        self._listeners.clear()
        self._owned.clear()
        self._relays.clear()
        self._relay_owner.clear()

    # ------------------------------------------------------------------- watches

    def _on_service(self, event: str, service: Obj, old: Obj | None) -> None:
        self.queue.add(_key(service))

    def _on_slice(self, event: str, slice_: Obj, old: Obj | None) -> None:
        names = {labels_of(slice_).get(SERVICE_NAME_LABEL)}
        if old is not None:
            names.add(labels_of(old).get(SERVICE_NAME_LABEL))
        namespace = slice_["metadata"].get("namespace", "")
        for name in names - {None}:
            self.queue.add((namespace, str(name)))

    def _on_node(self, event: str, node: Obj, old: Obj | None) -> None:
        name = name_of(node)
        current = None if event == "DELETED" else Node.from_object(node)
        if self._nodes.get(name) == current:
            return
        if current is None:
            self._nodes.pop(name, None)
        else:
            self._nodes[name] = current
        services = self.ctx.informer(SERVICES)
        for service in services.by_index(SERVICES_BY_TYPE, "NodePort") + services.by_index(
            SERVICES_BY_TYPE, "LoadBalancer"
        ):
            self.queue.add(_key(service))

    # ----------------------------------------------------------------- reconcile

    async def _reconcile(self, key: Key) -> None:
        namespace, name = key
        service = self.ctx.informer(SERVICES).get(namespace, name)
        if service is None:
            self._reported.pop(key, None)
            await self._apply(key, {}, set())
            return
        slices = self.ctx.informer(ENDPOINT_SLICES).by_index(SLICES_BY_SERVICE, f"{namespace}/{name}")
        nodes = sorted((n for n in self._nodes.values() if n.name not in self._stopped), key=lambda n: n.name)
        rules = service_rules(service, slices, nodes)
        reported = self._reported.setdefault(key, set())
        for refusal in rules.refusals:
            message = refusal.message()
            if message not in reported:
                reported.add(message)
                log.warning("%s/%s: %s", namespace, name, message)
                await self.events.record(service, "Service", "v1", "Warning", "NotLoopback", message)
        wanted = {(f.ip, f.port): f for f in rules.frontends}
        failures = await self._apply(key, wanted, rules.endpoints)
        for address, error in failures:
            message = f"kube-proxy (kubesim) cannot listen on {address[0]}:{address[1]}: {error}"
            log.warning("%s/%s: %s", namespace, name, message)
            await self.events.record(service, "Service", "v1", "Warning", "FailedToListen", message)
        if failures:
            raise Retry(f"{len(failures)} address(es) not bound")

    async def _apply(
        self, key: Key, wanted: dict[Address, Frontend], endpoints: set[tuple[str, int]]
    ) -> list[tuple[Address, str]]:
        owned = self._owned.setdefault(key, set())
        for address in owned - set(wanted):
            listener = self._listeners.pop(address, None)
            if listener is not None and listener.server is not None:
                listener.server.close()
            owned.discard(address)
        failures: list[tuple[Address, str]] = []
        for address, frontend in wanted.items():
            listener = self._listeners.get(address)
            if listener is not None and listener.owner != key:
                other = f"{listener.owner[0]}/{listener.owner[1]}"
                failures.append((address, f"already served for Service {other}"))
                continue
            if listener is not None:
                listener.frontend = frontend
                continue
            listener = _Listener(key, frontend)
            self._listeners[address] = listener  # claimed before the await: another worker's Service sees it
            owned.add(address)
            try:
                listener.server = await asyncio.get_running_loop().create_server(
                    lambda listener=listener: _Accepted(self, listener),  # type: ignore[misc]
                    sock=_bound_socket(address),
                    backlog=BACKLOG,
                )
            except OSError as error:
                self._listeners.pop(address, None)
                owned.discard(address)
                failures.append((address, error.strerror or str(error)))
                continue
        if not owned:
            self._owned.pop(key, None)
        for relay in list(self._relays.get(key, ())):
            if (relay.endpoint.ip, relay.endpoint.port) not in endpoints:
                relay.abort()
        return failures

    # ------------------------------------------------------------------- relays

    def _source_for(self, frontend: Frontend, backend: Endpoint, client_ip: str) -> str | None:
        if frontend.source == SOURCE_CLIENT:
            source: str | None = client_ip
        elif frontend.source == SOURCE_BACKEND_NODE:
            node = self._nodes.get(backend.node or "")
            source = node.internal_ip if node is not None else None
        else:
            source = frontend.source
        return source if source is not None and is_loopback(source) else None

    def _track(self, key: Key, relay: Relay) -> None:
        self._relays.setdefault(key, set()).add(relay)
        self._relay_owner[relay] = key

    def _relay_done(self, relay: Relay) -> None:
        key = self._relay_owner.pop(relay, None)
        if key is not None:
            relays = self._relays.get(key)
            if relays is not None:
                relays.discard(relay)
                if not relays:
                    del self._relays[key]

    # ------------------------------------------------------------------ queries

    def listening(self) -> dict[Address, tuple[Key, str, list[str]]]:
        """What is served now: address -> (Service key, kind, endpoint Pods) (for tests and debugging)."""
        return {
            address: (item.owner, item.frontend.kind, [b.pod or f"{b.ip}:{b.port}" for b in item.frontend.backends])
            for address, item in self._listeners.items()
        }

    def open_connections(self) -> int:
        return sum(len(r) for r in self._relays.values())


def _bound_socket(address: Address) -> socket.socket:
    """A TCP socket bound to the IPv4 literal ``address`` (not listening yet): no name lookup, so opening a
    Service's listener takes no trip through the loop's executor (a thousand Services regaining an endpoint at once
    would queue behind each other there)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def _key(service: Obj) -> Key:
    return (service["metadata"].get("namespace", ""), name_of(service))


__all__ = ["KubeProxy"]
