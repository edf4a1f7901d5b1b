"""`mcp-gateway run` as a real process: its log (stderr) collected line by line, its URL read from the log.

    async with gateway_process("--config", str(path), env={"SECRET": "..."}) as gateway:
        gateway.url; gateway.lines; await gateway.wait_line("connected to MQTT")

The environment is the test's own without MCP_GATEWAY_* (a developer's settings must not leak in),
plus `env`. The process is stopped with SIGTERM (SIGKILL after 10 s) when the block ends, also on failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import resource
import signal
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path

import orjson

from tests.conftest import wait_for

REPO = Path(__file__).resolve().parents[2]
PIPE = asyncio.subprocess.PIPE
LISTENING = re.compile(r" listening on (https?://\S+)")


def clean_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    base = {key: value for key, value in os.environ.items() if not key.startswith("MCP_GATEWAY")}
    return {**base, **(env or {})}


async def run_cli(*args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> tuple[int, str, str]:
    """`mcp-gateway ARGS` in a process of its own (in `cwd`, with the repository on its import path),
    with no MCP_GATEWAY_* but those in `env`: its exit code, stdout and stderr."""
    environment = clean_environment(env) if cwd is None else {**clean_environment(env), "PYTHONPATH": str(REPO)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", *args, stdout=PIPE, stderr=PIPE, env=environment, cwd=cwd
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


async def bridge_exit(*args: str) -> tuple[int, str]:
    """`mcp-gateway stdio --url http://127.0.0.1:9 ARGS` with stdin at EOF and no MCP_GATEWAY_*: its exit
    code and stderr (a bridge that starts exits 0 at EOF; stdout, the host's, stays empty)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "gateway.cli", "stdio", "--url", "http://127.0.0.1:9", *args),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=PIPE,
        stderr=PIPE,
        env=clean_environment(),
        cwd=str(REPO),
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert stdout == b""  # stdout belongs to the host
    assert process.returncode is not None
    return process.returncode, stderr.decode()


class GatewayProcess:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.lines: list[str] = []
        self.url = ""
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        assert self.process.stderr is not None
        async for raw in self.process.stderr:
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    @property
    def log(self) -> str:
        return "\n".join(self.lines)

    def json_lines(self) -> list[dict[str, object]]:
        """Every log line as the JSON object it must be (format = "json")."""
        return [orjson.loads(line) for line in self.lines if line.strip()]

    async def wait_line(self, pattern: str, after: int = 0, timeout: float = 20) -> str:
        found: list[str] = []

        def seen() -> bool:
            found[:] = [line for line in self.lines[after:] if re.search(pattern, line)]
            return bool(found) or self._reader.done()

        await wait_for(seen, timeout, f"log line {pattern!r}")
        assert found, "gateway exited:\n" + self.log
        return found[0]

    async def started(self) -> str:
        line = await self.wait_line(" listening on ")
        with contextlib.suppress(orjson.JSONDecodeError):
            line = str(orjson.loads(line).get("msg", ""))
        match = LISTENING.search(line)
        assert match is not None, self.log
        self.url = match.group(1)
        return self.url

    async def stop(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 10)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._reader, 5)


def limited_file_size(limit_bytes: int) -> Callable[[], None]:
    """A preexec_fn: the child's writes past `limit_bytes` in a file fail with EFBIG, as they fail with
    ENOSPC on a full file system (SIGXFSZ, which would kill it instead, is ignored)."""

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, resource.RLIM_INFINITY))

    return limit


async def cli_process(
    *args: str,
    env: Mapping[str, str] | None = None,
    stdin: int = asyncio.subprocess.DEVNULL,
    stdout: int = PIPE,
    file_size_limit: int | None = None,
) -> asyncio.subprocess.Process:
    """`mcp-gateway ARGS...` started from the repository, stderr piped, in the clean environment plus `env`;
    with `file_size_limit`, the files it writes stop at that many bytes (see limited_file_size)."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli",
        *args,
        cwd=REPO,
        stdin=stdin,
        stdout=stdout,
        stderr=PIPE,
        env=clean_environment(env),
        preexec_fn=None if file_size_limit is None else limited_file_size(file_size_limit),
    )


async def spawn(*args: str, env: Mapping[str, str] | None = None) -> GatewayProcess:
    return GatewayProcess(await cli_process("run", *args, env=env, stdout=asyncio.subprocess.DEVNULL))


@contextlib.asynccontextmanager
async def gateway_process(*args: str, env: Mapping[str, str] | None = None) -> AsyncIterator[GatewayProcess]:
    """A started gateway (its URL read from the log); stopped at the end of the block."""
    gateway = await spawn(*args, env=env)
    try:
        await gateway.started()
        yield gateway
    finally:
        await gateway.stop()


async def run_to_exit(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 30, file_size_limit: int | None = None
) -> tuple[int, str, str]:
    """`mcp-gateway ARGS...` to completion: exit code, stdout, stderr."""
    process = await cli_process(*args, env=env, file_size_limit=file_size_limit)
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()
