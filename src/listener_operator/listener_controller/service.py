"""The desired Service of a Listener (behaviour.md "Service composition", "Overrides"), computed without I/O.

Layers, lowest to highest: the generated Service (including the class's ``serviceAnnotations``), the class's
``serviceOverrides``, the Listener's ``objectOverrides``. Invalid input is rejected up front with a specific
:class:`ListenerError` (behaviour.md "Early validation") instead of failing late at Service apply.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import ValidationError

from listener_operator.addresses import resolve_preferred_address_type
from listener_operator.constants import (
    APP_NAME,
    GROUP_VERSION,
    LABEL_APP_INSTANCE,
    LABEL_APP_MANAGED_BY,
    LABEL_APP_NAME,
    MANAGED_BY_VALUE,
    mount_label_key,
)
from listener_operator.crd.models import (
    AddressType,
    ListenerClassSpec,
    ListenerPort,
    ListenerSpec,
    ServiceType,
)
from listener_operator.listener_controller.object_overrides import (
    PolicyViolation,
    override_path,
    override_shape_problem,
    policy_violations,
)
from listener_operator.listener_controller.overrides import deep_merge
from listener_operator.messages import brief
from listener_operator.names import (
    is_dns1123_label,
    label_value_problem,
    qualified_name_problem,
    service_name_problem,
)
from operator_runtime.objects import items, mapping, meta


class ListenerError(Exception):
    """A reconcile failure with an Event reason (behaviour.md "Failures and Events") and, where known, which object it concerns.

    ``related`` is ``"listenerclass"`` or ``"service"`` when the cause lies in that object, else ``None``.
    """

    reason: ClassVar[str] = "ReconcileFailed"
    related: ClassVar[str | None] = None


class MissingMetadataError(ListenerError):
    reason = "InvalidListener"


class InvalidListenerError(ListenerError):
    """The Listener spec does not match the schema (e.g. written before the CRD was installed)."""

    reason = "InvalidListener"


class NoListenerClassError(ListenerError):
    reason = "NoListenerClass"


class InvalidListenerClassError(ListenerError):
    reason = "InvalidListenerClass"
    related = "listenerclass"


class InvalidListenerNameError(ListenerError):
    reason = "InvalidListenerName"


class NoPortsError(ListenerError):
    reason = "NoPorts"


class InvalidPortError(ListenerError):
    reason = "InvalidPort"


class DuplicatePortError(ListenerError):
    reason = "DuplicatePort"


class InvalidLabelError(ListenerError):
    reason = "ValidateListenerLabels"


class InvalidPodSelectorError(ListenerError):
    reason = "ListenerPodSelector"


class InvalidAnnotationError(ListenerError):
    reason = "ValidateListenerClassAnnotations"
    related = "listenerclass"


class InvalidServiceOverrideError(ListenerError):
    """An override is malformed, or tried to change what the Service is (kind, name, namespace) or who controls it."""

    reason = "InvalidServiceOverrides"


class ServiceOverrideNotAllowedError(ListenerError):
    """A Listener's objectOverrides changed a Service field its ListenerClass decides and does not let Listeners
    change (behaviour.md "Override policy")."""

    reason = "ServiceOverrideNotAllowed"
    related = "listenerclass"


_PROTOCOLS = ("TCP", "UDP", "SCTP")


def _validate_labels(labels: Mapping[str, str], error: type[ListenerError], what: str) -> None:
    for key, value in labels.items():
        problem = qualified_name_problem(key)
        if problem:
            raise error(f"{what}: invalid key {brief(key)}: {problem}")
        if not isinstance(value, str):
            raise error(f"{what}: value of {brief(key)} is not a string")
        problem = label_value_problem(value)
        if problem:
            raise error(f"{what}: value {brief(value)} of {brief(key)} {problem}")


@dataclass(frozen=True)
class ListenerClass:
    """A ListenerClass parsed and validated once (:func:`parse_listener_class`), then handed to every step."""

    name: str
    spec: ListenerClassSpec

    @property
    def service_type(self) -> ServiceType:
        return self.spec.service_type

    @property
    def address_type(self) -> AddressType:
        """The kind of address to publish, ``HostnameConservative`` resolved for the service type."""
        return self.address_type_for(self.spec.service_type)

    def address_type_for(self, service_type: ServiceType) -> AddressType:
        """The kind of address to publish for a Service of ``service_type`` (the class's own type unless a Listener
        was allowed to override it, behaviour.md "Override policy")."""
        return resolve_preferred_address_type(self.spec.preferred_address_type, service_type)


def listener_identity(listener: Mapping[str, Any]) -> tuple[str, str, str]:
    """(namespace, name, uid) of a Listener, each required (behaviour.md "Reconcile")."""
    metadata = meta(listener)
    for field, value in (("namespace", metadata.namespace), ("name", metadata.name), ("uid", metadata.uid)):
        if not value:
            raise MissingMetadataError(f"Listener has no metadata.{field}")
    return metadata.namespace, metadata.name, metadata.uid


def parse_listener_spec(listener: Mapping[str, Any]) -> ListenerSpec:
    try:
        return ListenerSpec.model_validate(mapping(listener, "spec"))
    except ValidationError as error:
        raise InvalidListenerError(f"Listener spec is invalid: {_first_error(error)}") from None


def parse_listener_class(listener_class: Mapping[str, Any]) -> ListenerClass:
    """The typed ListenerClass; :class:`InvalidListenerClassError` naming the first invalid field."""
    name = meta(listener_class).name or "?"
    try:
        spec = ListenerClassSpec.model_validate(mapping(listener_class, "spec"))
    except ValidationError as error:
        raise InvalidListenerClassError(f"ListenerClass {name!r} is invalid: {_first_error(error)}") from None
    return ListenerClass(name, spec)


def check_listener(listener: Mapping[str, Any]) -> ListenerSpec:
    """The Listener's own checks, before anything of its class is looked at: identity, a usable Service name, a
    spec that matches the schema. Returns the parsed spec."""
    _, name, _ = listener_identity(listener)
    problem = service_name_problem(name)
    if problem:
        raise InvalidListenerNameError(f"Listener name {problem}")
    return parse_listener_spec(listener)


def listener_class_name(listener: Mapping[str, Any]) -> str:
    """The ListenerClass a Listener asks for; :class:`NoListenerClassError` if it names none."""
    name = mapping(listener, "spec").get("className")
    if not name:
        raise NoListenerClassError("Listener has no spec.className")
    if not isinstance(name, str):
        raise InvalidListenerError("spec.className is not a string")
    return name


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    location = ".".join(str(part) for part in first["loc"])
    return f"{location}: {first['msg']}" if location else str(first["msg"])


def service_ports(ports: list[ListenerPort] | None) -> list[dict[str, Any]]:
    """Service ports from Listener ports: de-duplicated by (protocol, name), last wins, sorted by that key with a
    missing protocol first; then checked for what the API server would reject (behaviour.md "Early validation")."""
    if not ports:
        raise NoPortsError("Listener has no ports: a Service needs at least one")
    unique: dict[tuple[str | None, str], ListenerPort] = {}
    for port in ports:
        unique[(port.protocol, port.name)] = port
    ordered = [unique[key] for key in sorted(unique, key=lambda k: (k[0] is not None, k[0] or "", k[1]))]
    names: dict[str, str | None] = {}
    numbers: dict[tuple[int, str], str] = {}
    for port in ordered:
        if port.protocol is not None and port.protocol not in _PROTOCOLS:
            raise InvalidPortError(f"port {brief(port.name)}: protocol {brief(port.protocol)} is not one of "
                                   f"{', '.join(_PROTOCOLS)}")
        if not 1 <= port.port <= 65535:
            raise InvalidPortError(f"port {brief(port.name)}: {port.port} is not between 1 and 65535")
        if not is_dns1123_label(port.name):
            raise InvalidPortError(f"port name {brief(port.name)} is not a DNS label (lowercase alphanumerics and "
                                   "'-', at most 63 characters)")
        if port.name in names:
            raise DuplicatePortError(f"port name {brief(port.name)} is used with protocols "
                                     f"{names[port.name] or 'TCP (default)'} and {port.protocol or 'TCP (default)'}")
        names[port.name] = port.protocol
        effective = (port.port, port.protocol or "TCP")
        if effective in numbers:
            raise DuplicatePortError(f"ports {brief(numbers[effective])} and {brief(port.name)} both expose "
                                     f"{effective[0]}/{effective[1]}")
        numbers[effective] = port.name
    return [
        {"name": port.name, "port": port.port, **({"protocol": port.protocol} if port.protocol else {})}
        for port in ordered
    ]


def compose_service(listener: Mapping[str, Any], listener_class: ListenerClass,
                    spec: ListenerSpec | None = None) -> dict[str, Any]:
    """The generated Service before any override (behaviour.md "Service composition"); ``spec`` is the result of
    :func:`check_listener` when the caller has it already."""
    if spec is None:
        spec = check_listener(listener)
    namespace, name, uid = listener_identity(listener)
    class_spec = listener_class.spec
    class_name = listener_class.name

    listener_labels = dict(meta(listener).labels)
    _validate_labels(listener_labels, InvalidLabelError, "Listener label")
    labels = {**listener_labels, LABEL_APP_NAME: APP_NAME, LABEL_APP_INSTANCE: name,
              LABEL_APP_MANAGED_BY: MANAGED_BY_VALUE}

    for key in class_spec.service_annotations:
        problem = qualified_name_problem(key)
        if problem:
            raise InvalidAnnotationError(
                f"ListenerClass {class_name!r}: serviceAnnotations key {brief(key)} is invalid: {problem}")

    _validate_labels(spec.extra_pod_selector_labels, InvalidPodSelectorError, "extraPodSelectorLabels")
    try:
        mount_key = mount_label_key(uid)
    except ValueError as error:
        raise MissingMetadataError(str(error)) from None
    selector = {**spec.extra_pod_selector_labels, mount_key: name}

    service_type = class_spec.service_type
    service_spec: dict[str, Any] = {
        "type": service_type.value,
        "ports": service_ports(spec.ports),
        "selector": selector,
        # absent and explicit null both mean true (behaviour.md "publishNotReadyAddresses null means true")
        "publishNotReadyAddresses": spec.publish_not_ready_addresses is not False,
    }
    if service_type is not ServiceType.CLUSTER_IP and class_spec.service_external_traffic_policy is not None:
        service_spec["externalTrafficPolicy"] = class_spec.service_external_traffic_policy.value
    if service_type is ServiceType.LOAD_BALANCER:
        if class_spec.load_balancer_class is not None:
            service_spec["loadBalancerClass"] = class_spec.load_balancer_class
        service_spec["allocateLoadBalancerNodePorts"] = class_spec.load_balancer_allocate_node_ports

    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": labels,
        "ownerReferences": [listener_owner_reference(listener)],
    }
    if class_spec.service_annotations:
        metadata["annotations"] = dict(class_spec.service_annotations)
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": service_spec}


def listener_owner_reference(listener: Mapping[str, Any]) -> dict[str, Any]:
    """The controller reference from the Service to its Listener; blocks foreground deletion of the Listener."""
    _, name, uid = listener_identity(listener)
    return {"apiVersion": GROUP_VERSION, "kind": "Listener", "name": name, "uid": uid,
            "controller": True, "blockOwnerDeletion": True}


def object_override_applies(override: Mapping[str, Any], service: Mapping[str, Any]) -> bool:
    """Whether a Listener ``objectOverrides`` entry targets this Service: apiVersion v1, kind Service, same name
    and the same namespace, written out (behaviour.md "Overrides")."""
    metadata = mapping(override, "metadata")
    return (override.get("apiVersion") == "v1" and override.get("kind") == "Service"
            and metadata.get("name") == service["metadata"]["name"]
            and metadata.get("namespace") == service["metadata"]["namespace"])


def build_service(listener: Mapping[str, Any], listener_class: ListenerClass,
                  spec: ListenerSpec | None = None) -> dict[str, Any]:
    """The Service to apply for ``listener`` under ``listener_class``, all override layers included.

    The Listener's ``objectOverrides`` are checked one by one before they are merged: a malformed entry is an
    :class:`InvalidServiceOverrideError`, one that changes a field the class decides (and does not allow) a
    :class:`ServiceOverrideNotAllowedError`, both naming the field path (behaviour.md "Override policy").
    """
    if spec is None:
        spec = check_listener(listener)
    service = compose_service(listener, listener_class, spec)
    identity = _identity(service)
    owner = service["metadata"]["ownerReferences"][0]
    _, name, uid = listener_identity(listener)
    mount_label = (mount_label_key(uid), name)  # compose_service checked that the uid forms one

    service = deep_merge(service, listener_class.spec.service_overrides)
    _check_identity(service, identity, owner, "the ListenerClass's serviceOverrides")
    decided = service

    allowed = frozenset(listener_class.spec.allowed_service_overrides)
    for index, override in enumerate(spec.object_overrides):
        problem = override_shape_problem(override, index, targets_service=False)
        if problem is None and object_override_applies(override, service):
            problem = override_shape_problem(override, index, targets_service=True)
            if problem is None:
                merged = deep_merge(service, override)
                _check_identity(merged, identity, owner, f"the Listener's {override_path(index)}")
                violations = policy_violations(decided, merged, index, allowed=allowed, mount_label=mount_label)
                if violations:
                    raise ServiceOverrideNotAllowedError(_not_allowed_message(listener_class.name, violations))
                service = merged
        if problem is not None:
            raise InvalidServiceOverrideError(problem)
    return service


def service_type_of(service: Mapping[str, Any]) -> ServiceType:
    """The type of a Service :func:`build_service` composed (checked there to be one of :class:`ServiceType`)."""
    return ServiceType(str(mapping(service, "spec").get("type")))


def _not_allowed_message(class_name: str, violations: list[PolicyViolation]) -> str:
    fields = ", ".join(violation.path for violation in violations)
    names = ", ".join(violation.field.value for violation in violations)
    return (f"{fields}: ListenerClass {class_name!r} decides {names} and does not let Listeners override it; the "
            "Service is kept as last applied (an administrator can allow it in the class's "
            "spec.allowedServiceOverrides)")


def _identity(service: Mapping[str, Any]) -> tuple[Any, ...]:
    metadata = mapping(service, "metadata")
    return service.get("apiVersion"), service.get("kind"), metadata.get("name"), metadata.get("namespace")


def _check_identity(service: Mapping[str, Any], identity: tuple[Any, ...], owner: Mapping[str, Any],
                    source: str) -> None:
    if _identity(service) != identity:
        raise InvalidServiceOverrideError(f"{source} must not change apiVersion, kind, name or namespace of the "
                                          "Service")
    references = items(service, "metadata", "ownerReferences")
    if owner not in references:
        raise InvalidServiceOverrideError(f"{source} must not change the Service's controller reference to its "
                                          "Listener")
    controllers = [ref for ref in references if isinstance(ref, Mapping) and ref.get("controller")]
    if len(controllers) != 1:
        raise InvalidServiceOverrideError(f"{source} must not add another controller reference")
    spec_type = mapping(service, "spec").get("type")
    if spec_type not in {t.value for t in ServiceType}:
        raise InvalidServiceOverrideError(f"{source} set an unsupported Service type {brief(spec_type)}")
