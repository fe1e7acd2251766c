"""The API server's registry behaviour per kind, as Kubernetes' ``pkg/registry`` holds it: what happens to an
object on its way into the store and what the built-in subresources do.

Modules: ``admission`` (``Admission``, the store's admission hooks: names, CRDs and custom objects through
``kubesim.schema``), ``defaults`` (built-in kinds' defaults), ``builtin_validation`` (built-in kinds' validation;
``kubesim.schema.validation`` validates against a CRD's OpenAPI schema), ``services`` (clusterIP and nodePort
allocation), ``scale`` (the ``scale`` subresource), ``podbinding`` (a Pod bound to a node: ``pods/<name>/binding``,
served by ``kubesim.server.bindings``), ``openapi`` and ``builtin_schemas`` (the ``/openapi`` documents).
"""
