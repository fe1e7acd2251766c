"""Which Listeners had a route before the router (re)started: the memory its readiness waits on (pure).

A just-started router is not ready while a Listener waits for its route (the remote sites of its links re-dial
within a second or two), for at most the router's grace (10 s). Waiting for a Listener whose routing key has no
target anywhere would hold back every other Listener of the site for that whole grace, so the adaptor tells the
router which Listeners to wait for: those the router listened for before (the ``listening`` of a network status:
the adaptor's own ``network.json`` from before a container restart, every router's key of the
``skupper-network-status`` ConfigMap when the Pod is new, and what the running adaptor saw before a router
process crash). Until the adaptor knows any of these, every Listener is waited for, as before.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["MAX_REMEMBERED", "RouteMemory", "listening_in_status", "listening_in_status_texts"]

#: At most this many names are remembered (a router's document holds far fewer Listeners).
MAX_REMEMBERED = 100_000
_MAX_NAME = 253


def listening_in_status(status: Any) -> frozenset[str]:
    """The Listener names a router's network status says it listened for (nothing for anything malformed)."""
    if not isinstance(status, Mapping):
        return frozenset()
    names = status.get("listening")
    if not isinstance(names, list):
        return frozenset()
    return frozenset(n for n in names[:MAX_REMEMBERED] if isinstance(n, str) and 0 < len(n) <= _MAX_NAME)


def listening_in_status_texts(texts: Iterable[Any]) -> frozenset[str]:
    """The union of ``listening`` over network statuses given as JSON texts (a ConfigMap's values); a text that
    does not parse counts as none."""
    found: set[str] = set()
    for text in texts:
        if not isinstance(text, str):
            continue
        try:
            status = json.loads(text)
        except ValueError:
            continue
        found |= listening_in_status(status)
    return frozenset(found)


class RouteMemory:
    """The Listeners known to have had a route; ``routed(names)`` is what the router's readiness waits for."""

    def __init__(self) -> None:
        self._names: set[str] = set()
        self._known = False

    @property
    def known(self) -> bool:
        return self._known

    def remember(self, names: Iterable[str]) -> None:
        """Listeners that had a route before this start (a stored status, or the statuses of a router process
        that has since crashed): the memory is known from here on, even when ``names`` is empty."""
        self._known = True
        self.saw(names)

    def saw(self, names: Iterable[str]) -> None:
        """Listeners the running router listens for now (remembered for its next start, known only then)."""
        for name in names:
            if len(self._names) >= MAX_REMEMBERED:
                break
            self._names.add(name)

    def routed(self, listeners: Iterable[str]) -> list[str] | None:
        """Of ``listeners`` (the applied document's), those that had a route; None while nothing is known (the
        router then waits for every Listener)."""
        if not self._known:
            return None
        current = set(listeners)
        self._names &= current   # a Listener that left the document is forgotten
        return sorted(self._names)
