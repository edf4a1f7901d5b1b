"""Where a running gateway's configuration comes from, so that a reload loads it exactly as `run` did:
the same file, the same environment layering (MCP_GATEWAY_*, MCP_GROUP_*), the same command-line flags."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.config import ENV_CONFIG_FILE, GatewayConfig, load_config


@dataclass(frozen=True)
class ConfigSource:
    path: str | None
    """The --config file; None: $MCP_GATEWAY_CONFIG when set, else the defaults (as load_config decides)."""
    flags: Mapping[str, Any] = field(default_factory=dict)
    """The command-line flags as `run` passed them (gateway/cli/common.py _config_flags); they win over the
    file and the environment at every reload as they did at start."""
    environ: Mapping[str, str] | None = None
    """None: the process's own environment, which is the one it started with (a process's environment
    does not change from outside; a changed EnvironmentFile= needs a restart)."""

    def load(self) -> GatewayConfig:
        """The configuration as `run` would build it now, for a reload; ConfigError naming the key or the file."""
        return load_config(self.path, environ=self.environ, flags=self.flags, reloading=True)

    def describe(self, environ: Mapping[str, str]) -> str:
        if self.path is not None:
            return f"config file {self.path}"
        named = (self.environ if self.environ is not None else environ).get(ENV_CONFIG_FILE)
        return f"config file {named} (${ENV_CONFIG_FILE})" if named else "defaults, environment and flags"
