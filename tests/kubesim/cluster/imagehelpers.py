"""A cluster whose nodes run one small script as an image of its own (``/app/<name>`` in a private root)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from traffichelpers import FAST_RESTARTS

from kubesim.cluster.runtime.hostprocess import MOUNT_NAMESPACE, HostImage, HostProcessHandler
from kubesim.sim import KubeSim


@contextlib.asynccontextmanager
async def script_image_cluster(directory: Path, image: str, name: str, script: str,
                               **image_fields: Any) -> AsyncIterator[KubeSim]:
    """One node; ``image`` runs ``script`` as ``/app/<name>`` (its command) in a root of its own."""
    program = directory / name
    program.write_text(script)
    program.chmod(0o755)
    async with KubeSim(nodes=1, **FAST_RESTARTS) as running:
        assert running.cluster is not None
        host_image = HostImage(cmd=(f"/app/{name}",), files={f"/app/{name}": program}, isolation=MOUNT_NAMESPACE,
                               env={"PATH": "/usr/bin:/bin"}, **image_fields)
        running.cluster.runtime.register(image, HostProcessHandler(host_image))
        yield running
