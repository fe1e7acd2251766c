"""``Site.spec.ha`` (pure): a site with two routers, as upstream (Deployments ``skupper-router`` and
``skupper-router-2``).

Both routers get the same router document but for ``router.id`` (the first keeps the site's id, the second is
``<site uid>/skupper-router-2``: ids are unique network-wide), each from its own ConfigMap named after its
Deployment; both carry every Listener, Connector, Link and the router access, so a Listener's Service (which
selects every router Pod of the site) reaches either and remote sites route to either. Each router Pod is labelled
with its router group (``skupper.io/group``, the Deployment's name, as upstream; with or without HA): the router
access is exposed per group (one Service each, selecting ``skupper.io/component=router`` and the group, as
upstream's), and its endpoints carry the group, so a linking site links to every router of this site (one
``links[]`` entry per group, see :mod:`.links`) and losing one router leaves a path to the other.

Without HA: one router, one group. Upstream's CRD says an edge site cannot be HA ("Currently, edge sites cannot
also have HA enabled"), but neither its controller nor ours refuses ``edge`` with ``ha``: both routers then link as
edges. (Router Pods of earlier versions were told apart by :data:`LEGACY_GROUP_LABEL`; a second
router Deployment made then keeps it in its immutable selector, and so on its Pods: :mod:`.resources`.)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from operator_runtime.kinds import CONFIG_MAP, DEPLOYMENT, ResourceInfo
from operator_runtime.objects import JsonDict, mapping, meta

from ..constants import LABEL_COMPONENT, LABEL_GROUP, ROUTER_NAME
from ..router.config import parse_config
from .resources import RouterOptions, config_map, deployment
from .services import owned_by

__all__ = ["HA_ROUTER_NAME", "LEGACY_GROUP_LABEL", "group_labels", "group_selector", "ha_enabled",
           "ha_router_objects", "router_groups", "unused_access_service", "unused_router_objects"]

HA_ROUTER_NAME = "skupper-router-2"
#: What told the routers of an HA site apart before upstream's ``skupper.io/group`` (earlier versions).
LEGACY_GROUP_LABEL = "internal.skupper.io/router-group"


def ha_enabled(site: Mapping[str, Any] | None) -> bool:
    return site is not None and mapping(site, "spec").get("ha") is True


def router_groups(site: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The routers of the site, by Deployment name."""
    return (ROUTER_NAME, HA_ROUTER_NAME) if ha_enabled(site) else (ROUTER_NAME,)


def group_labels(group: str) -> dict[str, str]:
    """The label telling a router Pod's group apart."""
    return {LABEL_GROUP: group}


def group_selector(group: str) -> dict[str, str]:
    """What the router access of one router selects (upstream's SecuredAccess selector for a RouterAccess)."""
    return {LABEL_COMPONENT: "router", LABEL_GROUP: group}


def second_document(document_text: str, site_uid: str) -> str:
    """The second router's document: the first one's with its own ``router.id``."""
    document = json.loads(document_text)
    document.setdefault("router", {})["id"] = f"{site_uid}/{HA_ROUTER_NAME}"
    return parse_config(json.dumps(document)).to_json()


def ha_router_objects(site: Mapping[str, Any], options: RouterOptions, document_text: str,
                      ports_text: str, selectors: Mapping[str, Mapping[str, Any]] | None = None
                      ) -> list[tuple[ResourceInfo, JsonDict]]:
    """The second router's ConfigMap and Deployment (none without HA); ``selectors``: the live Deployments'."""
    if not ha_enabled(site):
        return []
    return [config_map(site, second_document(document_text, meta(site).uid), ports_text, HA_ROUTER_NAME),
            deployment(site, options, HA_ROUTER_NAME, (selectors or {}).get(HA_ROUTER_NAME))]


def unused_router_objects(site: Mapping[str, Any]) -> list[tuple[ResourceInfo, str]]:
    """What to remove of a second router the Site does not have (HA turned off): its Deployment and ConfigMap."""
    return [] if ha_enabled(site) else [(DEPLOYMENT, HA_ROUTER_NAME), (CONFIG_MAP, HA_ROUTER_NAME)]


def unused_access_service(site: Mapping[str, Any], service: Mapping[str, Any], access: str | None) -> bool:
    """Whether ``service`` exposed the second router of the RouterAccess ``access`` (the value of the Service's
    access annotation, and its owner) and the Site has no second router any more."""
    return (access is not None and not ha_enabled(site) and owned_by(service, "RouterAccess", access)
            and meta(service).name == access + HA_ROUTER_NAME[len(ROUTER_NAME):])
