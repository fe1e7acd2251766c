"""Per-kind defaulting and validation on write: what the apiserver's registry strategies and admission do.

The store calls `Admission` before every commit (its ``AdmissionHooks``, ``kubesim.store.hooks``: the store is
built with it and hands itself over as a ``StoreReader``). It validates names per kind and labels, delegates to
`builtin_validation.py` (built-in kinds), `defaults.py` (built-in defaults), `services.py` (clusterIP/nodePort allocation),
accepts CustomResourceDefinitions (status conditions) and handles custom objects' schemas through `kubesim.schema`.
"""

from __future__ import annotations

import re
from typing import Any

from kubesim import errors
from kubesim.auth.serviceaccounts import add_token_volume
from kubesim.kinds.resources import ResourceType, types_from_crd
from kubesim.registry import builtin_validation, defaults
from kubesim.registry.services import ServiceAdmission, ServiceAllocator
from kubesim.schema.cel import cel_causes, compile_causes
from kubesim.schema.crd import structural_causes
from kubesim.schema.defaulting import apply_defaults
from kubesim.schema.pruning import prune
from kubesim.schema.validation import validate
from kubesim.store.hooks import StoreReader
from kubesim.store.metadata import now_iso
from kubesim.taints import DEFAULT_TOLERATION_SECONDS, default_tolerations

Obj = dict[str, Any]

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_RBAC_KINDS = {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
_KEEP_STATUS_ON_CREATE = {"nodes", "namespaces", "customresourcedefinitions.apiextensions.k8s.io"}


def name_problem(rt: ResourceType, name: str) -> str | None:
    """Why `name` is not a valid name for this kind (None when valid)."""
    if rt.kind in _RBAC_KINDS:
        if name in (".", "..") or "/" in name or "%" in name:
            return f'"{name}" may not be "." or ".." and may not contain "/" or "%"'
        return None
    if rt.kind == "Service":
        if len(name) > 63 or not _DNS1035_LABEL.match(name):
            return (
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
                "alphabetic character, and end with an alphanumeric character (at most 63 characters)"
            )
        return None
    if rt.kind == "Namespace":
        if len(name) > 63 or not _DNS1123_LABEL.match(name):
            return (
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
                "start and end with an alphanumeric character (at most 63 characters)"
            )
        return None
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        return (
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
            "must start and end with an alphanumeric character (at most 253 characters)"
        )
    return None


def _dig(obj: Any, path: tuple[str, ...]) -> Any:
    for p in path:
        obj = obj.get(p) if isinstance(obj, dict) else None
    return obj


def _metadata_causes(obj: Obj) -> list[dict[str, Any]]:
    from kubesim import selectors

    causes = []
    meta = obj.get("metadata") or {}
    labels = meta.get("labels")
    if labels is not None and not isinstance(labels, dict):
        causes.append(errors.cause("metadata.labels", "must be a map of strings", "FieldValueTypeInvalid"))
    for k, v in (labels or {}).items():
        try:
            selectors.validate_label_key(k)
            if not isinstance(v, str):
                raise ValueError("label values must be strings")
            selectors.validate_label_value(v)
        except ValueError as e:
            causes.append(errors.cause("metadata.labels", f"Invalid value: {k!r}: {e}"))
    ann = meta.get("annotations")
    if ann is not None and (not isinstance(ann, dict) or not all(isinstance(v, str) for v in ann.values())):
        causes.append(
            errors.cause("metadata.annotations", "must be a map of strings", "FieldValueTypeInvalid")
        )
    for ref in meta.get("ownerReferences") or []:
        if not isinstance(ref, dict) or not all(ref.get(k) for k in ("apiVersion", "kind", "name", "uid")):
            causes.append(
                errors.cause(
                    "metadata.ownerReferences",
                    "apiVersion, kind, name and uid are required",
                    "FieldValueRequired",
                )
            )
    return causes


class Admission:
    """Defaulting/validation hooks called by the store before it commits a write."""

    def __init__(
        self, *, service_cidr: str | None = None, service_node_port_range: tuple[int, int] | str | None = None,
        default_not_ready_toleration_seconds: int = DEFAULT_TOLERATION_SECONDS,
        default_unreachable_toleration_seconds: int = DEFAULT_TOLERATION_SECONDS,
    ) -> None:
        self.services = ServiceAllocator(service_cidr, service_node_port_range)
        self._service_admission = ServiceAdmission(self.services)
        # the DefaultTolerationSeconds plugin (kube-apiserver's --default-*-toleration-seconds)
        self.toleration_seconds = (default_not_ready_toleration_seconds, default_unreachable_toleration_seconds)

    # Store hooks ---------------------------------------------------------------------------------------

    def admit_create(self, store: StoreReader, rt: ResourceType, obj: Obj, *, dry_run: bool) -> None:
        name = obj["metadata"]["name"]
        causes = []
        problem = name_problem(rt, name)
        if problem:
            causes.append(errors.cause("metadata.name", f"Invalid value: {name!r}: {problem}"))
        if rt.key == "secrets":
            builtin_validation.fold_string_data(obj)
        causes += _metadata_causes(obj) + builtin_validation.metadata_causes(obj)
        causes += self._kind_causes(store, rt, obj) + builtin_validation.builtin_causes(rt, obj, None)
        if causes:
            raise errors.invalid(rt.kind, rt.group, name, causes)
        if rt.kind == "Service" and rt.group == "":
            self._service_admission.admit(rt, None, obj, dry_run=dry_run)
        if rt.has_status and rt.key not in _KEEP_STATUS_ON_CREATE:
            # Registry strategies reset status on create: it is written through /status only.
            obj.pop("status", None)
        if rt.key in ("persistentvolumes", "persistentvolumeclaims"):
            obj["status"] = {"phase": "Pending"}
        if rt.key == "pods":
            defaults.default_pod(obj)
            self._mount_service_account_token(store, obj)
            if isinstance(obj.get("spec"), dict):
                obj["spec"]["tolerations"] = default_tolerations(obj, *self.toleration_seconds)
        defaults.default_kind(rt, obj)
        if rt.key == "namespaces":
            spec = obj.setdefault("spec", {})
            if isinstance(spec, dict):
                spec.setdefault("finalizers", ["kubernetes"])
            obj["status"] = {"phase": "Active"}

    def admit_update(
        self, store: StoreReader, rt: ResourceType, old: Obj, new: Obj, *, dry_run: bool, subresource: str | None
    ) -> None:
        name = new["metadata"]["name"]
        if rt.key == "secrets":
            builtin_validation.fold_string_data(new)
        causes = _metadata_causes(new) + builtin_validation.metadata_causes(new)
        if subresource is None:
            causes += self._kind_causes(store, rt, new, old) + builtin_validation.builtin_causes(rt, new, old)
            if rt.key == "customresourcedefinitions.apiextensions.k8s.io":
                for path in (("scope",), ("group",), ("names", "plural")):
                    before, after = _dig(old.get("spec"), path), _dig(new.get("spec"), path)
                    if before != after:
                        causes.append(
                            errors.cause(
                                "spec." + ".".join(path), f"Invalid value: {after!r}: field is immutable"
                            )
                        )
        elif rt.schema is not None:
            causes += self._custom_causes(rt, new, old)
        if causes:
            raise errors.invalid(rt.kind, rt.group, name, causes)
        if rt.kind == "Service" and rt.group == "" and subresource is None:
            self._service_admission.admit(rt, old, new, dry_run=dry_run)
        if subresource is None:
            defaults.default_kind(rt, new)
        if rt.key == "namespaces" and not old["metadata"].get("deletionTimestamp"):
            new["status"] = dict(new.get("status") or {}, phase="Active")

    @staticmethod
    def _mount_service_account_token(store: StoreReader, pod: Obj) -> None:
        """The ServiceAccount admission plugin: the token volume, unless automounting is off."""
        account_rt = store.registry.by_key("serviceaccounts")
        namespace = pod["metadata"].get("namespace")
        name = str((pod.get("spec") or {}).get("serviceAccountName") or "default")
        account = store.find(account_rt, namespace, name) if account_rt is not None and namespace else None
        add_token_volume(pod, account)

    def restored(self, rt: ResourceType, obj: Obj) -> None:
        """An object read back from the store file: what it holds is taken again (a Service's clusterIPs and
        nodePorts), so nothing new is handed the same address."""
        if rt.kind == "Service" and rt.group == "":
            self._service_admission.adopt(obj)

    def released(self, rt: ResourceType, obj: Obj) -> None:
        """An object is gone: free what it held."""
        if rt.kind == "Service" and rt.group == "":
            self._service_admission.released(obj)

    # Kinds ------------------------------------------------------------------------------------------------

    def _kind_causes(self, store: StoreReader, rt: ResourceType, obj: Obj, old: Obj | None = None
                     ) -> list[dict[str, Any]]:
        if rt.crd_name is not None and rt.schema is not None:
            return self._custom_causes(rt, obj, old)
        if rt.key == "customresourcedefinitions.apiextensions.k8s.io":
            return self._crd_causes(store, obj)
        return []

    def _custom_causes(self, rt: ResourceType, obj: Obj, old: Obj | None = None) -> list[dict[str, Any]]:
        """Prune, default and validate a custom object against its CRD schema (in place), then its CEL rules
        (``old``: the stored object, for transition rules)."""
        assert rt.schema is not None
        meta = obj.get("metadata")
        # Root metadata is the server's (neither pruned nor defaulted from the schema): left out of the copies.
        body = {k: v for k, v in obj.items() if k != "metadata"}
        result = apply_defaults(prune(body, rt.schema), rt.schema, copy=False)
        obj.clear()
        obj.update(result)
        if meta is not None:
            obj["metadata"] = meta
        causes = validate(obj, rt.schema)
        return causes or cel_causes(obj, old, rt.schema)

    def _crd_causes(self, store: StoreReader, crd: Obj) -> list[dict[str, Any]]:
        causes = []
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        group = spec.get("group") or ""
        plural = names.get("plural") or ""
        if not group:
            causes.append(errors.cause("spec.group", "Required value", "FieldValueRequired"))
        if not plural:
            causes.append(errors.cause("spec.names.plural", "Required value", "FieldValueRequired"))
        if not names.get("kind"):
            causes.append(errors.cause("spec.names.kind", "Required value", "FieldValueRequired"))
        if spec.get("scope") not in ("Namespaced", "Cluster"):
            causes.append(
                errors.cause(
                    "spec.scope",
                    'Unsupported value: must be "Namespaced" or "Cluster"',
                    "FieldValueNotSupported",
                )
            )
        name = crd["metadata"]["name"]
        if group and plural and name != f"{plural}.{group}":
            causes.append(
                errors.cause(
                    "metadata.name", f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group'
                )
            )
        versions = spec.get("versions") or []
        if not versions:
            causes.append(errors.cause("spec.versions", "Required value", "FieldValueRequired"))
        elif sum(1 for v in versions if v.get("storage")) != 1:
            causes.append(
                errors.cause(
                    "spec.versions", "Invalid value: must have exactly one version marked as storage version"
                )
            )
        causes += structural_causes(crd)
        for i, version in enumerate(versions):
            schema = ((version or {}).get("schema") or {}).get("openAPIV3Schema") if isinstance(version, dict) else None
            if isinstance(schema, dict):
                causes += compile_causes(schema, f"spec.versions[{i}].schema.openAPIV3Schema")
        if not causes:
            existing = store.registry.by_key(f"{plural}.{group}")
            if existing is not None and existing.crd_name is None:
                causes.append(
                    errors.cause(
                        "spec.names.plural", f"Invalid value: {plural}.{group} is a built-in resource"
                    )
                )
        if not causes:
            self._accept_crd(crd)
        return causes

    @staticmethod
    def _accept_crd(crd: Obj) -> None:
        """What the CRD controllers do at once: names accepted, Established, storedVersions."""
        spec = crd["spec"]
        status = crd.get("status")
        if not isinstance(status, dict):
            crd["status"] = status = {}
        ts = now_iso()
        status["acceptedNames"] = dict(
            spec["names"], singular=spec["names"].get("singular") or spec["names"]["kind"].lower()
        )
        status["conditions"] = [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": ts,
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": ts,
            },
        ]
        stored = list(status.get("storedVersions") or [])
        storage = next((v["name"] for v in spec["versions"] if v.get("storage")), None)
        if storage and storage not in stored:
            stored.append(storage)
        status["storedVersions"] = stored
        types_from_crd(crd)  # raises nothing; keeps the CRD parseable before it is stored

    # Services ---------------------------------------------------------------------------------------------
