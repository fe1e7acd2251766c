"""Registry of served resource types: the built-in kinds and CRDs registered live.

A `ResourceType` carries everything the server needs to route, discover, default and validate one resource.
The registry is indexed by `key` (`plural` for the core group, `plural.group` otherwise), by URL
(`group, version, plural`) and by `apiVersion`/`kind`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kubesim import errors

CRD_KEY = "customresourcedefinitions.apiextensions.k8s.io"
NAMESPACE_KEY = "namespaces"
ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    has_status: bool = False
    categories: tuple[str, ...] = ()
    # For CRDs: the version's openAPIV3Schema, additionalPrinterColumns and the CRD's name.
    schema: dict[str, Any] | None = None
    printer_columns: tuple[dict[str, Any], ...] = ()
    crd_name: str | None = None
    served_versions: tuple[str, ...] = field(default=())
    # Served from another resource's objects (key of that resource), converted on the way in and out.
    storage: str | None = None
    verbs: tuple[str, ...] = (
        ALL_VERBS  # `("create",)` for virtual kinds (reviews) that are answered, not stored
    )

    @property
    def key(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def storage_key(self) -> str:
        return self.storage or self.key

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def discovery(self) -> list[dict[str, Any]]:
        """APIResource entries (the resource and its status subresource) for `APIResourceList`."""
        entry: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(self.verbs),
        }
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        if self.categories:
            entry["categories"] = list(self.categories)
        out = [entry]
        if self.key in ("deployments.apps", "statefulsets.apps", "replicasets.apps"):
            out.append(
                {
                    "name": f"{self.plural}/scale",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "group": "autoscaling",
                    "version": "v1",
                    "kind": "Scale",
                    "verbs": ["get", "patch", "update"],
                }
            )
        if self.key == "pods":
            out.append({"name": "pods/binding", "singularName": "", "namespaced": True, "kind": "Binding",
                        "verbs": ["create"]})
        if self.has_status:
            out.append(
                {
                    "name": f"{self.plural}/status",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": self.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        return out


def _rt(
    group: str,
    version: str,
    kind: str,
    plural: str,
    namespaced: bool,
    short: tuple[str, ...] = (),
    status: bool = False,
    categories: tuple[str, ...] = (),
) -> ResourceType:
    return ResourceType(
        group=group,
        version=version,
        kind=kind,
        plural=plural,
        singular=kind.lower(),
        namespaced=namespaced,
        short_names=short,
        has_status=status,
        categories=categories,
    )


BUILTIN_TYPES: tuple[ResourceType, ...] = (
    _rt("", "v1", "Namespace", "namespaces", False, ("ns",), True),
    _rt("", "v1", "Node", "nodes", False, ("no",), True),
    _rt("", "v1", "Pod", "pods", True, ("po",), True, ("all",)),
    _rt("", "v1", "Service", "services", True, ("svc",), True, ("all",)),
    _rt("", "v1", "Endpoints", "endpoints", True, ("ep",)),
    _rt("", "v1", "ConfigMap", "configmaps", True, ("cm",)),
    _rt("", "v1", "Secret", "secrets", True),
    _rt("", "v1", "ServiceAccount", "serviceaccounts", True, ("sa",)),
    _rt("", "v1", "Event", "events", True, ("ev",)),
    # Binding: answered (a Pod bound to a node, as ``pods/<name>/binding``), not stored
    ResourceType("", "v1", "Binding", "bindings", "binding", True, verbs=("create",)),
    _rt("", "v1", "PersistentVolume", "persistentvolumes", False, ("pv",), True),
    _rt("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", True, ("pvc",), True),
    _rt("apps", "v1", "StatefulSet", "statefulsets", True, ("sts",), True, ("all",)),
    _rt("apps", "v1", "Deployment", "deployments", True, ("deploy",), True, ("all",)),
    _rt("apps", "v1", "DaemonSet", "daemonsets", True, ("ds",), True, ("all",)),
    _rt("apps", "v1", "ReplicaSet", "replicasets", True, ("rs",), True, ("all",)),
    _rt("batch", "v1", "Job", "jobs", True, (), True, ("all",)),
    _rt("storage.k8s.io", "v1", "StorageClass", "storageclasses", False, ("sc",)),
    _rt("storage.k8s.io", "v1", "CSIDriver", "csidrivers", False),
    _rt("storage.k8s.io", "v1", "CSINode", "csinodes", False),
    _rt("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", True),
    # stored and served (upstream Skupper's controller watches Ingresses); no ingress controller acts on them
    _rt("networking.k8s.io", "v1", "Ingress", "ingresses", True, ("ing",), True),
    ResourceType("events.k8s.io", "v1", "Event", "events", "event", True, ("ev",), storage="events"),
    _rt("coordination.k8s.io", "v1", "Lease", "leases", True),
    _rt("rbac.authorization.k8s.io", "v1", "Role", "roles", True),
    _rt("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", True),
    _rt("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False),
    _rt("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False),
    _rt(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        False,
        ("crd", "crds"),
        True,
    ),
    ResourceType(
        "authorization.k8s.io",
        "v1",
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
        "selfsubjectaccessreview",
        False,
        verbs=("create",),
    ),
)

# Preferred group order in `/apis`, as a real apiserver lists them (built-ins first, CRD groups after).
_BUILTIN_GROUP_ORDER = [
    "apps",
    "events.k8s.io",
    "batch",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "apiextensions.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "authorization.k8s.io",
]


class Registry:
    """All served resource types; CRD types come and go at runtime."""

    def __init__(self) -> None:
        self._by_key: dict[str, ResourceType] = {}
        self._by_url: dict[tuple[str, str, str], ResourceType] = {}
        self._crd_types: dict[str, list[ResourceType]] = {}
        for rt in BUILTIN_TYPES:
            self._add(rt)

    def _add(self, rt: ResourceType) -> None:
        self._by_url[(rt.group, rt.version, rt.plural)] = rt
        # The key names the storage version (the first served version registered for a CRD).
        self._by_key.setdefault(rt.key, rt)

    def _remove(self, rt: ResourceType) -> None:
        self._by_url.pop((rt.group, rt.version, rt.plural), None)
        if self._by_key.get(rt.key) is rt:
            del self._by_key[rt.key]

    def by_key(self, key: str) -> ResourceType | None:
        return self._by_key.get(key)

    def require(self, key: str) -> ResourceType:
        """The type served under ``key``; 404 NotFound naming the key when there is none."""
        rt = self.by_key(key)
        if rt is None:
            raise errors.no_such_resource(key)
        return rt

    def by_url(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_url.get((group, version, plural))

    def by_url_key(self, group: str, plural: str) -> ResourceType | None:
        """The storage type of `plural` in `group` (any served version)."""
        return self._by_key.get(f"{plural}.{group}" if group else plural)

    def types(self) -> Iterator[ResourceType]:
        return iter(self._by_url.values())

    def register_crd(self, types: list[ResourceType]) -> None:
        """Serve the versions of one CRD (replacing what that CRD served before)."""
        if not types:
            return
        name = types[0].crd_name or types[0].key
        self.unregister_crd(name)
        for rt in types:
            self._add(rt)
        self._crd_types[name] = list(types)

    def unregister_crd(self, crd_name: str) -> None:
        for rt in self._crd_types.pop(crd_name, []):
            self._remove(rt)

    def crd_types(self, crd_name: str) -> list[ResourceType]:
        return list(self._crd_types.get(crd_name, []))

    def accepted_api_versions(self, rt: ResourceType) -> frozenset[str]:
        """The ``apiVersion`` values a body written to ``rt`` may carry: every served version of its CRD, or the
        one version of a built-in kind (kubesim serves one version per built-in group)."""
        if rt.crd_name is not None:
            return frozenset(t.api_version for t in self._crd_types.get(rt.crd_name, [rt]))
        return frozenset({rt.api_version})

    def groups(self) -> list[tuple[str, list[str]]]:
        """`(group, [versions, preferred first])` for every non-core group."""
        versions: dict[str, list[str]] = {}
        for rt in self._by_url.values():
            if rt.group:
                vs = versions.setdefault(rt.group, [])
                if rt.version not in vs:
                    vs.append(rt.version)
        for group, vs in versions.items():
            storage = next((r.version for r in self._by_key.values() if r.group == group), None)
            if storage in vs:
                vs.remove(storage)
                vs.insert(0, storage)
        order = {g: i for i, g in enumerate(_BUILTIN_GROUP_ORDER)}
        return sorted(versions.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0]))

    def group_version_types(self, group: str, version: str) -> list[ResourceType]:
        return [rt for rt in self._by_url.values() if rt.group == group and rt.version == version]


def types_from_crd(crd: dict[str, Any]) -> list[ResourceType]:
    """The served resource types of a CRD object (storage version first)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group", "")
    plural = names.get("plural", "")
    kind = names.get("kind", "")
    singular = names.get("singular") or kind.lower()
    namespaced = spec.get("scope", "Namespaced") == "Namespaced"
    short = tuple(names.get("shortNames") or ())
    categories = tuple(names.get("categories") or ())
    versions = [v for v in spec.get("versions") or [] if v.get("served", True)]
    versions.sort(key=lambda v: not v.get("storage", False))
    served = tuple(v.get("name", "") for v in versions)
    out = []
    for v in versions:
        schema = ((v.get("schema") or {}).get("openAPIV3Schema")) or None
        out.append(
            ResourceType(
                group=group,
                version=v.get("name", ""),
                kind=kind,
                plural=plural,
                singular=singular,
                namespaced=namespaced,
                short_names=short,
                has_status="status" in (v.get("subresources") or {}),
                categories=categories,
                schema=schema,
                printer_columns=tuple(v.get("additionalPrinterColumns") or ()),
                crd_name=crd.get("metadata", {}).get("name"),
                served_versions=served,
            )
        )
    return out
