"""pydantic models of the ``listeners.stackable.tech/v1alpha1`` custom resources.

Field names, enums and defaults follow upstream exactly (behaviour.md "Custom resources") so that existing manifests and clients keep working;
``Listener.status.conditions`` and ``observedGeneration`` are our additive extensions (behaviour.md
"Status conditions"). The models are
the single source of the CRD schemas (``crd/generate.py``): class and attribute docstrings become the descriptions
that ``kubectl explain`` shows. Mutable defaults are plain literals on purpose: pydantic copies them per instance, and
unlike ``default_factory`` they appear as ``default`` in the generated schema.

Python attributes are snake_case; the JSON (alias) names are camelCase. Parse API objects with
``Model.model_validate(obj)``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

from listener_operator.names import DNS1123_LABEL_PATTERN, LABEL_MAX

#: Service port protocols. A pattern rather than an enum: the field is nullable, and a null must stay accepted.
PROTOCOL_PATTERN = "^(TCP|UDP|SCTP)$"

Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1), WithJsonSchema({"type": "integer", "format": "int32"})]
#: A Kubernetes object of any kind, checked where it is used (a malformed one gets a condition naming its path).
_AnyObject = Annotated[Any, WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True})]
Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1), WithJsonSchema({"type": "integer", "format": "int64"})]


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=True,
        extra="ignore",
    )


class ServiceType(StrEnum):
    """The Kubernetes Service type used to expose Listeners of a class."""

    NODE_PORT = "NodePort"
    LOAD_BALANCER = "LoadBalancer"
    CLUSTER_IP = "ClusterIP"


class AddressType(StrEnum):
    """The kind of a published address."""

    HOSTNAME = "Hostname"
    IP = "IP"


class PreferredAddressType(StrEnum):
    """Which kind of address to publish when both are available."""

    HOSTNAME = "Hostname"
    IP = "IP"
    HOSTNAME_CONSERVATIVE = "HostnameConservative"


class ExternalTrafficPolicy(StrEnum):
    """Service externalTrafficPolicy."""

    CLUSTER = "Cluster"
    LOCAL = "Local"


class ServiceOverrideField(StrEnum):
    """A Service field the ListenerClass decides; a Listener's objectOverrides may change it only when the class
    allows it."""

    TYPE = "spec.type"
    EXTERNAL_IPS = "spec.externalIPs"
    LOAD_BALANCER_IP = "spec.loadBalancerIP"
    LOAD_BALANCER_SOURCE_RANGES = "spec.loadBalancerSourceRanges"
    LOAD_BALANCER_CLASS = "spec.loadBalancerClass"
    ALLOCATE_LOAD_BALANCER_NODE_PORTS = "spec.allocateLoadBalancerNodePorts"
    EXTERNAL_TRAFFIC_POLICY = "spec.externalTrafficPolicy"
    SELECTOR = "spec.selector"


class PodListenerScope(StrEnum):
    """Whether a Pod's listener addresses are specific to its node or valid cluster-wide."""

    NODE = "Node"
    CLUSTER = "Cluster"


class ListenerClassSpec(_Model):
    """Policy for exposing the Listeners that reference this class."""

    service_type: ServiceType
    """The type of the Service created for each Listener: NodePort, LoadBalancer or ClusterIP."""

    load_balancer_allocate_node_ports: bool = True
    """Whether LoadBalancer Services allocate node ports (Service.spec.allocateLoadBalancerNodePorts).
    Only used when serviceType is LoadBalancer."""

    load_balancer_class: str | None = None
    """The load balancer implementation to use (Service.spec.loadBalancerClass).
    Only used when serviceType is LoadBalancer."""

    service_annotations: dict[str, str] = {}
    """Annotations added to every Service created for this class."""

    service_external_traffic_policy: ExternalTrafficPolicy | None = None
    """Service.spec.externalTrafficPolicy for NodePort and LoadBalancer Services; omitted when unset and never set
    for ClusterIP."""

    preferred_address_type: PreferredAddressType = PreferredAddressType.HOSTNAME_CONSERVATIVE
    """Which address kind to publish. HostnameConservative means IP for NodePort classes (node hostnames are often
    not resolvable from outside the cluster) and Hostname for the other service types."""

    pinned_node_ports: bool = False
    """For NodePort classes: pin each new listener volume to the node it was first scheduled on, so that the
    published address stays stable. Pinning is done by the CSI driver through node affinity (topology key
    listeners.stackable.tech/hostname) on the PersistentVolume it provisions; to move a pinned Pod to another node,
    delete its PersistentVolumeClaim."""

    service_overrides: dict[str, Any] = {"apiVersion": "v1", "kind": "Service", "metadata": {}}
    """A partial Service deep-merged over the generated Service (after serviceAnnotations, before the Listener's
    objectOverrides). Maps merge per key, list-maps such as ports merge by key, other values are replaced."""

    allowed_service_overrides: Annotated[
        list[ServiceOverrideField], Field(json_schema_extra={"x-kubernetes-list-type": "set"})] = []
    """Service fields this class decides that the objectOverrides of its Listeners may change all the same. By
    default (empty) a Listener whose overrides widen exposure - change spec.type, spec.externalIPs,
    spec.loadBalancerIP or spec.loadBalancerClass, widen spec.loadBalancerSourceRanges, turn
    spec.allocateLoadBalancerNodePorts on, or remove the mount label from spec.selector - is refused (Ready=False,
    reason ServiceOverrideNotAllowed); everything else (spec.externalTrafficPolicy, annotations, labels, narrower
    source ranges, ...) applies as upstream merges it. Not part of the upstream API."""


class ListenerPort(_Model):
    """A port exposed by a Listener."""

    # The schema refuses at admission what no Service accepts (behaviour.md "Admission"); pydantic does not enforce
    # it, so that objects stored before keep getting the controller's specific reasons (InvalidPort, DuplicatePort).
    name: Annotated[str, Field(json_schema_extra={"pattern": DNS1123_LABEL_PATTERN, "maxLength": LABEL_MAX})]
    """The port name; unique within the Listener. Published addresses key their ports by this name. A Service port
    name: lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters."""

    port: Annotated[Int32, Field(json_schema_extra={"minimum": 1, "maximum": 65535})]
    """The port number exposed by the Service (1-65535). Pods must listen on the same number."""

    protocol: Annotated[str | None, Field(json_schema_extra={"pattern": PROTOCOL_PATTERN})] = None
    """TCP, UDP or SCTP; Kubernetes defaults to TCP."""


class ListenerIngress(_Model):
    """One address on which a Listener is reachable."""

    address: str
    """A hostname or an IP address."""

    address_type: AddressType
    """Whether address is a Hostname or an IP."""

    ports: dict[str, Int32]
    """The port number to use at this address, keyed by port name."""


class ListenerSpec(_Model):
    """Exposes a set of Pods (those mounting a listener volume bound to this Listener) as policed by a
    ListenerClass."""

    class_name: str | None = None
    """The name of the ListenerClass that decides how this Listener is exposed."""

    extra_pod_selector_labels: dict[str, str] = {}
    """Extra labels that Pods must carry to be selected. Pods must still mount a volume bound to this Listener."""

    ports: Annotated[list[ListenerPort] | None, Field(json_schema_extra={
        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]})] = None
    """The ports to expose; each name at most once."""

    publish_not_ready_addresses: bool | None = True
    """Whether Pods that are not ready still receive traffic (Service.spec.publishNotReadyAddresses). Unset or null
    means true."""

    object_overrides: list[_AnyObject] = []
    """Kubernetes objects deep-merged into the generated objects with the same apiVersion, kind, name and namespace
    (the namespace must be written out). Applied last."""


class Condition(_Model):
    """A standard Kubernetes condition (metav1.Condition)."""

    type: str
    """The condition type, e.g. Ready."""

    status: str
    """True, False or Unknown."""

    observed_generation: Int64 | None = None
    """The .metadata.generation the condition was computed from."""

    last_transition_time: str
    """When the status last changed (RFC 3339)."""

    reason: str
    """A CamelCase machine-readable reason."""

    message: str
    """A human-readable explanation."""


class ListenerStatus(_Model):
    """Where the Listener is reachable."""

    service_name: str | None = None
    """The name of the backing Service."""

    ingress_addresses: list[ListenerIngress] | None = None
    """Every address the Listener is reachable on."""

    node_ports: dict[str, Int32] | None = None
    """For NodePort classes only: the node port per port name (for internal use by the CSI driver)."""

    conditions: list[Condition] | None = None
    """Ready explains whether addresses are published and, if not, why. Not part of the upstream API."""

    observed_generation: Int64 | None = None
    """The .metadata.generation of the last reconciled spec. Not part of the upstream API."""


class PodListener(_Model):
    """The addresses of one listener volume, as seen by the Pod that mounts it."""

    scope: PodListenerScope
    """Node when the addresses are specific to the Pod's node (NodePort), Cluster otherwise."""

    ingress_addresses: list[ListenerIngress] | None = None
    """The addresses this Pod is reachable on through the volume's Listener."""


class PodListenersSpec(_Model):
    """The listener volumes of one Pod and their addresses (written by the CSI node driver)."""

    listeners: dict[str, PodListener]
    """Keyed by the Pod's volume name."""

