"""The real `mcp-gateway` command's messages say what to do, not only what failed.

A gateway that is not there: `call` asks whether one runs there and how to point elsewhere.
`policy explain` with no configuration at all: it says the built-in defaults answered, not that a
configuration was read. A relative `policy.file` that names nothing: `config check` and `run` say
where it was looked for (the working directory, and which).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.ports import free_port
from tests.support.gateway_process import run_cli


@pytest.mark.timeout(60)
async def test_call_to_no_gateway_asks_whether_one_runs_there() -> None:
    port = free_port()  # nothing listens on it
    code, _, err = await run_cli("call", "--url", f"http://127.0.0.1:{port}", "pump-1", "get_status")
    assert code == 1, err
    assert err.strip() == (
        f"mcp-gateway: cannot reach the gateway at http://127.0.0.1:{port}/pump-1/mcp: cannot connect to "
        f"127.0.0.1:{port}: Connection refused. Is `mcp-gateway run` running there? "
        "Point elsewhere with --url (or $MCP_GATEWAY_URL)"
    )


@pytest.mark.timeout(60)
async def test_policy_explain_without_a_configuration_says_none_was_given(tmp_path: Path) -> None:
    explain = ("policy", "explain", "--principal", "token:a", "--slot", "pump-1", "--method", "tools/list")
    code, out, err = await run_cli(*explain, cwd=tmp_path)
    assert (code, err) == (0, "")
    assert out.strip() == (
        "no configuration given (--config or MCP_GATEWAY_CONFIG): the built-in defaults have no [policy]: "
        "every request is allowed (authentication and scopes apply)"
    )
    config = tmp_path / "gateway.toml"
    config.write_text("port = 3999\n")
    code, out, err = await run_cli(*explain, env={"MCP_GATEWAY_CONFIG": str(config)}, cwd=tmp_path)
    assert (code, err) == (0, "")
    assert out.startswith("no [policy] in the configuration: every request is allowed"), out


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", [("config", "check"), ("run", "--port", "0")])
async def test_a_relative_policy_file_not_found_names_the_directory_it_was_read_from(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    config_dir = tmp_path / "etc"
    config_dir.mkdir()
    (config_dir / "plant-policy.toml").write_text("")  # beside the config: not where a relative path is read
    config = config_dir / "gateway.toml"
    config.write_text('[policy]\nfile = "plant-policy.toml"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, _, err = await run_cli(*command, "--config", str(config), cwd=elsewhere)
    assert code == 2, err
    assert err.strip().endswith(
        "setting 'policy.file': policy file plant-policy.toml: not found (a relative path is read from the "
        f"working directory: here {elsewhere / 'plant-policy.toml'})"
    ), err
