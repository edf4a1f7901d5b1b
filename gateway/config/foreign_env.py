"""mcp-broker's MCP_BROKER_* environment variables, which this gateway does not read: a team that keeps
its old environment is told which of them are set and which setting replaces each (docs/migrating.md),
since otherwise it would, for one, lose provider authentication without a word. Values are never
shown: some of these variables hold secrets."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

BROKER_ENV_PREFIX = "MCP_BROKER_"

_NO_PATH_SETTING = "none: the gateway's paths are fixed at mcp-broker's defaults"
_NO_STATIC_FILES = "none: the gateway serves no static files"

REPLACEMENTS: dict[str, str] = {
    "MCP_BROKER_CONFIG": "--config FILE or MCP_GATEWAY_CONFIG (a TOML file)",
    "MCP_BROKER_PORT": "port (MCP_GATEWAY_PORT or --port)",
    "MCP_BROKER_HOST": "host (MCP_GATEWAY_HOST or --host, default 127.0.0.1)",
    "MCP_BROKER_PROTOCOL": "tls.cert_file and tls.key_file (HTTPS when both are set)",
    "MCP_BROKER_TLS_CERT": "tls.cert_file",
    "MCP_BROKER_TLS_KEY": "tls.key_file",
    "MCP_BROKER_LOCALE": "none: _broker answers in English",
    "MCP_BROKER_STDIO_PROVIDER": "the command `mcp-gateway stdio --slot SLOT` (default _all)",
    "MCP_BROKER_ALLOWED_ORIGINS": "allowed_origins (MCP_GATEWAY_ALLOWED_ORIGINS, a JSON list)",
    "MCP_BROKER_PROVIDER_PATH": _NO_PATH_SETTING,
    "MCP_BROKER_PROVIDERS_PATH": _NO_PATH_SETTING,
    "MCP_BROKER_CLIENT_PATH": _NO_PATH_SETTING,
    "MCP_BROKER_MCP_PATH": _NO_PATH_SETTING,
    "MCP_BROKER_SSE_PATH": _NO_PATH_SETTING,
    "MCP_BROKER_MESSAGES_PATH": _NO_PATH_SETTING,
    "MCP_BROKER_WWW_DIR": _NO_STATIC_FILES,
    "MCP_BROKER_BUNDLE_DIR": _NO_STATIC_FILES,
    "MCP_BROKER_OPEN": _NO_STATIC_FILES,
    "MCP_BROKER_PROVIDER_HEARTBEAT_MS": "providers.heartbeat_interval_s (in seconds)",
    "MCP_BROKER_PROVIDER_REQUEST_TIMEOUT_MS": "providers.request_timeout_ms",
    "MCP_BROKER_PROVIDER_TAKEOVER": "providers.takeover",
    "MCP_BROKER_AUTH_ENABLED": "[auth] (tokens, oauth or hmac)",
    "MCP_BROKER_PUBLIC_BASE_URL": "public_url",
    "MCP_BROKER_JWKS": "auth.oauth.jwks_url",
    "MCP_BROKER_ISSUER": "auth.oauth.issuer",
    "MCP_BROKER_PROVIDER_SECRET": (
        '[providers.auth] mode = "shared" with shared_secret = { env = "MCP_BROKER_PROVIDER_SECRET" }, '
        "without which any peer may publish any slot"
    ),
}
"""Every MCP_BROKER_* variable mcp-broker reads (its README and bin.ts), and what does its job here."""


def foreign_env_warnings(environ: Mapping[str, str], referenced: Iterable[str] = ()) -> list[str]:
    """One warning naming each MCP_BROKER_* variable set (not empty) and its replacement, or none.

    A variable in `referenced` is one the configuration itself names (`shared_secret = { env =
    "MCP_BROKER_PROVIDER_SECRET" }`, an upstream's `env_passthrough`): it is read, so it is not named."""
    named = set(referenced)
    ignored = sorted(
        name
        for name, value in environ.items()
        if name.startswith(BROKER_ENV_PREFIX) and value.strip() and name not in named
    )
    if not ignored:
        return []
    listed = "; ".join(f"{name}: {REPLACEMENTS.get(name, 'no setting of this gateway')}" for name in ignored)
    return [
        f"MCP_BROKER_* variables are mcp-broker's; these are set and this gateway ignores them: {listed}. "
        "See docs/migrating.md for the settings that replace them"
    ]


def named_strings(value: object) -> set[str]:
    """Every text inside a dumped configuration: the variable names its `env` keys and lists hold."""
    found: set[str] = set()
    if isinstance(value, str):
        found.add(value)
    elif isinstance(value, Mapping):
        for item in value.values():
            found |= named_strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            found |= named_strings(item)
    return found
