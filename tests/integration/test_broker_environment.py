"""A team moving from mcp-broker keeps its environment: `config check` and `run` name every MCP_BROKER_*
variable set and the setting that replaces it, never its value (docs/migrating.md)."""

from __future__ import annotations

import secrets
from pathlib import Path

from tests.support.gateway_process import gateway_process, run_to_exit


def config_file(tmp_path: Path, text: str = "") -> Path:
    config = tmp_path / "gateway.toml"
    config.write_text('port = 0\n[logging]\nlevel = "info"\nformat = "json"\n' + text)
    return config


async def test_config_check_names_the_broker_variables_without_their_values(tmp_path: Path) -> None:
    secret = secrets.token_urlsafe(32)
    environment = {"MCP_BROKER_PROVIDER_SECRET": secret, "MCP_BROKER_HOST": "0.0.0.0", "MCP_BROKER_LOCALE": ""}
    code, stdout, stderr = await run_to_exit("config", "check", "--config", str(config_file(tmp_path)), env=environment)
    assert code == 0, stderr
    assert stdout.strip() == "configuration OK"
    [warning] = [line for line in stderr.splitlines() if "MCP_BROKER_" in line]
    assert warning.startswith("mcp-gateway config check: warning: ")
    assert 'MCP_BROKER_PROVIDER_SECRET: [providers.auth] mode = "shared"' in warning
    assert "MCP_BROKER_HOST: host (" in warning
    assert "docs/migrating.md" in warning
    assert "MCP_BROKER_LOCALE" not in warning  # empty: mcp-broker reads that as unset too
    assert secret not in stdout + stderr
    assert "0.0.0.0" not in warning


async def test_run_warns_once_without_the_secret(tmp_path: Path) -> None:
    secret = secrets.token_urlsafe(32)
    async with gateway_process(
        "--config", str(config_file(tmp_path)), env={"MCP_BROKER_PROVIDER_SECRET": secret}
    ) as gw:
        pass
    warnings = [
        entry
        for entry in gw.json_lines()
        if entry.get("level") == "warning" and "MCP_BROKER_PROVIDER_SECRET" in str(entry.get("msg"))
    ]
    assert len(warnings) == 1, gw.log
    assert warnings[0]["logger"] == "gateway.config"
    assert "providers.auth" in str(warnings[0]["msg"]) and "docs/migrating.md" in str(warnings[0]["msg"])
    assert secret not in gw.log


async def test_a_variable_the_configuration_names_is_not_warned_of(tmp_path: Path) -> None:
    """The quickest migration keeps the old variable: shared_secret = { env = "MCP_BROKER_PROVIDER_SECRET" }."""
    config = config_file(
        tmp_path, '[providers.auth]\nmode = "shared"\nshared_secret = { env = "MCP_BROKER_PROVIDER_SECRET" }\n'
    )
    environment = {"MCP_BROKER_PROVIDER_SECRET": secrets.token_urlsafe(32), "MCP_BROKER_PORT": "3001"}
    code, stdout, stderr = await run_to_exit("config", "check", "--config", str(config), env=environment)
    assert (code, stdout.strip()) == (0, "configuration OK"), stderr
    [warning] = [line for line in stderr.splitlines() if "MCP_BROKER_" in line]
    assert "MCP_BROKER_PORT: port (" in warning
    assert "MCP_BROKER_PROVIDER_SECRET" not in warning
