"""The stdio bridge and a host that reads stdout slowly, or stops reading it (docs/stdio-bridge.md): an
answer the gateway delivered is written to the host, never replaced by a `stdin_closed` error, the
bridge exits within its flush bounds however little the host reads (exit status 1, naming how many
answers the host did not get, when it read too little), and what it queues for stdout keeps to
MAX_STDOUT_QUEUED_BYTES.

A real gateway (in this process) with the ordinary SDK server of test_big_catalog_answers.py behind it,
and the bridge as its own process, driven line by line."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import orjson
import pytest

from gateway.app import GatewayServer
from gateway.northbound.bridge_errors import MAX_LINE_BYTES
from gateway.northbound.bridge_relay import EXIT_FLUSH_S, MAX_STDOUT_QUEUED_BYTES, Stdout
from tests.conftest import GatewayFactory, wait_ready_slot
from tests.integration.test_big_catalog_answers import SERVER_SOURCE, catalog
from tests.integration.test_stdio_bridge import INITIALIZE
from tests.integration.test_stdio_upstreams import START_S

REPO = Path(__file__).resolve().parents[2]
ANSWER_BYTES = 8 * 1024 * 1024
"""Each call's answer: five of them are more than MAX_STDOUT_QUEUED_BYTES, so the last waits for room."""
CALLS = 5
ANSWERS_COME_S = 6.0
"""Time for the gateway to deliver every answer to the bridge while the host reads nothing."""


@pytest.fixture
async def big_answers(gateway_factory: GatewayFactory, tmp_path: Path) -> GatewayServer:
    path = tmp_path / "catalog_server.py"
    path.write_text(SERVER_SOURCE)
    server = await gateway_factory(
        upstreams={"stdio": [catalog(path, 1, 1, 0)]}, limits={"max_frame_bytes": 4 * MAX_LINE_BYTES}
    )
    await wait_ready_slot(server, "catalog", START_S)
    return server


def start_bridge(server: GatewayServer, *extra: str) -> subprocess.Popen[bytes]:
    """The bridge with plain pipes: the host reads its stdout only when the test does (an asyncio pipe
    would read ahead into its buffer)."""
    return subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "stdio", "--slot", "catalog", "--url", server.url, *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=str(REPO),
        env={k: v for k, v in os.environ.items() if k != "MCP_GATEWAY_TOKEN"},
    )


async def send(process: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert process.stdin is not None
    process.stdin.write(orjson.dumps(message) + b"\n")
    process.stdin.flush()


async def calls_then_eof(process: subprocess.Popen[bytes]) -> None:
    """initialize (its answer read), then CALLS big calls the host does not read the answers of; EOF
    once the gateway has answered them all."""
    assert process.stdout is not None and process.stdin is not None
    await send(process, INITIALIZE)
    first = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 15)
    assert orjson.loads(first)["id"] == 1
    await send(process, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    for index in range(CALLS):
        params = {"name": "tool_00", "arguments": {"size": ANSWER_BYTES}}
        await send(process, {"jsonrpc": "2.0", "id": 10 + index, "method": "tools/call", "params": params})
    await asyncio.sleep(ANSWERS_COME_S)  # the gateway (in this loop) answers meanwhile
    process.stdin.close()


def read_all(stream: IO[bytes]) -> list[bytes]:
    return stream.readlines()


async def ended(process: subprocess.Popen[bytes], timeout: float) -> int:
    return await asyncio.wait_for(asyncio.to_thread(process.wait, timeout + 1), timeout)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


@pytest.mark.timeout(120)
async def test_an_answer_that_waited_for_room_reaches_a_host_that_reads_after_eof(big_answers: GatewayServer) -> None:
    # --read-timeout 2: the host starts reading later than that after EOF, within the flush.
    process = start_bridge(big_answers, "--read-timeout", "2")
    try:
        await calls_then_eof(process)
        await asyncio.sleep(2.8)
        assert process.stdout is not None and process.stderr is not None
        lines = await asyncio.wait_for(asyncio.to_thread(read_all, process.stdout), 30)
        status = await ended(process, 15)
        stderr = process.stderr.read().decode()
    finally:
        stop(process)
    answers = {message["id"]: message.get("result") or message["error"] for message in map(orjson.loads, lines)}
    assert sorted(answers) == [10 + index for index in range(CALLS)], stderr
    for request_id, answer in answers.items():
        assert answer.get("content", [{}])[0].get("text") == "y" * ANSWER_BYTES, (request_id, str(answer)[:300])
    assert status == 0, stderr
    assert "stdin_closed" not in stderr and "without an answer" not in stderr, stderr


@pytest.mark.timeout(120)
async def test_a_host_that_never_reads_again_does_not_hold_the_exit_for_the_read_timeout(
    big_answers: GatewayServer,
) -> None:
    process = start_bridge(big_answers)  # --read-timeout 90
    try:
        await calls_then_eof(process)
        closed = time.monotonic()
        # The answers held for room wait EXIT_FLUSH_S for the host to read, then the flush as long.
        status = await ended(process, 4 * EXIT_FLUSH_S + 2)
        took = time.monotonic() - closed
        assert process.stderr is not None
        stderr = process.stderr.read().decode()
    finally:
        stop(process)
    assert took < 3 * EXIT_FLUSH_S, took
    # Every request was answered, but the host got none of the answers: not a clean end.
    assert status == 1, stderr
    assert unwritten(stderr)[0] == CALLS, stderr
    assert "without an answer" not in stderr, stderr


def unwritten(stderr: str) -> tuple[int, int]:
    """The answers and other messages the bridge names as left unwritten on stdout at exit."""
    found = re.search(
        rf"stdout: (\d+) answer\(s\) and (\d+) other message\(s\) \(\d+ byte\(s\)\) still unwritten after "
        rf"{EXIT_FLUSH_S:g} s; the host reads no more of it",
        stderr,
    )
    assert found is not None, stderr
    return int(found[1]), int(found[2])


SMALL_CALLS = 12
SMALL_ANSWER_BYTES = 512 * 1024
"""Twelve answers of 512 KiB: all of them fit the stdout queue, far more than a pipe's buffer."""


@pytest.mark.timeout(120)
async def test_a_host_that_reads_only_after_the_exit_is_told_how_many_answers_it_missed(
    big_answers: GatewayServer,
) -> None:
    """Each request gets its answer from the gateway, but the host reads stdout only once the bridge
    has exited: the answers left in the bridge are counted on stderr and the exit status is 1."""
    process = start_bridge(big_answers, "--read-timeout", "3")
    try:
        assert process.stdin is not None and process.stdout is not None and process.stderr is not None
        await send(process, INITIALIZE)
        first = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 15)
        assert orjson.loads(first)["id"] == 1
        await send(process, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        for index in range(SMALL_CALLS):
            params = {"name": "tool_00", "arguments": {"size": SMALL_ANSWER_BYTES}}
            await send(process, {"jsonrpc": "2.0", "id": 10 + index, "method": "tools/call", "params": params})
        process.stdin.close()
        status = await ended(process, 3 + 4 * EXIT_FLUSH_S + 10)  # the host reads nothing until then
        lines = await asyncio.wait_for(asyncio.to_thread(read_all, process.stdout), 15)
        stderr = process.stderr.read().decode()
    finally:
        stop(process)
    whole = [orjson.loads(line) for line in lines if line.endswith(b"\n")]
    got = sorted(message["id"] for message in whole if "id" in message)
    assert got == [10 + index for index in range(len(got))], (got, stderr)
    for message in whole:
        assert message["result"]["content"][0]["text"] == "y" * SMALL_ANSWER_BYTES, str(message)[:300]
    answers, _ = unwritten(stderr)
    assert answers >= 1 and len(got) + answers == SMALL_CALLS, (len(got), stderr)
    assert status == 1, stderr
    assert "without an answer" not in stderr and "stdin_closed" not in stderr, stderr


# -- the stdout queue's bound -------------------------------------------------------------------------


def message_of(size: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "z" * size}}


async def test_the_stdout_queue_never_holds_more_than_its_bound() -> None:
    read_end, write_end = os.pipe()
    stream = os.fdopen(write_end, "wb")
    out = Stdout(stream)  # nobody reads the pipe yet: every message stays queued
    reading = False
    try:
        size = MAX_STDOUT_QUEUED_BYTES // 2 - 1000
        for _ in range(2):
            assert await asyncio.wait_for(out.write(message_of(size)), 5)
        third = asyncio.ensure_future(out.write(message_of(size)))
        await asyncio.sleep(0.5)
        assert not third.done(), "a message that would take the queue past its bound was queued"
        assert out.queued <= MAX_STDOUT_QUEUED_BYTES
        assert out.unread_for(0.0) > 0  # a write waits, and the host has read nothing

        def drain() -> None:
            with os.fdopen(read_end, "rb") as reader:
                while reader.read(1 << 20):
                    pass

        threading.Thread(target=drain, daemon=True).start()
        reading = True
        assert await asyncio.wait_for(third, 10)
        # A single message larger than the bound passes an empty queue, alone.
        assert await out.flush(10)
        assert await asyncio.wait_for(out.write(message_of(MAX_STDOUT_QUEUED_BYTES + 10)), 5)
        assert out.queued <= MAX_STDOUT_QUEUED_BYTES + 10 + 100
        assert await out.flush(10)
    finally:
        if not reading:
            os.close(read_end)  # the writer thread meets a closed pipe and ends
        out.close()
        await asyncio.to_thread(out.finished.wait, 10)
        with contextlib.suppress(OSError):
            stream.close()
