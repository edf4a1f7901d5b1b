"""A request aiohttp's parser refuses never puts what it carried in the log (gateway/logs.py).

The gateway runs as a process at debug level, in the JSON and in the text log format. A raw socket
sends each malformed form a client or a board can produce by accident, each with a recognisable token
in `Authorization` or `X-Provider-Token`: a token file with a Windows line ending, a control character,
a space before the colon, an obs-fold continuation line, a token in the query of a broken request line,
a header longer than the limit. Each is refused with HTTP 400, the log holds no trace of any token,
and there is a one-line warning naming the peer and the parser's reason.
"""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import pytest

from tests.support.gateway_process import gateway_process

CLIENT_TOKEN = "client-" + secrets.token_urlsafe(24)
PROVIDER_SECRET = "provider-" + secrets.token_urlsafe(24)


def malformed_requests() -> list[bytes]:
    client, board = CLIENT_TOKEN, PROVIDER_SECRET
    upgrade = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
    upgrade += "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    post = "POST /pump-1/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    forms = [
        f"{post}Authorization: Bearer {client}\r\r\nContent-Length: 0\r\n\r\n",
        f"{post}Authorization: Bearer {client}\x01\r\nContent-Length: 0\r\n\r\n",
        f"POST /pump-1/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization : Bearer {client}\r\n\r\n",
        f"POST /pump-1/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Trace: 1\r\n Authorization: Bearer {client}\r\n\r\n",
        f"POST /pump-1/mcp?access_token={client} HTTP/1.1 junk\r\nHost: 127.0.0.1\r\n\r\n",
        f"POST /pump-1/mcp?t={client}\x7f HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        f"POST /pump-1/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: x{client}\r\n\r\n",
        f"POST /pump-1/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {client}{'A' * 70_000}\r\n\r\n",
        f"GET /provider/pump-1 HTTP/1.1\r\nHost: 127.0.0.1\r\n{upgrade}X-Provider-Token: {board}\r\r\n\r\n",
        f"GET /provider/pump-1 HTTP/1.1\r\nHost: 127.0.0.1\r\n{upgrade}X-Provider-Token : {board}\r\n\r\n",
        f"GET /providers HTTP/1.1\r\nHost: 127.0.0.1\r\n{upgrade}X-Provider-Token: {board}\x02\r\n\r\n",
    ]
    return [form.encode("latin-1") for form in forms]


async def send_raw(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(4096), 10)
    finally:
        writer.close()


def fragments(token: str) -> list[str]:
    """The token and a prefix of it, so that a truncated copy is found too."""
    return [token, token[:16]]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("log_format", ["json", "text"])
async def test_malformed_requests_leave_no_token_in_the_log(tmp_path: Path, log_format: str) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        "port = 0\n"
        f'[logging]\nlevel = "debug"\nformat = "{log_format}"\n'
        '[auth]\ntokens = [{ name = "desk", scopes = ["pump-1"], env = "GATEWAY_TEST_TOKEN" }]\n'
        '[providers.auth]\nmode = "shared"\nshared_secret = { env = "GATEWAY_TEST_PROVIDER" }\n'
    )
    env = {"GATEWAY_TEST_TOKEN": CLIENT_TOKEN, "GATEWAY_TEST_PROVIDER": PROVIDER_SECRET}
    async with gateway_process("--config", str(config), env=env) as gateway:
        port = int(gateway.url.rsplit(":", 1)[1].rstrip("/"))
        for request in malformed_requests():
            answer = await send_raw(port, request)
            assert answer.split(b" ", 2)[1].startswith(b"4"), answer
        await asyncio.sleep(1)  # the last lines reach the log
    log = gateway.log
    for text in fragments(CLIENT_TOKEN) + fragments(PROVIDER_SECRET):
        assert text not in log
    assert "Traceback" not in log
    warnings = [line for line in gateway.lines if "malformed HTTP request from 127.0.0.1" in line]
    assert warnings, log
    assert all("warning" in line.lower() or "debug" in line.lower() for line in warnings)
    assert any("Missing expected LF after header value" in line for line in warnings), log
    assert any("Invalid header token" in line for line in warnings), log
    assert any("LineTooLong" in line for line in warnings), log
