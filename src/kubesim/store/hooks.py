"""The interfaces between the ``Store`` and the code it calls around a write: admission (before a commit, and as
objects come and go), garbage collection and namespace lifecycle (after a change). ``Store`` is built with one of
each (``StoreHooks``) and hands itself to every call as a ``StoreReader`` (admission reads) or a ``StoreWriter``
(the controllers write as a controller would: delete, commit, remove), so none of them imports the store; the
store imports none of them either (``kubesim.registry.admission``, ``store.gc``, ``store.namespaces`` implement these).

Every hook runs on the event loop thread, inside the store's write, so what it reads and writes is atomic with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from kubesim.kinds.resources import Registry, ResourceType
from kubesim.store.index import ObjectIndex

Obj = dict[str, Any]


class StoreReader(Protocol):
    """What admission may read of the store."""

    @property
    def registry(self) -> Registry: ...

    @property
    def objects(self) -> ObjectIndex: ...

    def find(self, rt: ResourceType, ns: str | None, name: str) -> Obj | None: ...


class StoreWriter(StoreReader, Protocol):
    """What the garbage collector and the namespace controller may do to the store."""

    def delete(self, rt: ResourceType, ns: str | None, name: str) -> tuple[Obj, bool]: ...

    def commit(self, rt: ResourceType, old: Obj | None, new: Obj) -> None: ...

    def remove(self, rt: ResourceType, old: Obj, last: Obj | None = None) -> None: ...


class AdmissionHooks(Protocol):
    """Defaulting and validation of every write before it is committed (raising ``ApiError`` refuses it), and what
    an object holds (addresses, ports) taken when it is read back from the store file and freed when it goes."""

    def admit_create(self, store: StoreReader, rt: ResourceType, obj: Obj, *, dry_run: bool) -> None: ...

    def admit_update(self, store: StoreReader, rt: ResourceType, old: Obj, new: Obj, *, dry_run: bool,
                     subresource: str | None) -> None: ...

    def restored(self, rt: ResourceType, obj: Obj) -> None: ...

    def released(self, rt: ResourceType, obj: Obj) -> None: ...


class GarbageCollection(Protocol):
    """Owner references: what goes with a deleted owner, foreground deletions, dangling references."""

    @property
    def foreground_finalizer(self) -> str:
        """The finalizer of an owner deleted with ``propagationPolicy: Foreground`` while dependents block it."""

    def after_write(self, store: StoreWriter, rt: ResourceType, new: Obj) -> None: ...

    def delete_dependents(self, store: StoreWriter, owner_uid: str) -> None: ...

    def orphan_dependents(self, store: StoreWriter, owner_uid: str) -> None: ...

    def check_foreground(self, store: StoreWriter, owner_uid: str) -> None: ...


class NamespaceLifecycle(Protocol):
    """Where new objects may go, and a namespace's deletion: Terminating, emptied, removed."""

    @property
    def defaults(self) -> tuple[str, ...]:
        """The namespaces every store has (created when missing)."""

    def resolve(self, store: StoreReader, rt: ResourceType, ns: str | None, meta: dict[str, Any]) -> str | None: ...

    def delete(self, store: StoreWriter, rt: ResourceType, old: Obj) -> tuple[Obj, bool]: ...

    def maybe_finish(self, store: StoreWriter, ns: str) -> None: ...

    def resume(self, store: StoreWriter, name: str) -> None: ...


@dataclass(frozen=True)
class StoreHooks:
    """The hooks a ``Store`` is built with."""

    admission: AdmissionHooks
    gc: GarbageCollection
    namespaces: NamespaceLifecycle
