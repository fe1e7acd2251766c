"""Validation of built-in kinds beyond names: the checks the apiserver's validators make that clients can trip over.

Not exhaustive (docs/kubesim.md lists what is not checked); each check here mirrors one of `ValidateObjectMeta`,
`ValidateConfigMap`, `ValidateSecret`, `ValidatePod`, `ValidateService` with the apiserver's field paths.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from kubesim.errors import cause
from kubesim.kinds.resources import ResourceType

Obj = dict[str, Any]
Cause = dict[str, Any]

_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_IANA_SVC_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_MAX_ANNOTATIONS_BYTES = 256 * 1024


def metadata_causes(obj: Obj) -> list[Cause]:
    """ownerReferences (one controller at most) and annotation keys/size."""
    from kubesim import selectors

    out: list[Cause] = []
    meta = obj.get("metadata") or {}
    refs = meta.get("ownerReferences") or []
    controllers = [r for r in refs if isinstance(r, dict) and r.get("controller") is True]
    if len(controllers) > 1:
        found = ", ".join(f"{r.get('kind')}/{r.get('name')}" for r in controllers)
        out.append(
            cause(
                "metadata.ownerReferences",
                f'Invalid value: Only one reference can have Controller set to true. Found "true" in references for {found}',
            )
        )
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        size = 0
        for k, v in annotations.items():
            try:
                selectors.validate_label_key(k)
            except ValueError as e:
                out.append(cause("metadata.annotations", f"Invalid value: {k!r}: {e}"))
            size += len(k) + len(v if isinstance(v, str) else "")
        if size > _MAX_ANNOTATIONS_BYTES:
            out.append(
                cause(
                    "metadata.annotations",
                    f"Too long: must have at most {_MAX_ANNOTATIONS_BYTES} bytes",
                    "FieldValueTooLong",
                )
            )
    return out


def _data_key_causes(field: str, data: Any) -> list[Cause]:
    out = []
    for k in (data or {}) if isinstance(data, dict) else ():
        if not _CONFIG_KEY.match(k) or len(k) > 253:
            out.append(
                cause(
                    f"{field}[{k}]",
                    f"Invalid value: {k!r}: a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
                )
            )
    return out


def _immutable_causes(obj: Obj, old: Obj | None) -> list[Cause]:
    if old is None or old.get("immutable") is not True:
        return []
    out = []
    if obj.get("immutable") is not True:
        out.append(
            cause("immutable", "Forbidden: field is immutable when `immutable` is set", "FieldValueForbidden")
        )
    for field in ("data", "binaryData"):
        if (obj.get(field) or {}) != (old.get(field) or {}):
            out.append(
                cause(field, "Forbidden: field is immutable when `immutable` is set", "FieldValueForbidden")
            )
    return out


def fold_string_data(secret: Obj) -> None:
    """`stringData` is write-only: merged into `data` (base64), overriding keys there, and never stored."""
    string_data = secret.pop("stringData", None)
    if isinstance(string_data, dict) and string_data:
        data = secret.get("data")
        if not isinstance(data, dict):
            data = secret["data"] = {}
        for k, v in string_data.items():
            data[k] = base64.b64encode(str(v).encode()).decode()


def _pod_spec_causes(spec: Any, path: str) -> list[Cause]:
    if not isinstance(spec, dict):
        return [cause(path, "Required value", "FieldValueRequired")]
    out = []
    containers = spec.get("containers")
    if not containers:
        out.append(cause(f"{path}.containers", "Required value", "FieldValueRequired"))
    names: set[str] = set()
    for group in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(group) or []):
            where = f"{path}.{group}[{i}]"
            if not isinstance(c, dict):
                out.append(cause(where, "Invalid value: must be an object"))
                continue
            name = c.get("name")
            if not name:
                out.append(cause(f"{where}.name", "Required value", "FieldValueRequired"))
            elif not _DNS1123_LABEL.match(str(name)):
                out.append(
                    cause(
                        f"{where}.name",
                        f"Invalid value: {name!r}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'",
                    )
                )
            elif name in names:
                out.append(cause(f"{where}.name", f"Duplicate value: {name!r}", "FieldValueDuplicate"))
            names.add(str(name))
            if not c.get("image"):
                out.append(cause(f"{where}.image", "Required value", "FieldValueRequired"))
            for j, p in enumerate(c.get("ports") or []):
                pname = p.get("name") if isinstance(p, dict) else None
                if pname and (
                    len(pname) > 15 or not _IANA_SVC_NAME.match(pname) or not re.search("[a-z]", pname)
                ):
                    out.append(
                        cause(
                            f"{where}.ports[{j}].name",
                            f"Invalid value: {pname!r}: must be no more than 15 characters and an IANA_SVC_NAME",
                        )
                    )
    return out


def _service_causes(obj: Obj) -> list[Cause]:
    out = []
    spec = obj.get("spec") or {}
    for i, p in enumerate(spec.get("ports") or []):
        name = p.get("name") if isinstance(p, dict) else None
        if name and (len(name) > 63 or not _DNS1123_LABEL.match(name)):
            out.append(
                cause(
                    f"spec.ports[{i}].name",
                    f"Invalid value: {name!r}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
                )
            )
    return out


def builtin_causes(rt: ResourceType, obj: Obj, old: Obj | None) -> list[Cause]:
    """Kind-specific problems of a built-in object (empty for custom resources and unchecked kinds)."""
    if rt.crd_name is not None:
        return []
    key = rt.key
    if key == "configmaps":
        return (
            _data_key_causes("data", obj.get("data"))
            + _data_key_causes("binaryData", obj.get("binaryData"))
            + _immutable_causes(obj, old)
        )
    if key == "secrets":
        out = _data_key_causes("data", obj.get("data")) + _immutable_causes(obj, old)
        if old is not None and obj.get("type") != old.get("type"):
            out.append(cause("type", "Invalid value: field is immutable"))
        return out
    if key == "pods":
        return _pod_spec_causes(obj.get("spec"), "spec") + _pod_update_causes(obj, old)
    if key == "services":
        return _service_causes(obj)
    if rt.group == "apps" and rt.kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"):
        template = (obj.get("spec") or {}).get("template") or {}
        out = _pod_spec_causes(template.get("spec"), "spec.template.spec")
        if rt.kind == "ReplicaSet":
            out += _selector_causes(obj)
        return out + _immutable_selector_causes(obj, old)
    if key == "jobs.batch":
        return _job_causes(obj, old)
    return []


def _immutable_selector_causes(obj: Obj, old: Obj | None) -> list[Cause]:
    """apps/v1 workloads: ``spec.selector`` cannot change once created (ValidateDeploymentUpdate and its kin)."""
    if old is None:
        return []
    before = (old.get("spec") or {}).get("selector")
    after = (obj.get("spec") or {}).get("selector") if isinstance(obj.get("spec"), dict) else None
    if _normal_selector(before) == _normal_selector(after):
        return []
    return [cause("spec.selector", f"Invalid value: {json.dumps(after, sort_keys=True)}: field is immutable")]


def _normal_selector(selector: Any) -> Any:
    """A selector as compared for immutability: absent and empty parts are the same."""
    if not isinstance(selector, dict):
        return selector
    return {k: v for k, v in selector.items() if v not in (None, {}, [])}




def _pod_update_causes(pod: Obj, old: Obj | None) -> list[Cause]:
    """A Pod is bound to its node once, through ``pods/<name>/binding``: an update may not change ``nodeName``."""
    if old is None:
        return []
    before = (old.get("spec") or {}).get("nodeName")
    after = (pod.get("spec") or {}).get("nodeName") if isinstance(pod.get("spec"), dict) else None
    if before == after:
        return []
    return [cause("spec", "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
                  "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing tolerations) and "
                  "`spec.terminationGracePeriodSeconds`; spec.nodeName is set by binding the Pod "
                  "(pods/<name>/binding)", "FieldValueForbidden")]


def _selector_causes(obj: Obj) -> list[Cause]:
    """``spec.selector`` is required, non-empty and selects the template's labels (ValidateReplicaSetSpec)."""
    from kubesim.selectors import selector_from_label_selector_object

    spec = obj.get("spec") or {}
    selector = spec.get("selector")
    if not isinstance(selector, dict) or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        return [cause("spec.selector", "Required value", "FieldValueRequired")]
    try:
        parsed = selector_from_label_selector_object(selector)
    except ValueError as error:
        return [cause("spec.selector", f"Invalid value: {error}")]
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not parsed.matches(labels):
        return [cause("spec.template.metadata.labels", f"Invalid value: {labels!r}: `selector` does not match "
                      "template `labels`")]
    return []


def _job_causes(job: Obj, old: Obj | None) -> list[Cause]:
    """ValidateJob's checks that users meet: the template's restartPolicy, non-negative counts, and (on update)
    the immutable selector and template."""
    spec: dict[str, Any] = job["spec"] if isinstance(job.get("spec"), dict) else {}
    template = spec.get("template") or {}
    out = _pod_spec_causes(template.get("spec"), "spec.template.spec")
    policy = (template.get("spec") or {}).get("restartPolicy") if isinstance(template.get("spec"), dict) else None
    if policy not in ("OnFailure", "Never"):
        out.append(cause("spec.template.spec.restartPolicy", f'Unsupported value: "{policy or ""}": supported values: '
                         '"OnFailure", "Never"', "FieldValueNotSupported"))
    for field in ("parallelism", "completions", "backoffLimit", "activeDeadlineSeconds"):
        value = spec.get(field)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            out.append(cause(f"spec.{field}", f"Invalid value: {value!r}: must be greater than or equal to 0"))
    if old is not None:
        from kubesim.jsonvalues import json_clone
        from kubesim.registry.defaults import default_job

        defaulted = json_clone(job)
        default_job(defaulted)  # compared as stored: the apiserver defaults a body before it validates it
        new_spec, old_spec = defaulted.get("spec") or {}, old.get("spec") or {}
        for field in ("selector", "template", "completions"):
            if new_spec.get(field) != old_spec.get(field):
                out.append(cause(f"spec.{field}", "Invalid value: field is immutable"))
    return out
