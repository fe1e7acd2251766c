"""The listener operator's CRD maintenance: what :mod:`operator_runtime.crdmaintenance` needs to know about it.

With maintenance on (the default, as upstream), every controller replica server-side-applies ListenerClass, Listener
and PodListeners with the field manager ``listener-operator`` and ``force``; with it off (``DISABLE_CRD_MAINTENANCE``)
nothing is written and a missing CRD is named in the log with the command that installs it. Either way the Listener
controller starts only once every CRD reports ``Established``.
"""

from __future__ import annotations

import logging

from operator_runtime.crdmaintenance import CrdMaintenance

__all__ = ["FIELD_MANAGER_CRDS", "INSTALL_HINT", "MAINTENANCE"]

#: Upstream's field manager for the CRDs it maintains (behaviour.md "CRD maintenance").
FIELD_MANAGER_CRDS = "listener-operator"
#: What a person runs to install the CRDs when the controller does not maintain them.
INSTALL_HINT = "listener-operator crd | kubectl apply --server-side -f -"

MAINTENANCE = CrdMaintenance(
    field_manager=FIELD_MANAGER_CRDS, install_hint=INSTALL_HINT,
    enable_hint="unset DISABLE_CRD_MAINTENANCE, Helm value maintenance.customResourceDefinitions.maintain=true",
    logger=logging.getLogger(__name__))

