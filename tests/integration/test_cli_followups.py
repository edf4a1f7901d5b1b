"""The client commands' answer bound (--max-answer-bytes), credential files given as pipes and FIFOs, and
arguments that are not UTF-8 for sim-fault, sim-status and approve (docs/cli.md). A real gateway in this
process with a real publisher; each command in a process of its own."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import sys
import time
from asyncio.subprocess import PIPE
from pathlib import Path

import pytest
from mcp.server.mcpserver import MCPServer

from gateway.app import GatewayServer
from gateway.cli.common import CREDENTIAL_PIPE_TIMEOUT_S, MIN_ANSWER_BYTES
from gateway.client_answers import MAX_ANSWER_BYTES, MAX_ANSWER_BYTES_LIMIT
from tests.conftest import GatewayFactory, Publishers
from tests.support.gateway_process import REPO, clean_environment, run_cli

BIG = MAX_ANSWER_BYTES + (1 << 20)
"""An answer past the default bound (17 MiB of text)."""
FRAMES = 24 << 20
"""The raised limits.max_frame_bytes (and the publisher's) that carries BIG."""
TOKEN = "cli2-followup-token"
WORDY = MIN_ANSWER_BYTES + 4096
"""The length of a tool description that makes the slot's tools/list larger than the smallest bound."""


def board() -> MCPServer:
    server = MCPServer("followups")

    @server.tool(structured_output=False)  # the text alone: one copy of it in the answer
    def text(size: int) -> str:
        """Answers `size` letters."""
        return "x" * size

    @server.tool(description="d" * WORDY)
    def wordy() -> str:
        return "ok"

    return server


@pytest.fixture
async def big_gateway(gateway_factory: GatewayFactory, publishers: Publishers) -> GatewayServer:
    server = await gateway_factory(limits={"max_frame_bytes": FRAMES})
    await publishers.start(server, "huge-1", board(), max_frame_bytes=FRAMES)
    return server


async def test_an_answer_past_the_default_bound_passes_with_a_raised_max_answer_bytes(
    big_gateway: GatewayServer,
) -> None:
    url = f"{big_gateway.url}/huge-1/mcp"
    code, out, err = await run_cli("call", "huge-1", "text", f"size={BIG}", "--url", big_gateway.url)
    assert (code, out) == (1, ""), err
    assert err == (
        f"mcp-gateway: the answer from {url} is larger than {MAX_ANSWER_BYTES} bytes (--max-answer-bytes), the "
        f"most the command reads; raise --max-answer-bytes (at most {MAX_ANSWER_BYTES_LIMIT})\n"
    )
    raised = str(BIG + (1 << 20))
    code, out, err = await run_cli(
        "call", "huge-1", "text", f"size={BIG}", "--max-answer-bytes", raised, "--url", big_gateway.url
    )
    assert (code, err) == (0, "")
    assert len(out) == BIG + 1 and out == "x" * BIG + "\n"


async def test_the_smallest_bound_refuses_a_larger_answer_and_a_listing_names_all(
    big_gateway: GatewayServer,
) -> None:
    url = f"{big_gateway.url}/huge-1/mcp"
    bound = str(MIN_ANSWER_BYTES)
    code, out, err = await run_cli(
        "call",
        "huge-1",
        "text",
        f"size={MIN_ANSWER_BYTES + 1000}",
        "--max-answer-bytes",
        bound,
        "--url",
        big_gateway.url,
    )
    assert (code, out) == (1, "")
    assert err == (
        f"mcp-gateway: the answer from {url} is larger than {bound} bytes (--max-answer-bytes), the most the "
        f"command reads; raise --max-answer-bytes (at most {MAX_ANSWER_BYTES_LIMIT})\n"
    )
    code, out, err = await run_cli("tools", "huge-1", "--max-answer-bytes", bound, "--url", big_gateway.url)
    assert (code, out) == (1, "")
    assert err == (
        f"mcp-gateway: the answer from {url} is larger than {bound} bytes (--max-answer-bytes), the most the "
        f"command reads; list one slot or a tool group instead of _all; raise --max-answer-bytes (at most "
        f"{MAX_ANSWER_BYTES_LIMIT})\n"
    )
    for command in (["slots"], ["schema-hash", "--slot", "huge-1"]):  # ordinary answers fit the smallest bound
        code, out, err = await run_cli(*command, "--max-answer-bytes", bound, "--url", big_gateway.url)
        assert (code, err) == (0, ""), command


@pytest.mark.parametrize("given", ["0", str(MIN_ANSWER_BYTES - 1), str(MAX_ANSWER_BYTES_LIMIT + 1), "lots"])
async def test_max_answer_bytes_out_of_its_range_is_a_usage_error(given: str) -> None:
    code, out, err = await run_cli("call", "a", "b", "--max-answer-bytes", given, "--url", "http://127.0.0.1:9")
    assert (code, out) == (2, "")
    assert (
        f"argument --max-answer-bytes: expected a whole number from {MIN_ANSWER_BYTES} to {MAX_ANSWER_BYTES_LIMIT}"
        in err
    ), err


# -- --token-file from a pipe or a FIFO ----------------------------------------------------------


@pytest.fixture
async def auth_gateway(gateway_factory: GatewayFactory) -> GatewayServer:
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    return await gateway_factory(auth={"tokens": [{"name": "operator", "sha256": digest}]})


async def cli_with_stdin(*args: str, stdin: bytes, timeout_s: float = 30) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "gateway.cli", *args),
        stdin=PIPE,
        stdout=PIPE,
        stderr=PIPE,
        env=clean_environment(),
        cwd=str(REPO),
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(stdin), timeout_s)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


async def test_a_token_from_stdin_through_a_pipe_is_read(auth_gateway: GatewayServer) -> None:
    code, out, err = await cli_with_stdin(
        "slots", "--token-file", "/dev/stdin", "--url", auth_gateway.url, stdin=TOKEN.encode() + b"\n"
    )
    assert (code, out, err) == (0, "no slots yet\n", "")
    code, out, err = await run_cli("slots", "--url", auth_gateway.url)  # the token is what opens it
    assert code == 1 and "HTTP 401" in err, err


async def test_a_token_over_the_bound_through_a_pipe_is_refused() -> None:
    code, out, err = await cli_with_stdin(
        "slots", "--token-file", "/dev/stdin", "--url", "http://127.0.0.1:9", stdin=b"x" * ((1 << 20) + 1)
    )
    assert (code, out) == (2, "")
    assert "--token-file /dev/stdin: cannot be used: it is larger than 1048576 bytes" in err, err


async def test_a_fifo_whose_writer_comes_late_is_read(auth_gateway: GatewayServer, tmp_path: Path) -> None:
    fifo = tmp_path / "token.fifo"
    os.mkfifo(fifo, 0o600)
    command = asyncio.create_task(run_cli("slots", "--token-file", str(fifo), "--url", auth_gateway.url))
    await asyncio.sleep(1.5)  # the command is waiting on the FIFO by now

    def write() -> None:
        deadline = time.monotonic() + 10
        while True:  # without waiting: a command that did not wait for a writer leaves no reader
            try:
                writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError as exc:
                if exc.errno != errno.ENXIO or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        os.write(writer, TOKEN.encode() + b"\n")
        os.close(writer)

    await asyncio.wait_for(asyncio.to_thread(write), 15)
    assert await command == (0, "no slots yet\n", "")


async def test_a_fifo_without_writer_ends_the_command_at_its_bound(tmp_path: Path) -> None:
    fifo = tmp_path / "token.fifo"
    os.mkfifo(fifo, 0o600)
    started = time.monotonic()
    code, out, err = await run_cli("slots", "--token-file", str(fifo), "--url", "http://127.0.0.1:9")
    waited = time.monotonic() - started
    assert (code, out) == (2, "")
    assert err == (
        f"mcp-gateway: --token-file {fifo}: no writer/no data within {CREDENTIAL_PIPE_TIMEOUT_S:g} s "
        "(CREDENTIAL_PIPE_TIMEOUT_S): a pipe or FIFO is read once, from a writer that writes the credential and "
        "closes it\n"
    )
    assert CREDENTIAL_PIPE_TIMEOUT_S <= waited < CREDENTIAL_PIPE_TIMEOUT_S + 10, waited


async def test_a_device_is_still_refused_as_a_token_file() -> None:
    code, out, err = await run_cli("slots", "--token-file", "/dev/zero", "--url", "http://127.0.0.1:9")
    assert (code, out) == (2, "")
    assert err == (
        "mcp-gateway: --token-file /dev/zero: cannot be used: it is not a regular file or a pipe; give a file or "
        "a pipe holding the credential\n"
    )


async def test_a_config_file_through_a_pipe_is_refused_with_the_reason(tmp_path: Path) -> None:
    code, out, err = await cli_with_stdin("config", "check", "--config", "/dev/stdin", stdin=b"port = 57460\n")
    assert (code, out) == (2, "")
    assert err == (
        "mcp-gateway: config file /dev/stdin: not a regular file; process substitution and pipes are not "
        "accepted for the configuration: the gateway reads it again at reload\n"
    )


# -- arguments that are not UTF-8 ----------------------------------------------------------------

LATIN1 = os.fsdecode(b"pomp\xe9")
"""`pompé` typed in a Latin-1 terminal: a byte that is no UTF-8."""


@pytest.mark.parametrize(
    ("command", "named"),
    [
        (["sim-fault", LATIN1, "overtemp", "--control", "http://127.0.0.1:9"], "the slot pomp\\xe9"),
        (["sim-fault", "pump-1", "overtemp", "--control", f"http://{LATIN1}:9"], "--control http://pomp\\xe9:9"),
        (["sim-status", "--control", f"http://{LATIN1}:9"], "--control http://pomp\\xe9:9"),
        (["approve", LATIN1, "--url", "http://127.0.0.1:9"], "the ID pomp\\xe9"),
        (["approve", "--url", f"http://{LATIN1}:9"], "--url http://pomp\\xe9:9"),
    ],
    ids=["sim-fault-slot", "sim-fault-control", "sim-status", "approve-id", "approve-url"],
)
async def test_an_argument_that_is_not_utf8_is_one_line_exit_2(command: list[str], named: str) -> None:
    code, out, err = await run_cli(*command)
    assert (code, out) == (2, ""), err
    said = f"mcp-gateway {command[0]}: {named} is not UTF-8 (the bytes shown as \\x..): give it in UTF-8\n"
    assert err == said, err
