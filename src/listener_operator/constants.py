"""Names shared by the Listener controller and the CSI driver.

These strings are part of the wire contract with upstream (labels, annotations, field managers and the driver name
are visible in the cluster), so they live in one place and are never spelled out elsewhere (behaviour.md "Names", "Field managers").
"""

from __future__ import annotations

import re
from typing import Final

API_GROUP: Final = "listeners.stackable.tech"
API_VERSION: Final = "v1alpha1"
GROUP_VERSION: Final = f"{API_GROUP}/{API_VERSION}"

# The CSI driver name is also the StorageClass and provisioner name.
DRIVER_NAME: Final = "listeners.stackable.tech"

# PVC annotations that select the Listener of a volume (behaviour.md "Selector annotations").
ANNOTATION_LISTENER_CLASS: Final = "listeners.stackable.tech/listener-class"
ANNOTATION_LISTENER_NAME: Final = "listeners.stackable.tech/listener-name"

# Labels put on a PV by the node driver so the controller can find the Listener's reservations (behaviour.md
# "NodePort").
PV_LABEL_LISTENER_NAMESPACE: Final = "listeners.stackable.tech/listener-namespace"
PV_LABEL_LISTENER_NAME: Final = "listeners.stackable.tech/listener-name"

# CSI topology key used for pinned NodePort volumes (PV node affinity, behaviour.md "Pinning").
TOPOLOGY_KEY_HOSTNAME: Final = "listeners.stackable.tech/hostname"

# Note the singular "listener.": the key differs from the API group on purpose (behaviour.md "Names").
MOUNT_LABEL_PREFIX: Final = "listener.stackable.tech/mnt."

# Controller identity (Event reporter, label values).
OPERATOR_NAME: Final = "listeners.stackable.tech"
CONTROLLER_NAME: Final = "listener"
FULL_CONTROLLER_NAME: Final = f"{CONTROLLER_NAME}.{OPERATOR_NAME}"
APP_NAME: Final = "listener"

# The three labels every generated Service carries; orphan cleanup selects on them (behaviour.md "Orphan cleanup").
LABEL_APP_NAME: Final = "app.kubernetes.io/name"
LABEL_APP_INSTANCE: Final = "app.kubernetes.io/instance"
LABEL_APP_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE: Final = f"{OPERATOR_NAME}_{CONTROLLER_NAME}"

# Server-side-apply field managers (behaviour.md "Field managers").
FIELD_MANAGER_BASE: Final = "listeners.stackable.tech"
FIELD_MANAGER_SERVICE: Final = f"{FIELD_MANAGER_BASE}/{OPERATOR_NAME}_{CONTROLLER_NAME}"
FIELD_MANAGER_LISTENER_STATUS: Final = f"{FIELD_MANAGER_BASE}/listener"
FIELD_MANAGER_VOLUME: Final = f"{FIELD_MANAGER_BASE}/volume"

# EndpointSlices name their Service through this label.
LABEL_ENDPOINTSLICE_SERVICE_NAME: Final = "kubernetes.io/service-name"

DEFAULT_CLUSTER_DOMAIN: Final = "cluster.local"


def mount_label_key(listener_uid: str) -> str:
    """The Pod label key that marks Pods mounting a volume of the Listener with this uid.

    Keyed by uid (not name) so that a recreated Listener with the same name does not select its predecessor's Pods;
    the part after the slash is always 36 characters, within the 63-character label-name limit.
    """
    compact = listener_uid.replace("-", "")
    name_part = MOUNT_LABEL_PREFIX.split("/", 1)[1] + compact
    if not _LABEL_NAME_PART.fullmatch(name_part) or len(name_part) > 63:
        raise ValueError(f"listener uid {listener_uid!r} does not form a valid label key")
    return f"{MOUNT_LABEL_PREFIX}{compact}"


_LABEL_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
