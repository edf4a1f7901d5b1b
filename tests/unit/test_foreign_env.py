"""MCP_BROKER_* variables: each one set is named with what replaces it, never with its value."""

from __future__ import annotations

import re

from gateway.config.foreign_env import REPLACEMENTS, foreign_env_warnings
from gateway.config.loading import _known_path

# The complete list in mcp-broker 1.3.2's README ("Option B: Environment variables") and `--help`.
BROKER_VARIABLES = {
    "MCP_BROKER_CONFIG", "MCP_BROKER_PORT", "MCP_BROKER_HOST", "MCP_BROKER_LOCALE", "MCP_BROKER_ALLOWED_ORIGINS",
    "MCP_BROKER_PROVIDER_PATH", "MCP_BROKER_PROVIDERS_PATH", "MCP_BROKER_CLIENT_PATH", "MCP_BROKER_MCP_PATH",
    "MCP_BROKER_SSE_PATH", "MCP_BROKER_MESSAGES_PATH", "MCP_BROKER_PROVIDER_HEARTBEAT_MS",
    "MCP_BROKER_PROVIDER_REQUEST_TIMEOUT_MS", "MCP_BROKER_PROVIDER_TAKEOVER", "MCP_BROKER_WWW_DIR",
    "MCP_BROKER_BUNDLE_DIR", "MCP_BROKER_OPEN", "MCP_BROKER_TLS_CERT", "MCP_BROKER_TLS_KEY", "MCP_BROKER_PROTOCOL",
    "MCP_BROKER_STDIO_PROVIDER", "MCP_BROKER_AUTH_ENABLED", "MCP_BROKER_PUBLIC_BASE_URL", "MCP_BROKER_JWKS",
    "MCP_BROKER_ISSUER", "MCP_BROKER_PROVIDER_SECRET",
}  # fmt: skip


def test_every_broker_variable_has_a_replacement_that_exists() -> None:
    assert set(REPLACEMENTS) == BROKER_VARIABLES
    for replacement in REPLACEMENTS.values():
        for key in re.findall(r"\b[a-z_]+(?:\.[a-z_]+)+\b", replacement):  # dotted settings: providers.takeover
            assert _known_path(key.split(".")), key


def test_nothing_set_nothing_said() -> None:
    assert foreign_env_warnings({"PATH": "/usr/bin", "MCP_GATEWAY_PORT": "3000"}) == []
    assert foreign_env_warnings({"MCP_BROKER_PORT": "", "MCP_BROKER_HOST": "  "}) == []


def test_one_warning_names_each_variable_and_no_value() -> None:
    environ = {"MCP_BROKER_PROVIDER_TAKEOVER": "always-secret-word", "MCP_BROKER_NEW_THING": "value-word"}
    [warning] = foreign_env_warnings(environ)
    assert "MCP_BROKER_NEW_THING: no setting of this gateway" in warning
    assert "MCP_BROKER_PROVIDER_TAKEOVER: providers.takeover" in warning
    assert "docs/migrating.md" in warning
    assert "secret-word" not in warning and "value-word" not in warning


def test_a_variable_the_configuration_names_is_left_out() -> None:
    environ = {"MCP_BROKER_PROVIDER_SECRET": "x" * 32}
    assert foreign_env_warnings(environ, referenced={"MCP_BROKER_PROVIDER_SECRET"}) == []
