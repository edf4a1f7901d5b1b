"""The stdio bridge tells a host whose request reached the gateway, and lost its answer to a dropped
connection, that the request may have been carried out (`gateway_disconnected`), never that the
gateway could not be reached: an agent told "unreachable" would send a device's `start` again. The
gateway here is a plain socket server that reads the POST and then closes, or closes inside an SSE
answer, as a gateway killed in the middle of a call does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from bench.ports import free_port
from tests.integration.test_stdio_bridge import INITIALIZE, RawBridge

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nMcp-Session-Id: s1\r\n\r\n"
)

Behaviour = Callable[[asyncio.StreamWriter], Awaitable[None]]


async def close_at_once(writer: asyncio.StreamWriter) -> None:
    writer.close()


async def close_inside_an_answer(writer: asyncio.StreamWriter) -> None:
    event = b": the call runs\n\n"
    writer.write(SSE_HEAD + f"{len(event):x}\r\n".encode() + event + b"\r\n")
    await writer.drain()
    writer.close()


@pytest.fixture
async def dying_gateway(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A 'gateway' that reads one whole POST, then behaves as `request.param` says."""
    behaviour: Behaviour = request.param

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        await behaviour(writer)

    port = free_port()
    server = await asyncio.start_server(serve, "127.0.0.1", port)
    async with server:
        yield f"http://127.0.0.1:{port}"


async def initialize_answer(url: str) -> dict[str, Any]:
    """What a host gets from a bridge to `url` for its initialize request."""
    raw = await RawBridge.start(url)
    try:
        await raw.send(INITIALIZE)
        return await raw.receive()
    finally:
        await raw.close()


@pytest.mark.parametrize("dying_gateway", [close_at_once], indirect=True)
async def test_a_request_whose_connection_ends_before_the_answer_may_have_been_carried_out(
    dying_gateway: str,
) -> None:
    answer = await initialize_answer(dying_gateway)
    assert answer["id"] == 1 and answer["error"]["code"] == -32000, answer
    assert answer["error"]["data"] == {"reason": "gateway_disconnected", "url": f"{dying_gateway}/pump-1/mcp"}
    assert "received the request, but the connection ended before its answer" in answer["error"]["message"]
    assert "Check its effect" in answer["error"]["message"]
    assert "Cannot reach" not in answer["error"]["message"]


@pytest.mark.parametrize("dying_gateway", [close_inside_an_answer], indirect=True)
async def test_an_answer_that_breaks_off_is_not_advice_to_send_again(dying_gateway: str) -> None:
    answer = await initialize_answer(dying_gateway)
    assert answer["error"]["data"]["reason"] == "answer_unreadable", answer
    assert "may have been carried out: check its effect before sending it again" in answer["error"]["message"]
