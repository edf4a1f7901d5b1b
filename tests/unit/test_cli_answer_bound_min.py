"""--max-answer-bytes has a named minimum, 64 KiB (MIN_ANSWER_BYTES): a smaller bound would refuse every
answer as too large (an initialize answer alone is several hundred bytes), so it is a usage error. The
real CLI, each command in a process of its own."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from gateway.client_answers import MAX_ANSWER_BYTES_LIMIT
from tests.support.written_config import REPO, mcp_gateway_command

MIN_ANSWER_BYTES = 64 * 1024

COMMANDS = {
    "call": ["call", "pump-1", "get_status"],
    "tools": ["tools", "pump-1"],
    "slots": ["slots"],
    "schema-hash": ["schema-hash", "--slot", "pump-1"],
}
REFUSAL = (
    "argument --max-answer-bytes: expected a whole number from 65536 to 1073741824 (64 KiB to 1 GiB: an "
    "initialize answer alone takes several hundred bytes, a tools/list several KiB), got "
)


@pytest.fixture(scope="module")
def closed_url() -> str:
    """A loopback URL nothing listens at: a port the OS gave, closed again."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    environ = {name: value for name, value in os.environ.items() if not name.startswith("MCP_")}
    return subprocess.run(
        [str(mcp_gateway_command()), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env=environ,
        cwd=REPO,
    )


def test_the_minimum_is_named() -> None:
    from gateway.cli import common

    assert common.MIN_ANSWER_BYTES == MIN_ANSWER_BYTES and MAX_ANSWER_BYTES_LIMIT == 1 << 30


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("given", ["1", "1000", str(MIN_ANSWER_BYTES - 1), "0"])
def test_a_bound_below_the_minimum_is_a_usage_error(closed_url: str, command: str, given: str) -> None:
    done = run(*COMMANDS[command], "--max-answer-bytes", given, "--url", closed_url)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert f"mcp-gateway {command}: error: {REFUSAL}'{given}'" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", list(COMMANDS))
def test_the_minimum_is_accepted(closed_url: str, command: str) -> None:
    # Past the parser: the command goes on to reach the gateway, which is not there (exit 1, not 2).
    done = run(*COMMANDS[command], "--max-answer-bytes", str(MIN_ANSWER_BYTES), "--url", closed_url)
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert "cannot reach the gateway" in done.stderr
