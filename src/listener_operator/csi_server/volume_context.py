"""Decoding the listener selector from PVC annotations / a volume context (behaviour.md "Selector annotations").

Upstream picks whichever selector annotation comes first when both are set, which is undefined behaviour
(behaviour.md "Exactly one selector annotation"); here exactly one is required, and the value must be a valid object name because it becomes part of API
URLs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from listener_operator.constants import ANNOTATION_LISTENER_CLASS, ANNOTATION_LISTENER_NAME
from listener_operator.csi_server.errors import InvalidInput, InvalidSelector, MissingArgument
from listener_operator.messages import brief
from listener_operator.names import is_dns1123_subdomain

__all__ = [
    "CONTEXT_EPHEMERAL",
    "CONTEXT_POD_NAME",
    "CONTEXT_POD_NAMESPACE",
    "CONTEXT_POD_UID",
    "ListenerSelector",
    "check_object_name",
    "decode_selector",
    "required_object",
]

# Added by kubelet because the CSIDriver has podInfoOnMount (behaviour.md "CSIDriver").
CONTEXT_POD_NAME = "csi.storage.k8s.io/pod.name"
CONTEXT_POD_NAMESPACE = "csi.storage.k8s.io/pod.namespace"
CONTEXT_POD_UID = "csi.storage.k8s.io/pod.uid"
# Set by kubelet for CSI inline ("ephemeral") volumes, which have no PV.
CONTEXT_EPHEMERAL = "csi.storage.k8s.io/ephemeral"


@dataclass(frozen=True)
class ListenerSelector:
    """``class`` mode: one Listener per volume of that class; ``name`` mode: bind to that existing Listener."""

    mode: Literal["class", "name"]
    value: str

    @property
    def annotation(self) -> str:
        return ANNOTATION_LISTENER_CLASS if self.mode == "class" else ANNOTATION_LISTENER_NAME


def check_object_name(kind: str, name: str, source: str) -> str:
    """Return ``name`` if it is a valid Kubernetes object name, else INVALID_ARGUMENT naming where it came from."""
    if not is_dns1123_subdomain(name):
        raise InvalidInput(f"{source}: {brief(name)} is not a valid {kind} name (lower-case RFC 1123 subdomain)")
    return name


def required_object(values: Mapping[str, str], namespace_key: str, name_key: str, kind: str, *, source: str,
                    hint: str) -> tuple[str, str]:
    """Namespace and name of a ``kind`` object given by two keys of ``values`` (request parameters, volume
    context): both required, both valid names; ``hint`` says which setting supplies them when they are missing."""
    namespace, name = values.get(namespace_key), values.get(name_key)
    if not namespace or not name:
        raise MissingArgument(f"{source} lacks {namespace_key} and/or {name_key} ({hint})")
    check_object_name("Namespace", namespace, f"{source} {namespace_key}")
    check_object_name(kind, name, f"{source} {name_key}")
    return namespace, name


def decode_selector(annotations: Mapping[str, str], source: str) -> ListenerSelector:
    """Exactly one of the two selector annotations must be present; ``source`` names the object for messages."""
    listener_class = annotations.get(ANNOTATION_LISTENER_CLASS)
    listener_name = annotations.get(ANNOTATION_LISTENER_NAME)
    if listener_class is not None and listener_name is not None:
        raise InvalidSelector(f"{source} sets both {ANNOTATION_LISTENER_CLASS} and {ANNOTATION_LISTENER_NAME}; "
                              "set exactly one of them")
    if listener_class is None and listener_name is None:
        raise InvalidSelector(f"{source} sets neither {ANNOTATION_LISTENER_CLASS} nor {ANNOTATION_LISTENER_NAME}; "
                              "set exactly one of them")
    if listener_class is not None:
        return ListenerSelector("class", check_object_name("ListenerClass", listener_class,
                                                           f"{source} annotation {ANNOTATION_LISTENER_CLASS}"))
    assert listener_name is not None
    return ListenerSelector("name", check_object_name("Listener", listener_name,
                                                      f"{source} annotation {ANNOTATION_LISTENER_NAME}"))
