"""Reading an HTTP answer's whole body, bounded: ``aiohttp``'s ``content.read(n)`` returns what has arrived so far
(up to ``n`` bytes), which for a server that writes its answer in several pieces (upstream's grant server writes
``---`` and then each document) is only the first piece."""

from __future__ import annotations

import aiohttp


class BodyTooLarge(ValueError):
    """An answer longer than the reader's limit (nothing of it is kept)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the answer is longer than {limit} bytes")
        self.limit = limit


async def read_body(content: aiohttp.StreamReader, limit: int) -> bytes:
    """The body until its end, or ``BodyTooLarge`` once more than ``limit`` bytes have come (the caller's session
    timeout bounds the time)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in content.iter_any():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)
