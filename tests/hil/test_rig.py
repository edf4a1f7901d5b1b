"""The suite's own rig (docs/hil.md): how it reads a running gateway's refusals, what it checks before a run,
and what it leaves behind on a board it did not boot. Real processes on loopback; no target needed."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx2
import orjson
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.hil.rig import Rig
from tests.hil.targets import parse_target
from tests.support.gateway_process import REPO, clean_environment, gateway_process

PYTEST = str(Path(sys.executable).parent / "pytest")
TRACE_ID = "4013403a401f403c"
"""A trace id whose hex digits spell 401 and 403, as a random one does about once in a hundred."""


@contextlib.contextmanager
def answering(status: int, text: str) -> Iterator[str]:
    """A plain HTTP server on a free loopback port that answers every request with `status` and `text`, a
    JSON-RPC error with the request's id when it is a JSON-RPC request."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def answer(self) -> None:
            request = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = text.encode()
            with contextlib.suppress(ValueError, AttributeError):
                error = {"code": -32001, "message": text}
                body = orjson.dumps({"jsonrpc": "2.0", "id": orjson.loads(request)["id"], "error": error})
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_DELETE = answer

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


async def wait_failure(url: str, tmp_path: Path) -> str:
    rig = Rig(parse_target("ws:pump-7", 90), "pump-7", tmp_path, url)
    with pytest.raises(pytest.fail.Exception) as failed:
        await rig.wait_attached(timeout=1.5)
    return str(failed.value)


async def test_a_refusal_is_the_http_status_not_digits_in_the_text(tmp_path: Path) -> None:
    with answering(200, f"slot pump-7 is not attached (traceId {TRACE_ID})") as url:
        message = await wait_failure(url, tmp_path)
    assert "not attached after 1.5 s" in message and "refused" not in message, message
    for status in (401, 403):
        with answering(status, "no") as url:
            message = await wait_failure(url, tmp_path)
        assert f"refused the caller ({status})" in message, message
    with answering(200, "") as url:
        closed = url  # the server is gone: nothing answers on its port
    message = await wait_failure(closed, tmp_path)
    assert "nothing answers there" in message, message


async def hil_run(*args: str, timeout: float = 40) -> tuple[int, str, float]:
    """The hil suite as a pytest process of its own: its exit code, output and how long it took."""
    began = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        PYTEST,
        *("-q", "-p", "no:cacheprovider", "tests/hil", *args),
        cwd=REPO,
        env=clean_environment(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout)
    assert process.returncode is not None
    return process.returncode, output.decode(), time.monotonic() - began


async def test_a_missing_serial_port_fails_the_run_at_once(tmp_path: Path) -> None:
    missing = tmp_path / "ttyNOPE"
    code, output, took = await hil_run("--target", f"serial:{missing}")
    assert code == pytest.ExitCode.USAGE_ERROR, output
    assert f"{missing} does not exist (no such serial port)" in output, output
    assert took < 30, f"{took:.1f} s: the run waited for the board"


async def test_a_gateway_url_that_is_no_mcp_gateway_fails_the_run_at_once() -> None:
    with answering(200, "<html>hello</html>") as url:
        code, output, took = await hil_run("--target", "ws:pump-1", "--gateway-url", url)
    assert code == pytest.ExitCode.USAGE_ERROR, output
    assert "answers, but is not an mcp-gateway: its /healthz gave HTTP 200" in output, output
    assert took < 30, f"{took:.1f} s: the run waited for the board"


@contextlib.asynccontextmanager
async def status_client(url: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(timeout=10) as http,
        Client(streamable_http_client(f"{url}/pump-1/mcp", http_client=http)) as client,
    ):
        yield client


async def speed_of(url: str) -> tuple[str, int]:
    async with status_client(url) as client:
        status = (await client.call_tool("get_status", {})).structured_content
    assert status is not None
    return str(status["state"]), int(status["speed_rpm"])


async def test_an_interrupted_ws_check_leaves_the_bench_pump_stopping(tmp_path: Path) -> None:
    """Ctrl-C while a check turns the motor of a board the suite did not boot: the teardown stops it."""
    config = tmp_path / "gateway.toml"
    config.write_text("[providers]\nheartbeat_interval_s = 0.5\n")
    async with gateway_process("--config", str(config), "--port", "0", "--sim-pumps", "1") as gateway:
        process = await asyncio.create_subprocess_exec(
            PYTEST,
            *("-q", "-p", "no:cacheprovider", "tests/hil", "-k", "affinity"),
            *("--target", "ws:pump-1", "--gateway-url", gateway.url),
            cwd=REPO,
            env=clean_environment(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            # a child of a shell run in the background ignores SIGINT; Ctrl-C reaches a foreground one
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            deadline = time.monotonic() + 40
            while (await speed_of(gateway.url))[1] < 1000:
                assert time.monotonic() < deadline, "the check never turned the pump"
                await asyncio.sleep(0.2)
            process.send_signal(signal.SIGINT)
            output, _ = await asyncio.wait_for(process.communicate(), 30)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        state, speed = await speed_of(gateway.url)
        assert state in ("stopping", "stopped"), (state, speed, output.decode()[-2000:])
