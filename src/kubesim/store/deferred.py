"""Work the store's background controllers do a moment after a write, as the namespace controller and the garbage
collector lag behind the API: scheduled on the running event loop, or not at all without one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


def call_later(delay: float, callback: Callable[..., Any], *args: Any) -> bool:
    """Run ``callback(*args)`` after ``delay`` seconds; False (nothing scheduled) for ``delay <= 0`` or no loop."""
    if delay <= 0:
        return False
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return False
    loop.call_later(delay, callback, *args)
    return True
