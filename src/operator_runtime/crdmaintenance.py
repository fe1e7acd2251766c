"""CRD maintenance for any controller: apply its CustomResourceDefinitions at start and wait until they are served.

With maintenance on, the CRDs are server-side applied with the controller's field manager and ``force`` (a CRD edited
by hand, or left by an older version, is put back as this version defines it; an unchanged CRD is not written). With
maintenance off nothing is written: the CRDs are the administrator's job, and a missing one is named in the log with
the command that installs it. Either way :func:`ensure_crds` returns only once every CRD reports ``Established``; the
wait follows a watch of the CRDs (list + watch, the only rights it needs, see :func:`crd_rules`). Each controller
describes itself in a :class:`CrdMaintenance` (the listener operator and the service network's site controller).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .api import KubeApi
from .errors import Expired, KubeError
from .kinds import CRD
from .objects import items, mapping, meta

__all__ = ["RETRY_INITIAL", "RETRY_MAX", "CrdMaintenance", "apply_crds", "crd_rules", "describe_waiting",
           "ensure_crds", "is_established", "not_established", "wait_established"]

log = logging.getLogger(__name__)

#: Seconds between attempts after a failure (doubling up to the maximum).
RETRY_INITIAL = 0.5
RETRY_MAX = 30.0


@dataclass(frozen=True)
class CrdMaintenance:
    """Who maintains the CRDs and what to tell an administrator while they are missing.

    ``field_manager``: the server-side-apply manager of the CRDs; ``install_hint``: the command that installs them by
    hand; ``enable_hint``: how to let the controller maintain them; ``logger``: where the operator logs about them.
    """

    field_manager: str
    install_hint: str
    enable_hint: str
    logger: logging.Logger = log


def crd_rules(*, maintain: bool) -> list[dict[str, list[str]]]:
    """The RBAC rule CRD maintenance needs: list and watch for the wait, create and patch to apply."""
    verbs = ["list", "watch", "create", "patch"] if maintain else ["list", "watch"]
    return [{"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": verbs}]


def is_established(crd: Mapping[str, Any]) -> bool:
    """Whether the CRD's ``Established`` condition is ``True`` (the API server serves its resources)."""
    return any(condition.get("type") == "Established" and condition.get("status") == "True"
               for condition in items(crd, "status", "conditions"))


def not_established(wanted: Iterable[str], crds: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The names in ``wanted`` whose CRD is missing from ``crds`` (name -> object) or not Established, sorted."""
    return sorted(name for name in wanted if name not in crds or not is_established(crds[name]))


async def apply_crds(api: KubeApi, crds: Iterable[Mapping[str, Any]], field_manager: str,
                     logger: logging.Logger = log) -> None:
    """Server-side apply each CRD (``field_manager``, force); an unchanged CRD is not written by the API server."""
    for crd in crds:
        name = str(meta(crd).name)
        await api.apply(CRD, dict(crd), name=name, field_manager=field_manager, force=True)
        logger.info("applied CustomResourceDefinition %s", name)


async def wait_established(api: KubeApi, names: Iterable[str], *,
                           on_waiting: Callable[[list[str], Mapping[str, Mapping[str, Any]]], None] | None = None,
                           ) -> None:
    """Return once every CRD in ``names`` exists and is Established.

    Lists the CRDs, then follows a watch from that list's version (relisting when the watch ends or expires).
    ``on_waiting(pending, known)`` is called whenever the set of pending CRDs changes, with the CRDs seen so far.
    API failures other than an expired watch propagate (the caller decides how to retry).
    """
    wanted = set(names)
    reported: list[str] | None = None
    while True:
        listed, version = await api.list(CRD)
        known = {str(meta(crd).name): crd for crd in listed if meta(crd).name in wanted}
        pending = not_established(wanted, known)
        if not pending:
            return
        if pending != reported and on_waiting is not None:
            on_waiting(pending, known)
        reported = pending
        try:
            async for event, crd in api.watch(CRD, resource_version=version):
                name = str(mapping(crd, "metadata").get("name") or "")
                if event == "BOOKMARK" or name not in wanted:
                    continue
                if event == "DELETED":
                    known.pop(name, None)
                else:
                    known[name] = crd
                pending = not_established(wanted, known)
                if not pending:
                    return
                if pending != reported and on_waiting is not None:
                    on_waiting(pending, known)
                reported = pending
        except Expired:
            pass  # relist


def describe_waiting(pending: list[str], known: Mapping[str, Mapping[str, Any]], *, maintained: bool,
                     how: CrdMaintenance) -> str:
    """The log line while CRDs are not served yet: which are missing, which are not Established, what to do."""
    missing = [name for name in pending if name not in known]
    unready = [name for name in pending if name in known]
    parts = []
    if missing:
        parts.append(f"missing: {', '.join(missing)}")
    if unready:
        parts.append(f"not Established yet: {', '.join(unready)}")
    text = "waiting for the CustomResourceDefinitions (" + "; ".join(parts) + ")"
    if missing and not maintained:
        text += (f"; CRD maintenance is disabled (DISABLE_CRD_MAINTENANCE), so install them: {how.install_hint} "
                 f"(or let the controller maintain them: {how.enable_hint})")
    return text


async def ensure_crds(api: KubeApi, crds: list[dict[str, Any]], *, maintain: bool, how: CrdMaintenance,
                      sleep: Callable[[float], Any] = asyncio.sleep) -> None:
    """Apply the CRDs (when ``maintain``) and wait until all are Established; retry failures with back-off.

    Never returns before the CRDs are served; cancelling it is the way to stop it.
    """
    names = [str(meta(crd).name) for crd in crds]
    logger = how.logger
    delay = RETRY_INITIAL
    applied = not maintain
    while True:
        try:
            if not applied:
                await apply_crds(api, crds, how.field_manager, logger)
                applied = True
            await wait_established(api, names, on_waiting=lambda pending, known: logger.warning(
                "%s", describe_waiting(pending, known, maintained=maintain, how=how)))
            logger.info("CustomResourceDefinitions established: %s", ", ".join(names))
            return
        except KubeError as error:
            what = "applying" if not applied else "watching"
            logger.warning("%s the CustomResourceDefinitions failed (%s); retrying in %.1fs", what, error, delay)
            await sleep(delay)
            delay = min(delay * 2, RETRY_MAX)
