"""Server-side apply and ``metadata.managedFields`` (FieldsV1) bookkeeping, as the apiserver does it.

Hand-written: this is the behaviour of Kubernetes' structured-merge-diff library (field sets, ownership,
conflicts, pruning of fields a manager stops applying), which has no Python implementation.

Model: an object is flattened into a *field set* of paths. A path is a tuple of FieldsV1 elements: ``f:<name>``
(a field), ``k:<json>`` (a list-map item by its keys), ``v:<json>`` (a set item by value), ``i:<n>`` (an index).
Leaves are scalars, atomic lists, nulls and empty maps; list items are members too (FieldsV1 ``.``).

Modules: ``listtypes`` (how a list or map merges), ``builtin_types`` (those of the built-in kinds) and
``schema_lists`` (those of a CRD, read from its schema), ``fieldsv1`` (paths and their JSON form), ``fieldsets`` (objects flattened and
compared), ``entries`` (managedFields entries), ``merge`` (merging and pruning an apply), ``last_applied`` (kubectl's
client-side to server-side transition), ``apply`` and ``update`` (the two kinds of write), ``fieldmanager`` (the
store's entry point: per-kind list types, failures as ``ApiError``).
"""
