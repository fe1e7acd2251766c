"""What one write of the site controller came to (pure data): :class:`Ok` or :class:`Failed`.

The writer (:mod:`.writer`) returns one per item of the plan and never changes the plan; the status writer
(:mod:`.status_writer`) reads them to say what failed in the statuses, and the controller turns the failures a retry
may fix into the error policy's ``Action``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["UNCHANGED", "Failed", "Ok", "Result", "RetryLater", "retryable_failures"]


@dataclass(frozen=True)
class Ok:
    """Done: ``written`` is False when the object was as wanted already (nothing was sent); ``value`` is what the
    write produced when the next step needs it (an issued certificate's expiry)."""

    written: bool = True
    value: Any = None


@dataclass(frozen=True)
class Failed:
    """Not done: ``message`` says why (for statuses and Events); ``retryable``: a retry may fix it (unreachable API,
    5xx, 429, conflicts), else only a change of the inputs does."""

    message: str
    retryable: bool


Result = Ok | Failed

#: The object was as wanted: nothing written.
UNCHANGED = Ok(written=False)


def retryable_failures(results: Iterable[Result | None]) -> list[Failed]:
    """The failures among ``results`` a retry may fix."""
    return [r for r in results if isinstance(r, Failed) and r.retryable]


class RetryLater(Exception):
    """Writes failed in a way a retry may fix; the statuses already say what failed."""

    def __init__(self, namespace: str, failures: list[Failed]) -> None:
        super().__init__(f"some writes in namespace {namespace} failed; retrying")
        self.failures = failures
