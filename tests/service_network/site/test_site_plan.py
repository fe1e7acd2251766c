"""The site controller's plan (``site/plan.py``): one namespace's writes from one snapshot, without I/O; the same
snapshot gives the same plan and is left as it was. And what the typed write results make of the owners' states
(``site/status_writer.py``'s pure half); a failed write fails the statuses, never the plan."""

from __future__ import annotations

import asyncio
import copy
import datetime
from typing import Any

from operator_runtime.errors import ServerError
from service_network.site.bindings import SecretInfo
from service_network.site.certificate_io import CertificateWriter
from service_network.site.compose import SiteInputs
from service_network.site.metrics import ControllerMetrics
from service_network.site.network import LocalNetworkView
from service_network.site.outcomes import UNCHANGED, Failed, Ok, RetryLater, retryable_failures
from service_network.site.plan import NamespacePlan, plan_namespace
from service_network.site.reflectors import SiteCaches
from service_network.site.selector import LabelSelector
from service_network.site.site_keys import ANNOTATION_SITE_BINDING
from service_network.site.snapshot import GrantInput, NamespaceSnapshot
from service_network.site.status_writer import StatusWriter, certificate_state
from service_network.site.writer import PlanWriter

NS = "west"
GV = "skupper.io/v2alpha1"
NOW = datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.UTC)
BINDING = '{"ca":"PEM","url":"https://grants.example:8443"}'


def obj(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": GV, "kind": kind, "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                                                         "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": spec}


def secret_view(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS, "uid": f"s-{name}", "resourceVersion": "7"},
            "type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": "", "ca.crt": ""}}


WEB_POD: dict[str, Any] = {"metadata": {"name": "web-1", "namespace": NS, "uid": "uid-web-1", "labels": {"app": "web"}},
           "status": {"phase": "Running", "podIP": "10.0.0.5", "hostIP": "10.1.0.1",
                      "conditions": [{"type": "Ready", "status": "True"}]}}


def snapshot(**changes: Any) -> NamespaceSnapshot:
    pods = [WEB_POD]

    def select(namespace: str, selector: LabelSelector) -> list[dict[str, Any]]:
        return [p for p in pods if selector.matches(p["metadata"]["labels"])]

    secrets = {"skupper-site-ca": secret_view("skupper-site-ca")}
    inputs = SiteInputs(
        namespace=NS, sites=[obj("Site", "west", {})],
        listeners=[obj("Listener", "db", {"routingKey": "db", "host": "db", "port": 5432})],
        connectors=[obj("Connector", "web", {"routingKey": "web", "port": 8080, "selector": "app=web"})],
        services={}, secrets={k: SecretInfo("kubernetes.io/tls", frozenset({"tls.crt", "tls.key", "ca.crt"}))
                              for k in secrets},
        secret_objects=secrets, router_config_map=None, router_pods=[], select_pods=select,
        view=LocalNetworkView())
    secured = obj("SecuredAccess", "portal", {"selector": {"app": "web"}, "accessType": "local",
                                              "ports": [{"name": "https", "port": 8443, "targetPort": 7000}]})
    fields: dict[str, Any] = dict(
        namespace=NS, now=NOW, site=inputs, secured_accesses=(secured,), secured_pods={"portal": pods},
        certificates=(obj("Certificate", "client", {"ca": "skupper-site-ca", "subject": "client", "client": True}),),
        issuer_cas={"skupper-site-ca": "CA PEM"}, default_ca="skupper-site-ca", binding_annotation=BINDING)
    fields.update(changes)
    return NamespaceSnapshot(**fields)


def test_the_same_snapshot_gives_the_same_plan_and_is_left_as_it_was() -> None:
    assert not asyncio.iscoroutinefunction(plan_namespace)
    given = snapshot()
    before = copy.deepcopy((given.site.sites, given.site.listeners, given.site.connectors, given.secured_accesses,
                            given.certificates, given.site.secret_objects))
    first, second = plan_namespace(given), plan_namespace(given)
    assert first == second
    assert before == (given.site.sites, given.site.listeners, given.site.connectors, given.secured_accesses,
                      given.certificates, given.site.secret_objects)


def test_one_plan_holds_every_path_of_the_namespace() -> None:
    plan = plan_namespace(snapshot())
    assert plan.site is not None and plan.site.active is not None
    assert plan.site.config_map is not None and set(plan.site.services) == {"db"}
    assert {(b.kind, b.name) for b in plan.site.bindings} == {("Listener", "db"), ("Connector", "web")}
    # the SecuredAccess: its Service, then its Certificate and the issuer's CA for its status
    (portal,) = plan.secured
    assert portal.composed.service is not None and portal.composed.service["metadata"]["name"] == "portal"
    assert portal.certificate is not None and portal.certificate["spec"]["ca"] == "skupper-site-ca"
    assert portal.ca == "CA PEM"
    # the client Certificate: issued, its Secret noting where the site key is proven
    (client,) = plan.certificates
    assert client.issue is not None and client.issue.annotations[ANNOTATION_SITE_BINDING] == BINDING
    assert plan.grants_or_tokens is False and plan.bind_links is False


def test_a_namespace_of_another_controller_or_without_a_site_plans_no_site() -> None:
    assert plan_namespace(snapshot(other_controller="skupper/controller")) == NamespacePlan(
        NS, other_controller="skupper/controller")
    bare = snapshot()
    empty = SiteInputs(namespace=NS, sites=[], listeners=[], connectors=[], services={}, secrets={},
                       router_config_map=None, router_pods=[], select_pods=bare.site.select_pods,
                       view=LocalNetworkView())
    plan = plan_namespace(snapshot(site=empty))
    assert plan.site is None and len(plan.secured) == 1 and len(plan.certificates) == 1


def test_a_secured_access_that_is_not_configured_wants_no_certificate() -> None:
    broken = obj("SecuredAccess", "portal", {"selector": {"app": "web"}, "ports": []})
    (item,) = plan_namespace(snapshot(secured_accesses=(broken,))).secured
    assert item.composed.configured.reason == "Error" and item.certificate is None and item.ca is None


def test_what_a_certificate_write_result_makes_of_its_owners_state() -> None:
    body = {"metadata": {"name": "portal"}, "spec": {}}
    owned = {"metadata": {"name": "portal", "ownerReferences": [{"uid": "me"}]}, "status": {"status": "Ready"}}
    assert certificate_state(body, "me", Failed("could not write Certificate portal: boom", True)).message == (
        "could not write Certificate portal: boom")
    assert certificate_state(body, "me", Ok(value=body)).message == "waiting for Certificate portal"
    assert certificate_state(body, "me", Ok(written=False, value=owned)).reason == "Ready"
    assert certificate_state(body, "other", Ok(written=False, value=owned)).message == (
        "Certificate portal already exists in namespace")
    failing = {**owned, "status": {"status": "Error", "message": "no CA"}}
    assert certificate_state(body, "me", Ok(written=False, value=failing)).message == "Certificate portal: no CA"


def test_only_failures_a_retry_may_fix_retry_the_namespace() -> None:
    fixable, final = Failed("503", True), Failed("exists", False)
    assert retryable_failures([UNCHANGED, Ok(), None, final, fixable]) == [fixable]
    assert RetryLater(NS, [fixable]).failures == [fixable]


def test_grants_are_planned_from_what_the_controller_remembers_of_them() -> None:
    grant = obj("AccessGrant", "g", {"expirationWindow": "15m"})
    given = snapshot(grants=(GrantInput(grant, first_seen=NOW, code="generated", url="https://grants/uid-g"),),
                     grant_server_ca="SERVER CA", grants_or_tokens=True)
    (item,) = plan_namespace(given).grants
    assert item.default_redemptions is True          # upstream writes redemptionsAllowed: 1 into the spec
    assert item.status is not None and "redemptions" not in item.status
    assert (item.status["code"], item.status["url"], item.status["ca"]) == (
        "generated", "https://grants/uid-g", "SERVER CA")
    assert item.status["expirationTime"] == "2026-11-26T12:15:00Z" and item.expires_in == 15 * 60
    # the status it has already: nothing to write
    settled = {**grant, "spec": {**grant["spec"], "redemptionsAllowed": 1}, "status": item.status}
    (again,) = plan_namespace(snapshot(grants=(GrantInput(settled, url="https://grants/uid-g"),),
                                       grant_server_ca="SERVER CA", grants_or_tokens=True)).grants
    assert again.default_redemptions is False and again.status is None and again.expires_in == 15 * 60


class FailingApi:
    """An API whose server-side applies of ConfigMaps fail with 503; every other write succeeds and is recorded."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str, str]] = []     # (verb, kind or kind/status, name)
        self.version = 0

    def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        return {**copy.deepcopy(body), "metadata": {**body.get("metadata", {}), "resourceVersion": str(self.version)}}

    async def apply(self, info: Any, body: dict[str, Any], *, name: str, namespace: str | None = None,
                    field_manager: str, force: bool = True, subresource: str | None = None) -> dict[str, Any]:
        if info.kind == "ConfigMap":
            raise ServerError(503, "ServiceUnavailable", "etcd is away")
        self.writes.append(("apply", f"{info.kind}/{subresource}" if subresource else info.kind, name))
        return self._answer(body)

    async def create(self, info: Any, body: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        self.writes.append(("create", info.kind, body["metadata"]["name"]))
        return self._answer(body)


class Events:
    def __init__(self) -> None:
        self.said: list[tuple[str, str, str]] = []

    async def publish(self, regarding: Any, *, type: str, reason: str, note: str, action: str,
                      related: Any = None) -> None:
        self.said.append((regarding["metadata"]["name"], reason, note))


async def test_a_failed_write_fails_the_statuses_without_changing_the_plan() -> None:
    api, events, metrics = FailingApi(), Events(), ControllerMetrics()
    caches = SiteCaches(api, watch_namespace=NS, controller_namespace="")  # type: ignore[arg-type]
    writer = PlanWriter(api, caches, metrics, certificates=CertificateWriter(api))  # type: ignore[arg-type]
    statuses = StatusWriter(api, caches, metrics, events, writer.failed)  # type: ignore[arg-type]
    given = snapshot(secured_accesses=(), certificates=())
    plan = plan_namespace(given)
    before = copy.deepcopy(plan)

    written = await writer.write(plan, given.site.identities)
    await statuses.write_plan(plan, written, NOW)

    assert plan == before                      # the writers composed the failure into statuses, not into the plan
    failures = [f.message for f in retryable_failures(written.all())]
    status_config_map = "could not write ConfigMap skupper-network-status: etcd is away"
    router_config_map = "could not write ConfigMap skupper-router: etcd is away"
    assert failures == [status_config_map, router_config_map]
    assert ("apply", "Listener/status", "db") in api.writes and ("apply", "Site/status", "west") in api.writes
    listener = caches.written_status["Listener"].get(f"{NS}/db")
    site = caches.written_status["Site"].get(f"{NS}/west")
    assert listener is not None and site is not None
    # the router ConfigMap fails every binding; the active Site's Configured says every failed write
    assert (listener["status"]["status"], listener["status"]["message"]) == ("Error", router_config_map)
    assert ("db", "RouterConfigFailed", router_config_map) in events.said
    assert site["status"]["message"] == f"{status_config_map}; {router_config_map}"
    (counted,) = [s for s in next(iter(metrics.write_failures.collect())).samples
                  if s.name.endswith("_total") and s.labels.get("kind") == "ConfigMap"]
    assert counted.value == 2
