"""gateway/cli/state_lock.py: what `run` locks, and what it does when it cannot lock at all."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from gateway.cli.state_lock import StateInUse, hold_state
from gateway.config import GatewayConfig

GOVERNED = {"policy": {"roles": {"worker": {"capabilities": ["mcp.tools.list"]}}}}


def config(**fields: object) -> GatewayConfig:
    return GatewayConfig.model_validate(fields)


def test_a_second_hold_is_refused_with_the_holders_pid_and_free_again_after_release(tmp_path: Path) -> None:
    environ = {"XDG_STATE_HOME": str(tmp_path / "xdg")}
    state = tmp_path / "xdg" / "mcp-gateway"
    held = hold_state(config(), environ)
    assert (state / "gateway.lock").read_text() == f"{os.getpid()}\n"
    assert (
        oct(state.stat().st_mode & 0o777) == "0o700" and oct((state / "gateway.lock").stat().st_mode & 0o777) == "0o600"
    )
    with pytest.raises(StateInUse) as refused:
        hold_state(config(), environ)  # another open file is another holder, in one process too
    message = str(refused.value)
    assert f"the state directory {state} ($XDG_STATE_HOME/mcp-gateway) is in use by another gateway" in message
    assert f"(pid {os.getpid()}, holding {state / 'gateway.lock'})" in message
    held.release()
    hold_state(config(), environ).release()


def test_the_audit_file_is_locked_only_when_a_trail_is_written(tmp_path: Path) -> None:
    audit = tmp_path / "trail" / "audit.db"
    governed = config(**GOVERNED, audit={"path": str(audit)})
    with hold_state(governed, {"STATE_DIRECTORY": str(tmp_path / "a")}):
        assert (tmp_path / "trail" / "audit.db.lock").read_text() == f"{os.getpid()}\n"
        with pytest.raises(StateInUse, match=r"the audit file .* \(this gateway's \[audit\] path\) is written by"):
            hold_state(governed, {"STATE_DIRECTORY": str(tmp_path / "b")})
        ungoverned = config(audit={"path": str(audit)})  # no [policy]: no trail, nothing written to the file
        hold_state(ungoverned, {"STATE_DIRECTORY": str(tmp_path / "c")}).release()
        off = config(**GOVERNED, audit={"path": str(audit), "enabled": False})
        hold_state(off, {"STATE_DIRECTORY": str(tmp_path / "d")}).release()


def test_a_link_to_a_held_place_is_refused_naming_both_paths(tmp_path: Path) -> None:
    real_state = tmp_path / "real-state"
    audit = tmp_path / "trail" / "audit.db"
    governed = config(**GOVERNED, audit={"path": str(audit)})
    with hold_state(governed, {"STATE_DIRECTORY": str(real_state)}):
        linked_state = tmp_path / "linked-state"
        linked_state.symlink_to(real_state)
        with pytest.raises(StateInUse) as refused:
            hold_state(config(), {"STATE_DIRECTORY": str(linked_state)})
        assert (
            f"the state directory {linked_state} ($STATE_DIRECTORY, systemd's StateDirectory=, which leads to "
            f"{real_state}) is in use by another gateway (pid {os.getpid()}, holding {real_state / 'gateway.lock'})"
        ) in str(refused.value)
        link = tmp_path / "elsewhere" / "link.db"
        link.parent.mkdir()
        link.symlink_to(audit)
        with pytest.raises(StateInUse) as refused:
            hold_state(config(**GOVERNED, audit={"path": str(link)}), {"STATE_DIRECTORY": str(tmp_path / "b")})
        assert (
            f"the audit file {link} (this gateway's [audit] path, which leads to {audit}) is written by another "
            f"gateway (pid {os.getpid()}, holding {audit}.lock)"
        ) in str(refused.value)
        assert not (tmp_path / "elsewhere" / "link.db.lock").exists()


def test_a_place_that_cannot_be_locked_is_logged_and_left_to_fail_as_before(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    governed = config(**GOVERNED, audit={"path": str(blocker / "audit.db")})
    with caplog.at_level(logging.WARNING, logger="gateway.state"):
        held = hold_state(governed, {"STATE_DIRECTORY": str(blocker / "state")})
    held.release()  # its retries too (tests/unit/test_state_lock_retry.py)
    assert held.descriptors == []
    assert f"the state directory {blocker / 'state'} cannot be locked" in caplog.text
    assert f"the audit file {blocker / 'audit.db'} cannot be locked" in caplog.text


def test_a_lock_name_taken_by_a_link_or_a_fifo_is_refused_and_the_target_left_alone(tmp_path: Path) -> None:
    """Whoever may write the state or audit directory could point a lock name at any file, which the
    gateway would empty and write its pid into: a link is never followed, a FIFO never waited on."""
    precious = tmp_path / "precious"
    precious.write_text("keep me\n")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "gateway.lock").symlink_to(precious)
    with pytest.raises(StateInUse, match=r"gateway.lock is a symbolic link: .* never writes through a link"):
        hold_state(config(), {"STATE_DIRECTORY": str(state)})
    assert precious.read_text() == "keep me\n"

    trail = tmp_path / "trail"
    trail.mkdir(mode=0o700)
    (trail / "audit.db.lock").symlink_to(precious)
    governed = config(**GOVERNED, audit={"path": str(trail / "audit.db")})
    with pytest.raises(StateInUse, match=r"audit.db.lock is a symbolic link"):
        hold_state(governed, {"STATE_DIRECTORY": str(tmp_path / "other")})
    assert precious.read_text() == "keep me\n"
    # The state directory's lock was let go again when the audit file's was refused.
    hold_state(config(), {"STATE_DIRECTORY": str(tmp_path / "other")}).release()

    fifo_state = tmp_path / "fifo"
    fifo_state.mkdir(mode=0o700)
    os.mkfifo(fifo_state / "gateway.lock")
    with pytest.raises(StateInUse, match=r"gateway.lock is not a regular file"):
        hold_state(config(), {"STATE_DIRECTORY": str(fifo_state)})


def test_a_state_directory_others_may_write_is_warned_of(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    state = tmp_path / "open"
    state.mkdir()
    state.chmod(0o777)
    with caplog.at_level(logging.WARNING), hold_state(config(), {"STATE_DIRECTORY": str(state)}):
        pass
    assert f"the state directory {state} is writable by other users (mode 777): make it 0700" in caplog.text
