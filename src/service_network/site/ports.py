"""Router port allocation (pure): each Listener entity (a Listener, or one of its per-Pod entities with
``exposePodsByName``) gets a port of the router, the Service's ``targetPort``.

Rules (upstream's, skupper-listener.md §5.6): the lowest free port from 1024 up, never one of the router's own ports;
a key keeps its port as long as it is wanted (``previous`` comes from the router ConfigMap, so ports survive
controller and router restarts); a key no longer wanted releases its port. New keys are served in the order given
(the caller sorts them by creation), so the result does not depend on cache iteration order.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

__all__ = ["FIRST_PORT", "LAST_PORT", "allocate"]

FIRST_PORT = 1024
LAST_PORT = 65535


def allocate(previous: Mapping[str, int], wanted: Iterable[str], reserved: Collection[int] = (), *,
             first: int = FIRST_PORT, last: int = LAST_PORT) -> tuple[dict[str, int], list[str]]:
    """Ports for ``wanted`` keys, and the keys left without one (only when the range is exhausted).

    A previous port is kept unless it is reserved, outside the range or already taken by an earlier key.
    """
    keys = list(dict.fromkeys(wanted))
    taken = set(reserved)
    result: dict[str, int] = {}
    for key in keys:
        port = previous.get(key)
        if isinstance(port, int) and first <= port <= last and port not in taken:
            result[key] = port
            taken.add(port)
    candidate = first
    unplaced: list[str] = []
    for key in keys:
        if key in result:
            continue
        while candidate <= last and candidate in taken:
            candidate += 1
        if candidate > last:
            unplaced.append(key)
            continue
        result[key] = candidate
        taken.add(candidate)
    return {key: result[key] for key in keys if key in result}, unplaced
