"""The stdio bridge at its edges: at EOF on stdin each request gets exactly one answer (none twice, and
one never sent gets one too) in words of its own (`stdin_closed`); SIGTERM, SIGINT and EOF end a bridge
whose host stopped reading stdout; a refused --url is quoted with its secrets masked."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.ports import free_port
from tests.integration.test_stdio_bridge import INITIALIZE, REPO, RawBridge
from tests.integration.test_stdio_bridge_silent_gateway import (
    READ_TIMEOUT_S,
    accept_and_say_nothing,
    silent_gateway,  # noqa: F401 (the fixture)
)

pytestmark = pytest.mark.timeout(90)

INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TIMEOUT = ("--read-timeout", "1")


async def keep_alive_for_ever(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A gateway at work on the first request for ever: an SSE head, then a keepalive every 0.2 s."""
    await reader.readuntil(b"\r\n\r\n")
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
        b"Mcp-Session-Id: s1\r\n\r\n"
    )
    keepalive = b": keepalive\n\n"
    # Ended by the test's teardown: quietly, as a gateway's connection would be.
    with contextlib.suppress(ConnectionError, asyncio.CancelledError):
        while True:
            writer.write(f"{len(keepalive):x}\r\n".encode() + keepalive + b"\r\n")
            await writer.drain()
            await asyncio.sleep(0.2)


async def all_output(raw: RawBridge) -> list[dict[str, Any]]:
    assert raw.process.stdout is not None
    out = await asyncio.wait_for(raw.process.stdout.read(), 20)
    return [orjson.loads(line) for line in out.splitlines()]


def per_id(answers: list[dict[str, Any]]) -> dict[str, int]:
    return dict(collections.Counter(orjson.dumps(answer.get("id")).decode() for answer in answers))


@pytest.mark.parametrize("silent_gateway", [accept_and_say_nothing], indirect=True)
@pytest.mark.parametrize("attempt", range(4))
async def test_at_eof_a_request_silenced_at_the_same_time_gets_one_answer(silent_gateway: str, attempt: int) -> None:  # noqa: F811
    """stdin closes at once: the wait at EOF and each request's own silence end together; a request
    whose task wrote its gateway-silent error is not answered again by the give-up."""
    raw = await RawBridge.start(silent_gateway, "pump-1", "--read-timeout", str(READ_TIMEOUT_S))
    try:
        await raw.send(INITIALIZE)
        await raw.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        await raw.send({"jsonrpc": "2.0", "id": 3, "method": "ping"})
        assert raw.process.stdin is not None
        raw.process.stdin.close()
        answers = await all_output(raw)
        assert per_id(answers) == {"1": 1, "2": 1, "3": 1}, answers
        await asyncio.wait_for(raw.process.wait(), 10)
    finally:
        if raw.process.returncode is None:
            raw.process.kill()
            await raw.process.wait()


@pytest.mark.parametrize("silent_gateway", [keep_alive_for_ever], indirect=True)
async def test_at_eof_requests_never_sent_are_answered_and_none_is_called_silent(
    silent_gateway: str,  # noqa: F811
) -> None:
    """initialize runs on (keepalives) and holds the session's opening: tools/list waits for it unsent and
    ping is never started. After --read-timeout each gets one `stdin_closed` answer, none `gateway_silent`
    (the gateway was not silent)."""
    raw = await RawBridge.start(silent_gateway, "pump-1", "--read-timeout", str(READ_TIMEOUT_S))
    try:
        await raw.send(INITIALIZE)
        await raw.send({"jsonrpc": "2.0", "id": "list", "method": "tools/list"})
        await raw.send({"jsonrpc": "2.0", "id": "ping", "method": "ping"})
        await raw.send(INITIALIZED)
        await asyncio.sleep(0.3)
        assert raw.process.stdin is not None
        raw.process.stdin.close()
        answers = await all_output(raw)
        assert per_id(answers) == {"1": 1, '"list"': 1, '"ping"': 1}, answers
        url = f"{silent_gateway}/pump-1/mcp"
        by_id = {answer["id"]: answer["error"] for answer in answers}
        for request_id, sent in ((1, True), ("list", False), ("ping", False)):
            error = by_id[request_id]
            assert error["code"] == -32000
            assert error["data"] == {"reason": "stdin_closed", "url": url, "readTimeoutS": READ_TIMEOUT_S, "sent": sent}
            assert "stopped waiting 1 s (--read-timeout) after stdin closed" in error["message"], error
        assert "may be carried out" in by_id[1]["message"]
        assert "was not carried out" in by_id["ping"]["message"]
        assert await asyncio.wait_for(raw.process.wait(), 10) == 1
        stderr = await raw.stderr()
        assert "2 more message(s) were never sent" in stderr, stderr
        assert "Traceback" not in stderr
    finally:
        if raw.process.returncode is None:
            raw.process.kill()
            await raw.process.wait()


@pytest.fixture
def stuck_bridge(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A bridge whose host writes lines it answers itself (not JSON) and never reads stdout: its stdout
    pipe fills up and the bridge's writes block. (subprocess, not asyncio's: asyncio's wait() waits for
    the pipes to close too.)"""
    stderr = tmp_path / "stderr"
    with stderr.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "stdio", "--url", f"http://127.0.0.1:{free_port()}", *TIMEOUT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            cwd=str(REPO),
            env={k: v for k, v in os.environ.items() if k != "MCP_GATEWAY_TOKEN"},
        )
    assert process.stdin is not None
    try:
        process.stdin.write(b"not json\n" * 3000)  # about 300 KB of answers, several pipes full
        process.stdin.flush()
        assert process.stdout is not None
        assert process.stdout.readline().startswith(b"{")  # serving: its signal handlers are set
        time.sleep(0.5)  # the pipe fills up again: the rest is never read
        yield process, stderr
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        for pipe in (process.stdin, process.stdout):
            with contextlib.suppress(OSError):
                pipe.close()  # type: ignore[union-attr]


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "EOF"])
def test_a_bridge_whose_host_stopped_reading_stdout_still_ends(
    stuck_bridge: tuple[subprocess.Popen[bytes], Path], how: str
) -> None:
    process, stderr_file = stuck_bridge
    started = time.monotonic()
    if how == "EOF":
        assert process.stdin is not None
        process.stdin.close()
    else:
        process.send_signal(getattr(signal, how))
    try:
        status = process.wait(15)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the bridge still runs 15 s after {how} with its stdout full")
    assert time.monotonic() - started < 15
    # Every line was answered (queued for stdout), the rest is the host's; a signal is 128 + its number.
    assert status == (0 if how == "EOF" else 128 + getattr(signal, how)), status
    stderr = stderr_file.read_text(errors="replace")
    assert "still unwritten" in stderr, stderr
    assert "Traceback" not in stderr and "Fatal Python error" not in stderr, stderr


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:3000/pump-1/mcp?token=s3cr3t-value",
        "ftp://127.0.0.1:3000/?api_key=s3cr3t-value",
        "http://:3000/?sig=s3cr3t-value",
        "http://127.0.0.1:99999/?sig=s3cr3t-value",
    ],
)
@pytest.mark.parametrize("source", ["--url", "MCP_GATEWAY_URL"])
def test_a_refused_url_is_quoted_without_its_secrets(
    url: str, source: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.cli import main

    if source == "--url":
        args = ["stdio", "--url", url]
    else:
        monkeypatch.setenv("MCP_GATEWAY_URL", url)
        args = ["stdio"]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "s3cr3t" not in captured.err, captured.err
    assert "=***" in captured.err, captured.err
    assert "mcp-gateway stdio: --url " in captured.err
