"""Gaps real clients found in kubesim (issue 14 item 10), each checked with both kubectl binaries: unknown API
versions, `kind: List` documents, `kubectl explain` of built-in kinds, one Kubernetes version for server and nodes."""

from __future__ import annotations

import json
import textwrap
from typing import Any

from test_kubectl_crd import WIDGET_CRD

from kubesim.cluster.kubelet.nodes import KUBELET_VERSION

WIDGET = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "default"},
          "spec": {"size": 1}}


async def install_widgets(kubectl: Any) -> None:
    await kubectl.apply_text(WIDGET_CRD)
    await kubectl.run("wait", "--for=condition=Established", "crd/widgets.example.com")


def write_json(kubectl: Any, name: str, body: dict[str, Any]) -> str:
    path = kubectl.workdir / name
    path.write_text(json.dumps(body))
    return str(path)


async def test_an_unserved_version_is_not_found_and_a_body_of_another_version_is_refused(kubectl: Any) -> None:
    await install_widgets(kubectl)
    body = write_json(kubectl, "v9.json", dict(WIDGET, apiVersion="example.com/v9"))
    # the URL of a version the CRD does not serve: 404, as for any unknown path
    missing = await kubectl.run("create", "--raw", "/apis/example.com/v9/namespaces/default/widgets", "-f", body,
                                check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr, missing.stderr
    # a served URL with a body of an unknown version: 400, nothing stored (it was stored as v1 before)
    refused = await kubectl.run("create", "--raw", "/apis/example.com/v1/namespaces/default/widgets", "-f", body,
                                check=False)
    assert refused.returncode != 0, refused.stdout
    assert ("the API version in the data (example.com/v9) does not match the expected API version "
            "(example.com/v1)") in refused.stderr, refused.stderr
    assert (await kubectl.run("get", "widgets", "-o", "name")).stdout == ""
    # kubectl apply of such a manifest is refused by discovery, which does not list v9
    manifest = await kubectl.apply_text(json.dumps(dict(WIDGET, apiVersion="example.com/v9")), check=False)
    assert manifest.returncode != 0 and 'no matches for kind "Widget" in version "example.com/v9"' in \
        manifest.stderr, manifest.stderr
    # the same body with the served version is created through the same raw path (no Content-Type sent: JSON)
    created = await kubectl.run("create", "--raw", "/apis/example.com/v1/namespaces/default/widgets", "-f",
                                write_json(kubectl, "v1.json", WIDGET))
    assert json.loads(created.stdout)["apiVersion"] == "example.com/v1"


async def test_kubectl_applies_a_list_document(kubectl: Any) -> None:
    await install_widgets(kubectl)
    manifest = textwrap.dedent("""\
        apiVersion: v1
        kind: List
        items:
        - apiVersion: v1
          kind: ConfigMap
          metadata: {name: first, namespace: default}
          data: {a: "1"}
        - apiVersion: example.com/v1
          kind: Widget
          metadata: {name: w, namespace: default}
          spec: {size: 2}
        """)
    result = await kubectl.apply_text(manifest)
    assert "configmap/first created" in result.stdout and "widget.example.com/w created" in result.stdout
    again = await kubectl.apply_text(manifest)
    assert "configmap/first unchanged" in again.stdout
    # the server still validates each item
    bad = await kubectl.apply_text(manifest.replace("size: 2", "size: 0"), check=False)
    assert bad.returncode != 0 and "spec.size" in bad.stderr, bad.stderr


async def test_kubectl_explain_shows_built_in_kinds(kubectl: Any) -> None:
    spec = (await kubectl.run("explain", "pod.spec")).stdout
    assert "FIELD: spec <PodSpec>" in spec and "containers\t<[]Container> -required-" in spec, spec
    ports = (await kubectl.run("explain", "service.spec.ports.targetPort")).stdout
    assert "targetPort <IntOrString>" in ports, ports
    deployment = (await kubectl.run("explain", "deployment.spec.replicas")).stdout
    assert "GROUP:      apps" in deployment and "replicas <integer>" in deployment, deployment
    # custom resources keep their own schemas
    await install_widgets(kubectl)
    widget = (await kubectl.run("explain", "widgets.spec")).stdout
    assert "size\t<integer> -required-" in widget, widget


async def test_the_server_reports_the_version_its_nodes_run(kubectl: Any) -> None:
    server = (await kubectl.run("version", "-o", "json")).json()["serverVersion"]
    assert server["gitVersion"] == KUBELET_VERSION == "v1.37.1-kubesim"
    assert (server["major"], server["minor"]) == ("1", "37")
