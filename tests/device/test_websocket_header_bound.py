"""The WebSocket board reads the answer to its upgrade a bounded line at a time (mcpdevice.websocket,
1024 bytes a line): a server whose status line never ends costs it one named link_down, not its
heap. pump-1 on the MicroPython Unix port against a hostile server written here (an asyncio server on
loopback) that answers `HTTP/1.1 101 ` and then megabytes without a newline.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from tests.device.conftest import DeviceFactory

LINE_MAX = 1024  # bytes in a line of the answer to the upgrade (mcpdevice.websocket)
FLOOD_BYTES = 8 * 1024 * 1024  # per connection, at most: twice what exhausts an unbounded readline


@pytest.fixture
async def endless_status_line() -> AsyncIterator[tuple[int, list[int]]]:
    """The server's port, and how many bytes it wrote to each connection before the board hung up."""
    sent: list[int] = []
    tasks: list[asyncio.Task[None]] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tasks.append(asyncio.current_task())  # type: ignore[arg-type]
        sent.append(0)
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 101 ")
            chunk = b"A" * 65536
            while sent[-1] < FLOOD_BYTES:
                writer.write(chunk)
                await asyncio.wait_for(writer.drain(), 10)
                sent[-1] += len(chunk)
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], sent
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


async def test_an_upgrade_answer_whose_status_line_never_ends_is_a_named_error_and_the_board_dials_again(
    devices: DeviceFactory, endless_status_line: tuple[int, list[int]]
) -> None:
    port, sent = endless_status_line
    url = f"ws://127.0.0.1:{port}"
    device = await devices(url, heap_log_s=0)
    expected = f"OSError: a line over {LINE_MAX} bytes in the answer to the upgrade from {url}/provider/pump-1"
    for dial in (1, 2, 3):
        down = await device.wait_event("link_down", count=dial, timeout=20)
        assert down["reason"] == expected, device.output()
    assert not any("MemoryError" in line for line in device.lines), device.output()
    assert device.process.returncode is None  # still running, still dialling
    assert len(sent) >= 3, sent
