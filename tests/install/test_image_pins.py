"""The image's Python dependencies are pinned: deploy/image/*.txt hold exact versions with sha256 hashes and agree
with pyproject.toml (scripts/build-image --lock re-derives them after a dependency change)."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from rendered_install import REPO

LINE = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>[^ ]+) --hash=sha256:[0-9a-f]{64}$")


def pins(file_name: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in (REPO / "deploy" / "image" / file_name).read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        match = LINE.fullmatch(line)
        assert match, f"{file_name}: not 'name==version --hash=sha256:<64 hex>': {line}"
        found[canonicalize_name(match["name"])] = match["version"]
    return found


def test_runtime_wheels_match_the_pins_of_pyproject() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    locked = pins("requirements.txt")
    for dependency in project["dependencies"]:
        requirement = Requirement(dependency)
        (specifier,) = requirement.specifier  # the project pins every direct dependency exactly
        assert specifier.operator == "==", dependency
        assert locked.get(canonicalize_name(requirement.name)) == specifier.version, \
            f"{dependency} is not what deploy/image/requirements.txt pins: run scripts/build-image --lock"
    assert canonicalize_name(project["name"]) not in locked  # the project wheel is built from the checkout


def test_build_backend_is_pinned_within_the_build_system_requirements() -> None:
    build_system = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]
    locked = pins("build-requirements.txt")
    for dependency in build_system["requires"]:
        requirement = Requirement(dependency)
        version = locked.get(canonicalize_name(requirement.name))
        assert version is not None and SpecifierSet(str(requirement.specifier)).contains(version), dependency
