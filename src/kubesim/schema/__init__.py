"""CRD ``openAPIV3Schema`` handling as the apiserver does it: prune, default, validate, structural checks.

The request pipeline for a custom object is ``pruning.prune`` -> ``defaulting.apply_defaults`` ->
``validation.validate`` (the apiserver's order: unknown fields are dropped, then defaults fill absent fields, then
the result is validated). ``crd.structural_causes`` decides whether a CRD's schemas are acceptable at all (how the
schema's lists merge under server-side apply is read by ``kubesim.ssa.schema_lists``, which builds on this package).
Causes are worded by ``fielderrors``.

Why a hand-written walker instead of ``jsonschema``: the apiserver's semantics are not JSON Schema's. ``nullable``,
the ``x-kubernetes-*`` extensions (int-or-string, embedded resources, list types), pruning and defaulting have no
jsonschema counterpart, and clients see the apiserver's cause ``reason``/``message`` texts
(``Required value``, ``Unsupported value: ...``, ``Invalid value: "string": spec.x in body must be of type
integer: "string"``), which would need a translation layer as long as this walker.

Known differences from the real apiserver: CEL rules (``x-kubernetes-validations``, :mod:`.cel`) without cost
budgets or the Kubernetes-only CEL functions, and no validation ratcheting;
string formats limited to ``date-time``, ``date``, ``uuid``, ``ipv4``, ``ipv6``, ``cidr`` and ``byte``; list-type
duplicates are reported in document order rather than after all schema errors; for a failed ``anyOf``/``oneOf`` the
causes of the branch with the fewest errors are added (the apiserver picks the branch with the most passed checks);
the metadata of embedded resources is pruned to ObjectMeta's field names but not validated as ObjectMeta.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

# Always allowed at a resource root (and in an embedded resource), whatever the schema declares.
ROOT_FIELDS = ("apiVersion", "kind", "metadata")


def properties_of(s: Schema) -> dict[str, Any]:
    """A schema node's ``properties`` (empty when absent or malformed)."""
    properties = s.get("properties")
    return properties if isinstance(properties, dict) else {}
