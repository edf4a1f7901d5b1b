"""A configuration written to tmp_path/gateway.toml, then loaded by the real loader in the test's process
or checked by `mcp-gateway config check` as a process of its own, as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHECK_TIMEOUT_S = 30.0
"""How long `config check` may take by default (it reads a file and exits)."""
REMOTE = '[[upstreams.remote]]\nname = "r1"\nurl = "https://example.com/mcp"\n'
"""A remote upstream with the least it needs; settings appended to the text land in its entry."""


def write_config(tmp_path: Path, text: str | bytes) -> Path:
    """`text` as tmp_path/gateway.toml: bytes as they are (a test of encodings), a string in UTF-8."""
    path = tmp_path / "gateway.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def mcp_gateway_command() -> Path:
    """The installed `mcp-gateway` script: beside this Python, else in the repository's venv."""
    command = Path(sys.executable).parent / "mcp-gateway"
    return command if command.exists() else REPO / ".venv" / "bin" / "mcp-gateway"


def config_check(
    tmp_path: Path,
    text: str | bytes,
    *,
    preexec_fn: Callable[[], None] | None = None,
    timeout_s: float = CHECK_TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """`mcp-gateway config check --config F` on `text` written to F, in an environment of its own: no MCP_*
    variable of the developer's, its state directory and working directory in tmp_path."""
    config = write_config(tmp_path, text)
    environ = {name: value for name, value in os.environ.items() if not name.startswith("MCP_")}
    environ["STATE_DIRECTORY"] = str(tmp_path / "state")
    return subprocess.run(
        [str(mcp_gateway_command()), "config", "check", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env=environ,
        cwd=tmp_path,
        preexec_fn=preexec_fn,
    )
