"""Run a check as `nobody` in a forked child, for real EACCES on a port root may always open, or a
gateway as `nobody`, as the appliance runs it under its own service user."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from tests.support.gateway_process import REPO, GatewayProcess, clean_environment

NOBODY = 65534


def as_nobody(work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """What `work()` returns (JSON-able), computed in a child that dropped root for nobody.

    No pytest code runs in the child: only `work` and os._exit, whatever happens (a failure there is
    an exit status of 1, which the parent asserts against)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.write(write_end, orjson.dumps(work()))
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        result: dict[str, Any] = orjson.loads(pipe.read() or b"null") or {}
    assert os.waitpid(pid, 0)[1] == 0, "the check as nobody failed in the child"
    return result


async def gateway_as_nobody(config: Path, state: Path, *options: str) -> GatewayProcess:
    """`mcp-gateway run --config CONFIG OPTIONS` as nobody (setpriv, util-linux) with STATE_DIRECTORY `state`."""
    setpriv = shutil.which("setpriv")
    assert setpriv is not None, "setpriv (util-linux) is needed to run the gateway as nobody"
    process = await asyncio.create_subprocess_exec(
        setpriv,
        *("--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups", sys.executable),
        *("-m", "gateway.cli", "run", "--config", str(config), *options),
        cwd=REPO,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=clean_environment({"STATE_DIRECTORY": str(state), "HOME": "/nonexistent"}),
    )
    return GatewayProcess(process)
