"""A TCP listener that takes connections and never answers: a hung gateway or control endpoint."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable


@contextlib.asynccontextmanager
async def _serving(
    handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[str]:
    """`handle` for each connection to a loopback listener; its base URL while it runs."""
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()


@contextlib.asynccontextmanager
async def silent_listener() -> AsyncIterator[str]:
    """Its base URL (`http://127.0.0.1:<port>`) while it runs; every connection is held open unanswered."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    async with _serving(hold) as url:
        try:
            yield url
        finally:
            for writer in held:  # before the server closes: it may wait for its connections
                writer.close()


@contextlib.asynccontextmanager
async def closing_listener() -> AsyncIterator[str]:
    """Its base URL while it runs; it reads each request's head and closes the connection unanswered,
    as a gateway killed while it carries out the request."""

    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
        writer.close()

    async with _serving(drop) as url:
        yield url


@contextlib.asynccontextmanager
async def redirecting_listener(status: int, location: str) -> AsyncIterator[str]:
    """Its base URL while it runs; it answers every request with the redirect `status` to `location`,
    as a web server or proxy in front of the wrong address does."""

    async def redirect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(
                f"HTTP/1.1 {status} Redirect\r\nLocation: {location}\r\nContent-Length: 0\r\n"
                "Connection: close\r\n\r\n".encode()
            )
            await writer.drain()
        writer.close()

    async with _serving(redirect) as url:
        yield url
