"""Which controller acts on a namespace: upstream Skupper's rule, so that its controller and ours stay apart.

Upstream's controller reads the ConfigMap ``skupper`` of each namespace it watches: its ``controller`` entry names
the controller that acts there, ``<namespace>/<name>`` or a bare ``<name>`` meaning the ConfigMap's own namespace
(upstream's namespace-scope manifest ships ``controller: skupper-controller``, its controller's Deployment). Ours
follows the same rule as a controller without ``-require-explicit-control``: it acts on a namespace without that
entry, and leaves alone a namespace whose entry names another controller. Ours is
``<controller namespace>/service-network-controller`` (the name its Sites report in ``status.controller``).
"""

from __future__ import annotations

from operator_runtime.objects import JsonDict, mapping, meta

NAMESPACE_CONFIG = "skupper"
CONTROLLER_KEY = "controller"
CONTROLLER_NAME = "service-network-controller"


def qualified_controller(value: str, namespace: str) -> str:
    """A ``controller`` entry as upstream reads it: with its namespace, the ConfigMap's when it names none."""
    return value if "/" in value else f"{namespace}/{value}"


def our_controller(controller_namespace: str) -> str:
    return f"{controller_namespace}/{CONTROLLER_NAME}"


def other_controller(config: JsonDict | None, ours: str) -> str | None:
    """The controller a namespace's ConfigMap ``skupper`` names when that is not ``ours``; None when ours may act."""
    if config is None:
        return None
    value = mapping(config, "data").get(CONTROLLER_KEY)
    if not isinstance(value, str) or not value:
        return None
    named = qualified_controller(value, meta(config).namespace)
    return None if named == ours else named
