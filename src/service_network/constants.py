"""Names shared by the service network's controller and router: API group, labels, annotations, object names,
ports and field managers. Values that Skupper users and tools see are upstream's (skupper-listener.md §5.3-§5.6)."""

from __future__ import annotations

from types import MappingProxyType

API_GROUP = "skupper.io"
API_VERSION = "v2alpha1"
GROUP_VERSION = f"{API_GROUP}/{API_VERSION}"
#: The group of upstream's NetworkObserver (its network-observer chart as a resource).
OBSERVABILITY_GROUP = "observability.skupper.io"
OBSERVABILITY_GROUP_VERSION = f"{OBSERVABILITY_GROUP}/{API_VERSION}"

#: Deployment, ServiceAccount, Role, RoleBinding and ConfigMap of a site's router (one per site; HA is part 2).
ROUTER_NAME = "skupper-router"
#: Key of the router document (docs/service-network-router.md) in the router ConfigMap.
ROUTER_CONFIG_KEY = "router.json"
#: Key of the router-port allocations (Listener entity -> port) in the router ConfigMap, so that ports stay stable
#: across restarts even for entities withheld from the router document (e.g. waiting for a TLS Secret).
PORTS_KEY = "ports.json"

#: ConfigMap into which each router Pod copies its network status (upstream's name), one key per router:
#: ``<router ConfigMap name>.json`` (docs/service-network-router.md "Network status"). The controller creates it
#: (owned by the Site); a router may only patch it.
NETWORK_STATUS_NAME = "skupper-network-status"

#: Labels of the router Pods; listener Services select them (upstream's selector).
ROUTER_POD_LABELS = MappingProxyType({"application": "skupper-router", "skupper.io/component": "router"})
#: Labels of the router Deployments and their Pods, as upstream's Deployment template has them (its tools select
#: router Pods by each: ``debug dump`` by the name, scenarios by ``part-of``, its controller by component and type).
ROUTER_LABELS = MappingProxyType({"app.kubernetes.io/name": "skupper-router", "app.kubernetes.io/part-of": "skupper",
                                  "application": "skupper-router", "skupper.io/component": "router",
                                  "skupper.io/type": "site"})
#: On router Pods: which router of the site (its Deployment's name), as upstream; the router access of each router
#: selects its Pods by it.
LABEL_GROUP = "skupper.io/group"
#: Label on every router object the controller creates (its caches select them by it).
LABEL_COMPONENT = "skupper.io/component"
COMPONENT_ROUTER = "router"
#: The selector of a router Deployment the controller creates (upstream's; a Deployment created by an earlier
#: version keeps the selector it has, which Kubernetes does not let change).
ROUTER_SELECTOR = MappingProxyType({LABEL_COMPONENT: COMPONENT_ROUTER})
#: Marks objects the controller keeps (upstream's annotation; on Services also what makes them ours, with an owner).
ANNOTATION_CONTROLLED = "internal.skupper.io/controlled"
#: Marks the router ConfigMap (upstream: value "").
LABEL_ROUTER_CONFIG = "internal.skupper.io/router-config"
#: Listener Services: the label names one Listener exposed by the Service; the annotation marks Services the
#: controller owns (a Service without it is never modified or deleted).
LABEL_LISTENER = "internal.skupper.io/listener"

#: Ports of the router itself, never given to a Listener: amqps, amqp (upstream's, kept free for compatibility),
#: the router's own metrics/health endpoint (as skupper-router's 9090), the adaptor's /metrics /healthz /readyz, and
#: the inter-router and edge ports of part 2.
ROUTER_METRICS_PORT = 9090
ADAPTOR_PORT = 9191
INTER_ROUTER_PORT = 55671
EDGE_PORT = 45671
ROUTER_RESERVED_PORTS = (5671, 5672, ROUTER_METRICS_PORT, ADAPTOR_PORT, EDGE_PORT, INTER_ROUTER_PORT)

#: Where the router Pod keeps the router's control socket, TLS material and network status (an emptyDir).
ROUTER_STATE_DIR = "/var/lib/skupper-router"

#: The project's image (the chart sets the real reference; `scripts/build-image` builds it).
DEFAULT_ROUTER_IMAGE = "localhost/listener-operator:0.1.0"

CONTROLLER_NAME = "service-network-controller"
FIELD_MANAGER = "service-network-controller"
FIELD_MANAGER_STATUS = "service-network-controller-status"
DEFAULT_LEASE_NAME = "service-network-controller"
