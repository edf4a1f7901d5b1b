"""`mcp-gateway run` on a port already in use exits 1 with its one-line message and nothing else.

What start-up made before the bind failed is closed on the way out: with [auth.oauth] the key fetcher's
HTTP session is open by then (its first fetch under way), and leaving it open logs asyncio's "Unclosed
client session" error on an exit that is no crash. A real process; the port is held by a listening
socket that never accepts, which also serves as the JWKS URL (so the fetch is in flight at the bind).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.support.gateway_process import run_cli


@pytest.mark.timeout(60)
@pytest.mark.parametrize("log_format", ["json", "text"])
async def test_a_taken_port_leaves_nothing_unclosed(tmp_path: Path, log_format: str) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        config = tmp_path / "gateway.toml"
        config.write_text(
            f'[logging]\nformat = "{log_format}"\n'
            f'[auth.oauth]\nissuer = "http://127.0.0.1:{port}"\njwks_url = "http://127.0.0.1:{port}/jwks"\n'
            f"[audit]\npath = {str(tmp_path / 'audit.db')!r}\n"
        )
        code, _, err = await run_cli("run", "--config", str(config), "--port", str(port), cwd=tmp_path)
    assert code == 1, err
    assert "Unclosed" not in err, err
    assert "Traceback" not in err, err
    assert '"level":"error"' not in err and " ERROR " not in err, err
    assert err.splitlines()[-1].endswith(
        "(another gateway running? choose another port with --port or MCP_GATEWAY_PORT)"
    )
