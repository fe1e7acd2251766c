"""Our ``skupper.io`` CRDs against upstream's, keyword by keyword, with every deliberate difference listed in
``docs/service-network.md``; and every upstream sample applied with kubectl: accepted, or refused naming exactly the
fields upstream's CRD requires.

The comparison reads the facts of upstream's CRDs kept in this repository (``upstream_facts/crds.json``), so it runs
in every clone; where upstream's files are present (``upstream_reference``), the facts are checked against them and
the samples are applied."""

from __future__ import annotations

import asyncio
import copy
import re
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from crd_compare import Difference, differences
from upstream_reference import FACTS, facts_from, reference, reference_dir, upstream_crd_facts

from kubesim.errors import ApiError
from kubesim.sim import KubeSim
from service_network.crd.generate import all_crds

REPO = Path(__file__).resolve().parents[3]
DOCS = REPO / "docs" / "service-network.md"
CRD_RESOURCE = "customresourcedefinitions.apiextensions.k8s.io"


def upstream_crds() -> dict[str, dict[str, Any]]:
    """Upstream's CRDs as facts (no prose), by kind."""
    return upstream_crd_facts()


def documented_differences() -> set[tuple[str, str, str]]:
    """(kind, field, keyword) rows of the table under "The CRDs compared with upstream's"."""
    text = DOCS.read_text()
    section = text.split("### The CRDs compared with upstream's", 1)[1].split("\n#", 1)[0]
    rows = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] not in ("kind", "---"):
            rows.add((cells[0], cells[1], cells[2]))
    return rows


def all_differences() -> list[Difference]:
    ours = {c["spec"]["names"]["kind"]: c for c in all_crds()}
    out: list[Difference] = []
    for kind, crd in upstream_crds().items():
        if kind not in ours:
            out.append(Difference(kind, "-", "-", "served", None))
            continue
        out.extend(differences(crd, ours[kind]))
    out.extend(Difference(kind, "-", "-", None, "served") for kind in set(ours) - set(upstream_crds()))
    return out


def test_every_difference_from_upstreams_crds_is_documented_with_its_reason() -> None:
    found = all_differences()
    listed = documented_differences()
    undocumented = [str(d) for d in found if (d.kind, d.path, d.key) not in listed]
    assert not undocumented, "differences from upstream's CRDs not listed in docs/service-network.md:\n" + "\n".join(
        undocumented)
    stale = listed - {(d.kind, d.path, d.key) for d in found}
    assert not stale, f"listed in docs/service-network.md but no longer different: {sorted(stale)}"
    assert len(upstream_crds()) == 12


def test_the_facts_kept_here_are_upstreams() -> None:
    """``upstream_facts/crds.json`` is what ``scripts/upstream-facts`` writes from upstream's CRDs today."""
    reference("crds")
    assert facts_from(reference_dir()) == upstream_crds(), (
        f"{FACTS} no longer matches {reference_dir()}: run scripts/upstream-facts and review the differences")


def test_the_facts_are_read_without_prose_and_keep_every_keyword(tmp_path: Path) -> None:
    """The facts keep every keyword the comparison looks at and drop only ``description`` (a field named so
    stays): what the check above compares is what the comparison needs."""
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "things.example.com", "annotations": {"x": "y"}},
           "spec": {"group": "example.com", "scope": "Namespaced", "conversion": {"strategy": "None"},
                    "names": {"kind": "Thing", "plural": "things", "shortNames": ["th"]},
                    "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                                  "additionalPrinterColumns": [{"name": "A", "type": "string", "jsonPath": ".a",
                                                                "description": "prose"}],
                                  "schema": {"openAPIV3Schema": {"type": "object", "description": "prose",
                                             "properties": {"description": {"type": "string", "enum": ["a"],
                                                                            "description": "prose"}}}}}]}}
    (tmp_path / "crds").mkdir()
    (tmp_path / "crds" / "thing.yaml").write_text(yaml.safe_dump(crd))
    facts = facts_from(tmp_path)["Thing"]
    version = facts["spec"]["versions"][0]
    assert version["schema"] == {"openAPIV3Schema": {"type": "object", "properties": {
        "description": {"type": "string", "enum": ["a"]}}}}
    assert version["additionalPrinterColumns"] == [{"name": "A", "type": "string", "jsonPath": ".a"}]
    assert facts["spec"]["names"]["shortNames"] == ["th"] and facts["metadata"] == {"name": "things.example.com"}
    assert differences(crd, facts) == []


def test_the_comparison_finds_what_a_user_would_notice() -> None:
    """The comparison above cannot pass by comparing nothing: each kind of change is found."""
    up = upstream_crds()["MultiKeyListener"]

    def changed(edit: Any) -> list[str]:
        ours = copy.deepcopy(up)
        edit(ours["spec"]["versions"][0])
        return [f"{d.path} {d.key}" for d in differences(up, ours)]

    def schema(v: dict[str, Any]) -> dict[str, Any]:
        return v["schema"]["openAPIV3Schema"]["properties"]

    assert changed(lambda v: schema(v)["spec"]["required"].remove("host")) == ["spec required"]
    assert changed(lambda v: schema(v)["spec"]["properties"]["port"].update(type="string")) == ["spec.port type"]
    assert changed(lambda v: schema(v)["spec"]["properties"].pop("observer")) == ["spec.observer -"]
    assert changed(lambda v: schema(v)["spec"]["properties"]["observer"]["enum"].pop()) == ["spec.observer enum"]
    assert changed(lambda v: schema(v)["spec"]["properties"]["strategy"].pop("x-kubernetes-validations")) == [
        "spec.strategy x-kubernetes-validations"]
    assert changed(lambda v: schema(v)["spec"]["properties"]["strategy"]["properties"]["weighted"]["properties"][
        "routingKeys"]["additionalProperties"].update(type="string")) == [
        "spec.strategy.weighted.routingKeys{} type"]
    assert changed(lambda v: v["additionalPrinterColumns"].pop()) == ["columns -"]
    assert changed(lambda v: schema(v)["status"]["properties"]["strategy"]["properties"]["priority"][
        "properties"]["routingKeysReachable"]["items"].update(format="date-time")) == [
        "status.strategy.priority.routingKeysReachable[] format"]
    assert changed(lambda v: v["schema"]["openAPIV3Schema"]["properties"]["spec"].update(description="x")) == []


# ---- every upstream sample, applied with kubectl -------------------------------------------------------------------

def _missing_required(value: Any, schema: Mapping[str, Any], path: str) -> Iterator[str]:
    """The fields ``value`` lacks that ``schema`` (upstream's) requires: what an API server names as
    ``<path>: Required value``."""
    if isinstance(value, Mapping):
        for name in schema.get("required") or []:
            if name not in value:
                yield f"{path}.{name}".lstrip(".")
        for name, sub in (schema.get("properties") or {}).items():
            if name in value:
                yield from _missing_required(value[name], sub, f"{path}.{name}")
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            yield from _missing_required(item, schema["items"], f"{path}[{i}]")


def _samples() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for folder in ("samples", "controller-example"):
        for f in sorted(reference(folder).glob("*.yaml")):
            for i, doc in enumerate(yaml.safe_load_all(f.read_text())):
                if doc:
                    out.append((f"{folder}/{f.name}#{i}", doc))
    return out


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[KubeSim]:
    async with KubeSim(kubeconfig_path=tmp_path / "kubeconfig") as server:
        for crd in all_crds():
            await server.api.create(CRD_RESOURCE, crd)
        yield server


async def _kubectl(sim: KubeSim, tmp_path: Path, *args: str, stdin: bytes | None = None) -> tuple[int, str]:
    kubectl = Path(sys.executable).parent / "kubectl"
    process = await asyncio.create_subprocess_exec(
        str(kubectl), f"--kubeconfig={sim.kubeconfig_path}", f"--cache-dir={tmp_path / 'cache'}", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={"HOME": str(tmp_path)})
    out, _ = await process.communicate(stdin)
    return process.returncode or 0, out.decode()


async def test_every_upstream_sample_is_accepted_or_refused_naming_upstreams_required_fields(
        sim: KubeSim, tmp_path: Path) -> None:
    samples = _samples()
    assert len(samples) >= 19
    upstream = upstream_crds()
    namespaces = {doc.get("metadata", {}).get("namespace") for _, doc in samples} - {None}
    for ns in sorted(namespaces | {"samples"}):
        await sim.api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    refused: dict[str, list[str]] = {}
    for where, doc in samples:
        schema = upstream[doc["kind"]]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        expected = sorted(_missing_required(doc, schema, ""))
        namespace = doc.get("metadata", {}).get("namespace") or "samples"
        code, out = await _kubectl(sim, tmp_path, "apply", "-n", namespace, "-f", "-",
                                   stdin=yaml.safe_dump(doc).encode())
        if not expected:
            assert code == 0, f"{where} refused: {out}"
            assert re.search(r" (created|configured|unchanged)$", out.strip()), out
            continue
        assert code != 0, f"{where} accepted; upstream's CRD requires {expected}"
        named = sorted(re.findall(r"([\w.\[\]]+): Required value", out))
        assert named == expected, f"{where}: {out}"
        refused[where] = named
        assert len(out) < 2000
    # upstream's own samples that upstream's CRDs refuse
    assert refused == {
        "samples/skupper_v2alpha1_certificate.yaml#0": ["spec.ca", "spec.subject"],
        "samples/skupper_v2alpha1_router_access.yaml#0": ["spec.roles", "spec.tlsCredentials"],
        "samples/skupper_v2alpha1_secured_access.yaml#0": ["spec.ports", "spec.selector"],
    }
    code, out = await _kubectl(sim, tmp_path, "get", "multikeylisteners,acnr,acnrb", "-A", "-o", "name")
    assert code == 0, out
    assert sorted(out.split()) == sorted([
        "multikeylistener.skupper.io/backend-priority", "multikeylistener.skupper.io/backend-weighted",
        "attachedconnector.skupper.io/backend", "attachedconnectorbinding.skupper.io/backend"])


async def test_the_multikeylistener_cel_rules_are_upstreams(sim: KubeSim) -> None:
    """The CRD's CEL rules, evaluated by kubesim as an API server does: exactly one strategy, and its kind fixed."""
    await sim.api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "west"}})
    resource = "multikeylisteners.skupper.io"

    def mkl(name: str, strategy: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "skupper.io/v2alpha1", "kind": "MultiKeyListener",
                "metadata": {"name": name, "namespace": "west"},
                "spec": {"host": name, "port": 8080, "strategy": strategy}}

    for strategy in ({}, {"priority": {"routingKeys": ["a"]}, "weighted": {"routingKeys": {"a": 1}}}):
        with pytest.raises(ApiError) as refused:
            await sim.api.create(resource, mkl("bad", strategy), "west")
        assert [f"{c['field']}: {c['message']}" for c in refused.value.causes or []] == [
            'spec.strategy: Invalid value: "object": exactly one of the fields in [priority weighted] must be set']
    created = await sim.api.create(resource, mkl("good", {"priority": {"routingKeys": ["a", "b"]}}), "west")
    created["spec"]["strategy"] = {"weighted": {"routingKeys": {"a": 1}}}
    with pytest.raises(ApiError) as changed:
        await sim.api.update(resource, created)
    assert [c["message"] for c in changed.value.causes or []] == ['Invalid value: "object": strategy is immutable']
