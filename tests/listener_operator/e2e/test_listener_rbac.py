"""The RBAC of the rendered install (deploy/manifests/) covers every request the controller makes.

kubesim authorizes each HTTP request of the operator against the rules the install binds to the operator's
ServiceAccount - the ClusterRole everywhere, the leader-election Role in the release namespace only - the way the
RBAC authorizer of a real API server would (a server-side apply that creates an object also needs ``create``). The
scenario exercises every kind of write and read the controller does: presets, leader election in the release
namespace, the three Service types, status, orphan deletion, Events.
"""

from __future__ import annotations

from typing import Any

from rendered_install import granted_rules, operator_service_account, rendered_objects
from test_listener_controller import NS, Env, _gone, environment

from kubesim.auth.authn import RequestAttributes, User
from kubesim.store.store import Store

RELEASE_NAMESPACE, _ = operator_service_account()


class ClusterRoleAuthorizer:
    """Allows what the install's bindings allow in the request's namespace; records every decision."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.objects = rendered_objects()
        self.rules: dict[str | None, list[dict[str, Any]]] = {}
        self.used: set[tuple[str, str, str]] = set()
        self.denied: list[tuple[str, str, str, str | None]] = []

    def _allows(self, verb: str, group: str, resource: str, namespace: str | None) -> bool:
        if namespace not in self.rules:
            self.rules[namespace] = granted_rules(namespace, self.objects)
        rules = self.rules[namespace]
        return any(group in rule.get("apiGroups", []) and resource in rule.get("resources", [])
                   and (verb in rule.get("verbs", []) or "*" in rule.get("verbs", []))
                   for rule in rules)

    def _exists(self, attrs: RequestAttributes) -> bool:
        rt = self.store.registry.by_key(f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource)
        return rt is not None and attrs.name is not None and self.store.find(rt, attrs.namespace, attrs.name) is not None

    def authorize(self, attrs: RequestAttributes) -> str | None:
        resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        verbs = [attrs.verb]
        if attrs.verb == "patch" and not attrs.subresource and not self._exists(attrs):
            verbs.append("create")  # a server-side apply that creates the object is authorized as create too
        for verb in verbs:
            if not self._allows(verb, attrs.group, resource, attrs.namespace):
                self.denied.append((verb, attrs.group, resource, attrs.name))
                return f"the ClusterRole does not allow {verb} on {resource}"
            self.used.add((verb, attrs.group, resource))
        return None


def test_the_authorizer_denies_what_the_role_does_not_grant() -> None:
    authorizer = ClusterRoleAuthorizer(Store.__new__(Store))
    user = User("operator")
    assert authorizer.authorize(RequestAttributes(user, "list", "", "services", None, None, None)) is None
    assert authorizer.authorize(RequestAttributes(user, "delete", "", "nodes", None, None, "n1")) is not None
    assert authorizer.authorize(RequestAttributes(user, "update", "", "services", "status", NS, "x")) is not None
    # the leader-election Lease is writable in the release namespace only
    assert authorizer.authorize(RequestAttributes(user, "update", "coordination.k8s.io", "leases", None,
                                                  RELEASE_NAMESPACE, "lease")) is None
    assert authorizer.authorize(RequestAttributes(user, "update", "coordination.k8s.io", "leases", None,
                                                  NS, "lease")) is not None
    assert authorizer.denied == [("delete", "", "nodes", "n1"), ("update", "", "services/status", "x"),
                                 ("update", "coordination.k8s.io", "leases", "lease")]


async def test_every_request_of_the_controller_is_allowed_by_its_cluster_role() -> None:
    async with environment() as env:
        authorizer = ClusterRoleAuthorizer(env.sim.store)
        env.sim.server.authorizer = authorizer
        await _run_scenario(env)
        assert authorizer.denied == []
        expected = {
            ("get", "listeners.stackable.tech", "listenerclasses"),      # presets
            ("create", "listeners.stackable.tech", "listenerclasses"),
            ("watch", "listeners.stackable.tech", "listeners"),
            ("list", "", "nodes"), ("watch", "", "persistentvolumes"),
            ("watch", "discovery.k8s.io", "endpointslices"),
            ("patch", "", "services"), ("create", "", "services"),       # apply that creates
            ("delete", "", "services"),                                  # orphan
            ("patch", "listeners.stackable.tech", "listeners/status"),
            ("create", "events.k8s.io", "events"),
            ("create", "coordination.k8s.io", "leases"), ("update", "coordination.k8s.io", "leases"),
            # CRD maintenance: server-side apply of the (existing) CRDs, then the Established check
            ("patch", "apiextensions.k8s.io", "customresourcedefinitions"),
            ("list", "apiextensions.k8s.io", "customresourcedefinitions"),
        }
        assert expected <= authorizer.used, sorted(expected - authorizer.used)


async def _run_scenario(env: Env) -> None:
    await env.create_node("node-a", ("InternalIP", "192.168.0.1"))
    await env.api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": RELEASE_NAMESPACE}})
    running = await env.start_operator(leader_elect=True, leader_election_namespace=RELEASE_NAMESPACE,
                                       identity="rbac",
                                       lease_duration=3.0, renew_deadline=2.0, retry_period=0.2)
    for name in ("cluster-internal", "external-unstable", "external-stable"):
        await env.wait_for(lambda name=name: env.api.get("listenerclasses.listeners.stackable.tech", name))  # type: ignore[misc]
    web = await env.create_listener("web", "cluster-internal")
    await env.create_listener("np", "external-unstable")
    await env.create_listener("lb", "external-stable")
    await env.create_listener("broken", None)
    await env.create_endpoints("np", ["node-a"])
    await env.create_pinned_pv("pv-np", "np", "node-a")
    service = await env.wait_for(lambda: env.service("lb"))
    service["status"] = {"loadBalancer": {"ingress": [{"ip": "198.51.100.7"}]}}
    await env.api.update("services", service, subresource="status")
    stale = {"apiVersion": "v1", "kind": "Service", "metadata": {
        "name": "web-stale", "namespace": NS,
        "labels": {"app.kubernetes.io/name": "listener", "app.kubernetes.io/instance": "web",
                   "app.kubernetes.io/managed-by": "listeners.stackable.tech_listener"},
        "ownerReferences": [{"apiVersion": "listeners.stackable.tech/v1alpha1", "kind": "Listener", "name": "web",
                             "uid": web["metadata"]["uid"], "controller": True}]},
        "spec": {"type": "ClusterIP", "ports": [{"name": "x", "port": 1}]}}
    await env.api.create("services", stale, NS)

    assert await env.wait_for(lambda: env.addresses("web")) == ["web.ns.svc.cluster.local"]
    assert await env.wait_for(lambda: env.addresses("np")) == ["192.168.0.1"]
    assert await env.wait_for(lambda: env.addresses("lb")) == ["198.51.100.7"]
    await env.wait_for(lambda: env.events("NoListenerClass"))
    await env.wait_for(lambda: _gone(env, "web-stale"))
    assert await running.stop() == 0  # releases the lease
