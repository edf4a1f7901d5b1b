"""`call`, `tools` and `slots` at the edges (docs/cli.md): an answer that breaks off, one streamed as a single
event past the keepalive interval, one without end, a listing whose cursor never ends, text items that hold
no text, arguments that are not UTF-8 or too large an integer, options among the key=value arguments, a
secret in a refused --url. A real gateway (in this process, or `mcp-gateway run` killed mid-call), real
providers, hostile HTTP servers on free loopback ports; each command in a process of its own."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mcp_types as types
import orjson
import pytest
from mcp.server.lowlevel import Server

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.support.gateway_process import REPO, clean_environment, run_cli
from tests.support.raw_http import raw_http

BIG = 600_000
"""A result larger than aiohttp's own line bound, sent as one SSE event line."""


def board() -> Server[Any]:
    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(name="slow_big", description="Waits, then answers big.", input_schema={"type": "object"}),
                types.Tool(name="echo", description="Echoes.", input_schema={"type": "object"}),
                types.Tool(
                    name="loose",
                    description="Requires an argument it does not describe.",
                    input_schema={"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["b", "a"]},
                ),
            ]
        )

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name == "slow_big":
            await asyncio.sleep(1.6)  # past sse_keepalive_s: the answer goes on the open stream, one event
            text = "B" * BIG
        else:
            text = orjson.dumps(params.arguments, option=orjson.OPT_SORT_KEYS).decode()
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    return Server("edges", on_list_tools=list_tools, on_call_tool=call_tool)


@pytest.fixture
async def keepalive_gateway(gateway_factory: GatewayFactory, publishers: Publishers) -> GatewayServer:
    server = await gateway_factory(limits={"sse_keepalive_s": 1})
    await publishers.start(server, "edge-1", board())
    return server


async def test_a_long_call_answered_as_one_big_event_is_printed_whole(keepalive_gateway: GatewayServer) -> None:
    code, out, err = await run_cli("call", "edge-1", "slow_big", "--url", keepalive_gateway.url)
    assert (code, err) == (0, "")
    assert out == "B" * BIG + "\n"


async def test_options_go_among_the_key_value_arguments(keepalive_gateway: GatewayServer) -> None:
    code, out, err = await run_cli(
        "call", "edge-1", "echo", "x=1", "--timeout", "5", "y=2", "--url", keepalive_gateway.url
    )
    assert (code, err) == (0, "")
    assert orjson.loads(out) == {"x": 1, "y": 2}


async def test_integers_are_sent_exactly_or_refused(keepalive_gateway: GatewayServer) -> None:
    top, bottom = str((1 << 64) - 1), str(-(1 << 63))
    code, out, err = await run_cli(
        "call", "edge-1", "echo", f"x={top}", f"y=[{bottom}]", "--url", keepalive_gateway.url
    )
    assert (code, err) == (0, "")
    assert out == f'{{"x":{top},"y":[{bottom}]}}\n'
    for value in ("99999999999999999999999", "[-9223372036854775809]"):
        code, out, err = await run_cli("call", "edge-1", "echo", f"x={value}", "--url", keepalive_gateway.url)
        assert (code, out) == (2, "")
        assert err.startswith("mcp-gateway call: argument 'x': the integer ") and err.count("\n") == 1


async def test_tools_lists_a_required_argument_missing_from_the_properties(keepalive_gateway: GatewayServer) -> None:
    code, out, err = await run_cli("tools", "edge-1", "--url", keepalive_gateway.url)
    assert (code, err) == (0, "")
    assert "loose a=INTEGER b=VALUE" in out.splitlines()


async def test_arguments_that_are_not_utf8_are_a_usage_error(keepalive_gateway: GatewayServer) -> None:
    latin1 = os.fsdecode(b"caf\xe9")  # as a Latin-1 terminal sends it: one byte that is no UTF-8
    url = keepalive_gateway.url
    for args, named in [
        (("call", f"pompe-{latin1}", "echo"), "the slot pompe-caf\\xe9"),
        (("call", "edge-1", latin1), "the tool caf\\xe9"),
        (("call", "edge-1", "echo", f"value={latin1}"), "the argument value=caf\\xe9"),
        (("tools", f"p-{latin1}"), "the slot p-caf\\xe9"),
    ]:
        code, out, err = await run_cli(*args, "--url", url)
        assert (code, out) == (2, ""), err
        assert err == f"mcp-gateway {args[0]}: {named} is not UTF-8 (the bytes shown as \\x..): give it in UTF-8\n"


async def test_a_gateway_killed_mid_call_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    record = tmp_path / "stdin.log"
    command = orjson.dumps([sys.executable, "-m", "tests.support.stdio_server", "--record-stdin", str(record)]).decode()
    config.write_text(
        f'port = 0\n[limits]\nsse_keepalive_s = 1\n[[upstreams.stdio]]\nname = "demo"\ncommand = {command}\n'
        f"cwd = {orjson.dumps(str(REPO)).decode()}\n"
    )
    env = clean_environment({"STATE_DIRECTORY": str(tmp_path / "state")})
    gateway = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "gateway.cli", "run", "--config", str(config), "--no-mdns"),
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # its stdio child too goes with the group
    )
    try:
        url = await _listening(gateway)
        for _ in range(40):  # until the child has started and listed its tools
            code, out, err = await run_cli("tools", "demo", "--url", url)
            if "sleep seconds=" in out:
                break
            await asyncio.sleep(0.5)
        assert "sleep seconds=" in out, err
        call = asyncio.create_task(run_cli("call", "demo", "sleep", "seconds=30", "--url", url))
        await wait_for(lambda: b'"tools/call"' in record.read_bytes(), 30, "the call to reach the provider")
        await asyncio.sleep(1.5)  # past sse_keepalive_s: the answer's stream is open, keepalives flowing
        os.killpg(gateway.pid, signal.SIGKILL)
        code, out, err = await call
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(gateway.pid, signal.SIGKILL)
        await gateway.wait()
    assert (code, out) == (1, "")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"mcp-gateway: the answer from the gateway at {url}/demo/mcp broke off (")
    assert err.endswith("; the call may have reached the device: check its effect before calling it again\n")


DRAINS: set[asyncio.Task[None]] = set()
"""The tasks reading the killed gateway's log, held until it ends."""


async def _listening(gateway: asyncio.subprocess.Process) -> str:
    assert gateway.stderr is not None
    async with asyncio.timeout(30):
        while line := (await gateway.stderr.readline()).decode():
            if match := re.search(r" listening on (https?://[^\s\"]+)", line):
                # Keep its log flowing, so that a full pipe never stops the gateway.
                DRAINS.add(asyncio.get_running_loop().create_task(_drain(gateway.stderr)))
                return match.group(1).rstrip("/")
    raise AssertionError("the gateway did not start")


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.read(65536):
        pass


def head(content_type: str, extra: str = "") -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nConnection: close\r\n{extra}\r\n".encode()


def whole(content_type: str, body: bytes) -> Callable[[bytes, socket.socket], None]:
    def answer(_request: bytes, connection: socket.socket) -> None:
        connection.sendall(head(content_type, f"Content-Length: {len(body)}\r\n") + body)

    return answer


def result(value: dict[str, Any]) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": value})


@pytest.mark.parametrize(
    "sent",
    [
        # An event stream with a keepalive, then the connection ends inside its chunked body.
        head("text/event-stream", "Transfer-Encoding: chunked\r\n") + b"d\r\n: keepalive\n\n\r\n",
        # A JSON body that ends before its Content-Length.
        head("application/json", "Content-Length: 1000\r\n") + b'{"jsonrpc":"2.0","id":1,"result":{',
    ],
)
def test_an_answer_that_breaks_off_is_one_line(sent: bytes) -> None:
    with raw_http(lambda _request, connection: connection.sendall(sent)) as server:
        code, out, err = cli("call", "pump-1", "get_status", "--url", server.url)
    assert (code, out) == (1, "")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"mcp-gateway: the answer from the gateway at {server.url}/pump-1/mcp broke off (")
    assert err.endswith("; the call may have reached the device: check its effect before calling it again\n")


def endless(content_type: str, start: bytes, chunk: bytes) -> Callable[[bytes, socket.socket], None]:
    def answer(_request: bytes, connection: socket.socket) -> None:
        connection.sendall(head(content_type) + start)
        with contextlib.suppress(OSError):
            for _ in range(64):  # 64 MiB at most: four times the bound, then this server gives up
                connection.sendall(chunk)

    return answer


TEXT = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"'
MIB = b"A" * (1 << 20)


@pytest.mark.parametrize(
    "serve",
    [
        endless("application/json", TEXT, MIB),
        endless("text/event-stream", b"data: " + TEXT, MIB),  # one line
        endless("text/event-stream", b"", b"data: " + MIB + b"\n"),  # one event of many data lines
    ],
    ids=["json", "sse-line", "sse-event"],
)
def test_an_answer_without_end_is_refused_at_the_bound(serve: Callable[[bytes, socket.socket], None]) -> None:
    with raw_http(serve) as server:
        code, out, err = cli("call", "pump-1", "get_status", "--url", server.url, "--timeout", "10")
    assert (code, out) == (1, "")
    assert err == (
        f"mcp-gateway: the answer from {server.url}/pump-1/mcp is larger than 16777216 bytes (--max-answer-bytes), "
        "the most the command reads; raise --max-answer-bytes (at most 1073741824)\n"
    )


def test_an_event_of_several_data_lines_is_one_message() -> None:
    body = b'data: {"jsonrpc": "2.0", "id": 1,\ndata:  "result": {"content": [{"type": "text", "text": "ok"}]}}\n\n'
    with raw_http(whole("text/event-stream", body)) as server:
        code, out, err = cli("call", "pump-1", "get_status", "--url", server.url)
    assert (code, out, err) == (0, "ok\n", "")


def test_text_items_that_hold_no_text_are_shown_as_json() -> None:
    content = [{"type": "text", "text": 5}, {"type": "text", "text": None}, {"type": "text", "text": {"a": "\x1b"}}]
    with raw_http(whole("application/json", result({"content": content}))) as server:
        code, out, err = cli("call", "pump-1", "get_status", "--url", server.url)
    assert (code, out, err) == (0, '5\nnull\n{"a":"\\u001b"}\n', "")


def paged(cursors: Callable[[int], str]) -> Callable[[bytes, socket.socket], None]:
    seen = [0]

    def answer(_request: bytes, connection: socket.socket) -> None:
        seen[0] += 1
        tools = [{"name": f"t{seen[0]}", "inputSchema": {"type": "object"}}]
        body = result({"tools": tools, "nextCursor": cursors(seen[0])})
        connection.sendall(head("application/json", f"Content-Length: {len(body)}\r\n") + body)

    return answer


def test_a_cursor_that_comes_back_ends_the_listing() -> None:
    with raw_http(paged(lambda page: "again")) as server:
        code, out, err = cli("tools", "pump-1", "--url", server.url)
    assert (code, out) == (1, "")
    assert err == (
        f'mcp-gateway: the tools/list of {server.url}/pump-1/mcp gives the cursor "again" a second time: '
        "a listing that never ends (no gateway sends one)\n"
    )
    assert server.requests == 2


def test_a_listing_is_read_up_to_its_page_bound() -> None:
    with raw_http(paged(lambda page: f"page-{page}")) as server:
        code, out, err = cli("tools", "pump-1", "--url", server.url)
    assert (code, out) == (1, "")
    assert err == (
        f"mcp-gateway: the tools/list of {server.url}/pump-1/mcp goes on past 64 pages (MAX_TOOLS_PAGES), the most "
        "a command reads (the gateway lists a slot's tools in one page)\n"
    )
    assert server.requests == 64


def test_slots_json_escapes_what_a_provider_wrote() -> None:
    entry = {
        "name": "pump-1",
        "connected": True,
        "connects": 1,
        "stderr_tail": ["x\x9b31m \u202eevil \x7fDEL \x1b[31m"],
    }
    answer = result({"content": [], "structuredContent": {"providers": [entry]}})
    with raw_http(whole("application/json", answer)) as server:
        code, out, err = cli("slots", "--json", "--url", server.url)
    assert (code, err) == (0, "")
    assert all(char.isprintable() or char == "\n" for char in out)
    assert orjson.loads(out) == [entry]  # the same JSON: the escapes stand for the same characters


def test_a_refused_url_does_not_echo_its_query() -> None:
    code, out, err = cli("call", "pump-1", "get_status", "--url", "http://127.0.0.1:1/?token=s3cret#frag")
    assert (code, out) == (2, "")
    assert "s3cret" not in err and "frag" not in err
    assert err.endswith("with no query (?...) or anchor (#...); got 'http://127.0.0.1:1/?***'\n")


def cli(*args: str) -> tuple[int, str, str]:
    """`mcp-gateway ARGS` in a process of its own, as a thread of the test would run it: exit, stdout, stderr."""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        capture_output=True,
        timeout=60,
        check=False,
        cwd=REPO,
        env=clean_environment(),
    )
    return done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
