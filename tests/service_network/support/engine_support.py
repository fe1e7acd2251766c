"""Container engines of the test's own for container system sites (``--platform podman|docker``), each on a socket of
the test (as upstream's sites reach the engine: its API socket) with its own storage (nothing of the host's images or
containers is seen or touched) and this project's image loaded into it: Podman's API service (``podman system
service``), and a Docker daemon (``dockerd``: no bridge, no iptables rules, no IP forwarding, its data and state
under the test's directory; the image handed over by ``podman save --format docker-archive``, as Debian's Docker
20.10 loads no OCI archive).

The image is the archive ``$LISTENER_OPERATOR_IMAGE_ARCHIVE`` names (scripts/build-image's output), else built here
with scripts/build-image (a minute or two with warm caches). Where podman (or dockerd) is not installed the tests are
skipped with that reason (scripts/setup-system --podman, --docker install them), unless ``REQUIRE_PODMAN=1`` (or
``REQUIRE_DOCKER=1``): then it is a failure.

``containers.conf`` (``CONTAINERS_CONF``): the ``runc`` runtime and explicit ``nofile``/``nproc`` ulimits below
this process's hard limits. Both are for hosts like the CI machine (a cgroup "hybrid" host where Podman's default
``crun`` refuses to start containers, and where no process may raise a limit, while Podman asks for its defaults);
docs/skupper-cli.md, "Sites on Podman and Docker hosts", shows the file."""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SERVICE_SECONDS = 30.0


@dataclass(frozen=True)
class LocalEngine:
    """The test's engine: ``endpoint`` for ``CONTAINER_ENDPOINT``, ``command`` to run podman (or docker) on its
    storage."""

    endpoint: str
    command: tuple[str, ...]
    conf: Path
    image: str

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.command, *args], capture_output=True, text=True, timeout=timeout, check=False,
                              env={**os.environ, "CONTAINERS_CONF": str(self.conf)})

    def names(self) -> list[str]:
        """Every container of the engine (running or not)."""
        listed = self.run("ps", "--all", "--format", "{{.Names}}")
        assert listed.returncode == 0, listed.stderr
        return listed.stdout.split()


def _limit(which: int, at_most: int) -> int:
    _, hard = resource.getrlimit(which)
    return at_most if hard == resource.RLIM_INFINITY else min(hard, at_most)


def containers_conf(path: Path) -> Path:
    """The test's containers.conf (see the module's docstring): ulimits no higher than ours (16384 processes at
    most: Podman itself runs with no more than 32768 here)."""
    nofile, nproc = _limit(resource.RLIMIT_NOFILE, 65536), _limit(resource.RLIMIT_NPROC, 16384)
    runtime = 'runtime = "runc"\n' if shutil.which("runc") or Path("/usr/sbin/runc").exists() else ""
    path.write_text(f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
                    f"\n[engine]\n{runtime}", encoding="utf-8")
    return path


def _unavailable(reason: str, required: str = "REQUIRE_PODMAN") -> None:
    if os.environ.get(required) == "1":
        pytest.fail(f"{required}=1: {reason}")
    pytest.skip(reason)


def _wait_for_socket(socket: Path, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + SERVICE_SECONDS
    while not socket.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert socket.exists(), log.read_text(errors="replace")[-2000:]


def _end(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(20)
    if process.poll() is None:
        process.kill()
        process.wait(10)


def image_archive(work: Path) -> Path:
    if given := os.environ.get("LISTENER_OPERATOR_IMAGE_ARCHIVE"):
        return Path(given)
    out = work / "image"
    built = subprocess.run([str(REPO / "scripts" / "build-image"), "--output", str(out)], capture_output=True,
                           text=True, timeout=1100, check=False)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (archive,) = out.glob("listener-operator-*.oci.tar")
    return archive


@contextlib.contextmanager
def podman_engine() -> Iterator[LocalEngine]:
    """Start the engine, load the image, yield; then remove every container, stop the service, drop the storage."""
    if shutil.which("podman") is None:
        _unavailable("podman is not installed (scripts/setup-system --podman installs it)")
    if os.geteuid() != 0:
        _unavailable("these tests run Podman as root (a rootless Podman needs subordinate ids set up)")
    work = Path(tempfile.mkdtemp(prefix="podman-", dir="/tmp"))
    conf = containers_conf(work / "containers.conf")
    command = ("podman", "--root", str(work / "root"), "--runroot", str(work / "run"))
    socket = work / "podman.sock"
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    service = subprocess.Popen([*command, "system", "service", "--time=0", f"unix://{socket}"], env=env,
                               stdout=subprocess.DEVNULL, stderr=(work / "service.log").open("wb"),
                               start_new_session=True)
    podman = LocalEngine(f"unix://{socket}", command, conf, "")
    try:
        _wait_for_socket(socket, service, work / "service.log")
        loaded = podman.run("load", "--quiet", "-i", str(image_archive(work)), timeout=600)
        assert loaded.returncode == 0, loaded.stdout + loaded.stderr
        image = loaded.stdout.strip().rsplit("Loaded image: ", 1)[-1].strip()
        yield LocalEngine(podman.endpoint, command, conf, image)
    finally:
        podman.run("rm", "--all", "--force", "--time", "2")
        _end(service)
        _unmount_under(work)
        shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def docker_engine(podman: LocalEngine) -> Iterator[LocalEngine]:
    """A Docker daemon of the test's own, holding ``podman``'s image; every container removed at the end, the
    daemon stopped, its directory removed."""
    if shutil.which("dockerd") is None:
        _unavailable("dockerd is not installed (scripts/setup-system --docker installs it)", "REQUIRE_DOCKER")
    work = Path(tempfile.mkdtemp(prefix="docker-", dir="/tmp"))
    socket = work / "docker.sock"
    log = work / "dockerd.log"
    daemon = subprocess.Popen(
        ["dockerd", "--data-root", str(work / "data"), "--exec-root", str(work / "exec"), "--pidfile",
         str(work / "docker.pid"), "-H", f"unix://{socket}", "--bridge=none", "--iptables=false",
         "--ip6tables=false", "--ip-forward=false", "--ip-masq=false"],
        stdout=subprocess.DEVNULL, stderr=log.open("wb"), start_new_session=True)
    docker = LocalEngine(f"unix://{socket}", ("docker", "-H", f"unix://{socket}"), podman.conf, podman.image)
    try:
        _wait_for_socket(socket, daemon, log)
        archive = work / "image.tar"
        saved = podman.run("save", "--quiet", "--format", "docker-archive", "-o", str(archive), podman.image,
                           timeout=300)
        assert saved.returncode == 0, saved.stderr
        loaded = docker.run("load", "--quiet", "-i", str(archive), timeout=300)
        assert loaded.returncode == 0, loaded.stdout + loaded.stderr
        archive.unlink()
        yield docker
    finally:
        docker.run("rm", "--force", *docker.names())
        _end(daemon)
        _unmount_under(work)        # what dockerd leaves mounted (its default network namespace)
        shutil.rmtree(work, ignore_errors=True)


def _unmount_under(directory: Path) -> None:
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(f"{directory}/")]
    for point in sorted(points, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, timeout=30, check=False)
