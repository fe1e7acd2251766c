"""Where our custom kinds live on the API server (the built-in ones are in ``operator_runtime.kinds``).

One descriptor per kind for every reader and writer (controller, CSI services, presets); the CRDs themselves are
generated from the models in ``crd/``.
"""

from __future__ import annotations

from listener_operator.constants import GROUP_VERSION
from operator_runtime.kinds import ResourceInfo

__all__ = ["LISTENER", "LISTENER_CLASS", "POD_LISTENERS"]

LISTENER_CLASS = ResourceInfo(GROUP_VERSION, "ListenerClass", "listenerclasses", namespaced=False)
LISTENER = ResourceInfo(GROUP_VERSION, "Listener", "listeners", namespaced=True)
POD_LISTENERS = ResourceInfo(GROUP_VERSION, "PodListeners", "podlisteners", namespaced=True)
