"""Which platform runs a system site (standard library and PyYAML only: the command line reads it before loading the
site): ``linux`` (the router as a process of this user), ``podman`` or ``docker`` (the router in a container of the
engine), as upstream's ``internal/platform.yaml`` records it in the site's directory."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

__all__ = ["CONTAINER_PLATFORMS", "DEFAULT", "PLATFORMS", "PlatformMismatch", "chosen", "read_platform",
           "write_platform"]

PLATFORMS = ("podman", "docker", "linux")
CONTAINER_PLATFORMS = ("podman", "docker")
DEFAULT = "linux"                 # upstream's is podman: see docs/skupper-cli.md, "Sites on Podman and Docker hosts"
ENV = "SKUPPER_PLATFORM"


class PlatformMismatch(Exception):
    """The namespace runs on another platform than the one asked for (upstream's words)."""


def platform_file(base: Path) -> Path:
    return base / "internal" / "platform.yaml"


def read_platform(base: Path) -> str | None:
    """The platform ``internal/platform.yaml`` of the site at ``base`` names (None: no file, or not a platform)."""
    try:
        loaded = yaml.safe_load(platform_file(base).read_text(encoding="utf-8")[:4096])
    except (OSError, yaml.YAMLError):
        return None
    value = loaded.get("platform") if isinstance(loaded, dict) else None
    return value if value in PLATFORMS else None


def write_platform(base: Path, platform: str) -> None:
    path = platform_file(base)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"platform: {platform}\n", encoding="utf-8")


def requested(flag: str, environ: dict[str, str] | None = None) -> str:
    """What the user asked for: ``--platform``, else ``SKUPPER_PLATFORM`` ("" when neither; ``kubernetes`` counts as
    neither, as upstream's system verbs treat it)."""
    value = flag or (os.environ if environ is None else environ).get(ENV, "")
    return "" if value == "kubernetes" else value


def chosen(flag: str, base: Path, environ: dict[str, str] | None = None) -> str:
    """The platform of a verb on the site at ``base``: the one asked for, else the one the site records, else
    ``DEFAULT``. ``ValueError`` for a platform that is not one of ``PLATFORMS``."""
    value = requested(flag, environ)
    if value and value not in PLATFORMS:
        raise ValueError(f'platform "{value}" is not one of {", ".join(PLATFORMS)} (skupper system)')
    return value or read_platform(base) or DEFAULT


def check_same(asked: str, base: Path, namespace: str) -> None:
    """Upstream's refusal when the namespace already runs on another platform than ``asked``."""
    configured = read_platform(base)
    if configured is not None and asked and configured != asked:
        raise PlatformMismatch(f'existing namespace uses "{configured}" platform and it cannot change to "{asked}"')
