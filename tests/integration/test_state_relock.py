"""A running gateway whose state directory is removed and made again (`rm -rf`, `mkdir`) takes its
locks again on the new files within one check (every LOCK_RETRY_S), so a second gateway on the same
state directory and [audit] path is refused at start (exit 2) as before, not let in beside it
(docs/operations.md, "The state directory"). Real gateways, started as an operator starts them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gateway.cli.state_lock import LOCK_RETRY_S
from tests.integration.test_backup_restore import POLICY
from tests.support.gateway_process import gateway_process, run_to_exit


@pytest.mark.timeout(120)
async def test_a_second_gateway_is_refused_after_the_state_directory_was_made_again(tmp_path: Path) -> None:
    state = tmp_path / "state"
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    config = tmp_path / "gateway.toml"
    config.write_text(f'[policy]\nfile = "{policy}"\n[audit]\npath = "{state / "audit.db"}"\n', encoding="utf-8")
    env = {"STATE_DIRECTORY": str(state)}
    async with gateway_process("--config", str(config), "--port", "0", env=env) as first:
        shutil.rmtree(state)
        state.mkdir(mode=0o700)
        for what in (f"the state directory {state}", f"the audit file {state / 'audit.db'}"):
            await first.wait_line(f"{what}: its lock file was removed or replaced", timeout=LOCK_RETRY_S + 15)
        assert (state / "gateway.lock").read_text() == f"{first.process.pid}\n"
        assert (state / "audit.db.lock").read_text() == f"{first.process.pid}\n"

        code, _, stderr = await run_to_exit("run", "--config", str(config), "--port", "0", env=env, timeout=30)
        assert code == 2, stderr
        assert f"is in use by another gateway (pid {first.process.pid}, holding {state / 'gateway.lock'})" in stderr
