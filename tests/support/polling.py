"""The one wait the end-to-end environments share (imported by the end-to-end tests of the Listener operator and of
the development environment: ``tests/listener_operator/e2e/``, ``tests/devenv/e2e/``).

The tests observe the operator's effects through the API as a user would, so they poll a check rather than follow
a watch: most checks combine several objects or read files, which no single watch covers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kubesim.errors import ApiError
from kubesim.testing.patience import patience


async def poll_until(check: Callable[[], Awaitable[Any]], within: float, what: str = "") -> Any:
    """The first truthy result of ``check`` (a 404 counts as not yet); AssertionError after ``within`` seconds."""
    deadline = time.monotonic() + patience(within)
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = await check()
        except ApiError as error:
            if error.code != 404:
                raise
            last = None
        if last:
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {within}s waiting for {what or check}: last value {last!r}")
