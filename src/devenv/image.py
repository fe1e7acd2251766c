"""The project's container image as kubesim runs it: its programs are this virtualenv's console scripts.

The image (``Containerfile``) installs the project into a virtualenv at ``/opt/listener-operator`` and runs
``/opt/listener-operator/bin/listener-operator``; the same virtualenv directory holds ``service-network``. kubesim's
host-process runtime maps that directory to the ``bin`` directory of the Python running this code, so a Pod of the
image runs the code of this checkout, with the container's command, arguments and environment (see
``kubesim.cluster.runtime.hostprocess``). ``tests/devenv/test_project_image.py`` checks these facts against the
Containerfile.

The router (``service-network-router``, which the Containerfile copies into ``/opt/listener-operator/bin``) is the
one this process would run: ``service_network.router.dataplane.router_binary()`` when the image is loaded
(``$ROUTER_BIN`` first, which ``scripts/_venv.sh`` sets). It is an image file at that path, and the image's
environment names its host path in ``ROUTER_BIN`` (kubesim's addition: a host process does not see the image's
file at its image path, and kubesim's own environment does not leak into containers), so a router Pod runs the
binary a test session or ``local up`` was pointed at, never another build found beside the checkout
(``tests/service_network/e2e/test_router_pod_binary.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from kubesim.cluster.runtime.hostprocess import HostImage, HostProcessHandler
from kubesim.cluster.runtime.registry import RuntimeRegistry
from service_network.router.dataplane import BINARY, router_binary
from service_network.router.errors import RouterBinaryNotFound

#: Every repository ending in ``listener-operator`` (``localhost/listener-operator``, the chart's default, or a
#: registry's copy) is this image.
IMAGE_NAME = "listener-operator"
IMAGE_BIN = "/opt/listener-operator/bin"
ENTRYPOINT = (f"{IMAGE_BIN}/listener-operator",)
CMD = ("--help",)
ENV = {
    "PATH": f"{IMAGE_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}


#: The variable naming the router binary to the Pod's adaptor (``service_network.router.dataplane``).
ROUTER_BIN_ENV = "ROUTER_BIN"


def image_router() -> Path | None:
    """The router binary this process would run (``$ROUTER_BIN``, ...), None when there is none: the image then
    has no router, and a router Pod fails saying how to build it, as it would without this image's file."""
    try:
        return Path(router_binary()).absolute()
    except RouterBinaryNotFound:
        return None


def project_image(bin_dir: Path | None = None, router: Path | None = None) -> HostImage:
    """The image, its programs taken from ``bin_dir`` (default: this interpreter's virtualenv ``bin``), its router
    ``router`` (default: ``image_router()``)."""
    router = router or image_router()
    files = {f"{IMAGE_BIN}/{BINARY}": router} if router is not None else {}
    env = {**ENV, ROUTER_BIN_ENV: str(router)} if router is not None else ENV
    return HostImage(entrypoint=ENTRYPOINT, cmd=CMD, programs={IMAGE_BIN: bin_dir or Path(sys.executable).parent},
                     files=files, env=env, working_dir="/")


def load_project_image(registry: RuntimeRegistry) -> None:
    """Make the simulated nodes run the project's image (as ``kind load`` / ``ctr import`` would)."""
    registry.register(IMAGE_NAME, HostProcessHandler(project_image()))
