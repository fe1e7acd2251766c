"""Whether a CustomResourceDefinition is acceptable, as the apiserver decides before storing it: per version the
structural invariants, the validity of ``default`` values, the general OpenAPI rules and the printer columns."""

from __future__ import annotations

from typing import Any

from kubesim.jsonvalues import is_integer
from kubesim.schema import ROOT_FIELDS, Schema
from kubesim.schema import fielderrors as fe
from kubesim.schema.fielderrors import Cause
from kubesim.schema.openapi_rules import openapi_rule_causes
from kubesim.schema.pruning import prune
from kubesim.schema.structural import structural_invariant_causes
from kubesim.schema.validation import validate


def structural_causes(crd: dict[str, Any]) -> list[Cause]:
    """Why a CRD's schemas are not acceptable (empty when acceptable), as the 422 ``Status.details.causes`` of the
    rejected request.

    Per version: the structural invariants (sorted, as the apiserver sorts them), then the validity of ``default``
    values (only for an otherwise structural schema), then the general OpenAPI checks (unsupported keywords, list
    and map types, ``uniqueItems``, ...).
    """
    out: list[Cause] = []
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return [fe.required("spec")]
    if spec.get("preserveUnknownFields") is True:
        out.append(
            fe.invalid(
                "spec.preserveUnknownFields",
                True,
                "must be false in order to use defaults in the schema",
            )
        )
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        out.append(fe.required("spec.versions", "must have exactly one version marked as storage version"))
        return out
    for i, version in enumerate(versions):
        vpath = f"spec.versions[{i}].schema"
        holder = version.get("schema") if isinstance(version, dict) else None
        schema = holder.get("openAPIV3Schema") if isinstance(holder, dict) else None
        if not isinstance(schema, dict):
            out.append(fe.required(f"{vpath}.openAPIV3Schema", "schemas are required"))
            continue
        out.extend(schema_causes(schema, f"{vpath}.openAPIV3Schema"))
    for i, version in enumerate(versions):
        columns = version.get("additionalPrinterColumns") if isinstance(version, dict) else None
        for j, column in enumerate(columns if isinstance(columns, list) else []):
            out.extend(_printer_column_causes(column, f"spec.versions[{i}].additionalPrinterColumns[{j}]"))
    return out


_COLUMN_TYPES = ["boolean", "date", "integer", "number", "string"]
_COLUMN_FORMATS = ["byte", "date", "date-time", "double", "float", "int32", "int64", "password"]


def _printer_column_causes(column: Any, path: str) -> list[Cause]:
    """``additionalPrinterColumns`` entries: a name, a known type and format, a simple JSONPath."""
    if not isinstance(column, dict):
        return [fe.invalid(path, column, "must be an object")]
    out: list[Cause] = []
    if not column.get("name"):
        out.append(fe.required(f"{path}.name"))
    column_type = column.get("type")
    if not column_type:
        out.append(fe.required(f"{path}.type", "must be one of " + ", ".join(_COLUMN_TYPES)))
    elif column_type not in _COLUMN_TYPES:
        out.append(fe.not_supported(f"{path}.type", column_type, _COLUMN_TYPES))
    column_format = column.get("format")
    if column_format and column_format not in _COLUMN_FORMATS:
        out.append(fe.not_supported(f"{path}.format", column_format, _COLUMN_FORMATS))
    priority = column.get("priority")
    if priority is not None and (not is_integer(priority) or priority < 0):
        out.append(fe.invalid(f"{path}.priority", priority, "must be a non-negative integer"))
    json_path = column.get("jsonPath")
    if not json_path:
        out.append(fe.required(f"{path}.JSONPath"))
    elif not isinstance(json_path, str) or not json_path.startswith("."):
        out.append(fe.invalid(f"{path}.JSONPath", json_path, "must be a simple json path starting with ."))
    return out


def schema_causes(schema: Schema, path: str = "openAPIV3Schema") -> list[Cause]:
    """Problems of one ``openAPIV3Schema`` (see ``structural_causes``), with fields under ``path``."""
    structural = structural_invariant_causes(schema, path)
    out = list(structural)
    if not structural:
        _defaults_node(schema, path, out, root=True)
    if schema.get("nullable") is True:
        out.append(fe.forbidden(f"{path}.nullable", "nullable cannot be true at the root"))
    openapi_rule_causes(schema, path, out, root=True, in_meta=False)
    return out


def _defaults_node(s: Any, path: str, out: list[Cause], *, root: bool = False) -> None:
    """Each ``default`` must validate against its own schema and survive pruning unchanged."""
    if not isinstance(s, dict):
        return
    if "default" in s and s["default"] is not None and not root:
        node = {k: v for k, v in s.items() if k != "default"}
        out.extend(validate(s["default"], node, root_path=f"{path}.default"))
        if isinstance(s["default"], dict | list):
            pruned = prune({"value": s["default"]}, {"type": "object", "properties": {"value": node}})
            if pruned.get("value") != s["default"]:
                out.append(fe.invalid(f"{path}.default", s["default"], "must not have unknown fields"))
    if isinstance(s.get("items"), dict):
        _defaults_node(s["items"], f"{path}.items", out)
    for name, prop in (s.get("properties") or {}).items():
        if not (root and name in ROOT_FIELDS):
            _defaults_node(prop, f"{path}.properties[{name}]", out)
    if isinstance(s.get("additionalProperties"), dict):
        _defaults_node(s["additionalProperties"], f"{path}.additionalProperties", out)
