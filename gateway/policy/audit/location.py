"""Where the audit trail lives by default, and its directory created private (mode 0700)."""

from __future__ import annotations

import os
import stat
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


SQLITE_HEADER = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file (https://sqlite.org/fileformat.html)."""


def unusable_audit_path(path: Path) -> str | None:
    """Why `path` can never hold the audit trail, or None. Only what no waiting mends is named: a
    directory, a part of its directory that is a file, something other than a regular file, a file
    that is not SQLite. A missing directory is created at start; a read-only or full disk, or a file
    SQLite finds damaged inside, is a run-time condition the trail reports and recovers from (fail
    closed), so those are not judged here. An empty file is a new database to SQLite."""
    try:
        info = path.stat()
    except NotADirectoryError:
        blocker = next((part for part in reversed(path.parents) if part.exists() and not part.is_dir()), None)
        named = f"{blocker} is a file, not a directory" if blocker is not None else "a part of it is not a directory"
        return f"{named}; name a file in a directory"
    except (OSError, ValueError):  # missing (created at start), no permission (the trail says so), a NUL
        return None
    if stat.S_ISDIR(info.st_mode):
        return f"it is a directory; name a file in it, e.g. {path / FILE_NAME}"
    if not stat.S_ISREG(info.st_mode):
        return "it is not a regular file (a device, a pipe or a socket); name a file"
    if info.st_size == 0:
        return None
    try:
        with path.open("rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
    except OSError:
        return None  # not readable now: the trail reports it, and recovers when it can be read
    if header != SQLITE_HEADER:
        return (
            "it is not an SQLite database (the file does not start with SQLite's header); move it aside, "
            "or name another file: the gateway starts a new trail where none is"
        )
    return None
