"""Listener Services (pure), as upstream shapes them (skupper-listener.md §5.6, §5.8):

- one ClusterIP Service per Listener ``host``, selecting the router Pods, with one port per Listener sharing that
  host (``name`` = Listener name, ``port`` = its ``spec.port``, ``targetPort`` = its router port);
- with ``exposePodsByName``, one Service per target Pod, named after the Pod, the Listener's port -> the router port
  of that Pod's entity;
- label ``internal.skupper.io/listener=<a Listener name>``, annotation ``internal.skupper.io/controlled=true``,
  owned by the Site.

Services are written as updates, not server-side applies: created with POST (so one that appeared meanwhile is
never taken over) and changed with a JSON merge patch carrying the ``resourceVersion`` the controller saw (so a
Service replaced by someone else meanwhile is never touched): :func:`service_patch`. (Applies on top of a POST would
leave ports the create owns behind when a Listener goes.)

A Service is ours when it carries the annotation *and* an owner reference to a Site: one without either is
*foreign*, and is never modified or deleted (skupper#2180); a Listener asking for its name is reported instead.
(Upstream goes by the annotation alone, so a user's Service that merely carries it, copied from an example, say,
would be deleted.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from operator_runtime.objects import JsonDict, mapping, meta

from ..constants import ANNOTATION_CONTROLLED, LABEL_LISTENER, ROUTER_POD_LABELS
from .resources import owner_references
from .templates import ANNOTATION_KEYS, recorded

__all__ = ["Exposure", "is_controlled", "is_listener_service", "listener_service", "owned_by", "service_bodies",
           "service_patch"]


@dataclass(frozen=True, order=True)
class Exposure:
    """One Service port: the Service ``host``, the port name (a Listener's name), the client port, the router
    port."""

    host: str
    name: str
    port: int
    target_port: int


def is_controlled(service: Mapping[str, Any]) -> bool:
    """The Service carries our annotation (whatever its value, as upstream checks it) and is owned by a Site."""
    return ANNOTATION_CONTROLLED in meta(service).annotations and owned_by(service, "Site")


def owned_by(obj: Mapping[str, Any], kind: str, name: str | None = None) -> bool:
    """``obj`` has an owner reference to a ``skupper.io`` object of ``kind`` (named ``name`` when given)."""
    references = mapping(obj, "metadata").get("ownerReferences")
    return isinstance(references, list) and any(
        isinstance(r, Mapping) and r.get("kind") == kind and str(r.get("apiVersion", "")).startswith("skupper.io/")
        and (name is None or r.get("name") == name) for r in references)


def is_listener_service(service: Mapping[str, Any]) -> bool:
    """Ours and labelled as a listener Service: deleted when no Listener exposes its name any more."""
    return is_controlled(service) and LABEL_LISTENER in meta(service).labels


def listener_service(site: Mapping[str, Any], host: str, exposures: Iterable[Exposure]) -> JsonDict:
    """The server-side-apply body of the Service ``host``."""
    ports = sorted(exposures, key=lambda e: e.name)
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": host, "namespace": meta(site).namespace,
                     "labels": {LABEL_LISTENER: ports[0].name if ports else ""},
                     "annotations": {ANNOTATION_CONTROLLED: "true"},
                     "ownerReferences": owner_references(site)},
        "spec": {"type": "ClusterIP", "selector": dict(ROUTER_POD_LABELS),
                 "ports": [{"name": e.name, "port": e.port, "targetPort": e.target_port, "protocol": "TCP"}
                           for e in ports]},
    }


def service_bodies(site: Mapping[str, Any], exposures: Iterable[Exposure]) -> dict[str, JsonDict]:
    """One Service body per host of ``exposures``."""
    by_host: dict[str, list[Exposure]] = {}
    for exposure in exposures:
        by_host.setdefault(exposure.host, []).append(exposure)
    return {host: listener_service(site, host, items) for host, items in sorted(by_host.items())}


def service_patch(desired: Mapping[str, Any], live: Mapping[str, Any]) -> JsonDict:
    """The merge patch turning ``live`` (one of ours) into ``desired``: ports and owner references replaced whole,
    selector keys we do not want removed, our labels and annotations set and those label templates gave it and no
    longer give removed (:mod:`.templates`); guarded by ``live``'s resourceVersion."""
    wanted_selector = dict(desired["spec"]["selector"])
    selector: JsonDict = {k: None for k in mapping(live, "spec", "selector") if k not in wanted_selector}
    selector.update(wanted_selector)
    given_labels, given_annotations = recorded(live)
    labels: JsonDict = {k: None for k in given_labels if k not in desired["metadata"]["labels"]}
    labels.update(desired["metadata"]["labels"])
    annotations: JsonDict = {k: None for k in given_annotations | {ANNOTATION_KEYS}
                             if k not in desired["metadata"]["annotations"]}
    annotations.update(desired["metadata"]["annotations"])
    return {"metadata": {"resourceVersion": meta(live).resource_version, "labels": labels,
                         "annotations": annotations,
                         "ownerReferences": list(desired["metadata"]["ownerReferences"])},
            "spec": {"type": desired["spec"]["type"], "selector": selector, "ports": list(desired["spec"]["ports"])}}
