"""One gateway per state directory and per audit file (docs/operations.md, "The state directory"): a
second `mcp-gateway run` on either is refused at start (exit 2) with the place, the holder's pid and
what to do; the lock goes with the process that held it, however it ended; the CLI's readers and
writers of the same files keep working beside the running gateway."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.support.gateway_process import gateway_process, run_to_exit

POLICY = """
[policy.roles.worker]
capabilities = ["mcp.tools.list", "mcp.tools.call", "tool.control"]
[[policy.assign]]
principal = "anonymous"
role = "worker"
resources = ["/**"]
"""


@pytest.mark.timeout(120)
async def test_a_second_gateway_on_the_same_state_directory_is_refused_until_the_first_is_gone(
    tmp_path: Path,
) -> None:
    state = Path(os.environ["STATE_DIRECTORY"])  # the test's own (tests/conftest.py), in both processes
    config = tmp_path / "gateway.toml"
    config.write_text(POLICY)  # and no [audit] path: both would write $STATE_DIRECTORY/audit.db
    async with gateway_process("--config", str(config), "--port", "0") as first:
        lock = state / "gateway.lock"
        assert lock.read_text() == f"{first.process.pid}\n"
        code, _, stderr = await run_to_exit("run", "--config", str(config), "--port", "0", timeout=30)
        assert code == 2, stderr
        assert stderr.startswith(f"mcp-gateway: the state directory {state} ($STATE_DIRECTORY"), stderr
        assert f"in use by another gateway (pid {first.process.pid}, holding {lock})" in stderr
        assert "Give this gateway a state directory of its own" in stderr and "XDG_STATE_HOME" in stderr
        assert "Traceback" not in stderr
        # The commands that read or write the state beside the gateway are not gateways: they run.
        code, _, stderr = await run_to_exit("devices", timeout=30)
        assert code == 0, stderr
        code, _, stderr = await run_to_exit("audit", "--path", str(state / "audit.db"), timeout=30)
        assert code == 0, stderr
        first.process.send_signal(signal.SIGKILL)  # no clean exit: the kernel drops the lock with the process
        await first.process.wait()
    async with gateway_process("--config", str(config), "--port", "0") as second:
        assert lock.read_text() == f"{second.process.pid}\n"
    assert lock.read_text() == ""  # a gateway that stopped leaves no pid behind


@pytest.mark.timeout(120)
async def test_a_second_gateway_writing_the_same_audit_file_is_refused(tmp_path: Path) -> None:
    audit = tmp_path / "shared" / "audit.db"
    config = tmp_path / "gateway.toml"
    config.write_text(f'{POLICY}\n[audit]\npath = "{audit}"\n')
    own_a = {"STATE_DIRECTORY": str(tmp_path / "a")}
    own_b = {"STATE_DIRECTORY": str(tmp_path / "b")}
    async with gateway_process("--config", str(config), "--port", "0", env=own_a) as first:
        code, _, stderr = await run_to_exit("run", "--config", str(config), "--port", "0", env=own_b, timeout=30)
        assert code == 2, stderr
        assert stderr.startswith(
            f"mcp-gateway: the audit file {audit} (this gateway's [audit] path) is written by another gateway "
            f"(pid {first.process.pid}, holding {audit}.lock)"
        ), stderr
        assert "Give this gateway an [audit] path of its own" in stderr
        # Its own state directory was not kept: the refused gateway left nothing locked.
        assert (tmp_path / "b" / "gateway.lock").read_text() == ""
        code, _, stderr = await run_to_exit("audit", "--path", str(audit), timeout=30)
        assert code == 0, stderr
    # Without a [policy] nothing is written to the trail, and the file is not locked.
    config.write_text(f'[audit]\npath = "{audit}"\n')
    async with (
        gateway_process("--config", str(config), "--port", "0", env=own_a),
        gateway_process("--config", str(config), "--port", "0", env=own_b),
    ):
        pass


@pytest.mark.timeout(120)
async def test_an_audit_path_that_links_to_another_gateways_file_is_refused(tmp_path: Path) -> None:
    audit = tmp_path / "shared" / "audit.db"
    link = tmp_path / "other" / "link.db"
    first_config = tmp_path / "first.toml"
    first_config.write_text(f'{POLICY}\n[audit]\npath = "{audit}"\n')
    second_config = tmp_path / "second.toml"
    second_config.write_text(f'{POLICY}\n[audit]\npath = "{link}"\n')
    own_a = {"STATE_DIRECTORY": str(tmp_path / "a")}
    own_b = {"STATE_DIRECTORY": str(tmp_path / "b")}
    async with gateway_process("--config", str(first_config), "--port", "0", env=own_a) as first:
        link.parent.mkdir()
        link.symlink_to(audit)
        code, _, stderr = await run_to_exit("run", "--config", str(second_config), "--port", "0", env=own_b, timeout=30)
        assert code == 2, stderr
        # Both places are named: the path this gateway was given and the file it leads to.
        assert stderr.startswith(
            f"mcp-gateway: the audit file {link} (this gateway's [audit] path, which leads to {audit}) is written "
            f"by another gateway (pid {first.process.pid}, holding {audit}.lock)"
        ), stderr
        assert not (tmp_path / "other" / "link.db.lock").exists()
