"""Reading an HTTP answer's body whole, bounded: `response.content.read(n)` returns only what has arrived.

Used for what the gateway fetches itself (an authorization server's keys, a remote upstream's answers).
A JSON body that comes in two TCP segments (or two chunks of a chunked answer) is read to its end by
`read_body`, which raises `BodyTooLarge` as soon as more than `limit` bytes arrived; `read_prefix`
keeps at most the first `limit` bytes of a body (for the snippet an error message quotes) and reads
no further.
"""

from __future__ import annotations

import aiohttp


class BodyTooLarge(ValueError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"larger than {limit} bytes")
        self.limit = limit


async def read_body(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The whole body up to EOF; BodyTooLarge once more than `limit` bytes arrived."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await response.content.read(limit + 1 - size)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)


async def read_prefix(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The first `limit` bytes of the body (all of it when shorter), read across chunks."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = await response.content.read(limit - size)
        if not chunk:
            break
        size += len(chunk)
        chunks.append(chunk)
    return b"".join(chunks)
