"""A multi-MiB answer from a remote session-era upstream, read as an event stream, arrives whole and
other clients of other slots are answered while it streams (docs/upstreams.md); bench/big_answer.py
measures both against the direct read.

The remote is a real SDK server (`MCPServer.streamable_http_app`, which answers session-era POSTs as
SSE) in a process of its own, and so is the gateway: neither can borrow time from the test's loop.
Run as a module, this file is that server: `python -m tests.integration.test_remote_big_sse_answer PORT`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import mcp_types as types
import pytest
from mcp import Client

from bench.ports import free_port
from tests.support.gateway_process import REPO, gateway_process

BIG_BYTES = 8 * 1024 * 1024
SLOT = "far"


def serve(port: int) -> None:
    import uvicorn
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("far")
    blob = bytes(range(256)) * (BIG_BYTES // 256)

    @server.resource("blob://big", mime_type="application/octet-stream")
    def big() -> bytes:
        """8 MiB of binary (about 11 MiB of JSON once in base64)."""
        return blob

    app = server.streamable_http_app()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


@contextlib.asynccontextmanager
async def far_server() -> AsyncIterator[str]:
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.integration.test_remote_big_sse_answer", str(port), cwd=REPO
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                break
            except OSError:
                assert time.monotonic() < deadline and process.returncode is None, "the SDK server did not start"
                await asyncio.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()


async def read_big(client: Client) -> None:
    result = await asyncio.wait_for(client.read_resource("blob://big"), 120)
    content = result.contents[0]
    assert isinstance(content, types.BlobResourceContents)
    assert len(base64.b64decode(content.blob)) == BIG_BYTES


@pytest.mark.timeout(180)
async def test_a_big_event_stream_answer_arrives_whole_while_other_slots_are_answered(tmp_path: Path) -> None:
    # How long each takes, against the direct read, is bench/big_answer.py's to measure.
    async with far_server() as url:
        config = tmp_path / "gateway.toml"
        config.write_text(
            "port = 0\n[limits]\nmax_frame_bytes = 33554432\n"
            f'[[upstreams.remote]]\nname = "{SLOT}"\nurl = "{url}"\ntransport = "streamable-http"\n'
        )
        env = {"STATE_DIRECTORY": str(tmp_path / "state")}
        async with (
            gateway_process("--config", str(config), env=env) as gateway,
            Client(f"{gateway.url}/{SLOT}/mcp", mode="legacy") as relayed,
            Client(f"{gateway.url}/_broker/mcp", mode="legacy") as other,
        ):
            answered = 0
            reading = asyncio.create_task(read_big(relayed))
            while not reading.done():
                await asyncio.wait_for(other.list_tools(), 30)
                answered += 1
                await asyncio.sleep(0.02)
            await reading
            assert answered >= 1


if __name__ == "__main__":
    serve(int(sys.argv[1]))
