"""Fixtures for the C board (device/libmcpb-idf): `build/c/pump1-host`, pump-1 in C served from a Linux
process through the same core a board runs, against real gateways, brokers and pseudo-terminals.

The binary is brought up to date once per session: `cmake --build build/c --target pump1-host` when
the tree is configured, else `scripts/build-c` (which configures it, and runs ctest). `MCPB_C_BUILD_DIR`
names another tree, which must be configured already. Without cmake or
a C compiler the tests FAIL, they never skip. The board logs to stderr, one line per event
(`pump1-host WARN: link refused code=1008 http=0 retry_in_ms=23311: ...`); CBoard keeps those lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped,unused-ignore]
import orjson
import pytest
from mcp import Client

from tests.device.harness import SCHEMA_FILE
from tests.integration.test_serial_boards import ptys, relays  # noqa: F401 - the fixtures, for serial lines
from tests.sim.conftest import simulators  # noqa: F401 - the fixture, for the schema test

REPO = Path(__file__).resolve().parents[2]
# MCPB_C_BUILD_DIR points the tests at another configured tree (one engineer's build beside the shared one).
BUILD_DIR = Path(os.environ.get("MCPB_C_BUILD_DIR") or REPO / "build" / "c")
BINARY = BUILD_DIR / "pump1-host"
SLOT = "pump-c1"
TOOL_NAMES = ["get_status", "start", "set_speed", "stop", "reset_fault"]
SCHEMA_TOOLS: list[dict[str, Any]] = orjson.loads(SCHEMA_FILE.read_bytes())
OUTPUT_SCHEMAS = {tool["name"]: tool["outputSchema"] for tool in SCHEMA_TOOLS}
LINK_LINE = re.compile(
    r"link (?P<kind>\w+)(?: slot=\S+)? code=(?P<code>-?\d+) http=(?P<http>\d+) "
    r"retry_in_ms=(?P<retry>\d+): (?P<reason>.*)$"
)
Status = dict[str, Any]


def build_pump1_host() -> Path:
    """Build (or bring up to date) build/c/pump1-host; fails loudly when the toolchain is missing."""
    missing = [tool for tool in ("cmake", "cc") if shutil.which(tool) is None]
    if missing:
        pytest.fail(
            f"{' and '.join(missing)} not found: the C board tests need cmake and a C compiler "
            "(Debian: apt-get install cmake build-essential libcmocka-dev)",
            pytrace=False,
        )
    BUILD_DIR.parent.mkdir(exist_ok=True)
    # One build at a time, should several pytest processes (xdist workers) start together.
    with open(BUILD_DIR.parent / ".pump1-host.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (BUILD_DIR / "CMakeCache.txt").exists():
            command = [
                "cmake",
                "--build",
                str(BUILD_DIR),
                "--target",
                "pump1-host",
                "--parallel",
                str(os.cpu_count() or 2),
            ]
        else:
            command = [str(REPO / "scripts" / "build-c")]
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0 or not BINARY.exists():
        pytest.fail(
            f"building pump1-host failed ({' '.join(command)}, exit {done.returncode}):\n"
            f"{(done.stdout + done.stderr)[-4000:]}",
            pytrace=False,
        )
    return BINARY


@pytest.fixture(scope="session")
def pump1_host() -> Path:
    return build_pump1_host()


class CBoard:
    """One pump1-host process and its log lines as they arrive."""

    def __init__(self, process: asyncio.subprocess.Process, args: tuple[str, ...]) -> None:
        self.process = process
        self.args = args
        self.lines: list[str] = []
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @property
    def pid(self) -> int:
        return self.process.pid

    async def _read(self) -> None:
        assert self.process.stderr is not None
        async for raw in self.process.stderr:
            self.lines.append(raw.decode(errors="replace").rstrip())

    def output(self) -> str:
        return "\n".join(self.lines[-40:])

    def links(self, kind: str | None = None) -> list[re.Match[str]]:
        """The board's `link <kind> ...` lines, parsed (kind: connected, refused, closed, error)."""
        found = [match for line in self.lines if (match := LINK_LINE.search(line)) is not None]
        return [match for match in found if kind is None or match["kind"] == kind]

    async def wait_link(self, kind: str, count: int = 1, timeout: float = 10.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while True:
            matching = self.links(kind)
            if len(matching) >= count:
                return matching[count - 1]
            if self.process.returncode is not None and self._reader.done():
                pytest.fail(f"pump1-host exited ({self.process.returncode}) before link {kind}:\n{self.output()}")
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout}s waiting for pump1-host link {kind} #{count}:\n{self.output()}")
            await asyncio.sleep(0.02)

    async def wait_line(self, text: str, timeout: float = 10.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            found = [line for line in self.lines if text in line]
            if found:
                return found[0]
            if self.process.returncode is not None and self._reader.done():
                pytest.fail(f"pump1-host exited ({self.process.returncode}) before {text!r}:\n{self.output()}")
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout}s waiting for {text!r} from pump1-host:\n{self.output()}")
            await asyncio.sleep(0.02)

    def signal(self, number: int) -> None:
        if self.process.returncode is None:
            self.process.send_signal(number)

    async def stop(self) -> int:
        """SIGTERM (the board says goodbye and exits), SIGKILL after 5 s; the exit status."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGCONT)  # a test may have stopped it
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 5)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(self._reader, 2)
        assert self.process.returncode is not None
        return self.process.returncode


CBoardFactory = Callable[..., Awaitable[CBoard]]


async def start_c_board(binary: Path, *args: str) -> CBoard:
    process = await asyncio.create_subprocess_exec(
        str(binary),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    return CBoard(process, args)


@pytest.fixture
async def c_boards(pump1_host: Path) -> AsyncIterator[CBoardFactory]:
    """Start pump1-host processes: `await c_boards("--url", gateway.url, "--slot", SLOT)`; all are
    stopped at the end of the test."""
    started: list[CBoard] = []

    async def start(*args: str) -> CBoard:
        board = await start_c_board(pump1_host, *args)
        started.append(board)
        return board

    yield start
    for board in started:
        await board.stop()


async def structured_call(client: Client, tool: str, arguments: dict[str, Any] | None = None) -> Status:
    """A successful call's structured result, checked against the tool's outputSchema in
    device/schemas/pump-1.json; the text block carries the same object (what old clients read)."""
    result = await client.call_tool(tool, arguments or {})
    assert not result.is_error, result.content
    structured = result.structured_content
    assert isinstance(structured, dict), result
    jsonschema.validate(structured, OUTPUT_SCHEMAS[tool])
    assert orjson.loads(result.content[0].text) == structured  # type: ignore[union-attr]
    return structured


async def exercise_every_tool(url: str, mode: str) -> list[Status]:
    """An SDK client in era `mode` lists pump-1's five tools and calls each; every result as the
    schema promises and as the pump's state machine says. The structured results, in call order."""
    async with Client(url, mode=mode) as client:
        listed = await client.list_tools()
        assert [tool.name for tool in listed.tools] == TOOL_NAMES

        idle = await structured_call(client, "get_status")
        assert (idle["state"], idle["speed_rpm"], idle["fault"]) == ("stopped", 0, None)

        started = await structured_call(client, "start", {"speed_rpm": 1200})
        assert (started["state"], started["setpoint_rpm"], started["fault"]) == ("starting", 1200, None)

        changed = await structured_call(client, "set_speed", {"speed_rpm": 1500})
        assert changed["state"] in ("starting", "running")
        assert changed["setpoint_rpm"] == 1500

        stopping = await structured_call(client, "stop")
        assert stopping["state"] in ("stopping", "stopped")
        assert stopping["setpoint_rpm"] == 1500, "stop keeps the setpoint for the next start"

        reset = await structured_call(client, "reset_fault")
        assert reset["fault"] is None
        assert reset["state"] in ("stopping", "stopped")

        refused = await client.call_tool("start", {"speed_rpm": 5000})
        assert refused.is_error
        assert "speed_rpm 5000 is out of range" in refused.content[0].text  # type: ignore[union-attr]
        return [idle, started, changed, stopping, reset]
