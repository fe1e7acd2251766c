"""Where the tests find upstream Skupper's files, and the facts of them kept in this repository.

Upstream's CRDs, samples and hello-world manifests are read from a copy of upstream's repository that is *not* part
of this one: ``../shared/reference/upstream-skupper`` beside the checkout (this project's CI has it there), or the
directory named by ``$UPSTREAM_SKUPPER_REFERENCE``. A test that needs the files themselves calls :func:`reference`:
without them it is skipped, saying what is missing and how to provide it, unless ``$REQUIRE_UPSTREAM_REFERENCE`` is
``1`` (``.ci/run`` sets it), which turns the skip into a failure.

What the CRD comparison needs of upstream's CRDs is facts, not prose: names, scope, versions, printer columns and
every schema keyword but ``description``. Those facts are kept here in ``upstream_facts/crds.json``, written from the
reference by ``scripts/upstream-facts`` (this module run as a script), so the comparison runs in every clone;
``test_upstream_crds.py`` checks that the file still matches the reference wherever the reference is present.

Run as a script: ``python tests/service_network/support/upstream_reference.py [--check]`` writes (or checks) the
facts file from the reference.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

__all__ = ["DEFAULT_REFERENCE", "FACTS", "PATH_VARIABLE", "REQUIRE_VARIABLE", "crd_facts", "facts_from",
           "reference", "reference_dir", "upstream_crd_facts"]

REPO = Path(__file__).resolve().parents[3]
DEFAULT_REFERENCE = REPO.parent / "shared" / "reference" / "upstream-skupper"
PATH_VARIABLE = "UPSTREAM_SKUPPER_REFERENCE"
REQUIRE_VARIABLE = "REQUIRE_UPSTREAM_REFERENCE"
FACTS = Path(__file__).resolve().parent / "upstream_facts" / "crds.json"

#: Prose: ours is written here, not copied, and the comparison ignores it.
_PROSE = "description"


def reference_dir() -> Path:
    """The directory upstream's files are read from (it may not exist)."""
    configured = os.environ.get(PATH_VARIABLE)
    return Path(configured).expanduser() if configured else DEFAULT_REFERENCE


def reference(*parts: str) -> Path:
    """``parts`` under the reference directory; skips the calling test when it is missing (fails it when
    ``$REQUIRE_UPSTREAM_REFERENCE=1``)."""
    import pytest

    path = reference_dir().joinpath(*parts)
    if path.exists():
        return path
    where = (f"${PATH_VARIABLE}={os.environ[PATH_VARIABLE]}" if os.environ.get(PATH_VARIABLE)
             else f"{DEFAULT_REFERENCE} (shared/reference beside the checkout)")
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0].rpartition("::")[2]
    reason = (f"{test + ': ' if test else ''}upstream Skupper's files are missing: {path} does not exist. They are read from {where}; "
              f"put a copy of upstream's reference files there (crds/, samples/, controller-example/, "
              f"e2e-hello-world/) or set ${PATH_VARIABLE} to such a directory")
    if os.environ.get(REQUIRE_VARIABLE) == "1":
        pytest.fail(f"{reason} (${REQUIRE_VARIABLE}=1: they are required here)", pytrace=False)
    # reported at the test's own location (as a skip mark is), so the summary names the test, not this helper
    raise pytest.skip.Exception(reason, _use_item_location=True)


def _strip_prose(node: Any, in_properties: bool = False) -> Any:
    """``node`` without ``description`` keywords. Under ``properties`` the keys are field names and are kept, so a
    field that happens to be called ``description`` stays."""
    if isinstance(node, Mapping):
        return {key: _strip_prose(value, key == "properties" and not in_properties)
                for key, value in node.items() if in_properties or key != _PROSE}
    if isinstance(node, list):
        return [_strip_prose(item) for item in node]
    return node


def crd_facts(crd: Mapping[str, Any]) -> dict[str, Any]:
    """The facts of one CRD a user or a tool can see: group, names, scope, and per version served, storage,
    subresources, printer columns and the schema without prose."""
    spec = crd["spec"]
    versions = [{key: version[key] for key in ("name", "served", "storage", "subresources", "schema",
                                                "additionalPrinterColumns") if key in version}
                for version in spec["versions"]]
    return {"apiVersion": crd["apiVersion"], "kind": crd["kind"], "metadata": {"name": crd["metadata"]["name"]},
            "spec": _strip_prose({"group": spec["group"], "names": spec["names"], "scope": spec["scope"],
                                  "versions": versions})}


def facts_from(directory: Path) -> dict[str, dict[str, Any]]:
    """Every CRD in ``directory/crds/*.yaml`` as facts, by kind."""
    found: dict[str, dict[str, Any]] = {}
    for f in sorted((directory / "crds").glob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            if doc:
                found[doc["spec"]["names"]["kind"]] = crd_facts(doc)
    return found


def upstream_crd_facts() -> dict[str, dict[str, Any]]:
    """The facts kept in this repository (``upstream_facts/crds.json``)."""
    document: dict[str, Any] = json.loads(FACTS.read_text())
    crds: dict[str, dict[str, Any]] = document["crds"]
    return crds


def _render(crds: Mapping[str, Any], source: str) -> str:
    document = {"source": source, "generator": "scripts/upstream-facts", "crds": crds}
    return json.dumps(document, indent=1, sort_keys=True) + "\n"


def _source(directory: Path) -> str:
    """The reference's provenance line (its README names the upstream commit)."""
    readme = directory / "README.md"
    for line in readme.read_text().splitlines() if readme.exists() else []:
        if "commit" in line:
            return line.strip()
    return str(directory)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    directory = reference_dir()
    if not (directory / "crds").is_dir():
        print(f"upstream-facts: {directory / 'crds'} does not exist (set ${PATH_VARIABLE})", file=sys.stderr)
        return 2
    crds = facts_from(directory)
    current = json.loads(FACTS.read_text())["crds"] if FACTS.exists() else None
    if check:
        if current != crds:
            print(f"upstream-facts: {FACTS} does not match {directory}; run scripts/upstream-facts", file=sys.stderr)
            return 1
        print(f"upstream-facts: {FACTS.name} matches {directory} ({len(crds)} CRDs)")
        return 0
    FACTS.parent.mkdir(exist_ok=True)
    FACTS.write_text(_render(crds, _source(directory)))
    print(f"upstream-facts: wrote {FACTS} ({len(crds)} CRDs from {directory})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
