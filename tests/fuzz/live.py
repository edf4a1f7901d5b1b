"""A real gateway for live fuzzing: its own event loop in a background thread, real sockets on loopback.

Hypothesis drives examples from a synchronous test function, so the gateway (and the SDK provider
publishing `pump-1` into it) run on a loop of their own; each example hands that loop a coroutine
(`LiveGateway.run`). The harness also watches for what a client cannot see: an exception that
escaped a handler or a task of the gateway is recorded in `crashes` (the tests assert it stays empty).

RawHttp speaks HTTP/1.1 over a plain socket, byte by byte as the test wrote it: header values that
are not UTF-8, repeated headers and odd request targets reach the gateway exactly as sent, which an
HTTP client library would refuse or tidy up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import http_exceptions

from gateway.app import GatewayServer
from gateway.config import GatewayConfig
from gateway.publish import Publisher
from tests.support.servers import demo_server

T = TypeVar("T")
READ_TIMEOUT_S = 10.0
"""How long the gateway may take to answer one fuzzed request. Far above any legitimate answer (the
demo provider's calls are cut at the slot's 300 ms deadline); only a hang reaches it."""


class CrashLog(logging.Handler):
    """Records log records of the gateway (and of aiohttp and asyncio serving it) that carry an exception
    which escaped gateway code. aiohttp's own HTTP
    parser logs the requests it rejects (malformed request lines and headers) with their exception:
    those are refusals, answered 400 before any gateway code runs, not crashes."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info is None or record.exc_info[1] is None:
            return
        if not record.name.startswith(("gateway", "aiohttp", "asyncio")):
            return  # the demo provider (mcp.*) logs its own tool failures: they are the point of `fail`
        exc = record.exc_info[1]
        if isinstance(exc, http_exceptions.HttpProcessingError):
            return
        self.records.append(f"{record.name}: {record.getMessage()}: {exc!r}")


@dataclass
class LiveGateway:
    config: dict[str, Any]
    provider_token: str | None = None
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    server: GatewayServer | None = None
    publisher: Publisher | None = None
    crashes: list[str] = field(default_factory=list)
    _thread: threading.Thread | None = None
    _tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    _log: CrashLog = field(default_factory=CrashLog)

    def __enter__(self) -> LiveGateway:
        self._thread = threading.Thread(target=self.loop.run_forever, name="live-gateway", daemon=True)
        self._thread.start()
        self.loop.call_soon_threadsafe(self.loop.set_exception_handler, self._on_loop_exception)
        logging.getLogger().addHandler(self._log)
        self.run(self._start(), timeout=30)
        return self

    def __exit__(self, *_: object) -> None:
        with contextlib.suppress(Exception):
            self.run(self._stop(), timeout=30)
        logging.getLogger().removeHandler(self._log)
        self.loop.call_soon_threadsafe(self.loop.stop)
        assert self._thread is not None
        self._thread.join(10)
        self.loop.close()

    def _on_loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        self.crashes.append(f"event loop: {context.get('message')}: {context.get('exception')!r}")

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = READ_TIMEOUT_S + 5) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def all_crashes(self) -> list[str]:
        return [*self.crashes, *self._log.records]

    async def _start(self) -> None:
        self.server = GatewayServer(GatewayConfig.model_validate({"port": 0, **self.config}))
        await self.server.start()
        self.publisher = Publisher(
            demo_server("pump"), self.server.url, "pump-1", aggregate=True, token=self.provider_token
        )
        self._tasks.append(asyncio.get_running_loop().create_task(self.publisher.run()))
        await self.wait_ready("pump-1")

    async def wait_ready(self, slot: str, timeout: float = 10.0) -> None:
        assert self.server is not None
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            entry = self.server.gateway.registry.slots.get(slot)
            if entry is not None and entry.live is not None and entry.live.ready:
                return
            assert asyncio.get_running_loop().time() < deadline, f"slot {slot} never became ready"
            await asyncio.sleep(0.01)

    async def _stop(self) -> None:
        if self.publisher is not None:
            await self.publisher.stop()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 5)
        if self.server is not None:
            await self.server.stop()

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url


@dataclass
class Answer:
    version: bytes
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None

    @property
    def content_type(self) -> str:
        return (self.header("Content-Type") or "").split(";")[0].strip().lower()

    @property
    def from_http_parser(self) -> bool:
        """aiohttp's HTTP parser refused the request before the gateway saw it (it answers HTTP/1.0 400
        in plain text, with what was wrong): a malformed request line or header, not a gateway answer."""
        return self.version == b"HTTP/1.0" and self.status == 400 and self.content_type == "text/plain"


async def raw_request(port: int, head: bytes, body: bytes, *, head_only: bool = False) -> Answer:
    """Send one request (`head` ends with the blank line) on a new connection; read its answer.

    A streamed answer (text/event-stream) is read up to its headers: the stream itself may last. The
    answer to HEAD has no body whatever its Content-Length says (`head_only`)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head + body)
        await writer.drain()
        return await asyncio.wait_for(_read_answer(reader, head_only), READ_TIMEOUT_S)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def _read_answer(reader: asyncio.StreamReader, head_only: bool) -> Answer:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head[:-4].split(b"\r\n")
    version, status, *_ = lines[0].split(b" ", 2)
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers.append((name.decode("latin-1").strip(), value.decode("latin-1").strip()))
    answer = Answer(version, int(status), headers, b"")
    if head_only or answer.content_type == "text/event-stream" or answer.status in (101, 204, 304):
        return answer
    length = answer.header("Content-Length")
    if length is not None:
        answer.body = await reader.readexactly(int(length))
    elif (answer.header("Transfer-Encoding") or "").lower() == "chunked":
        chunks = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                break
            chunks.append(chunk[:-2])
        answer.body = b"".join(chunks)
    else:
        answer.body = await reader.read()
    return answer
