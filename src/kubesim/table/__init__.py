"""``meta.k8s.io`` Table rendering: what ``kubectl get`` prints.

The apiserver answers a list/get with a Table when the client asks for
``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``. Columns come from a CRD's ``additionalPrinterColumns``
(evaluated with a small JSONPath subset, ``jsonpath``; only the first match is shown, as the apiserver
does), from the built-in printers (pods, services, nodes, PVCs, PVs, configmaps, secrets, namespaces, statefulsets,
deployments, storageclasses, leases), or default to ``Name`` and ``Age``. Server-side printing is always "wide":
priority-1 columns are included and kubectl hides them unless ``-o wide``.

Modules: ``render`` (the Table protocol: media type, columns, rows), ``cells`` (ages and cell helpers),
``pods`` (the pod printer), ``printers`` (the other built-in printers, ``builtin_columns``) and ``jsonpath``
(the JSONPath subset of printer columns).
"""
