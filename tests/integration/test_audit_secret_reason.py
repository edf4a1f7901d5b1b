"""A refusal's reason in the audit trail names a secret-looking argument but not its value
(gateway/policy/audit/records.py: mask_text). The caller, who sent the value, reads it in its error;
the trail's database file and its write-ahead log hold no trace of it."""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import sqlite3
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import GatewayFactory, wait_ready_slot
from tests.support.refusals import refusal, refused_argument_text
from tests.support.remote_server import remote_server
from tests.support.servers import demo_server

OPERATOR = secrets.token_urlsafe(32)
SECRET_VALUE = "SECRET-LIMIT-" + secrets.token_hex(8)
NESTED_SECRET = "SECRET-NESTED-" + secrets.token_hex(8)

POLICY: dict[str, Any] = {
    "roles": {"operator": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]}},
    "assign": [{"principal": "token:operator", "role": "operator", "resources": ["/plant/**"]}],
    "limits": [
        # The second call leaves api_token out, to meet the limit on options.
        {"resources": ["/plant/files"], "tool": "echo", "argument": "api_token", "allowed": ["x"], "missing": "allow"},
        {"resources": ["/plant/files"], "tool": "echo", "argument": "options", "allowed": ["a"]},
    ],
    "resource_patterns": [{"slots": "*", "path": "/plant/{slot}"}],
}


def trail_bytes(path: Path) -> bytes:
    return b"".join(file.read_bytes() for file in path.parent.glob(path.name + "*"))


@pytest.mark.timeout(60)
async def test_a_secret_argument_value_never_reaches_the_trail(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    trail = tmp_path / "audit.db"
    async with remote_server(lambda: demo_server("files")) as remote:
        server = await gateway_factory(
            auth={"tokens": [{"name": "operator", "sha256": hashlib.sha256(OPERATOR.encode()).hexdigest()}]},
            policy=POLICY,
            audit={"path": str(trail)},
            upstreams={"remote": [{"name": "files", "url": remote.url}]},
        )
        await wait_ready_slot(server, "files")
        headers = {"Authorization": f"Bearer {OPERATOR}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as transport,
            Client(streamable_http_client(f"{server.url}/files/mcp", http_client=transport), mode="legacy") as sdk,
        ):
            text, _ = refusal(await sdk.call_tool("echo", {"text": "hi", "api_token": SECRET_VALUE}))
            # The caller sent the value: its own error may name it, to say which argument to fix.
            assert refused_argument_text(text, "files").startswith(
                f'Argument "api_token" = "{SECRET_VALUE}" is not allowed'
            )
            refusal(await sdk.call_tool("echo", {"text": "hi", "options": {"mode": "b", "password": NESTED_SECRET}}))
        with contextlib.closing(sqlite3.connect(f"file:{trail}?mode=ro", uri=True)) as db:
            reasons = [row[0] for row in db.execute("SELECT reason FROM decisions WHERE effect = 'refuse-arguments'")]
        assert len(reasons) == 2, reasons
        assert reasons[0].startswith('Argument "api_token" = *** is not allowed'), reasons
        assert reasons[1].startswith('Argument "options" = {"mode":"b","password":***} is not allowed'), reasons
        stored = trail_bytes(trail)
        for value in (SECRET_VALUE, NESTED_SECRET):
            assert value.encode() not in stored
            assert value[-12:].encode() not in stored
