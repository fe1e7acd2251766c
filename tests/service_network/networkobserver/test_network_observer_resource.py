"""The NetworkObserver resource (``observability.skupper.io/v2alpha1``): its values checked as upstream's chart
takes them (pure), the objects and status composed (pure), the observer's own access checks (htpasswd, router
discovery), and end to end on kubesim with the site controller: the observer Pod deployed by the resource serves
the API over TLS with basic authentication and sees the site's router; bad values and foreign objects are refused
with the field named, in the status and an Event, and nothing deployed is lost; deleting the resource removes what
it made."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from e2e_support import ECHO, greeting
from site_support import ECHO_IMAGE, SiteEnv, site_environment

from kubesim.errors import ApiError
from service_network.networkobserver.compose import ObserverOptions, conditions, manifest, observer_objects
from service_network.networkobserver.values import ValuesError, parse_values
from service_network.observer.access import Htpasswd, check_hash, parse_htpasswd
from service_network.observer.routers import parse_router_urls, router_urls

NO = "networkobservers.observability.skupper.io"
NO_GV = "observability.skupper.io/v2alpha1"
OPTIONS = ObserverOptions(image="localhost/listener-operator:0.1.0")
#: upstream's sample NetworkObserver spec: the chart's values.yaml, abridged to the keys whose defaults matter
UPSTREAM_SPEC: dict[str, Any] = {
    "nameOverride": "", "fullnameOverride": "",
    "image": {"repository": "quay.io/skupper/network-observer", "pullPolicy": "Always", "tag": ""},
    "prometheus": {"repository": "quay.io/prometheus/prometheus", "persistence": {"enabled": False, "size": "8Gi"}},
    "extraArgs": None, "router": {"endpoint": "amqps://skupper-router-local", "certificate": {"create": True}},
    "tls": {"secretName": "", "openshiftIssued": False, "skupperIssued": True},
    "auth": {"strategy": "basic", "basic": {"create": True, "secretName": ""},
             "openshift": {"createCookieSecret": True, "cookieSecretName": "",
                           "serviceAccount": {"create": True, "nameOverride": ""}}},
    "commonAnnotations": {}, "commonLabels": {}, "podAnnotations": {}, "podLabels": {},
    "service": {"type": "ClusterIP", "port": 443},
    "ingress": {"enabled": False, "hosts": [{"host": "chart-example.local"}]}, "route": {"enabled": False},
    "resources": {}, "containerResources": {"networkObserver": {}, "prometheus": {}, "proxy": {}},
    "podSecurityContext": {"seccompProfile": {"type": "RuntimeDefault"}}, "skipManagementLabels": False,
    "readinessProbe": {"enabled": False}, "livenessProbe": {"enabled": False},
}


def observer(name: str = "obs", spec: Any = None, generation: int = 1, status: Any = None) -> dict[str, Any]:
    return {"apiVersion": NO_GV, "kind": "NetworkObserver",
            "metadata": {"name": name, "namespace": "west", "uid": f"uid-{name}", "generation": generation},
            "spec": spec if spec is not None else {}, "status": status or {}}


# ---- values (pure) -----------------------------------------------------------------------------------------------

def test_upstream_sample_values_are_taken_with_the_charts_names() -> None:
    values = parse_values("networkobserver-sample", UPSTREAM_SPEC)
    assert (values.name, values.fullname) == ("network-observer", "networkobserver-sample-network-observer")
    assert (values.auth_strategy, values.auth_secret, values.tls_secret, values.skupper_issued) == (
        "basic", "networkobserver-sample-network-observer-auth", "networkobserver-sample-network-observer-tls", True)
    assert (values.service_type, values.service_port, values.image, values.pull_policy) == (
        "ClusterIP", 443, None, "Always")
    assert values.unsupported == ()
    # a release whose name holds the chart's name is the fullname itself; overrides as the chart's helpers
    assert parse_values("my-network-observer", {}).fullname == "my-network-observer"
    assert parse_values("x", {"nameOverride": "watch"}).fullname == "x-watch"
    assert parse_values("x", {"fullnameOverride": "console"}).fullname == "console"
    assert parse_values("a" * 60, {}).fullname == "a" * 60 + "-ne"
    assert parse_values("x", None).auth_strategy == "basic"
    # the release's name is a label value and part of every name
    for bad in ("a" * 64, "with.dot", "Upper"):
        with pytest.raises(ValuesError) as caught:
            parse_values(bad, {})
        assert caught.value.path == "metadata.name"


def test_resource_quantities_as_the_api_server_writes_them() -> None:
    values = parse_values("x", {"containerResources": {"networkObserver": {
        "requests": {"cpu": 0.25, "memory": "256Mi"}, "limits": {"cpu": "1.5", "memory": 1073741824}}}})
    assert values.resources == {"requests": {"cpu": "250m", "memory": "256Mi"},
                                "limits": {"cpu": "1500m", "memory": "1073741824"}}
    # the deprecated key when containerResources says nothing
    assert parse_values("x", {"resources": {"limits": {"cpu": 1}}}).resources == {"limits": {"cpu": "1"}}


def test_switched_on_features_it_does_not_provide_are_listed() -> None:
    spec = {"ingress": {"enabled": True}, "route": {"enabled": True}, "tls": {"openshiftIssued": True},
            "prometheus": {"persistence": {"enabled": True}}}
    assert parse_values("x", spec).unsupported == ("spec.ingress.enabled", "spec.route.enabled",
                                                   "spec.tls.openshiftIssued", "spec.prometheus.persistence.enabled")


@pytest.mark.parametrize(("spec", "path"), [
    ({"auth": {"strategy": "openshift"}}, "spec.auth.strategy"),
    ({"auth": {"strategy": "digest"}}, "spec.auth.strategy"),
    ({"auth": "basic"}, "spec.auth"),
    ({"service": {"port": 70000}}, "spec.service.port"),
    ({"service": {"port": True}}, "spec.service.port"),
    ({"service": {"type": "ExternalName"}}, "spec.service.type"),
    ({"fullnameOverride": "../etc"}, "spec.fullnameOverride"),
    ({"fullnameOverride": "9lives"}, "spec.fullnameOverride"),
    ({"nameOverride": "Bad Name"}, "spec.nameOverride"),
    ({"tls": {"secretName": "a/b"}}, "spec.tls.secretName"),
    ({"auth": {"basic": {"secretName": "x" * 300}}}, "spec.auth.basic.secretName"),
    ({"commonLabels": {"app": "a b"}}, "spec.commonLabels.app"),
    ({"podLabels": {"-bad": "x"}}, "spec.podLabels"),
    # labels that would put the observer Pod behind every Listener's Service (the router Pods' selector)
    ({"podLabels": {"application": "skupper-router"}}, "spec.podLabels.application"),
    ({"commonLabels": {"skupper.io/component": "router"}}, "spec.commonLabels.skupper.io/component"),
    ({"podLabels": {"internal.skupper.io/listener": "x"}}, "spec.podLabels.internal.skupper.io/listener"),
    ({"podAnnotations": {f"k{i}": "v" for i in range(65)}}, "spec.podAnnotations"),
    ({"extraArgs": "--x"}, "spec.extraArgs"),
    ({"extraArgs": ["a"] * 33}, "spec.extraArgs"),
    ({"extraArgs": ["x" * 2000]}, "spec.extraArgs[0]"),
    ({"image": {"repository": "evil image"}}, "spec.image.repository"),
    ({"image": {"pullPolicy": "Sometimes"}}, "spec.image.pullPolicy"),
    ({"containerResources": {"networkObserver": {"cpu": "1"}}}, "spec.containerResources.networkObserver"),
    ({"containerResources": {"networkObserver": {"limits": {"cpu": "lots"}}}},
     "spec.containerResources.networkObserver.limits.cpu"),
    ({"resources": {"requests": {"memory": True}}}, "spec.containerResources.networkObserver.requests.memory"),
    ([], "spec"),
])
def test_bad_values_name_their_field_and_never_echo_much(spec: Any, path: str) -> None:
    with pytest.raises(ValuesError) as caught:
        parse_values("obs", spec)
    assert caught.value.path == path
    assert len(str(caught.value)) < 300


# ---- objects and status (pure) ------------------------------------------------------------------------------------

def test_objects_follow_the_chart_and_run_our_observer() -> None:
    obj = observer("obs", {"commonLabels": {"team": "a"}, "podAnnotations": {"note": "x"}, "extraArgs": ["--interval=1"],
                           "service": {"port": 8443, "type": "NodePort"}})
    objects = {(info.kind, body["metadata"]["name"]): body for info, body in
               observer_objects(obj, parse_values("obs", obj["spec"]), OPTIONS, ["http://127.0.0.9:9090"])}
    assert list(objects) == [("ServiceAccount", "obs-network-observer"), ("Role", "obs-network-observer"),
                             ("RoleBinding", "obs-network-observer"), ("ConfigMap", "obs-network-observer-routers"),
                             ("Certificate", "obs-network-observer-tls"),
                             ("Service", "obs-network-observer"), ("Service", "obs-network-observer-metrics"),
                             ("Deployment", "obs-network-observer")]
    for body in objects.values():
        assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-obs"
        assert body["metadata"]["labels"]["app.kubernetes.io/part-of"] == "skupper-network-observer"
        assert body["metadata"]["labels"]["team"] == "a"
    cert = objects[("Certificate", "obs-network-observer-tls")]["spec"]
    assert (cert["ca"], cert["subject"], cert["server"]) == ("skupper-local-ca", "obs-network-observer", True)
    service = objects[("Service", "obs-network-observer")]["spec"]
    assert (service["type"], service["ports"][0]["port"], service["ports"][0]["targetPort"]) == (
        "NodePort", 8443, "https")
    pod = objects[("Deployment", "obs-network-observer")]["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert container["command"] == ["service-network", "observer"]
    assert container["args"][-2:] == ["--htpasswd=/etc/network-observer/auth/htpasswd", "--interval=1"]
    assert container["args"][:6] == ["--routers-config-map=obs-network-observer-routers",
                                     "--namespace=$(POD_NAMESPACE)", "--listen", "0.0.0.0:8443", "--listen-metrics",
                                     "0.0.0.0:9000"]
    assert json.loads(objects[("ConfigMap", "obs-network-observer-routers")]["data"]["routers.json"]) == [
        "http://127.0.0.9:9090"]
    assert [v["secret"]["secretName"] for v in pod["spec"]["volumes"]] == [
        "obs-network-observer-tls", "obs-network-observer-auth"]
    assert pod["metadata"]["annotations"] == {"note": "x"}
    # a Role that reads its one ConfigMap, by name, and nothing else
    role = objects[("Role", "obs-network-observer")]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"],
                              "resourceNames": ["obs-network-observer-routers"], "verbs": ["get", "list", "watch"]}]

    none = observer("obs", {"auth": {"strategy": "none"}, "tls": {"secretName": "mine"}})
    bodies = observer_objects(none, parse_values("obs", none["spec"]), OPTIONS)
    assert "Certificate" not in [info.kind for info, _ in bodies]
    deployment = bodies[-1][1]["spec"]["template"]["spec"]
    assert not any(a.startswith("--htpasswd") for a in deployment["containers"][0]["args"])
    assert [v["secret"]["secretName"] for v in deployment["volumes"]] == ["mine"]
    assert "stringData" not in manifest(bodies) and "kind: Deployment" in manifest(bodies)


def test_conditions_as_a_helm_operator_keeps_them() -> None:
    installed = conditions(observer(), None, "InstallError", "t1")
    assert [(c["type"], c["status"], c["reason"]) for c in installed] == [
        ("Initialized", "True", "Initialized"), ("Deployed", "True", "InstallSuccessful"),
        ("ReleaseFailed", "False", "")]
    status = {"conditions": installed, "observedGeneration": 1, "deployedRelease": {"name": "obs"}}
    # the same generation again: nothing changes, times kept
    assert conditions(observer(status=status), None, "UpgradeError", "t2") == installed
    # a bad new generation: Deployed stays as it was, ReleaseFailed says why
    failed = conditions(observer(generation=2, status=status), "spec.service.port: bad", "UpgradeError", "t3")
    assert [(c["type"], c["status"], c["reason"], c["lastTransitionTime"]) for c in failed] == [
        ("Initialized", "True", "Initialized", "t1"), ("Deployed", "True", "InstallSuccessful", "t1"),
        ("ReleaseFailed", "True", "UpgradeError", "t3")]
    fixed = conditions(observer(generation=3, status={**status, "conditions": failed, "observedGeneration": 2}),
                       None, "UpgradeError", "t4")
    assert [(c["type"], c["status"], c["reason"]) for c in fixed][1:] == [
        ("Deployed", "True", "UpgradeSuccessful"), ("ReleaseFailed", "False", "")]
    never = conditions(observer(), "spec.auth.strategy: no", "InstallError", "t5")
    assert [(c["type"], c["status"], c["reason"]) for c in never][1:] == [
        ("Deployed", "False", "InstallError"), ("ReleaseFailed", "True", "InstallError")]


# ---- the observer's access checks ---------------------------------------------------------------------------------

def test_htpasswd_schemes_and_headers(tmp_path: Any) -> None:
    sha = "{SHA}" + base64.b64encode(hashlib.sha1(b"s3cret").digest()).decode()
    ssha = "{SSHA}" + base64.b64encode(hashlib.sha1(b"s3cret" + b"salt").digest() + b"salt").decode()
    assert all(check_hash(h, "s3cret") for h in ("{PLAIN}s3cret", sha, ssha))
    assert not any(check_hash(h, "wrong") for h in ("{PLAIN}s3cret", sha, ssha))
    assert not check_hash("$apr1$abc$def", "s3cret") and not check_hash("{SHA}!!notbase64", "s3cret")
    assert parse_htpasswd("# c\n\nskupper:{PLAIN}a\nskupper:{PLAIN}b\nbroken\n") == {"skupper": "{PLAIN}a"}
    path = tmp_path / "htpasswd"
    path.write_text("skupper:{PLAIN}pw\n")
    users = Htpasswd(path)

    def basic(text: str) -> str:
        return "Basic " + base64.b64encode(text.encode()).decode()
    assert users.allows(basic("skupper:pw"))
    assert not users.allows(basic("skupper:px")) and not users.allows(basic("other:pw"))
    assert not users.allows(None) and not users.allows("Bearer x") and not users.allows("Basic !!!")
    assert not users.allows(basic("skupper:" + "p" * 5000))
    path.write_text("skupper:{PLAIN}new-password-longer\n")     # a Secret volume updated in place
    users.refresh()
    assert users.allows(basic("skupper:new-password-longer")) and not users.allows(basic("skupper:pw"))


def test_router_pods_ready_first_then_oldest() -> None:
    def pod(name: str, ip: str | None, ready: bool, phase: str = "Running", created: str = "2026-01-01T00:00:00Z",
            deleting: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "creationTimestamp": created}
        if deleting:
            meta["deletionTimestamp"] = created
        return {"metadata": meta, "status": {"phase": phase, "podIP": ip, "conditions": [
            {"type": "Ready", "status": "True" if ready else "False"}]}}
    pods = [pod("b", "127.0.0.3", False), pod("a", "127.0.0.2", True, created="2026-01-02T00:00:00Z"),
            pod("c", "127.0.0.4", True), pod("d", None, True), pod("e", "127.0.0.6", True, "Pending"),
            pod("f", "127.0.0.7", True, deleting=True), pod("g", "fd00::1", False, created="2026-01-03T00:00:00Z")]
    assert router_urls(pods) == ["http://127.0.0.4:9090", "http://127.0.0.2:9090", "http://127.0.0.3:9090",
                                 "http://[fd00::1]:9090"]
    # what the observer takes from its ConfigMap: IP URLs only, bounded
    assert parse_router_urls(json.dumps(router_urls(pods))) == router_urls(pods)
    assert parse_router_urls('["http://evil.example:9090", "file:///etc/passwd", "http://127.0.0.1:99999", 7, '
                             '"http://127.0.0.1:9090"]') == ["http://127.0.0.1:9090"]
    assert parse_router_urls("not json") == [] and parse_router_urls('{"a": 1}') == []
    assert len(parse_router_urls(json.dumps(["http://127.0.0.1:9090"] * 100))) == 16


# ---- end to end on kubesim ----------------------------------------------------------------------------------------

@pytest.fixture
async def env() -> AsyncIterator[SiteEnv]:
    async with site_environment() as environment:
        await environment.start_controller()
        yield environment


async def _create(env: SiteEnv, name: str, spec: dict[str, Any]) -> None:
    await env.api.create(NO, {"apiVersion": NO_GV, "kind": "NetworkObserver",
                              "metadata": {"name": name, "namespace": env.namespace}, "spec": spec}, env.namespace)


async def _condition(env: SiteEnv, name: str, type_: str, status: str, within: float = 30.0,
                     message: str | None = None) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        obj = await env.api.get(NO, name, env.namespace)
        for c in (obj.get("status") or {}).get("conditions") or []:
            if c["type"] == type_ and c["status"] == status and (message is None or message in c["message"]):
                return obj
        return None
    try:
        found: dict[str, Any] = await env.wait_for(check, within, f"NetworkObserver {name} {type_}={status} {message}")
    except AssertionError as failure:
        obj = await env.api.get(NO, name, env.namespace)
        raise AssertionError(f"{failure}; status {(obj.get('status') or {}).get('conditions')}") from None
    return found


async def _secret_text(env: SiteEnv, name: str, key: str) -> str:
    secret = await env.wait_for(lambda: env.api.get("secrets", name, env.namespace), 30, f"Secret {name}")
    return base64.b64decode(secret["data"][key]).decode()


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def _api(url: str, ca: str, server_name: str, auth: str | None) -> tuple[int, Any]:
    context = ssl.create_default_context(cadata=ca)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session, session.get(
            url, ssl=context, server_hostname=server_name, headers={"Authorization": auth} if auth else {}) as resp:
        return resp.status, await resp.json(content_type=None)


async def test_a_network_observer_deploys_an_observer_of_the_site(env: SiteEnv) -> None:
    await env.create("Site", "west", {})
    await env.deployment("echo", ECHO_IMAGE, 1, ECHO)
    await env.create("Listener", "echo", {"routingKey": "echo", "host": "echo", "port": 7000})
    await env.create("Connector", "echo", {"routingKey": "echo", "selector": "app=echo", "port": 7000})
    await env.wait_status("Listener", "echo", "Ready", "OK", within=60)
    await _create(env, "networkobserver-sample", UPSTREAM_SPEC)
    full = "networkobserver-sample-network-observer"

    obj = await _condition(env, "networkobserver-sample", "Deployed", "True")
    deployed = {c["type"]: c for c in obj["status"]["conditions"]}["Deployed"]
    assert deployed["reason"] == "InstallSuccessful"
    assert obj["status"]["deployedRelease"]["name"] == "networkobserver-sample"
    for resource, name in (("deployments.apps", full), ("services", full), ("services", f"{full}-metrics"),
                           ("serviceaccounts", full), ("roles.rbac.authorization.k8s.io", full),
                           ("certificates.skupper.io", f"{full}-tls")):
        owned = await env.api.get(resource, name, env.namespace)
        assert owned["metadata"]["ownerReferences"][0]["name"] == "networkobserver-sample", resource
    htpasswd = await _secret_text(env, f"{full}-auth", "htpasswd")
    user, _, hashed = htpasswd.strip().partition(":")
    assert user == "skupper" and hashed.startswith("{PLAIN}") and len(hashed) > 20
    password = hashed[len("{PLAIN}"):]
    ca = await _secret_text(env, f"{full}-tls", "ca.crt")

    pod = (await env.wait_ready_pods({"app.kubernetes.io/name": "network-observer"}, 1, within=60))[0]
    base = f"https://{pod['status']['podIP']}:8443"
    status, body = await _api(f"{base}/api/v2alpha1/sites", ca, full, None)
    assert (status, body["code"]) == (401, "ErrUnauthorized")
    auth = _basic("skupper", password)
    status, _ = await _api(f"{base}/api/v2alpha1/sites", ca, full, _basic("skupper", "guess"))
    assert status == 401

    # traffic through the Listener's Service, then the observer counts it
    ip = (await env.service("echo"))["spec"]["clusterIP"]
    for _ in range(3):
        assert await env.wait_for(lambda: greeting(ip, 7000), 10, "traffic through the router")

    async def seen() -> dict[str, Any] | None:
        _, sites = await _api(f"{base}/api/v2alpha1/sites", ca, full, auth)
        _, services = await _api(f"{base}/api/v2alpha1/services", ca, full, auth)
        _, listeners = await _api(f"{base}/api/v2alpha1/listeners", ca, full, auth)
        done = [s["name"] for s in sites["results"]] == ["west"] and [s["name"] for s in services["results"]] == [
            "echo"] and listeners["count"] == 1
        return {"sites": sites, "services": services} if done else None
    await env.wait_for(seen, 30, "the observer seeing the site, its service and its listener")
    async with aiohttp.ClientSession() as session, session.get(
            f"http://{pod['status']['podIP']}:9000/metrics") as resp:
        text = await resp.text()
    assert 'skupper_site_info{' in text and 'name="west"' in text
    # the console's files ask for no password (as upstream's proxy: only /api/ does)
    context = ssl.create_default_context(cadata=ca)
    async with aiohttp.ClientSession() as session, session.get(f"{base}/", ssl=context,
                                                               server_hostname=full) as resp:
        assert resp.status == 200 and "<html" in (await resp.text()).lower()

    # nothing is written when nothing changed: a change that is not the spec's reconciles it, and writes nothing
    writes = len(env.controllers[0].writes())
    current = await env.api.get(NO, "networkobserver-sample", env.namespace)
    current["metadata"].setdefault("annotations", {})["note"] = "reconcile me"
    await env.api.update(NO, current)
    await asyncio.sleep(2)
    assert env.controllers[0].writes()[writes:] == []

    # the password Secret deleted: made again, with a new password (the kubelet updates the Pod's file, which the
    # observer re-reads: test_htpasswd_schemes_and_headers)
    await env.api.delete("secrets", f"{full}-auth", env.namespace)

    async def new_password() -> str | None:
        try:
            text = await _secret_text(env, f"{full}-auth", "htpasswd")
        except ApiError:
            return None
        got = text.strip().partition(":")[2].removeprefix("{PLAIN}")
        return got if got != password else None
    assert await env.wait_for(new_password, 30, "a new password Secret")

    # values it cannot use: refused with the field, as status and Event; the running observer stays
    current = await env.api.get(NO, "networkobserver-sample", env.namespace)
    current["spec"]["auth"]["strategy"] = "openshift"
    await env.api.update(NO, current)
    obj = await _condition(env, "networkobserver-sample", "ReleaseFailed", "True", message="spec.auth.strategy")
    conditions_now = {c["type"]: c for c in obj["status"]["conditions"]}
    assert conditions_now["ReleaseFailed"]["reason"] == "UpgradeError"
    assert conditions_now["Deployed"]["status"] == "True"
    events, _ = await env.api.list("events.events.k8s.io", env.namespace)
    assert any(e["reason"] == "ReleaseFailed" and "spec.auth.strategy" in e["note"] for e in events)
    assert (await env.api.get("deployments.apps", full, env.namespace))["metadata"]["name"] == full

    # auth none: the API answers without a user (a new Pod without --htpasswd)
    current = await env.api.get(NO, "networkobserver-sample", env.namespace)
    current["spec"]["auth"]["strategy"] = "none"
    await env.api.update(NO, current)
    obj = await _condition(env, "networkobserver-sample", "ReleaseFailed", "False")
    assert {c["type"]: c for c in obj["status"]["conditions"]}["Deployed"]["reason"] == "UpgradeSuccessful"

    async def open_api() -> bool:
        for candidate in await env.ready_pods({"app.kubernetes.io/name": "network-observer"}):
            try:
                status, _ = await _api(f"https://{candidate['status']['podIP']}:8443/api/v2alpha1/sites", ca, full,
                                       None)
            except (aiohttp.ClientError, OSError, TimeoutError):
                continue
            if status == 200:
                return True
        return False
    await env.wait_for(open_api, 60, "the API open with auth.strategy none")

    # deleted: what it made goes with it (all but skupper-local-ca, which outlives it as a site CA would)
    await env.api.delete(NO, "networkobserver-sample", env.namespace)

    async def gone() -> bool:
        try:
            await env.api.get("deployments.apps", full, env.namespace)
        except ApiError as e:
            return e.code == 404
        return False
    await env.wait_for(gone, 30, "the observer Deployment garbage-collected")


async def test_a_name_that_is_taken_is_never_taken_over(env: SiteEnv) -> None:
    await env.api.create("services", {"apiVersion": "v1", "kind": "Service",
                                      "metadata": {"name": "console", "namespace": env.namespace},
                                      "spec": {"ports": [{"port": 80}], "selector": {"app": "mine"}}}, env.namespace)
    await _create(env, "obs", {"fullnameOverride": "console", "auth": {"strategy": "none"}})
    obj = await _condition(env, "obs", "ReleaseFailed", "True", message="Service console exists")
    assert {c["type"]: c for c in obj["status"]["conditions"]}["Deployed"]["status"] == "False"
    service = await env.service("console")
    assert service["spec"]["selector"] == {"app": "mine"} and not service["metadata"].get("ownerReferences")
    with pytest.raises(ApiError):
        await env.api.get("deployments.apps", "console", env.namespace)


# ---- the console in a browser, as the demo prints it -------------------------------------------------------------

async def _console_access(env: SiteEnv) -> Any:
    """A site with a NetworkObserver of upstream's defaults, and what the demo prints of it (URL, user, password,
    the CA and the name its certificate is for: devenv.observer, the demo's own code)."""
    from devenv.observer import OBSERVER_NAME, network_observer, observer_access

    await env.create("Site", "west", {})
    await env.wait_status("Site", "west", "Ready", within=90)
    await env.api.create(NO, network_observer(env.namespace), env.namespace)
    access = await observer_access(env.api, env.namespace, 120)
    assert not isinstance(access, str), access
    assert access.url.startswith("https://") and access.server_name == OBSERVER_NAME
    return access


def _browser_url(access: Any) -> tuple[str, str]:
    """(the console's URL by the name its certificate carries, the resolver rule mapping that name to the address
    the demo prints: what an /etc/hosts line does)."""
    from urllib.parse import urlsplit

    printed = urlsplit(access.url)
    return f"https://{access.server_name}:{printed.port}/", f"MAP {access.server_name} {printed.hostname}"


async def test_the_console_opens_in_a_browser_that_trusts_the_observers_ca(env: SiteEnv) -> None:
    """Chromium, with the NetworkObserver's CA imported into its profile (no certificate error ignored), opens the
    console over HTTPS with the printed user and password, and draws the site: the certificate (ECDSA P-256, signed
    by a P-256 skupper-local-ca) is one a browser accepts."""
    from browser_support import browser_page
    from test_observer_network import artifacts

    access = await _console_access(env)
    url, rule = _browser_url(access)
    async with browser_page(trusted_ca=access.ca, host_rules=rule) as page:
        await page.basic_auth(access.user, access.password)
        await page.navigate(url)
        assert await page.evaluate("location.protocol") == "https:"
        await page.wait_for("document.querySelectorAll('#topology .site').length === 1", 60, "the site drawn",
                            show="document.getElementById('status')?.textContent")
        drawn = await page.evaluate("[...document.querySelectorAll('#topology .site')].map(g => g.dataset.site)")
        assert drawn == ["west"]
        await page.screenshot(artifacts() / "console-networkobserver.png")


async def test_the_console_opened_from_a_url_with_credentials_draws_the_site(env: SiteEnv) -> None:
    """``https://user:password@host:port/``, a common way to hand a browser basic-auth credentials: the page's own
    requests (built against its origin, not its URL with the credentials, which the browser refuses to fetch) get
    the site drawn."""
    from urllib.parse import quote

    from browser_support import browser_page

    access = await _console_access(env)
    url, rule = _browser_url(access)
    with_credentials = url.replace("https://", f"https://{quote(access.user, safe='')}:"
                                               f"{quote(access.password, safe='')}@", 1)
    async with browser_page(trusted_ca=access.ca, host_rules=rule) as page:
        await page.navigate(with_credentials)
        await page.wait_for("document.querySelectorAll('#topology .site').length === 1", 60, "the site drawn",
                            show="document.getElementById('status')?.textContent")
        assert await page.evaluate("[...document.querySelectorAll('#topology .site')].map(g => g.dataset.site)") \
            == ["west"]
        assert "unreachable" not in await page.evaluate("document.getElementById('status')?.textContent || ''")


async def test_a_console_certificate_of_an_ed25519_key_is_refused_by_the_browser(
        env: SiteEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the previous versions did (Ed25519 keys for every certificate, the observer's CA included): the browser
    cannot open the console, while OpenSSL's clients (curl, Python) can. Its CA cannot even be imported into the
    browser's certificate store (NSS refuses an Ed25519 certificate), and without it the TLS handshake itself fails
    (not a mere untrusted certificate, which a person could accept: net::ERR_CERT_...)."""
    from browser_support import browser_page
    from cryptography.hazmat.primitives.asymmetric import ed25519

    from service_network.site import pki

    monkeypatch.setattr(pki, "_new_key", ed25519.Ed25519PrivateKey.generate)
    access = await _console_access(env)
    url, rule = _browser_url(access)
    status, _ = await _api(f"{access.url}api/v2alpha1/sites", access.ca, access.server_name,
                           _basic(access.user, access.password))
    assert status == 200                                      # OpenSSL takes it
    with pytest.raises(AssertionError, match="SEC_ERROR_ADDING_CERT"):
        async with browser_page(trusted_ca=access.ca, host_rules=rule):
            pass
    async with browser_page(host_rules=rule) as page:
        await page.basic_auth(access.user, access.password)
        with pytest.raises(AssertionError, match="net::ERR_") as refused:
            await page.navigate(url)
    assert "net::ERR_CERT_" not in str(refused.value), refused.value
