"""Where the audit trail lives by default, and its directory created private (mode 0700)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from gateway.config import AuditConfig

FILE_NAME = "audit.db"
APP_DIR = "mcp-gateway"


def default_audit_path(environ: Mapping[str, str] | None = None) -> Path:
    """$STATE_DIRECTORY/audit.db (systemd StateDirectory=), else $XDG_STATE_HOME/mcp-gateway/audit.db,
    else ~/.local/state/mcp-gateway/audit.db."""
    env = os.environ if environ is None else environ
    # systemd sets a colon-separated list when StateDirectory= names several: the first is ours.
    state_directory = env.get("STATE_DIRECTORY", "").split(":")[0]
    if state_directory:
        return Path(state_directory) / FILE_NAME
    xdg = env.get("XDG_STATE_HOME", "")
    if xdg and Path(xdg).is_absolute():  # the XDG spec says to ignore a relative value
        return Path(xdg) / APP_DIR / FILE_NAME
    home = env.get("HOME") or str(Path.home())
    return Path(home) / ".local" / "state" / APP_DIR / FILE_NAME


def audit_path(config: AuditConfig, environ: Mapping[str, str] | None = None) -> Path:
    """The configured [audit] path (with ~ expanded), else the default location."""
    return Path(config.path).expanduser() if config.path else default_audit_path(environ)


def ensure_directory(directory: Path) -> None:
    """Create `directory` and any missing parent with mode 0700 (records hold who did what, and arguments)."""
    missing = []
    for candidate in (directory, *directory.parents):
        if candidate.exists():
            break
        missing.append(candidate)
    for candidate in reversed(missing):
        candidate.mkdir(mode=0o700, exist_ok=True)
