"""kubesim's container runtime: an image -> handler registry and the built-in in-process servers.

``default_registry()`` knows ``agnhost`` (serve-hostname, netexec, pause), ``busybox`` (sleeping and small
scripts), ``nginx`` / ``nginx-unprivileged``, ``pause`` and Skupper's ``hello-world-backend`` /
``hello-world-frontend``. Register more with ``cluster.runtime.register(image, handler)``; a handler only needs
``async start(ContainerSpec) -> Container`` (see ``registry.py``). Containers of other images never start.
"""

from __future__ import annotations

from kubesim.cluster.runtime import agnhost, busybox, helloworld, nginx
from kubesim.cluster.runtime.registry import (
    Container,
    ContainerSpec,
    RuntimeHandler,
    RuntimeRegistry,
    parse_image,
)


def default_registry() -> RuntimeRegistry:
    registry = RuntimeRegistry()
    registry.register("agnhost", agnhost.handler())
    registry.register("pause", agnhost.pause_handler())
    registry.register("busybox", busybox.handler())
    registry.register("nginx", nginx.handler(80))
    registry.register("nginx-unprivileged", nginx.handler(8080))
    registry.register("quay.io/skupper/hello-world-backend", helloworld.backend_handler())
    registry.register("quay.io/skupper/hello-world-frontend", helloworld.frontend_handler())
    return registry


__all__ = ["Container", "ContainerSpec", "RuntimeHandler", "RuntimeRegistry", "default_registry", "parse_image"]
