"""`mcp-gateway run` started with standard descriptors closed (`<&- >&-`, as some cron and daemon
wrappers start it) serves, and stops on SIGINT or SIGTERM with exit 0.

Before, with stdin and stdout closed the event loop's signal wake-up socket took fd 0 or 1 and the
first signal aborted the process (uvloop's assertion `fd > STDERR_FILENO`, exit 134); with stderr
closed the gateway exited 1 at start, saying nothing.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from bench.ports import free_port
from tests.support.gateway_process import REPO, clean_environment

pytestmark = pytest.mark.timeout(60)


async def healthy(url: str) -> bool:
    try:
        async with aiohttp.ClientSession() as http, http.get(f"{url}/healthz") as answer:
            return answer.status == 200
    except aiohttp.ClientError:
        return False


@pytest.mark.parametrize(
    ("closed", "stop"),
    [
        ("<&- >&-", signal.SIGINT),
        ("<&- >&-", signal.SIGTERM),
        ("2>&-", signal.SIGTERM),
        ("<&- >&- 2>&-", signal.SIGINT),
    ],
)
async def test_run_with_closed_standard_descriptors_serves_and_stops_with_0(
    tmp_path: Path, closed: str, stop: signal.Signals
) -> None:
    port = free_port()
    command = f'exec "$0" -m gateway.cli run --port {port} {closed}'
    env = clean_environment({"STATE_DIRECTORY": str(tmp_path / "state")})
    # The shell closes the descriptors, then execs Python in its place: the pid is the gateway's.
    process = await asyncio.create_subprocess_exec(
        "/bin/sh", "-c", command, sys.executable, cwd=REPO, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        started: list[bool] = []

        async def up() -> bool:
            started.append(await healthy(url))
            return started[-1] or process.returncode is not None

        await wait_for_async(up, 20)
        assert process.returncode is None, f"exited {process.returncode} at start"
        process.send_signal(stop)
        assert await asyncio.wait_for(process.wait(), 20) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def wait_for_async(check: Callable[[], Awaitable[bool]], timeout: float) -> None:
    """Poll the coroutine function `check` until it returns True."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"not up within {timeout} s")


def test_the_descriptors_reopened_are_on_dev_null() -> None:
    """A process started with 0-2 closed gets them back on /dev/null, and Python streams on them."""
    script = (
        "import os, sys\n"
        "from gateway.cli.process import reopen_standard_descriptors\n"
        "assert sys.stdout is None and sys.stderr is None\n"
        "reopen_standard_descriptors()\n"
        "null = os.stat(os.devnull)\n"
        "same = [(os.fstat(fd).st_rdev == null.st_rdev) for fd in (0, 1, 2)]\n"
        "print('lost', file=sys.stderr)\n"
        "os.write(3, repr(same).encode())\n"
    )
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: fd 3 the pipe, 0-2 closed, then Python
        try:
            os.dup2(write, 3)
            for fd in (0, 1, 2):
                os.close(fd)
            os.execve(sys.executable, [sys.executable, "-c", script], {**os.environ, "PYTHONPATH": str(REPO)})
        finally:
            os._exit(127)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        said = answer.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert said == "[True, True, True]"
