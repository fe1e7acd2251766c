"""Fault injection for reliability tests: error rates, latency, watch cuts, forced 410 (all off by default).

Settable at start (`KubeSim(faults=...)`), at runtime through `sim.faults` and through the admin endpoint
`/kubesim/faults` (GET shows, PUT replaces, PATCH merges, DELETE resets).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

from kubesim import errors as api_errors


@dataclass
class ErrorRule:
    """Fail `rate` (0..1) of matching requests with `code` (500, 429 with Retry-After, or 409)."""

    rate: float
    code: int = 500
    verbs: list[str] = field(
        default_factory=list
    )  # empty = all verbs (get, list, watch, create, update, patch, delete, deletecollection)
    resources: list[str] = field(
        default_factory=list
    )  # resource keys (`pods`, `listeners.listeners.stackable.tech`); empty = all
    retry_after: int = 1

    def applies(self, verb: str, resource: str) -> bool:
        return (not self.verbs or verb in self.verbs) and (not self.resources or resource in self.resources)


@dataclass
class Faults:
    errors: list[ErrorRule] = field(default_factory=list)
    latency_ms: float = 0.0
    watch_max_events: int | None = None  # cut a watch stream after this many events
    watch_max_seconds: float | None = None  # cut a watch stream after this many seconds
    expire_next_watch: bool = False  # the next watch request gets 410 Gone
    seed: int | None = None

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    # -------------------------------------------------------------------------------------------- control

    def reset(self) -> None:
        self.update(Faults().to_dict(), replace=True)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("seed", None)
        return d

    def update(self, settings: dict[str, Any], *, replace: bool = False) -> None:
        """Set fields from a JSON-style dict; unknown keys or bad values raise `ApiError` 400."""
        base = Faults() if replace else self
        known = {"errors", "latency_ms", "watch_max_events", "watch_max_seconds", "expire_next_watch", "seed"}
        unknown = set(settings) - known
        if unknown:
            raise api_errors.bad_request(f"unknown fault settings: {sorted(unknown)}")
        try:
            rules = base.errors
            if "errors" in settings:
                rules = [r if isinstance(r, ErrorRule) else ErrorRule(**r) for r in settings["errors"] or []]
                for r in rules:
                    if r.code not in (500, 429, 409) or not 0 <= float(r.rate) <= 1:
                        raise ValueError("error rules need code 500, 429 or 409 and a rate in [0, 1]")
            latency = float(settings.get("latency_ms", base.latency_ms))
            max_events = settings.get("watch_max_events", base.watch_max_events)
            max_seconds = settings.get("watch_max_seconds", base.watch_max_seconds)
            expire = bool(settings.get("expire_next_watch", base.expire_next_watch))
            if latency < 0:
                raise ValueError("latency_ms must be >= 0")
        except (TypeError, ValueError) as e:
            raise api_errors.bad_request(f"invalid fault settings: {e}") from None
        self.errors = rules
        self.latency_ms = latency
        self.watch_max_events = None if max_events is None else int(max_events)
        self.watch_max_seconds = None if max_seconds is None else float(max_seconds)
        self.expire_next_watch = expire
        if "seed" in settings:
            self._random = random.Random(settings["seed"])

    # ------------------------------------------------------------------------------------------ decisions

    def error_for(self, verb: str, resource: str, name: str = "") -> api_errors.ApiError | None:
        for rule in self.errors:
            if rule.applies(verb, resource) and self._random.random() < rule.rate:
                if rule.code == 429:
                    return api_errors.too_many_requests(rule.retry_after)
                if rule.code == 409:
                    plural, _, group = resource.partition(".")
                    return api_errors.conflict(
                        plural,
                        group,
                        name or "object",
                        "the object has been modified; please apply your changes to the latest version and try again (injected fault)",
                    )
                return api_errors.internal_error("injected fault")
        return None

    def take_expire_next_watch(self) -> bool:
        if self.expire_next_watch:
            self.expire_next_watch = False
            return True
        return False
