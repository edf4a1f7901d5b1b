"""`mcp-gateway stdio` on every kind of stdin a host or a person gives it: /dev/null, a regular file,
a terminal, a pipe (the pipe is what tests/integration/test_stdio_bridge.py drives throughout).

The bridge runs as a real subprocess; the gateway URL points at a loopback port nobody listens on,
so a request is answered with the bridge's own gateway_unreachable error and no gateway is needed.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from bench.ports import free_port
from gateway.northbound import bridge_stdin
from gateway.northbound.bridge_stdin import TOO_LONG, stdin_lines

REPO = Path(__file__).resolve().parents[2]
EXIT_WITHIN_S = 15.0
"""Generous for a loaded 2-core machine; the bridge with nothing to answer exits in well under 1 s."""

PING = {"jsonrpc": "2.0", "id": "p", "method": "ping"}


def bridge_command() -> list[str]:
    return [sys.executable, "-m", "gateway.cli", "stdio", "--url", f"http://127.0.0.1:{free_port()}"]


def run_bridge(stdin: int) -> subprocess.CompletedProcess[bytes]:
    # A bridge that never sees EOF hangs: the timeout turns that into a failure naming the stdin.
    return subprocess.run(
        bridge_command(), stdin=stdin, capture_output=True, cwd=REPO, timeout=EXIT_WITHIN_S, check=False
    )


def test_dev_null_is_an_immediate_eof_and_a_clean_exit() -> None:
    with open(os.devnull, "rb") as devnull:
        done = run_bridge(devnull.fileno())
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b""
    assert b"Traceback" not in done.stderr and b"PermissionError" not in done.stderr, done.stderr.decode()


def test_a_regular_file_is_read_to_its_end_and_every_request_answered(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(orjson.dumps(PING) + b"\n\n" + orjson.dumps({**PING, "id": "q"}))  # no final newline
    with requests.open("rb") as stdin:
        done = run_bridge(stdin.fileno())
    assert done.returncode == 0, done.stderr.decode()
    answers = [orjson.loads(line) for line in done.stdout.splitlines()]
    assert sorted(answer["id"] for answer in answers) == ["p", "q"]
    assert all(answer["error"]["data"]["reason"] == "gateway_unreachable" for answer in answers)
    assert b"Traceback" not in done.stderr, done.stderr.decode()


def test_a_terminal_is_read_until_ctrl_d() -> None:
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            bridge_command(), stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO
        )
        try:
            # Canonical mode: the line goes through on its newline; Ctrl-D on an empty line is EOF.
            os.write(controller, orjson.dumps(PING) + b"\n")
            assert process.stdout is not None
            answer = orjson.loads(process.stdout.readline())
            assert answer["id"] == "p" and answer["error"]["data"]["reason"] == "gateway_unreachable"
            os.write(controller, b"\x04")
            assert process.wait(timeout=EXIT_WITHIN_S) == 0
            assert process.stderr is not None
            assert b"Traceback" not in process.stderr.read()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    stream.close()
    finally:
        os.close(controller)
        os.close(terminal)


async def test_a_line_over_the_cap_in_a_file_is_skipped_as_too_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bridge_stdin, "MAX_LINE_BYTES", 16)
    lines = tmp_path / "lines"
    lines.write_bytes(b"short\r\n" + b"x" * 40 + b"\n" + b"y" * 16 + b"\n" + b"z" * 17 + b"\nlast")
    with lines.open("rb") as stream:
        read = [line async for line in stdin_lines(stream)]
    assert read == [b"short", TOO_LONG, b"y" * 16, TOO_LONG, b"last"]
