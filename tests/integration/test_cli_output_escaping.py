"""What an endpoint, a caller or a board wrote reaches the operator's terminal escaped, a malformed or
endless answer ends a command in one named line, and a token file that is a device, a FIFO or too big is
refused by name (docs/cli.md, docs/simulator.md): `sim-status` and `sim-fault` against servers that are
not the simulator's control endpoint (HTTP servers on free loopback ports), `approve --json` against a
real gateway and a hostile endpoint, `devices --json` after a real gateway heard a board's hello, and
`--token-file` of client commands. Each command runs in a process of its own, its address space bounded,
so that an unbounded read ends in MemoryError instead of filling the machine."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from gateway.config.files import MAX_SECRET_FILE_BYTES
from gateway.devices.registry import DeviceRegistry, default_registry_path
from sim.control_client import MAX_ANSWER_BYTES, TIMEOUT_S
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.support.gateway_process import REPO, clean_environment
from tests.support.raw_http import RawHttpServer
from tests.support.servers import demo_server

TITLE = "\x1b]0;PWNED\x07"
CLEAR = "\x1b[2J"
CSI = "\x9b2J"  # a C1 control: an escape sequence of its own on many terminals
RLO = "\u202e"  # a bidi override: reorders what follows
HOSTILE = TITLE + CLEAR + CSI + RLO + "\x7f"
ESCAPED = "\\u001b]0;PWNED\\u0007\\u001b[2J\\u009b2J\\u202e\\u007f"
ADDRESS_SPACE_BYTES = 2 << 30
"""The bound on a command's address space: far above what one needs, far below what an unbounded read takes."""
BOUNDED = (
    "import resource, runpy, sys\n"
    f"resource.setrlimit(resource.RLIMIT_AS, ({ADDRESS_SPACE_BYTES}, {ADDRESS_SPACE_BYTES}))\n"
    "sys.argv[0] = 'mcp-gateway'\n"
    "runpy.run_module('gateway.cli', run_name='__main__', alter_sys=True)\n"
)


def no_control(text: str) -> bool:
    """Nothing a terminal would act on or reorder: only printing characters and newlines."""
    return all(char.isprintable() or char == "\n" for char in text)


async def cli(*args: str, env: dict[str, str] | None = None, timeout_s: float = 30) -> tuple[int, str, str]:
    """`mcp-gateway ARGS` in a process of its own with a bounded address space: exit code, stdout, stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        BOUNDED,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=REPO,
        env=clean_environment(env),
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout_s)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return process.returncode, out.decode(errors="replace"), err.decode(errors="replace")


class Endpoint(RawHttpServer):
    """Answers every request with `answer`, as it is, or with a JSON array that never ends (`endless`)."""

    def __init__(self) -> None:
        self.answer = b""
        self.endless = False
        super().__init__(self._respond)

    def _respond(self, _: bytes, connection: socket.socket) -> None:
        if not self.endless:
            connection.sendall(self.answer)
            return
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n[")
        chunk = b'"' + b"x" * (1 << 20) + b'",'
        while not self.stopped.is_set():
            connection.sendall(chunk)


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    server = Endpoint()
    yield server
    server.stop()


def answer(status: str, body: bytes, content_type: bytes = b"application/json") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n".encode()
    return head + b"Content-Type: " + content_type + b"\r\n\r\n" + body


def as_json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


def pump_state(slot: str = "pump-1", text: str = "") -> dict[str, Any]:
    """A pump's state as the simulator answers it, with `text` in what the endpoint names."""
    return {
        "slot": slot + text,
        "device_id": "sim-" + slot,
        "link": {"url": "ws://x", "connected": False, "links": 1, "offline_for_s": 3.0, "last_down_reason": text},
        "injected": ["dry_run" + text],
        "boots": 1,
        "status": {
            "state": "fault" + text,
            "speed_rpm": 0,
            "setpoint_rpm": 1450,
            "motor_temp_c": None,
            "fault": {"code": "dry_run" + text},
        },
        "requests": {"requests": 1, "duplicates": 0, "errors": 0},
        "telemetry": None,
    }


SIM_COMMANDS = [["sim-status"], ["sim-status", "--json"], ["sim-fault", "pump-1", "dry_run"]]


def sim(command: list[str], endpoint: Endpoint) -> list[str]:
    return [*command, "--control", endpoint.url]


@pytest.mark.parametrize("command", SIM_COMMANDS, ids=" ".join)
@pytest.mark.parametrize(
    "reply",
    [
        answer("401 Unauthorized", as_json({"error": "unauthorized", "error_description": "go " + HOSTILE})),
        answer("500 Internal Server Error", ("go " + HOSTILE).encode(), b"text/plain"),
        # A simulator's error code, from another server: what it says is escaped too.
        answer("400 Bad Request", as_json({"error": "bad_request", "error_description": "go " + HOSTILE})),
    ],
    ids=["401-json", "500-text", "400-simulator-code"],
)
async def test_an_error_answer_reaches_the_terminal_escaped(
    endpoint: Endpoint, command: list[str], reply: bytes
) -> None:
    endpoint.answer = reply
    code, out, err = await cli(*sim(command, endpoint))
    assert (code, out) == (1, ""), err
    assert err.count("\n") == 1 and no_control(err), err
    assert f"go {ESCAPED}" in err, err


@pytest.mark.parametrize("command", SIM_COMMANDS, ids=" ".join)
@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b"[1, 2]", "JSON that is not the"),
        (b'{"pumps": [1]}', "not"),
        (b"not json" + HOSTILE.encode(), "a body that is not JSON: not json" + ESCAPED),
        (as_json({"ok": True, "note": HOSTILE}), "JSON that is not the"),
        (
            as_json({"pumps": [{**pump_state(), "status": {**pump_state()["status"], "speed_rpm": {}}}]}),
            "not",
        ),
        (as_json(pump_state("pump-2")), "not"),
    ],
    ids=["array", "pumps-of-numbers", "not-json", "other-object", "speed-an-object", "another-pump"],
)
async def test_a_200_that_is_not_the_simulators_answer_is_named_exit_1(
    endpoint: Endpoint, command: list[str], body: bytes, said: str
) -> None:
    endpoint.answer = answer("200 OK", body)
    code, out, err = await cli(*sim(command, endpoint))
    assert (code, out) == (1, ""), (out, err)
    assert "Traceback" not in err and err.count("\n") == 1 and no_control(err), err
    assert "is not a simulator control endpoint: it answered HTTP 200 with " in err and said in err, err
    assert "give --control the address of `mcp-gateway sim --control-port`" in err


@pytest.mark.parametrize("command", SIM_COMMANDS, ids=" ".join)
async def test_an_endless_answer_is_cut_at_the_bound(endpoint: Endpoint, command: list[str]) -> None:
    endpoint.endless = True
    started = time.monotonic()
    code, out, err = await cli(*sim(command, endpoint))
    assert (code, out) == (1, ""), err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert f"with a body over {MAX_ANSWER_BYTES} bytes, more than a simulator sends" in err, err
    assert time.monotonic() - started < TIMEOUT_S  # cut at the bound, not at the timeout


async def test_an_announced_length_over_the_bound_is_refused_before_reading(endpoint: Endpoint) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000000000\r\n\r\n{"
    endpoint.answer = head
    code, out, err = await cli(*sim(["sim-status"], endpoint))
    assert (code, out) == (1, ""), err
    assert f"with a body over {MAX_ANSWER_BYTES} bytes" in err, err


async def test_a_simulators_answer_is_shown_escaped_and_its_json_is_the_same_json(endpoint: Endpoint) -> None:
    listing = {"pumps": [pump_state(text=HOSTILE)]}
    endpoint.answer = answer("200 OK", as_json(listing))
    code, out, err = await cli(*sim(["sim-status"], endpoint))
    assert code == 0 and no_control(out), (out, err)
    row = out.splitlines()[1]
    assert row.startswith(f"pump-1{ESCAPED} off 3s") and f"fault{ESCAPED}" in row, row
    assert row.endswith(f"  dry_run{ESCAPED} dry_run{ESCAPED}"), row

    code, out, err = await cli(*sim(["sim-status", "--json"], endpoint))
    assert code == 0 and no_control(out), (out, err)
    assert json.loads(out) == listing

    state = pump_state(text="")
    state["link"]["last_down_reason"] = HOSTILE
    endpoint.answer = answer("200 OK", as_json(state))
    code, out, err = await cli(*sim(["sim-fault", "pump-1", "dry_run"], endpoint))
    assert code == 0 and no_control(out), (out, err)
    assert json.loads(out) == state


# -- approve --json ------------------------------------------------------------------------------

APPROVE_POLICY: dict[str, Any] = {
    "roles": {"operator": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]}},
    "assign": [{"principal": "*", "role": "operator", "resources": ["/_system/**"]}],
}


async def test_approve_json_shows_a_gateways_refusal_escaped(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    server = await gateway_factory(policy=APPROVE_POLICY, audit={"path": str(tmp_path / "audit.db")})
    async with Client(f"{server.url}/_broker/mcp", mode="2026-07-28") as broker:
        listed = await broker.list_tools()
    assert "broker_approve" in {tool.name for tool in listed.tools}
    wanted = "ap-" + CSI + RLO + "\x85"
    code, out, err = await cli("approve", wanted, "--json", "--url", server.url)
    assert code == 1, (out, err)
    assert no_control(out) and no_control(err), (out, err)
    refused = json.loads(out)["_meta"]["io.github.mcp-gateway/refused"]
    assert (refused["reason"], refused["approval"]) == ("unknown_approval", wanted)
    assert "ap-\\u009b2J\\u202e\\u0085" in out


@pytest.mark.parametrize("kind", ["tool error", "JSON-RPC error"])
async def test_approve_json_shows_an_endpoints_refusal_escaped(endpoint: Endpoint, kind: str) -> None:
    if kind == "tool error":
        said: dict[str, Any] = {
            "content": [{"type": "text", "text": "refused " + HOSTILE}],
            "structuredContent": {"reason": "already_decided", "decided_by": "token:" + HOSTILE},
            "isError": True,
        }
        message = {"jsonrpc": "2.0", "id": 1, "result": said}
    else:
        said = {"error": {"code": -32602, "message": "refused", "data": {"approval": "ap-" + HOSTILE}}}
        message = {"jsonrpc": "2.0", "id": 1, **said}
    endpoint.answer = answer("200 OK", as_json(message))
    code, out, err = await cli("approve", "ap-1", "--json", "--url", endpoint.url)
    assert code == 1, (out, err)
    assert no_control(out) and no_control(err), (out, err)
    assert json.loads(out) == said and ESCAPED in out


# -- devices --json ------------------------------------------------------------------------------


async def test_devices_json_shows_a_boards_hello_escaped(
    gateway_factory: GatewayFactory, publishers: Publishers, tmp_path: Path
) -> None:
    gateway = await gateway_factory()
    hello = {
        "device_id": "24:0a:c4:00:00:0e",
        "firmware": {"name": "pump" + HOSTILE, "version": "1.0" + CSI},
        "schema": "0123456789abcdef",
    }
    await publishers.start(gateway, "pump-8", demo_server(), hello=hello)
    path = default_registry_path()
    registry = DeviceRegistry(path)
    try:
        await wait_for(lambda: bool(registry.devices()), 5, "the hello in the registry")
    finally:
        registry.close()
    code, out, err = await cli("devices", "--json", "--registry", str(path))
    assert code == 0, err
    assert no_control(out), out
    record = json.loads(out)
    assert (record["firmware"], record["version"]) == ("pump" + HOSTILE, "1.0" + CSI)
    assert f'"firmware":"pump{ESCAPED}"' in out


# -- --token-file --------------------------------------------------------------------------------

TOKEN_COMMANDS = [
    ["slots", "--url", "http://127.0.0.1:9", "--token-file"],
    ["sim", "--gateway", "http://127.0.0.1:9", "--provider-token-file"],
]


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "token.fifo"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("command", TOKEN_COMMANDS, ids=lambda command: command[0])
async def test_a_token_file_that_is_a_device_or_a_fifo_without_writer_is_refused(
    fifo: Path, command: list[str]
) -> None:
    for path, reason in (("/dev/zero", "cannot be used: it is not a regular file"), (str(fifo), "no writer/no data")):
        code, out, err = await cli(*command, path, timeout_s=20)
        assert (code, out) == (2, ""), (path, err)
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert f"{command[-1]} {path}: {reason}" in err, err


@pytest.mark.parametrize("command", TOKEN_COMMANDS, ids=lambda command: command[0])
async def test_a_token_file_over_the_bound_is_refused(tmp_path: Path, command: list[str]) -> None:
    big = tmp_path / "big.token"
    big.write_bytes(b"x" * (MAX_SECRET_FILE_BYTES + 1))
    code, out, err = await cli(*command, str(big))
    assert (code, out) == (2, ""), err
    assert f"{command[-1]} {big}: cannot be used: it is larger than {MAX_SECRET_FILE_BYTES} bytes" in err, err
