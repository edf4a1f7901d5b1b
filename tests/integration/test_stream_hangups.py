"""A client that hangs up on its event stream is no error in the gateway's log.

A real gateway process; a real aiohttp client opens a session on `_broker`, then a raw socket sends the
session's `GET /_broker/mcp` (the notification stream) or a 2026-era `subscriptions/listen` POST and
closes at once. The hang-up is met either when the stream's headers are written (prepare) or at the
next keepalive (limits.sse_keepalive_s, short here); neither may log an ERROR or a traceback, which per
dropped connection would fill an SD card with noise.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import orjson
import pytest

from tests.support.gateway_process import gateway_process

ACCEPT = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
ENDPOINT = "/_broker/mcp"
HANGUPS = 12


async def open_session(http: aiohttp.ClientSession, url: str) -> str:
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    async with http.post(url, json=hello, headers=ACCEPT) as answer:
        session = answer.headers["Mcp-Session-Id"]
        await answer.read()
    headers = {**ACCEPT, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
    async with http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers) as ok:
        await ok.read()
    return session


async def send_and_hang_up(port: int, request: bytes) -> None:
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    writer.close()


def listen_request(port: int) -> bytes:
    body = orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "subscriptions/listen",
            "params": {
                "notifications": {"toolsListChanged": True},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        }
    )
    head = (
        f"POST {ENDPOINT} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n"
        f"Mcp-Method: subscriptions/listen\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


@pytest.mark.timeout(90)
@pytest.mark.parametrize("stream", ["get", "listen"])
async def test_a_client_hanging_up_on_its_stream_logs_no_error(tmp_path: Path, stream: str) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('port = 0\n[logging]\nformat = "json"\n[limits]\nsse_keepalive_s = 0.2\n')
    async with gateway_process("--config", str(config)) as gateway:
        port = int(gateway.url.rsplit(":", 1)[1].rstrip("/"))
        url = f"http://127.0.0.1:{port}{ENDPOINT}"
        async with aiohttp.ClientSession() as http:
            for _ in range(HANGUPS):
                if stream == "get":
                    session = await open_session(http, url)
                    request = (
                        f"GET {ENDPOINT} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n"
                        f"Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n"
                    ).encode()
                else:
                    request = listen_request(port)
                await send_and_hang_up(port, request)
            await asyncio.sleep(1.5)  # past a few keepalives: every stream has met its hang-up
            # The gateway still serves: a new session opens.
            await open_session(http, url)
    errors = [line for line in gateway.json_lines() if line.get("level") in ("error", "critical")]
    assert errors == [], errors
    assert "Traceback" not in gateway.log
