"""What every ``skupper`` verb shares: the connection to the cluster, waiting for a resource's status, and errors
with their exit codes. Imported when a verb's flags are (``skupper site --help``), so what only a run needs (the
API client, asyncio) is imported when it runs.

Errors a user can act on are :class:`~.errors.CliError` (the message on standard output, exit code 1) and
:class:`~.errors.Invalid` (every problem of the arguments and flags, exit code 2); the API's refusals are turned
into them with the server's own message.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from operator_runtime.errors import ApiFailure, KubeError, NotFound
from operator_runtime.kinds import ResourceInfo
from operator_runtime.objects import JsonDict, mapping

from ..constants import GROUP_VERSION
from .errors import CliError, Invalid

if TYPE_CHECKING:
    from operator_runtime.api import KubeApi

    from .cmdline import Args

__all__ = ["CRD_MISSING", "WAIT_CHOICES", "CliError", "Invalid", "Session", "api_call", "condition", "find",
           "fresh_condition", "list_kind", "pause", "resource", "wait_deleted", "wait_for_condition"]

#: upstream's order (its messages list them so)
WAIT_CHOICES = ("ready", "configured", "none")


def resource(kind: str, name: str, namespace: str | None, spec: Mapping[str, Any]) -> JsonDict:
    """A ``skupper.io/v2alpha1`` resource as the CLI creates it."""
    metadata: JsonDict = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": GROUP_VERSION, "kind": kind, "metadata": metadata, "spec": dict(spec)}


class Session:
    """The cluster a command talks to, and the namespace it works in."""

    def __init__(self, api: KubeApi, namespace: str) -> None:
        self.api = api
        self.namespace = namespace

    @classmethod
    def open(cls, args: Args) -> Session:
        from operator_runtime.api import KubeApi

        from .kube import BlockingTransport, KubeconfigError, load
        try:
            endpoint = load(args.kubeconfig or None, args.context or None)
            transport = BlockingTransport(endpoint)
        except (KubeconfigError, OSError, ValueError) as e:     # ssl: unreadable or invalid certificates
            raise CliError(str(e)) from None
        return cls(KubeApi(transport), args.namespace or endpoint.namespace)

    async def close(self) -> None:
        await self.api.close()


T = TypeVar("T")


async def api_call(what: str, call: Awaitable[T]) -> T:
    """Run an API call; an API failure becomes a :class:`CliError` with the server's message (``what``: a prefix,
    or "" for the message alone, as upstream prints API errors raw)."""
    try:
        return await call
    except ApiFailure as e:
        raise CliError(f"{what}: {e.message}" if what else e.message) from None
    except KubeError as e:
        raise CliError(f"{what}: {e}" if what else str(e)) from None


CRD_MISSING = ('The Skupper CRDs are not yet installed. To install them, run\n'
               '"kubectl apply -f https://skupper.io/v2/install.yaml"')


async def list_kind(session: Session, info: ResourceInfo, *, code: int = 2) -> list[JsonDict]:
    """The objects of ``info`` in the namespace; the CRDs-missing message when the kind is not served. A failure
    exits with ``code``: 2 where upstream lists while it checks the arguments, 1 where it lists to run."""
    try:
        items, _ = await session.api.list(info, namespace=session.namespace)
    except NotFound:
        raise CliError(CRD_MISSING, code) from None
    except KubeError as e:
        raise CliError(str(e), code) from None
    return items


async def find(session: Session, info: ResourceInfo, name: str) -> JsonDict | None:
    try:
        return await session.api.get(info, name, session.namespace)
    except NotFound:
        return None
    except KubeError as e:
        raise CliError(str(e)) from None


def condition(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    return next((c for c in mapping(obj, "status").get("conditions") or []
                 if isinstance(c, Mapping) and c.get("type") == type_), None)


def _generation(obj: Mapping[str, Any] | None) -> int:
    value = mapping(obj, "metadata").get("generation") if obj is not None else None
    return value if isinstance(value, int) else 0


def fresh_condition(obj: Mapping[str, Any] | None, type_: str, generation: int) -> Mapping[str, Any] | None:
    """The condition ``type_`` of ``obj`` if written for ``generation`` or a later one (a condition without
    ``observedGeneration`` counts as written for any)."""
    found = condition(obj, type_) if obj is not None else None
    observed = found.get("observedGeneration") if found is not None else None
    return found if not isinstance(observed, int) or observed >= generation else None


async def wait_for_condition(session: Session, info: ResourceInfo, name: str, wait: str,
                             within: datetime.timedelta, *, success: str,
                             written: Mapping[str, Any] | None = None) -> None:
    """Poll until the ``Configured`` (``wait`` configured) or ``Ready`` condition is True, then print ``success``;
    else :class:`CliError` with upstream's words after ``within``. ``wait`` none: nothing. ``written``: the object
    as a change wrote it: only a condition written for its generation (or a later one) counts, not the one the
    object had before the change."""
    if wait == "none":
        return
    type_ = "Configured" if wait == "configured" else "Ready"
    generation = _generation(written)
    deadline = time.monotonic() + within.total_seconds()
    seen: Mapping[str, Any] | None = None
    while True:
        seen = fresh_condition(await find(session, info, name), type_, generation)
        if seen is not None and seen.get("status") == "True":
            print(success)
            return
        if time.monotonic() >= deadline:
            if seen is None:
                raise CliError(f'{info.kind} "{name}" is not yet {wait}, check the status for more information\n')
            raise CliError(f'{info.kind} "{name}" is not yet {wait}: {seen.get("message")}\n')
        await pause()


async def wait_deleted(session: Session, info: ResourceInfo, name: str, within: datetime.timedelta, *,
                       success: str, failure: str) -> None:
    deadline = time.monotonic() + within.total_seconds()
    while True:
        if await find(session, info, name) is None:
            print(success)
            return
        if time.monotonic() >= deadline:
            raise CliError(failure)
        await pause()


async def pause() -> None:
    """A quarter of a second between two polls. Blocking: a command's coroutines run without an event loop
    (docs: :mod:`.main`), and nothing else runs meanwhile."""
    time.sleep(0.25)  # noqa: ASYNC251
