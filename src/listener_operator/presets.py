"""The preset ListenerClasses (behaviour.md "Presets"), created at controller start-up if missing.

Existing classes are never updated: they belong to the cluster administrator once created (upstream behaviour,
kept for compatibility, behaviour.md "Presets on their own").
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

from listener_operator.constants import GROUP_VERSION
from listener_operator.kinds import LISTENER_CLASS
from operator_runtime.api import KubeApi
from operator_runtime.errors import Conflict, NotFound

log = logging.getLogger(__name__)

PRESET_NONE = "none"
PRESET_EPHEMERAL_NODES = "ephemeral-nodes"
PRESET_STABLE_NODES = "stable-nodes"
DEFAULT_PRESET = PRESET_EPHEMERAL_NODES

# preset name -> class name -> ListenerClass spec
PRESETS: Mapping[str, Mapping[str, Mapping[str, Any]]] = {
    PRESET_NONE: {},
    PRESET_EPHEMERAL_NODES: {
        "cluster-internal": {"serviceType": "ClusterIP"},
        "external-unstable": {"serviceType": "NodePort", "pinnedNodePorts": False},
        "external-stable": {"serviceType": "LoadBalancer"},
    },
    PRESET_STABLE_NODES: {
        "cluster-internal": {"serviceType": "ClusterIP"},
        "external-unstable": {"serviceType": "NodePort", "pinnedNodePorts": False},
        "external-stable": {"serviceType": "NodePort", "pinnedNodePorts": True},
    },
}


def preset_classes(preset: str) -> list[dict[str, Any]]:
    """The ListenerClass objects of ``preset``; ``ValueError`` naming the valid presets for an unknown name."""
    if preset not in PRESETS:
        raise ValueError(f"unknown ListenerClass preset {preset!r}; expected one of {', '.join(PRESETS)}")
    return [
        {"apiVersion": GROUP_VERSION, "kind": "ListenerClass", "metadata": {"name": name},
         "spec": copy.deepcopy(dict(spec))}
        for name, spec in PRESETS[preset].items()
    ]


async def ensure_presets(api: KubeApi, preset: str) -> list[str]:
    """Create the preset's ListenerClasses that do not exist yet; return the names created.

    Reads first so that a restart writes nothing; a 409 from a concurrent creator (another replica) counts as
    "exists". Other API errors propagate.
    """
    created: list[str] = []
    for obj in preset_classes(preset):
        name = obj["metadata"]["name"]
        try:
            await api.get(LISTENER_CLASS, name)
            continue
        except NotFound:
            pass
        try:
            await api.create(LISTENER_CLASS, obj)
        except Conflict:
            continue
        log.info("created preset ListenerClass %s (preset %s)", name, preset)
        created.append(name)
    return created
