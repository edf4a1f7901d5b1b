"""A configuration an earlier release loaded starts this gateway: allowed_hosts entries with a port or a
subdomain wildcard are honoured by the Host check, and entries no request can match (a zone id, an IPv6
origin without brackets) are logged as warnings once at start and ignored, instead of stopping `run`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from bench.ports import free_port
from tests.support.gateway_process import gateway_process

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


async def broker_info(url: str, host: str) -> dict[str, Any]:
    """broker_info through a real SDK client that names the gateway `host` in every request."""
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30), headers={"Host": host}) as http,
        Client(streamable_http_client(f"{url}/_broker/mcp", http_client=http), mode="legacy") as client,
    ):
        info = (await client.call_tool("broker_info", {})).structured_content
    assert isinstance(info, dict)
    return info


async def host_refusal(url: str, host: str) -> dict[str, Any]:
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30), headers={"Host": host}) as http:
        answer = await http.get(f"{url}/_broker/mcp")
    assert answer.status_code == 403, answer.text
    refusal: dict[str, Any] = orjson.loads(answer.content)
    return refusal


@pytest.mark.timeout(90)
async def test_yesterdays_allowed_hosts_and_origins_start_the_gateway_with_warnings(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "gateway.toml"
    config.write_text(
        f"port = {port}\n"
        f'allowed_hosts = ["gw.plant.lan", "gw.plant.lan:{port}", "[fd00::2]:{port}", "fe80::1%eth0", "*.plant.lan"]\n'
        'allowed_origins = ["http://::1:8080"]\n'
        '[logging]\nformat = "json"\n',
        encoding="utf-8",
    )
    env = {"STATE_DIRECTORY": str(tmp_path / "state")}
    async with gateway_process("--config", str(config), env=env) as gateway:
        url = f"http://127.0.0.1:{port}"
        for host in (f"gw.plant.lan:{port}", f"[fd00::2]:{port}", f"pump-7.plant.lan:{port}"):
            assert (await broker_info(url, host))["name"], host
        for host in (f"fd00::2:{port}", f"[fd00::2]:{port + 1}", "plant.lan", f"evil.example:{port}"):
            assert (await host_refusal(url, host))["error"] == "host_not_allowed", host
        warnings = [line["msg"] for line in gateway.json_lines() if line.get("level") == "warning"]
    assert warnings == [
        "config: allowed_hosts entry 'fe80::1%eth0' never matches and is ignored: a Host header carries no zone "
        "id ('%...'); write the address alone ('fe80::1')",
        "config: allowed_origins entry 'http://::1:8080' never matches and is ignored: an IPv6 address in an "
        "origin stands in brackets, as a browser sends it: write e.g. 'http://[::1]:8080'",
    ]
