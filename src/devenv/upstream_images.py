"""Upstream Skupper's images as kubesim runs them: their programs are the ones built in ``../shared/peers/``.

Upstream Skupper 2.2.1's install manifests name ``quay.io/skupper/controller:2.2.1`` and, for the router Pods its
controller creates, ``quay.io/skupper/kube-adaptor:2.2.1`` and ``quay.io/skupper/skupper-router:3.5.1``. Their
programs are built from upstream's sources in the project's shared directory (``../shared/peers/`` beside the
checkout, or ``$UPSTREAM_PEERS``): ``skupper-2.2.1/bin/{controller,kube-adaptor}``,
``skupper-router-3.5.1/sbin/skrouterd`` with its Python modules. ``UPSTREAM_IMAGES`` is the mapping, as data: for
each image, its ``CMD``, ``ENV`` and working directory as upstream's Dockerfiles/Containerfile state them, which of
its paths are which files of the peers directory, and what the program needs.

The Go programs read fixed container paths (the ServiceAccount token, the files their Pod spec mounts), so the
images run with ``isolation="mount-namespace"``: every container in a root of its own with its volumes at their
container paths (``kubesim.cluster.runtime.rootfs``). They bind fixed ports on every address and talk over
``localhost`` inside a Pod, so they run with ``network="pod"``: a network namespace per Pod
(``kubesim.cluster.runtime.podnet``), one ``PodNetworks`` for the three images.

Deliberate difference, the router: upstream's image runs ``/home/skrouterd/bin/launch.sh`` (bash scripts from the
router's source tree that concatenate ``$QDROUTERD_CONF`` into ``/tmp/skrouterd.json``, expand ``${VAR}`` with
Python and exec ``skrouterd``). The peers directory holds the built router, not those scripts, and this build of
``skrouterd`` does not find its Python modules by itself; so the image's command here is ``sh -c`` doing the same
for the JSON file upstream's Deployment names (``$QDROUTERD_CONF`` expanded with Python's ``os.path.expandvars``
into ``/tmp/skrouterd.json``, the router id ``<site>-${HOSTNAME}`` becoming the Pod's name) and running
``skrouterd -I <its modules> -c /tmp/skrouterd.json``, with the machine's ``sh`` and ``python3``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kubesim.cluster.runtime.hostprocess import MOUNT_NAMESPACE, HostImage, HostProcessHandler
from kubesim.cluster.runtime.podnet import PodNetworks
from kubesim.cluster.runtime.registry import RuntimeRegistry

REPO = Path(__file__).resolve().parents[2]
PEERS_VARIABLE = "UPSTREAM_PEERS"
#: Where the peers are looked for without ``$UPSTREAM_PEERS``: ``shared/peers`` beside the checkout (CI's clone,
#: ``/work/main``) or beside the directory of worktrees (``/work/wt/<name>``).
DEFAULT_PEERS = (REPO.parent / "shared" / "peers", REPO.parent.parent / "shared" / "peers")
ROUTER_HOME = "/home/skrouterd"
ROUTER_PYTHON = f"{ROUTER_HOME}/lib/skupper-router/python"


class PeersMissing(Exception):
    """Upstream's built programs are not on this machine."""


@dataclass(frozen=True)
class UpstreamImage:
    """One of upstream's images: ``files`` maps image paths to paths under the peers directory (a file or a
    directory the program needs), ``cmd``/``env``/``working_dir`` are the image's."""

    repository: str
    tag: str
    cmd: tuple[str, ...]
    files: Mapping[str, str]
    env: Mapping[str, str] = field(default_factory=dict)
    working_dir: str = "/"

    def host_image(self, peers: Path) -> HostImage:
        """The image with its files found under ``peers`` (``PeersMissing`` names the first absent one)."""
        files = {}
        for image_path, relative in self.files.items():
            host = peers / relative
            if not host.exists():
                raise PeersMissing(f"{self.repository}:{self.tag} needs {relative} of the peers directory, "
                                   f"and {host} does not exist")
            files[image_path] = host
        return HostImage(cmd=self.cmd, env=self.env, working_dir=self.working_dir, files=files,
                         isolation=MOUNT_NAMESPACE, network="pod")


#: What upstream's launch.sh does for a JSON configuration file in $QDROUTERD_CONF (its configure.sh copies the file
#: to /tmp/skrouterd.json and expands ${VAR} there with Python's os.path.expandvars), then skrouterd on that file.
LAUNCH = ("python3 -c 'import os; text = open(os.environ[\"QDROUTERD_CONF\"]).read(); "
          "open(\"/tmp/skrouterd.json\", \"w\").write(os.path.expandvars(text))' && "
          f"exec skrouterd -I {ROUTER_PYTHON} -c /tmp/skrouterd.json")

GO_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

UPSTREAM_IMAGES: tuple[UpstreamImage, ...] = (
    # Dockerfile.controller: FROM scratch, WORKDIR /app, the static binary at /app/controller, CMD ["/app/controller"]
    UpstreamImage("quay.io/skupper/controller", "2.2.1", cmd=("/app/controller",),
                  files={"/app/controller": "skupper-2.2.1/bin/controller"}, env=GO_ENV, working_dir="/app"),
    # Dockerfile.kube-adaptor: the same layout, CMD ["/app/kube-adaptor"] (its init container runs it with -init)
    UpstreamImage("quay.io/skupper/kube-adaptor", "2.2.1", cmd=("/app/kube-adaptor",),
                  files={"/app/kube-adaptor": "skupper-2.2.1/bin/kube-adaptor"}, env=GO_ENV, working_dir="/app"),
    # Containerfile: skrouterd in /usr/sbin there; here /home/skrouterd/sbin (kubesim binds the machine's /usr
    # read-only); QDROUTERD_HOME as upstream's; the command replaces launch.sh (see the module's docstring; ``/bin/sh`` is the machine's)
    UpstreamImage("quay.io/skupper/skupper-router", "3.5.1",
                  cmd=("/bin/sh", "-c", LAUNCH),
                  files={"/home/skrouterd/sbin/skrouterd": "skupper-router-3.5.1/sbin/skrouterd",
                         "/home/skrouterd/lib/skupper-router": "skupper-router-3.5.1/lib/skupper-router"},
                  env={"PATH": "/home/skrouterd/sbin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                       "QDROUTERD_HOME": "/home/skrouterd", "VERSION": "3.5.1"},
                  working_dir="/home/skrouterd/bin"),
)


def peers_dir() -> Path:
    """The peers directory: ``$UPSTREAM_PEERS``, else the first ``shared/peers`` found beside the checkout (may
    not exist)."""
    configured = os.environ.get(PEERS_VARIABLE)
    if configured:
        return Path(configured).expanduser()
    return next((p for p in DEFAULT_PEERS if p.is_dir()), DEFAULT_PEERS[0])


def upstream_host_images(peers: Path | None = None) -> dict[str, HostImage]:
    """Image repository -> ``HostImage`` for every upstream image; ``PeersMissing`` when the peers are absent."""
    where = peers if peers is not None else peers_dir()
    if not where.is_dir():
        raise PeersMissing(f"upstream Skupper's programs are missing: {where} does not exist. kubesim runs "
                           f"upstream's images from ../shared/peers/ beside the checkout (skupper-2.2.1/, "
                           f"skupper-router-3.5.1/) or from ${PEERS_VARIABLE}")
    return {image.repository: image.host_image(where) for image in UPSTREAM_IMAGES}


def load_upstream_images(registry: RuntimeRegistry, peers: Path | None = None) -> list[str]:
    """Make the simulated nodes run upstream's images (all or none: nothing is registered when one is missing);
    returns the repositories registered."""
    images = upstream_host_images(peers)
    networks = PodNetworks()  # one namespace per Pod, shared by the containers of all three images
    for repository, image in images.items():
        registry.register(repository, HostProcessHandler(image, networks))
    return sorted(images)
