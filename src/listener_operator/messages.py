"""Values quoted in error messages, Events and log lines, cut to a readable length.

Names, paths and values in error messages often come from objects or requests others wrote; a 1 MiB value must
not be echoed into a gRPC status, an Event or a log line. :func:`brief` quotes a value like ``repr`` and cuts it.
"""

from __future__ import annotations

__all__ = ["BRIEF_LIMIT", "brief", "cut"]

#: Characters of a quoted value kept in a message.
BRIEF_LIMIT = 100


def brief(value: object, limit: int = BRIEF_LIMIT) -> str:
    """``repr(value)``, cut to about ``limit`` characters with a note of how long the value was."""
    if isinstance(value, str | bytes) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value)} characters)"
    text = repr(value)
    if len(text) > limit + 2:
        return f"{text[:limit]}... ({len(text)} characters)"
    return text


def cut(text: str, limit: int) -> str:
    """``text`` unquoted, cut to ``limit`` characters with a note of how long it was (for messages from others
    that are quoted as prose, such as a condition's message)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
