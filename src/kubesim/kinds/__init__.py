"""The kinds the API serves and how their objects are addressed, below everything that stores or acts on them.

Modules: ``resources`` (``ResourceType`` and the ``Registry`` of built-in kinds and live CRDs), ``views`` (resources
served from another's storage), ``fields`` (the fields each kind can be selected by) and ``podspec`` (where a PodSpec
lives inside each built-in kind). The store, server-side apply, the registry and the server all build on this
package, so it imports none of them.
"""
