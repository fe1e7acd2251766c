"""Label and annotation templates (``skupper.io/label-template`` ConfigMaps), by upstream's rules (its
``internal/kube/site/labels/registry.go`` and the cases of ``registry_test.go``): pure, then on kubesim with the site
controller: a template added, changed and deleted gives its keys to existing and new objects and takes them back,
never a key the controller did not give, and nothing is written while nothing changes."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest
from site_support import SiteEnv, site_environment
from test_site_compose import compose, listener, site

from service_network.site.certificates import plan_certificate
from service_network.site.services import service_patch
from service_network.site.templates import (
    ANNOTATION_KEYS,
    metadata_patch,
    parse_template,
    template_metadata,
    templates_for,
    up_to_date,
    with_extra,
)


def template(config_map: str, namespace: str = "west", labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    """A template ConfigMap; ``data``: its data (``name``, ``kind``, ``labelSelector``, ``exclude``)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": config_map, "namespace": namespace,
                         "labels": {"skupper.io/label-template": "true", **(labels or {})},
                         "annotations": annotations or {}},
            "data": data}


def given(config_maps: list[dict[str, Any]], kind: str, name: str, labels: dict[str, str] | None = None,
          namespace: str = "west") -> tuple[dict[str, str], dict[str, str]]:
    extra = template_metadata(templates_for(namespace, "ops", config_maps), kind, name, labels or {})
    return dict(extra.labels), dict(extra.annotations)


def test_a_template_gives_every_object_its_labels_and_annotations() -> None:
    maps = [template("t", labels={"acme.com/foo": "bar"}, annotations={"acme.com/note": "hi"})]
    assert given(maps, "ConfigMap", "xyz") == ({"acme.com/foo": "bar"}, {"acme.com/note": "hi"})
    assert given(maps, "Deployment", "skupper-router") == ({"acme.com/foo": "bar"}, {"acme.com/note": "hi"})
    # another namespace's template gives nothing here
    assert given(maps, "ConfigMap", "xyz", namespace="east") == ({}, {})
    # a ConfigMap without the label is no template
    plain = template("t")
    del plain["metadata"]["labels"]["skupper.io/label-template"]
    assert parse_template(plain) is None


def test_the_controller_namespaces_templates_apply_everywhere_and_win() -> None:
    maps = [template("mine", labels={"a": "site", "b": "site"}),
            template("shared", namespace="ops", labels={"b": "ops", "c": "ops"}, annotations={"n": "ops"})]
    assert given(maps, "Service", "x") == ({"a": "site", "b": "ops", "c": "ops"}, {"n": "ops"})
    assert given(maps, "Service", "x", namespace="east") == ({"b": "ops", "c": "ops"}, {"n": "ops"})


def test_name_kind_and_selector_restrict_a_template() -> None:
    maps = [template("by-kind", labels={"k": "1"}, kind="Service"),
            template("by-name", labels={"n": "1"}, name="abc"),
            template("both", labels={"b": "1"}, kind="Service", name="xyz"),
            template("listener", labels={"l": "1"}, labelSelector="internal.skupper.io/listener in (my-listener)"),
            template("broken", labels={"x": "1"}, labelSelector="this is not a valid selector")]
    assert given(maps, "ConfigMap", "xyz")[0] == {}
    assert given(maps, "Service", "abc")[0] == {"k": "1", "n": "1"}
    assert given(maps, "Service", "xyz")[0] == {"k": "1", "b": "1"}
    assert given(maps, "Deployment", "abc")[0] == {"n": "1"}
    assert given(maps, "Service", "svc", {"internal.skupper.io/listener": "my-listener"})[0] == {"k": "1", "l": "1"}
    assert given(maps, "Service", "svc", {"internal.skupper.io/listener": "other"})[0] == {"k": "1"}


def test_excluded_keys_are_never_given() -> None:
    maps = [template("t", labels={"a": "1", "b": "2"},
                     annotations={"c": "3", "kubectl.kubernetes.io/last-applied-configuration": "{}"}, exclude="b,c")]
    assert given(maps, "ConfigMap", "xyz") == ({"a": "1"}, {})


def test_a_key_the_controller_sets_is_never_replaced() -> None:
    maps = [template("t", labels={"skupper.io/component": "mine", "team": "a"},
                     annotations={"internal.skupper.io/controlled": "no", ANNOTATION_KEYS: "forged"})]
    plan = compose(sites=[site("west")], listeners=[listener("backend", "backend", 8080)],
                   templates=templates_for("test", None, [{**maps[0], "metadata": {
                       **maps[0]["metadata"], "namespace": "test"}}]))
    deployment = next(body for info, body in plan.router_objects if info.kind == "Deployment")
    assert deployment["metadata"]["labels"]["skupper.io/component"] == "router"
    assert deployment["metadata"]["labels"]["team"] == "a"
    service = plan.services["backend"]["metadata"]
    assert service["annotations"]["internal.skupper.io/controlled"] == "true"
    # what the Service has not got itself is given (and recorded)
    assert service["labels"]["skupper.io/component"] == "mine"
    assert service["annotations"][ANNOTATION_KEYS] == '{"annotations":[],"labels":["skupper.io/component","team"]}'
    # never into the Pods: upstream's template labels the Deployment only
    assert "team" not in deployment["spec"]["template"]["metadata"]["labels"]


def test_upstreams_objects_get_the_keys_and_the_others_do_not() -> None:
    shared = [template("t", namespace="test", labels={"team": "a"})]
    plan = compose(sites=[site("west", linkAccess="default")], templates=templates_for("test", None, shared))
    labelled = {(info.kind, body["metadata"]["name"]) for info, body in plan.router_objects
                if body["metadata"].get("labels", {}).get("team") == "a"}
    assert labelled == {("Deployment", "skupper-router")}      # not the ServiceAccount, Role, network status
    assert plan.config_map is not None and plan.config_map[1]["metadata"]["labels"]["team"] == "a"
    assert plan.access is not None
    assert all(c["metadata"]["labels"]["team"] == "a" for c in plan.access.certificates)


def test_a_removed_key_leaves_and_only_a_key_templates_gave() -> None:
    desired = {"metadata": {"labels": {"a": "1"}, "annotations": {ANNOTATION_KEYS: '{"annotations":[],"labels":["a"]}'}}}
    live = {"metadata": {"resourceVersion": "7",
                         "labels": {"a": "1", "gone": "x", "users": "kept"},
                         "annotations": {ANNOTATION_KEYS: '{"annotations":["note"],"labels":["a","gone"]}',
                                         "note": "n"}}}
    assert not up_to_date(desired, live)
    assert metadata_patch(desired, live) == {"metadata": {
        "resourceVersion": "7", "labels": {"gone": None},
        "annotations": {"note": None, ANNOTATION_KEYS: '{"annotations":[],"labels":["a"]}'}}}
    # no template any more: every given key and the record go; the user's label stays
    assert metadata_patch({"metadata": {}}, live) == {"metadata": {
        "resourceVersion": "7", "labels": {"a": None, "gone": None},
        "annotations": {"note": None, ANNOTATION_KEYS: None}}}
    done = {"metadata": {"resourceVersion": "8", "labels": {"a": "1", "users": "kept"},
                         "annotations": {ANNOTATION_KEYS: '{"annotations":[],"labels":["a"]}'}}}
    assert up_to_date(desired, done) and metadata_patch(desired, done) is None


def test_listener_services_are_patched_with_the_keys_taken_away() -> None:
    body = with_extra({"kind": "Service", "metadata": {
        "name": "backend", "labels": {"internal.skupper.io/listener": "backend"},
        "annotations": {"internal.skupper.io/controlled": "true"}, "ownerReferences": []},
        "spec": {"type": "ClusterIP", "selector": {}, "ports": []}}, ())
    live = {"metadata": {"resourceVersion": "3", "labels": {"internal.skupper.io/listener": "backend", "team": "a"},
                         "annotations": {ANNOTATION_KEYS: '{"annotations":[],"labels":["team"]}'}},
            "spec": {"selector": {}}}
    patch = service_patch(body, live)
    assert patch["metadata"]["labels"] == {"team": None, "internal.skupper.io/listener": "backend"}
    assert patch["metadata"]["annotations"][ANNOTATION_KEYS] is None


def test_the_secret_of_a_certificate_is_relabelled_without_a_new_certificate() -> None:
    certificate = {"apiVersion": "skupper.io/v2alpha1", "kind": "Certificate",
                   "metadata": {"name": "tls", "namespace": "west", "uid": "c1"},
                   "spec": {"ca": "site-ca", "subject": "tls", "hosts": ["b.example", "a.example"], "server": True}}
    import datetime

    now = datetime.datetime.now(datetime.UTC)
    ca = {"metadata": {"name": "site-ca", "uid": "ca1", "resourceVersion": "1", "annotations": {}},
          "data": {"tls.crt": "", "tls.key": ""}}
    first = plan_certificate(certificate, {"site-ca": ca}, now)
    assert first.issue is not None and first.issue.annotations == {
        "internal.skupper.io/controlled": "true", "internal.skupper.io/certificate": "true",
        "internal.skupper.io/hosts": "a.example,b.example"}
    marker = first.issue.marker
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    secret = {"metadata": {"name": "tls", "resourceVersion": "5", "annotations": {
        "internal.skupper.io/certificate-names": marker, "internal.skupper.io/not-before": stamp,
        "internal.skupper.io/not-after": "2099-01-01T00:00:00Z"}}, "data": {"tls.crt": "", "tls.key": ""}}
    # issued by an earlier version: upstream's annotations by a metadata patch, no new certificate
    plan = plan_certificate(certificate, {"tls": secret, "site-ca": ca}, now)
    assert plan.issue is None and plan.relabel is not None
    assert plan.relabel["metadata"]["annotations"]["internal.skupper.io/controlled"] == "true"
    templates = templates_for("west", None, [template("t", labels={"team": "a"}, kind="Secret")])
    plan = plan_certificate(certificate, {"tls": secret, "site-ca": ca}, now, templates=templates)
    assert plan.issue is None and plan.relabel is not None and plan.relabel["metadata"]["labels"] == {"team": "a"}


# ---- on kubesim ------------------------------------------------------------------------------------------------

@pytest.fixture
async def env() -> AsyncIterator[SiteEnv]:
    async with site_environment() as environment:
        await environment.api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": "ops"}})
        await environment.start_controller(leader_election_namespace="ops")
        yield environment


async def _metadata(env: SiteEnv, resource: str, name: str) -> tuple[dict[str, str], dict[str, str]]:
    obj = await env.api.get(resource, name, env.namespace)
    return obj["metadata"].get("labels") or {}, obj["metadata"].get("annotations") or {}


OBJECTS = (("deployments.apps", "skupper-router"), ("configmaps", "skupper-router"), ("services", "backend"),
           ("services", "skupper-router"), ("certificates.skupper.io", "skupper-site-ca"),
           ("secrets", "skupper-site-server"))


async def _all_have(env: SiteEnv, objects: tuple[tuple[str, str], ...], labels: dict[str, str | None],
                    annotations: dict[str, str | None]) -> bool:
    for resource, name in objects:
        have_labels, have_annotations = await _metadata(env, resource, name)
        if any(have_labels.get(k) != v for k, v in labels.items()) or any(
                have_annotations.get(k) != v for k, v in annotations.items()):
            return False
    return True


async def test_a_template_added_changed_and_deleted_shows_on_and_leaves_the_objects(env: SiteEnv) -> None:
    await env.create("Site", "west", {"linkAccess": "default"})
    await env.create("Listener", "backend", {"routingKey": "backend", "host": "backend", "port": 8080})
    await env.wait_status("Site", "west", "Ready", within=90)
    await env.wait_for(lambda: env.api.get("secrets", "skupper-site-server", env.namespace), 30, "server Secret")
    # a user's own label on a listener Service: never taken away
    service = await env.service("backend")
    service["metadata"]["labels"]["mine"] = "kept"
    await env.api.update("services", service)

    # added, in the site's namespace: on the existing objects
    await env.api.create("configmaps", template("cost", labels={"example.com/cost-centre": "42"},
                                                annotations={"example.com/owner": "team-a"}), env.namespace)
    await env.wait_for(lambda: _all_have(env, OBJECTS, {"example.com/cost-centre": "42"},
                                         {"example.com/owner": "team-a"}), 30, "the template's keys on every object")
    # a restricted one in the controller's namespace: only listener Services, of every site
    await env.api.create("configmaps", template("listeners", namespace="ops", labels={"example.com/tier": "front"},
                                                kind="Service", labelSelector="internal.skupper.io/listener"), "ops")
    await env.wait_for(lambda: _all_have(env, (("services", "backend"),), {"example.com/tier": "front"}, {}), 30,
                       "the controller namespace's template on the listener Service")
    assert (await _metadata(env, "services", "skupper-router"))[0].get("example.com/tier") is None

    # a new object gets the keys when it is created
    await env.create("Listener", "other", {"routingKey": "other", "host": "other", "port": 8080})
    await env.wait_for(lambda: _all_have(env, (("services", "other"),), {
        "example.com/cost-centre": "42", "example.com/tier": "front"}, {"example.com/owner": "team-a"}), 30,
        "the keys on a new Service")

    # nothing written at rest
    controller = env.controllers[0]
    await asyncio.sleep(2)
    writes = len(controller.writes())
    await asyncio.sleep(3)
    assert controller.writes()[writes:] == []

    # changed: a value changed, an annotation dropped (excluded)
    current = await env.api.get("configmaps", "cost", env.namespace)
    current["metadata"]["labels"]["example.com/cost-centre"] = "43"
    current["data"] = {"exclude": "example.com/owner"}
    await env.api.update("configmaps", current)
    await env.wait_for(lambda: _all_have(env, OBJECTS, {"example.com/cost-centre": "43"},
                                         {"example.com/owner": None}), 30, "the changed template on every object")

    # deleted: its keys leave every object; the other template's stay, and so does the user's label
    await env.api.delete("configmaps", "cost", env.namespace)
    await env.wait_for(lambda: _all_have(env, OBJECTS, {"example.com/cost-centre": None}, {}), 30,
                       "the deleted template's keys gone")
    labels, _ = await _metadata(env, "services", "backend")
    assert labels["example.com/tier"] == "front" and labels["mine"] == "kept"
    await env.api.delete("configmaps", "listeners", "ops")
    await env.wait_for(lambda: _all_have(env, (*OBJECTS, ("services", "other")), {"example.com/tier": None},
                                         {ANNOTATION_KEYS: None}), 30, "no template key left")
    labels, _ = await _metadata(env, "services", "backend")
    assert labels["mine"] == "kept"
    # the certificates themselves were never issued again
    secret = await env.api.get("secrets", "skupper-site-server", env.namespace)
    assert base64.b64decode(secret["data"]["tls.crt"])
