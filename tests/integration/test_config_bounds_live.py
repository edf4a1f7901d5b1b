"""Configuration bounds on a real `mcp-gateway run` process: a header limit the listener could not use stops
the start, a descriptor reserve that leaves one connection is named by the warning and by every 503, a
configuration file reloaded after it grew past 1 MiB (or became a FIFO) is refused while the gateway
serves on, and "LOCALHOST" binds as the loopback name it is."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import aiohttp
import orjson

from tests.integration.test_connection_limits import Connection, connect, gateway_with_fd_limit, get, request
from tests.support.gateway_process import gateway_process, run_to_exit


async def test_a_header_limit_past_what_the_parser_takes_stops_the_start() -> None:
    code, _, err = await run_to_exit(
        "run", "--port", "0", env={"MCP_GATEWAY_LIMITS__CONNECTIONS__MAX_HEADER_BYTES": "99999999999999999999"}
    )
    assert code == 2, err
    assert err == (
        "mcp-gateway: environment variable MCP_GATEWAY_LIMITS__CONNECTIONS__MAX_HEADER_BYTES: setting "
        "'limits.connections.max_header_bytes': Input should be less than or equal to 1048576\n"
    )


async def test_a_reserve_that_takes_the_descriptor_limit_is_named_in_the_warning_and_the_503() -> None:
    env = {"MCP_GATEWAY_LIMITS__CONNECTIONS__FD_RESERVE": "250", "MCP_GATEWAY_LOGGING__FORMAT": "text"}
    gateway = await gateway_with_fd_limit(256, 256, env)
    held: list[Connection] = []
    try:
        port = int(gateway.url.rsplit(":", 1)[1])
        first = await connect(port)
        held.append(first)
        assert (await request(first, get(port)))[0] == 200  # kept alive: the one place the reserve leaves
        second = await connect(port)
        held.append(second)
        status, _, body = await request(second, get(port))
        assert status == 503
        assert body["error"] == "too_many_connections"
        assert body["error_description"] == (
            "The gateway holds 1 connections, its limit (1 here: what limits.connections.fd_reserve and "
            "limits.connections.max_refusing leave of the process's descriptor limit, below "
            "limits.connections.max_connections); try again shortly, and close connections you no longer use"
        )
    finally:
        for _, writer in held:
            writer.close()
        await gateway.stop()
    assert "limits.connections.fd_reserve = 250 and limits.connections.max_refusing = 64 take 314 of" in gateway.log
    assert "leaving room for 1 connections, fewer than limits.connections.max_connections = 4096" in gateway.log
    assert "RLIMIT_NOFILE 256) leaves room for" not in gateway.log  # not the limit's fault
    assert "Traceback" not in gateway.log


PIPE_REFUSED = (
    "not a regular file; process substitution and pipes are not accepted for the configuration: the gateway "
    "reads it again at reload"
)


async def test_a_reload_of_a_config_file_past_its_bound_or_a_fifo_is_refused_and_serving_goes_on(
    tmp_path: Path,
) -> None:
    real = tmp_path / "real.toml"
    real.write_text('port = 0\n[logging]\nformat = "json"\n')
    config = tmp_path / "gateway.toml"
    config.symlink_to(real)
    huge = tmp_path / "huge.toml"
    huge.write_text('port = 0\n[logging]\nformat = "json"\n' + ("#" * 1023 + "\n") * 1024)
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    async with gateway_process("--config", str(config)) as gateway:
        for target, reason in ((huge, "larger than 1048576 bytes, the bound for it"), (fifo, PIPE_REFUSED)):
            config.unlink()
            config.symlink_to(target)
            mark = len(gateway.lines)
            gateway.process.send_signal(signal.SIGHUP)
            line = orjson.loads(await gateway.wait_line("configuration reload", after=mark, timeout=10))
            assert line["level"] == "error", line
            assert line["msg"] == (
                f"configuration reload refused, nothing was changed: config file {config}: {reason}"
            ), line
            async with aiohttp.ClientSession() as http, http.get(f"{gateway.url}/healthz") as response:
                assert response.status == 200
        assert gateway.process.returncode is None


async def test_localhost_in_capitals_is_loopback_and_needs_no_authentication() -> None:
    async with gateway_process("--host", "LOCALHOST", "--port", "0") as gateway:
        port = gateway.url.rsplit(":", 1)[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", int(port))
        try:
            writer.write(f"GET /healthz HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n".encode())
            await writer.drain()
            head = await asyncio.wait_for(reader.readline(), 5)
            assert head.startswith(b"HTTP/1.1 200"), head
        finally:
            writer.close()
    assert "refusing to listen" not in gateway.log
