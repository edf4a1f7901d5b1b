"""A stdio upstream's child gets stdin, stdout and stderr and no other descriptor of the gateway's, on
the event loop `run` uses by default (uvloop, whose subprocess_exec ignores close_fds): a descriptor
the gateway was started with inheritable (a supervisor's pipe, a file a wrapper opened) would let
every child write through it (docs/upstreams.md, "Environment: an allow-list")."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.support.gateway_process import REPO, GatewayProcess, clean_environment

pytestmark = pytest.mark.timeout(60)

CHILD = """
import os, sys
targets = {}
for name in os.listdir("/proc/self/fd"):
    try:
        targets[name] = os.readlink(f"/proc/self/fd/{name}")
    except OSError:  # the directory listdir read through, closed by now
        pass
with open(sys.argv[1] + ".part", "w") as out:
    out.write("\\n".join(f"{name} {target}" for name, target in sorted(targets.items(), key=lambda i: int(i[0]))))
os.rename(sys.argv[1] + ".part", sys.argv[1])
"""


async def test_a_child_inherits_no_descriptor_the_gateway_was_handed(tmp_path: Path) -> None:
    handed = tmp_path / "handed.log"
    seen = tmp_path / "child-fds.txt"
    config = tmp_path / "gateway.toml"
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    config.write_text(
        'port = 0\n[[upstreams.stdio]]\nname = "probe"\n'
        f"command = [{str(sys.executable)!r}, {str(child)!r}, {str(seen)!r}]\n"
        "restart_initial_s = 30.0\nrestart_max_s = 60.0\n"
    )
    descriptor = os.open(handed, os.O_WRONLY | os.O_CREAT, 0o600)
    os.set_inheritable(descriptor, True)
    try:
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "gateway.cli", "run", "--config", str(config)),
            cwd=REPO,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env={**clean_environment(), "STATE_DIRECTORY": str(tmp_path / "state")},
            pass_fds=(descriptor,),
        )
    finally:
        os.close(descriptor)
    gateway = GatewayProcess(process)
    try:
        await gateway.started()
        await wait_for(seen.exists, 20, "the child's descriptor list")
        targets = dict(line.split(" ", 1) for line in seen.read_text().splitlines())
        stdio = {targets["0"], targets["1"], targets["2"]}
        # uvloop leaves the child a second descriptor of each of its own pipes; nothing else is there.
        assert set(targets.values()) <= stdio, targets
        assert str(handed) not in targets.values()
    finally:
        await gateway.stop()
