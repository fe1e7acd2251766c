"""The listener operator's CustomResourceDefinitions, generated from the pydantic models in ``crd/models.py`` by the
generic converter in :mod:`operator_runtime.crdgen`."""

from __future__ import annotations

from typing import Any

from listener_operator.constants import API_GROUP, API_VERSION
from listener_operator.crd.models import ListenerClassSpec, ListenerSpec, ListenerStatus, PodListenersSpec
from listener_operator.names import DNS1035_LABEL_PATTERN, LABEL_MAX
from operator_runtime import crdgen
from operator_runtime.crdgen import AGE_COLUMN, SchemaConversionError, structural_schema

__all__ = ["SchemaConversionError", "all_crds", "crds_yaml", "listener_class_crd", "listener_crd",
           "pod_listeners_crd", "structural_schema"]

_object_schema = crdgen.object_schema
_AGE_COLUMN = AGE_COLUMN

#: A Listener's name names its Service and is a label value: a DNS-1035 label (behaviour.md "Admission").
_SERVICE_NAME = {"maxLength": LABEL_MAX, "pattern": DNS1035_LABEL_PATTERN,
                 "description": "The Listener's name, which its Service takes: lowercase letters, digits and '-', "
                                "starting with a letter, at most 63 characters."}


def _crd(*, kind: str, plural: str, singular: str, scope: str, schema: dict[str, Any],
         status: bool = False, columns: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return crdgen.custom_resource_definition(group=API_GROUP, version=API_VERSION, kind=kind, plural=plural,
                                             singular=singular, scope=scope, schema=schema, status=status,
                                             columns=columns)


def _listener_status_schema() -> dict[str, Any]:
    schema = structural_schema(ListenerStatus)
    conditions = schema["properties"]["conditions"]
    # A list-map keyed by type, so that server-side apply merges conditions per type.
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    return schema


def listener_class_crd() -> dict[str, Any]:
    return _crd(
        kind="ListenerClass", plural="listenerclasses", singular="listenerclass", scope="Cluster",
        schema=_object_schema(
            "A cluster-wide policy for how Listeners are exposed (Service type, annotations, address preference).",
            {"spec": structural_schema(ListenerClassSpec)}, ["spec"]),
        columns=[{"name": "Type", "type": "string", "jsonPath": ".spec.serviceType"}, _AGE_COLUMN],
    )


def listener_crd() -> dict[str, Any]:
    return _crd(
        kind="Listener", plural="listeners", singular="listener", scope="Namespaced", status=True,
        schema=_object_schema(
            "Exposes the Pods that mount a listener volume bound to it, through a Service shaped by a ListenerClass.",
            {"spec": structural_schema(ListenerSpec), "status": _listener_status_schema()}, ["spec"],
            name=_SERVICE_NAME),
        columns=[
            {"name": "Class", "type": "string", "jsonPath": ".spec.className"},
            {"name": "Service", "type": "string", "jsonPath": ".status.serviceName"},
            {"name": "Address", "type": "string", "jsonPath": ".status.ingressAddresses[0].address"},
            # upstream's CRDs have no printer columns (behaviour.md "Printer columns show class, address and
            # readiness"): these are ours; Ready and Reason say why a Listener has no address
            {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
            {"name": "Reason", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].reason'},
            _AGE_COLUMN,
        ],
    )


def pod_listeners_crd() -> dict[str, Any]:
    return _crd(
        kind="PodListeners", plural="podlisteners", singular="podlisteners", scope="Namespaced",
        schema=_object_schema(
            "The listener volumes of one Pod and the addresses they publish to it. Written by the CSI node driver.",
            {"spec": structural_schema(PodListenersSpec)}, ["spec"]),
    )


def all_crds() -> list[dict[str, Any]]:
    """The three CRDs, in the order they should be applied."""
    return [listener_class_crd(), listener_crd(), pod_listeners_crd()]


def crds_yaml() -> str:
    """All CRDs as one multi-document YAML stream."""
    return crdgen.crds_yaml(all_crds())
