"""The site controller's CRD maintenance: what :mod:`operator_runtime.crdmaintenance` needs to know about it.

With maintenance on (the default), ``service-network run controller`` server-side-applies the ``skupper.io`` CRDs
(Site, Listener, Connector, RouterAccess, Link, AccessGrant, AccessToken, ...) at start with the field manager
``service-network-controller`` and ``force``; with it off (``DISABLE_CRD_MAINTENANCE``) nothing is written and a
missing CRD is named in the log with the command that installs it. Either way the site controller starts reconciling
only once every CRD reports ``Established``.
"""

from __future__ import annotations

import logging

from operator_runtime.crdmaintenance import CrdMaintenance

from ..constants import FIELD_MANAGER

__all__ = ["FIELD_MANAGER_CRDS", "INSTALL_HINT", "MAINTENANCE"]

#: The field manager of the CRDs the site controller maintains (the controller's own).
FIELD_MANAGER_CRDS = FIELD_MANAGER
#: What a person runs to install the CRDs when the controller does not maintain them.
INSTALL_HINT = "service-network crd | kubectl apply --server-side -f -"

MAINTENANCE = CrdMaintenance(
    field_manager=FIELD_MANAGER_CRDS, install_hint=INSTALL_HINT,
    enable_hint="unset DISABLE_CRD_MAINTENANCE, Helm value maintenance.customResourceDefinitions.maintain=true",
    logger=logging.getLogger(__name__))
