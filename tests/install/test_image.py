"""scripts/build-image makes a runnable image: in a container (crun, via scripts/run-image) its entry point answers
--help and its commands, it runs as root without privileges, ships the router binary (and no HAProxy), and the
printed digest is the archive's manifest digest.

Slow (a Debian root file system and a buildah build: about a minute with warm caches under .cache/image/, two on a
fresh machine). Set LISTENER_OPERATOR_IMAGE_ARCHIVE to an archive built by scripts/build-image to test that one
instead of building (and LISTENER_OPERATOR_IMAGE_DIGEST to the digest it printed: scripts/test sets both).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rendered_install import REPO

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

LISTENER_OPERATOR = str(Path(sys.executable).parent / "listener-operator")


@dataclass(frozen=True)
class Image:
    archive: Path
    digest: str  # as scripts/build-image printed it (empty when given by the environment)


def run(*command: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Image]:
    given = os.environ.get("LISTENER_OPERATOR_IMAGE_ARCHIVE")
    if given:
        yield Image(Path(given), os.environ.get("LISTENER_OPERATOR_IMAGE_DIGEST", ""))
        return
    out = tmp_path_factory.mktemp("image")
    built = run(str(REPO / "scripts" / "build-image"), "--output", str(out), timeout=1100)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (archive,) = out.glob("listener-operator-*.oci.tar")
    yield Image(archive, built.stdout.strip().splitlines()[-1])


def oci(archive: Path) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(manifest digest, manifest, image config) of the archive's only image."""
    with tarfile.open(archive) as tar:
        def blob(digest: str) -> dict[str, Any]:
            member = tar.extractfile("blobs/sha256/" + digest.split(":", 1)[1])
            assert member is not None
            loaded: dict[str, Any] = json.loads(member.read())
            return loaded
        index_file = tar.extractfile("index.json")
        assert index_file is not None
        (descriptor,) = json.loads(index_file.read())["manifests"]
        manifest = blob(descriptor["digest"])
        return descriptor["digest"], manifest, blob(manifest["config"]["digest"])


def in_container(image: Image, *args: str, entrypoint: str | None = None) -> subprocess.CompletedProcess[str]:
    options = ["--entrypoint", entrypoint] if entrypoint else []
    return run(str(REPO / "scripts" / "run-image"), *options, str(image.archive), *args, timeout=300)


def test_the_printed_digest_names_the_archived_image(image: Image) -> None:
    digest, manifest, config = oci(image.archive)
    if image.digest:
        assert image.digest == digest
    assert digest.startswith("sha256:") and len(manifest["layers"]) == 2  # Debian base, then the venv
    assert config["config"]["Entrypoint"] == ["/opt/listener-operator/bin/listener-operator"]
    assert config["config"]["User"] == "0:0"
    assert config["config"]["Labels"]["org.opencontainers.image.version"] == "0.1.0"
    assert config["os"] == "linux" and config["architecture"] == "amd64"


def test_the_entrypoint_answers_help_in_a_container(image: Image) -> None:
    result = in_container(image, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: listener-operator")
    assert "{crd,run," in result.stdout


def test_commands_flags_and_tools_in_the_container(image: Image) -> None:
    script = ("listener-operator run controller --help && echo '=== node' && listener-operator run node --help"
              " && echo '=== crd' && listener-operator crd && echo '=== id' && id -u"
              " && grep CapEff /proc/self/status && service-network-router --version && ! command -v haproxy"
              " && readlink -f /opt/listener-operator/bin/python"
              " && ! test -e /opt/listener-operator/bin/pip")
    result = in_container(image, "-c", script, entrypoint="/bin/sh")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    controller, rest = result.stdout.split("=== node\n")
    node, rest = rest.split("=== crd\n")
    crd, rest = rest.split("=== id\n")
    assert "--listener-class-preset" in controller and "--leader-election-namespace" in controller
    assert "--kubelet-dir" in node and "--node-name" in node
    # the image's package prints the same CRDs as this checkout
    assert crd == run(LISTENER_OPERATOR, "crd").stdout
    lines = rest.splitlines()
    uid, capabilities, router, python = lines[0], lines[1], lines[2], lines[-1]
    assert uid == "0"
    # root, but with the runtime's default capabilities only: not privileged
    assert int(capabilities.split()[1], 16) & (1 << 21) == 0  # no CAP_SYS_ADMIN
    assert router.startswith("service-network-router ")
    assert python == "/usr/bin/python3.11"  # Debian's interpreter
