"""The in-memory object store: one global revision, a watch hub with a retained event window, deletion semantics.

All methods are synchronous and run on the event loop thread, so every write (and the watch registration that
follows a list) is atomic without locks. Stored objects are never mutated after they are stored: a write builds a
new dict. Readers that serialise straight away (the HTTP layer) may therefore use them without copying; the
in-process client copies before handing objects out.

Modules: ``store`` (``Store``: the read and write paths, one commit per change), ``index`` (objects by key,
namespace, name and uid; owners' dependents), ``watchhub`` (the retained event log and the open watches),
``listing`` (paged LISTs as consistent snapshots), ``metadata`` (server-owned metadata), ``preconditions``
(request checks before a write), ``patching`` (patch bodies applied to an object), ``gc`` (owner references,
propagation policies, finalizers of foreground deletion), ``namespaces`` (namespace lifecycle), ``hooks`` (the
interfaces through which the store calls admission, ``gc`` and ``namespaces``, and what it offers them: none of them
imports the store) and ``deferred`` (work the background controllers do a moment after a write).
"""
