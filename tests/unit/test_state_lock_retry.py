"""A state directory or audit file that cannot be locked at start (a read-only SD card awaiting fsck)
is tried again until it is locked: logged when it is, an error naming the holder when another gateway
took it meanwhile, and `state.unlocked` in broker_diagnose until then. The unlockable place is made
without mounts: a path through a regular file (ENOTDIR), mended by putting a directory there."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gateway.cli.state_lock import HeldState, StateInUse, hold_state
from gateway.core.broker.diagnose import diagnose
from gateway.core.broker.problems import STANDING, GatewayView, Problem
from tests.unit.test_state_lock import GOVERNED, config

VIEW = GatewayView(url="http://127.0.0.1:3000", host="127.0.0.1", is_loopback=True, insecure_lan=False)
HOLDER = """
import fcntl, os, sys
descriptor = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
os.pwrite(descriptor, f"{os.getpid()}\\n".encode(), 0)
print("locked", flush=True)
sys.stdin.read()
"""
"""Another gateway, as far as the lock goes: holds it (its pid written in) until its stdin closes."""


def unlocked_problems() -> list[Problem]:
    return [problem for problem in diagnose(VIEW) if problem.id == "state.unlocked"]


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@contextmanager
def another_gateway(lock: Path) -> Iterator[subprocess.Popen[str]]:
    """HOLDER running on `lock` until the block ends."""
    other = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert other.stdout is not None and other.stdout.readline() == "locked\n"
        yield other
    finally:
        assert other.stdin is not None
        other.stdin.close()
        other.wait(timeout=10)


def assert_named_once(
    held: HeldState, state: Path, other: subprocess.Popen[str], caplog: pytest.LogCaptureFixture
) -> tuple[str, Problem]:
    """Two retries while `other` holds the state directory's lock: one error naming it, and `state.unlocked`
    as an error. The error line and the problem, for what a test asserts beyond that."""
    with caplog.at_level(logging.ERROR, logger="gateway.state"):
        held.retry_now()
        held.retry_now()  # the same holder is logged once
    errors = [record.getMessage() for record in caplog.records if record.levelno == logging.ERROR]
    assert len(errors) == 1, errors
    assert (
        f"the state directory {state} ($STATE_DIRECTORY, systemd's StateDirectory=) is in use by another "
        f"gateway (pid {other.pid}, holding {state / 'gateway.lock'})"
    ) in errors[0]
    (problem,) = unlocked_problems()
    assert problem.severity == "error"
    assert problem.summary == f"the state directory {state} is used by another gateway as well (pid {other.pid})"
    return errors[0], problem


@pytest.fixture
def blocker(tmp_path: Path) -> Iterator[Path]:
    """A regular file where the state and audit directories should be: nothing under it can be made."""
    path = tmp_path / "card"
    path.write_text("")
    yield path
    for what in (f"the state directory {path / 'state'}", f"the audit file {path / 'audit.db'}"):
        STANDING.withdraw(f"state.unlocked:{what}")


def mend(blocker: Path) -> Path:
    """The card is writable again: the directories can be there."""
    blocker.unlink()
    (blocker / "state").mkdir(parents=True, mode=0o700)
    return blocker / "state"


def test_a_place_not_lockable_at_start_is_locked_by_the_retry_once_it_can_be(
    blocker: Path, caplog: pytest.LogCaptureFixture
) -> None:
    environ = {"STATE_DIRECTORY": str(blocker / "state")}
    governed = config(**GOVERNED, audit={"path": str(blocker / "audit.db")})
    with caplog.at_level(logging.INFO, logger="gateway.state"):
        held = hold_state(governed, environ, retry_s=0.05)
        try:
            assert held.descriptors == []
            assert f"the state directory {blocker / 'state'} cannot be locked (Not a directory)" in caplog.text
            assert "tried again every 0.05 s" in caplog.text
            found = unlocked_problems()
            assert sorted(problem.summary for problem in found) == [
                f"the audit file {blocker / 'audit.db'} is not locked: another gateway started on it would not be "
                "refused",
                f"the state directory {blocker / 'state'} is not locked: another gateway started on it would not be "
                "refused",
            ]
            assert all(problem.severity == "warning" and "Not a directory" in problem.evidence for problem in found)
            assert "remount it read-write" in found[0].fix

            state = mend(blocker)
            wait_until(lambda: not held.unlocked)
            assert (state / "gateway.lock").read_text() == f"{os.getpid()}\n"
            assert (blocker / "audit.db.lock").read_text() == f"{os.getpid()}\n"
            assert f"the state directory {state} is locked now ({state / 'gateway.lock'})" in caplog.text
            assert f"the audit file {blocker / 'audit.db'} is locked now" in caplog.text
            assert unlocked_problems() == []
            # A second gateway on the same places is refused again, as at any start.
            with pytest.raises(StateInUse, match=r"is in use by another gateway"):
                hold_state(governed, environ)
        finally:
            held.release()
    assert (blocker / "state" / "gateway.lock").read_text() == ""
    hold_state(governed, environ).release()


def test_another_gateway_that_took_the_lock_meanwhile_is_named_until_it_is_gone(
    blocker: Path, caplog: pytest.LogCaptureFixture
) -> None:
    environ = {"STATE_DIRECTORY": str(blocker / "state")}
    held = hold_state(config(), environ, retry_s=3600)  # tried by hand below
    try:
        state = mend(blocker)
        lock = state / "gateway.lock"
        with another_gateway(lock) as other:
            error, problem = assert_named_once(held, state, other, caplog)
            assert "Give this gateway a state directory of its own" in error
            assert "Stop one of the two gateways" in problem.fix
        held.retry_now()  # the other is gone: this gateway takes the lock
        assert held.unlocked == [] and len(held.descriptors) == 1
        assert lock.read_text() == f"{os.getpid()}\n"
        assert unlocked_problems() == []
    finally:
        held.release()


def test_release_ends_the_retries_and_withdraws_the_problem(blocker: Path) -> None:
    held = hold_state(config(), {"STATE_DIRECTORY": str(blocker / "state")}, retry_s=0.01)
    assert len(unlocked_problems()) == 1
    held.release()
    assert unlocked_problems() == []
    mend(blocker)
    time.sleep(0.1)
    assert not (blocker / "state" / "gateway.lock").exists()  # no try after the release
