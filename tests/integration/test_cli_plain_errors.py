"""Errors of the operator commands in words a script's author can act on: a simulator control endpoint
that stays silent or is no simulator's, a token file in a directory that does not exist, an audit
trail at a relative path read from another directory, a device update whose token file is missing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

import sim.control_client
from gateway.app import GatewayServer
from sim.control_client import ControlUnreachable, get_pumps
from tests.support.gateway_process import run_cli
from tests.support.silent import silent_listener


@pytest.fixture
async def silent_endpoint() -> AsyncIterator[str]:
    async with silent_listener() as url:
        yield url


async def test_a_silent_control_endpoint_names_the_timeout(
    silent_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sim.control_client, "TIMEOUT_S", 0.5)
    monkeypatch.setattr(sim.control_client, "TIMEOUT", aiohttp.ClientTimeout(total=0.5))
    with pytest.raises(ControlUnreachable) as raised:
        await get_pumps(silent_endpoint)
    assert f"did not answer at {silent_endpoint}/pumps (no answer within 0.5 s)" in str(raised.value)


async def test_sim_status_at_the_gateways_address_says_it_is_no_simulator(gateway: GatewayServer) -> None:
    code, out, err = await run_cli("sim-status", "--control", gateway.url)
    assert (code, out) == (1, "")
    assert err.startswith(
        f"mcp-gateway sim-status: {gateway.url}/pumps is not a simulator control endpoint: it answered HTTP 404: "
        "No such endpoint."
    ), err
    assert "give --control the address of `mcp-gateway sim --control-port`" in err


async def test_token_create_into_a_missing_directory_names_the_directory(tmp_path: Path) -> None:
    missing = tmp_path / "not-made"
    code, out, err = await run_cli("token", "create", "agent", "--file", str(missing / "tokens.toml"))
    assert (code, out) == (2, "")
    assert err == (
        f"mcp-gateway token create: cannot write {missing / 'tokens.toml'}: the directory {missing} does not exist "
        "(create it first)\n"
    )
    assert ".tmp" not in err


async def test_audit_with_a_relative_path_from_another_directory_says_where_it_looked(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('[audit]\npath = "audit.db"\n')
    elsewhere = tmp_path / "home"
    elsewhere.mkdir()
    code, out, err = await run_cli("audit", "--config", str(config), cwd=elsewhere)
    assert (code, out) == (2, "")
    assert err.rstrip().endswith(
        "(a relative [audit] path is read from the working directory, as mcp-gateway run reads it: here "
        f"{elsewhere / 'audit.db'}; run this where the gateway runs, or pass --path FILE)"
    ), err
    assert "--config" not in err


async def test_device_update_with_a_missing_token_file_names_the_token_file(tmp_path: Path) -> None:
    missing = tmp_path / "operator.token"
    code, out, err = await run_cli(
        "device",
        "update",
        "pump-1",
        "--port",
        "/dev/null",
        "--url",
        "http://127.0.0.1:9",
        "--token-file",
        str(missing),
        env={"STATE_DIRECTORY": str(tmp_path / "state")},
    )
    assert (code, out) == (2, "")  # a file named on the command line: usage (docs/cli.md)
    assert f"--token-file {missing}: cannot be read" in err
    assert err.rstrip().endswith("give a --token-file that can be read"), err
    assert "pass --url" not in err
