"""The project's container image as kubesim runs it: its programs are this virtualenv's console scripts.

The image (``Containerfile``) installs the project into a virtualenv at ``/opt/listener-operator`` and runs
``/opt/listener-operator/bin/listener-operator``; the same virtualenv directory holds ``service-network``. kubesim's
host-process runtime maps that directory to the ``bin`` directory of the Python running this code, so a Pod of the
image runs the code of this checkout, with the container's command, arguments and environment (see
``kubesim.cluster.runtime.hostprocess``). ``tests/devenv/test_project_image.py`` checks these facts against the
Containerfile.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kubesim.cluster.runtime.hostprocess import HostImage, HostProcessHandler
from kubesim.cluster.runtime.registry import RuntimeRegistry

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


def project_image(bin_dir: Path | None = None) -> HostImage:
    """The image, its programs taken from ``bin_dir`` (default: this interpreter's virtualenv ``bin``)."""
    return HostImage(entrypoint=ENTRYPOINT, cmd=CMD, programs={IMAGE_BIN: bin_dir or Path(sys.executable).parent},
                     env=ENV, working_dir="/")


def load_project_image(registry: RuntimeRegistry) -> None:
    """Make the simulated nodes run the project's image (as ``kind load`` / ``ctr import`` would)."""
    registry.register(IMAGE_NAME, HostProcessHandler(project_image()))
