"""kubectl with CustomResourceDefinitions on kubesim: install, printer columns, validation, defaults, removal."""

from __future__ import annotations

import asyncio
import json
import textwrap
from typing import Any

WIDGET_CRD = textwrap.dedent(
    """\
    apiVersion: apiextensions.k8s.io/v1
    kind: CustomResourceDefinition
    metadata:
      name: widgets.example.com
    spec:
      group: example.com
      scope: Namespaced
      names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
      versions:
      - name: v1
        served: true
        storage: true
        subresources: {status: {}}
        additionalPrinterColumns:
        - {name: Size, type: integer, jsonPath: .spec.size}
        - {name: Mode, type: string, jsonPath: .spec.mode}
        - {name: Phase, type: string, jsonPath: .status.phase}
        - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
        schema:
          openAPIV3Schema:
            type: object
            properties:
              spec:
                type: object
                required: [size]
                properties:
                  size: {type: integer, minimum: 1}
                  mode: {type: string, enum: [fast, slow], default: fast}
                  tags:
                    type: object
                    additionalProperties: {type: string}
              status:
                type: object
                properties:
                  phase: {type: string}
    """
)

GADGET_CRD = textwrap.dedent(
    """\
    apiVersion: apiextensions.k8s.io/v1
    kind: CustomResourceDefinition
    metadata:
      name: gadgets.example.com
    spec:
      group: example.com
      scope: Cluster
      names: {plural: gadgets, singular: gadget, kind: Gadget}
      versions:
      - name: v1
        served: true
        storage: true
        additionalPrinterColumns:
        - {name: Color, type: string, jsonPath: .spec.color}
        schema:
          openAPIV3Schema:
            type: object
            properties:
              spec:
                type: object
                properties:
                  color: {type: string}
    """
)


def widget(name: str, spec: dict[str, Any], namespace: str = "default") -> str:
    return json.dumps(
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
    )


async def install(kubectl: Any, crd: str, name: str) -> None:
    result = await kubectl.apply_text(crd)
    assert result.stdout.strip() == f"customresourcedefinition.apiextensions.k8s.io/{name} created"
    await kubectl.run("wait", "--for=condition=Established", f"crd/{name}", "--timeout=30s")


async def test_crd_install_then_get_shows_printer_columns(kubectl: Any) -> None:
    await install(kubectl, WIDGET_CRD, "widgets.example.com")
    created = await kubectl.apply_text(widget("w1", {"size": 3}))
    assert created.stdout.strip() == "widget.example.com/w1 created"

    output = (await kubectl.run("get", "widgets")).stdout
    assert output.splitlines()[0].split() == ["NAME", "SIZE", "MODE", "PHASE", "AGE"], output
    [row] = kubectl.table(output)
    assert (row["NAME"], row["SIZE"], row["MODE"]) == ("w1", "3", "fast"), (
        "the schema default for mode is shown"
    )
    assert row["PHASE"] == "", (
        "a missing printer-column value is a null cell, printed empty (as on a real server)"
    )
    assert row["AGE"]

    by_short_name = (await kubectl.run("get", "wd", "-o", "json")).json()
    assert [i["metadata"]["name"] for i in by_short_name["items"]] == ["w1"]


async def test_crd_client_side_apply_uses_merge_patch(kubectl: Any) -> None:
    await install(kubectl, WIDGET_CRD, "widgets.example.com")
    await kubectl.apply_text(widget("w2", {"size": 1, "tags": {"a": "1", "b": "2"}}))
    unchanged = await kubectl.apply_text(widget("w2", {"size": 1, "tags": {"a": "1", "b": "2"}}))
    assert unchanged.stdout.strip() == "widget.example.com/w2 unchanged"
    before = (await kubectl.run("get", "widget", "w2", "-o", "json")).json()

    configured = await kubectl.apply_text(widget("w2", {"size": 2, "tags": {"a": "1"}}))
    assert configured.stdout.strip() == "widget.example.com/w2 configured"
    after = (await kubectl.run("get", "widget", "w2", "-o", "yaml")).yaml()
    assert after["spec"] == {"size": 2, "mode": "fast", "tags": {"a": "1"}}
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1


async def test_crd_server_side_apply_and_status_is_a_subresource(kubectl: Any) -> None:
    await install(kubectl, WIDGET_CRD, "widgets.example.com")
    await kubectl.apply_text(widget("w3", {"size": 5}), "--server-side")
    first = (await kubectl.run("get", "widget", "w3", "-o", "json")).json()

    # The main resource ignores .status for kinds with the status subresource.
    with_status = json.loads(widget("w3", {"size": 5}))
    with_status["status"] = {"phase": "Ignored"}
    await kubectl.apply_text(json.dumps(with_status), "--server-side")
    obj = (await kubectl.run("get", "widget", "w3", "-o", "json")).json()
    assert "phase" not in obj.get("status", {})

    await kubectl.run(
        "patch",
        "widget",
        "w3",
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status": {"phase": "Ready"}, "spec": {"size": 99}}',
    )
    obj = (await kubectl.run("get", "widget", "w3", "-o", "json")).json()
    assert obj["status"] == {"phase": "Ready"}
    assert obj["spec"]["size"] == 5, "a status write never changes spec"
    assert obj["metadata"]["generation"] == first["metadata"]["generation"], "status writes keep generation"

    rows = {r["NAME"]: r for r in kubectl.table((await kubectl.run("get", "widgets")).stdout)}
    assert (rows["w3"]["SIZE"], rows["w3"]["MODE"], rows["w3"]["PHASE"]) == ("5", "fast", "Ready")


async def test_crd_invalid_objects_are_rejected_with_causes(kubectl: Any) -> None:
    await install(kubectl, WIDGET_CRD, "widgets.example.com")

    bad_enum = await kubectl.apply_text(widget("bad1", {"size": 1, "mode": "warp"}), check=False)
    assert bad_enum.returncode != 0
    assert 'The Widget "bad1" is invalid' in bad_enum.stderr, bad_enum.stderr
    assert "spec.mode" in bad_enum.stderr and "Unsupported value" in bad_enum.stderr

    missing = await kubectl.apply_text(widget("bad2", {"mode": "slow"}), check=False)
    assert missing.returncode != 0
    assert "spec.size" in missing.stderr and "Required value" in missing.stderr, missing.stderr

    wrong_type = await kubectl.apply_text(widget("bad3", {"size": "big"}), check=False)
    assert wrong_type.returncode != 0
    assert "spec.size" in wrong_type.stderr and "Invalid value" in wrong_type.stderr, wrong_type.stderr

    listed = (await kubectl.run("get", "widgets", "-o", "json")).json()
    assert listed["items"] == [], "nothing is half-written by a rejected apply"


async def test_crd_unknown_fields_strict_validation_or_pruning(kubectl: Any) -> None:
    await install(kubectl, WIDGET_CRD, "widgets.example.com")
    manifest = widget("pruned", {"size": 1, "bogus": True})
    # kubectl sends fieldValidation=Strict by default
    strict = await kubectl.apply_text(manifest, check=False)
    assert strict.returncode != 0
    assert 'strict decoding error: unknown field "spec.bogus"' in strict.stderr, strict.stderr
    await kubectl.apply_text(manifest, "--validate=false")  # fieldValidation=Ignore
    obj = (await kubectl.run("get", "widget", "pruned", "-o", "json")).json()
    assert obj["spec"] == {"size": 1, "mode": "fast"}, "unknown fields are pruned when not rejected"


async def test_cluster_scoped_crd(kubectl: Any) -> None:
    await install(kubectl, GADGET_CRD, "gadgets.example.com")
    await kubectl.apply_text(
        json.dumps(
            {
                "apiVersion": "example.com/v1",
                "kind": "Gadget",
                "metadata": {"name": "g1"},
                "spec": {"color": "red"},
            }
        )
    )
    [row] = kubectl.table((await kubectl.run("get", "gadgets")).stdout)
    assert list(row) == ["NAME", "COLOR"], "explicit printer columns replace the default Age column"
    assert (row["NAME"], row["COLOR"]) == ("g1", "red")
    obj = (await kubectl.run("get", "gadget", "g1", "-o", "json")).json()
    assert "namespace" not in obj["metadata"]


async def test_crd_deletion_removes_objects_and_the_resource(kubectl: Any) -> None:
    await install(kubectl, WIDGET_CRD, "widgets.example.com")
    await kubectl.apply_text(widget("doomed", {"size": 1}))
    await kubectl.run("delete", "crd", "widgets.example.com", "--wait=true", "--timeout=60s")

    async def resource_gone() -> bool:
        result = await kubectl.run("get", "widgets", check=False)
        return result.returncode != 0 and (
            "doesn't have a resource type" in result.stderr
            or "could not find the requested resource" in result.stderr
        )

    deadline = asyncio.get_running_loop().time() + 15
    while not await resource_gone():
        assert asyncio.get_running_loop().time() < deadline, "widgets still served after CRD deletion"
        await asyncio.sleep(0.2)

    # Re-installing starts from an empty collection: the old objects were deleted with the CRD.
    await install(kubectl, WIDGET_CRD, "widgets.example.com")
    listed = (await kubectl.run("get", "widgets", "-o", "json")).json()
    assert listed["items"] == []


async def test_get_watch_of_custom_resources_prints_printer_columns(kubectl: Any) -> None:
    await install(kubectl, WIDGET_CRD, "widgets.example.com")
    await kubectl.apply_text(widget("early", {"size": 1}))
    watcher = await kubectl.spawn("get", "widgets", "--watch")
    lines = await kubectl.read_until(watcher.stdout, lambda line: line.startswith("early"))
    assert lines[0].split() == ["NAME", "SIZE", "MODE", "PHASE", "AGE"]

    await kubectl.apply_text(widget("late", {"size": 7, "mode": "slow"}))
    lines = await kubectl.read_until(watcher.stdout, lambda line: line.startswith("late"))
    assert lines[-1].split()[:3] == ["late", "7", "slow"]
