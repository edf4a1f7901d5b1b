"""A gateway started while its state directory cannot be locked (the SD card read-only at boot)
shows `state.unlocked` in broker_diagnose, takes the lock by itself once the place is writable again,
and from then on a second gateway on the same state directory is refused at start (exit 2), as it
would have been had the card been writable from the start (docs/operations.md, "The state
directory"). The read-only place is made without mounts: a path through a regular file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from gateway.cli.state_lock import LOCK_RETRY_S
from tests.support.gateway_process import gateway_process, run_to_exit


async def diagnosis(url: str) -> dict[str, Any]:
    async with Client(f"{url}/_broker/mcp", mode="2026-07-28") as client:
        result = await client.call_tool("broker_diagnose", {})
    assert not result.is_error and result.structured_content is not None, result
    found: dict[str, Any] = result.structured_content
    return found


@pytest.mark.timeout(120)
async def test_a_gateway_takes_its_lock_once_the_card_is_writable_and_a_second_is_refused(tmp_path: Path) -> None:
    card = tmp_path / "card"
    card.write_text("")  # nothing can be made under it, as on a read-only file system
    state = card / "state"
    env = {"STATE_DIRECTORY": str(state)}
    async with gateway_process("--port", "0", env=env) as first:
        await first.wait_line(f"the state directory {state} cannot be locked")
        problems = {problem["id"]: problem for problem in (await diagnosis(first.url))["problems"]}
        assert problems["state.unlocked"]["severity"] == "warning"
        assert f"the state directory {state} is not locked" in problems["state.unlocked"]["summary"]

        card.unlink()
        state.mkdir(parents=True, mode=0o700)
        await first.wait_line(f"the state directory {state} is locked now", timeout=LOCK_RETRY_S + 15)
        assert (state / "gateway.lock").read_text() == f"{first.process.pid}\n"
        assert "state.unlocked" not in {problem["id"] for problem in (await diagnosis(first.url))["problems"]}

        code, _, stderr = await run_to_exit("run", "--port", "0", env=env, timeout=30)
        assert code == 2, stderr
        assert f"is in use by another gateway (pid {first.process.pid}, holding {state / 'gateway.lock'})" in stderr
