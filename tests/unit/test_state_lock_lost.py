"""A lock the gateway holds whose file is removed or replaced while it runs (`rm -rf` of the state
directory, made again) is taken again on the file now at the path, at the retry cadence: otherwise the
flock stays on a file nobody finds and a second gateway on the same state would start unopposed. When
another process locked the new file first, it is named (an error, and `state.unlocked` as an error)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.cli.state_lock import HeldState, StateInUse, hold_state
from gateway.core.broker.problems import STANDING
from tests.unit.test_state_lock import GOVERNED, config
from tests.unit.test_state_lock_retry import another_gateway, assert_named_once, unlocked_problems, wait_until

PROBE = """
import fcntl, os, sys
descriptor = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
try:
    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    print("held")
else:
    print("free")
"""
"""Another process, as a second gateway starting: is the lock at this path held by someone?"""


def probe(lock: Path) -> str:
    """What a second process finds at `lock`: "held" (it would be refused) or "free"."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(lock)], check=True, capture_output=True, text=True, timeout=30
    )
    return done.stdout.strip()


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "state"
    yield path
    for what in (f"the state directory {path}", f"the audit file {path / 'audit.db'}"):
        STANDING.withdraw(f"state.unlocked:{what}")


@pytest.fixture
def held(state: Path) -> Iterator[HeldState]:
    """The state directory held, its lock checked again only when the test calls retry_now()."""
    held = hold_state(config(), {"STATE_DIRECTORY": str(state)}, retry_s=3600)
    yield held
    held.release()


def remake(state: Path) -> None:
    """The state directory removed and made again, as `rm -rf` and a later mkdir (or systemd) leave it."""
    shutil.rmtree(state)
    state.mkdir(mode=0o700)


def test_a_state_directory_removed_and_made_again_is_locked_again_and_a_second_gateway_refused(
    state: Path, caplog: pytest.LogCaptureFixture
) -> None:
    environ = {"STATE_DIRECTORY": str(state)}
    governed = config(**GOVERNED)  # the default audit file, in the state directory
    with caplog.at_level(logging.INFO, logger="gateway.state"):
        held = hold_state(governed, environ, retry_s=0.05)
        try:
            remake(state)
            # A second gateway starting now would find an unlocked place (what this test guards against).
            wait_until(lambda: (state / "gateway.lock").exists() and (state / "audit.db.lock").exists())
            wait_until(lambda: probe(state / "gateway.lock") == "held" and probe(state / "audit.db.lock") == "held")
            assert (state / "gateway.lock").read_text() == f"{os.getpid()}\n"
            assert (state / "audit.db.lock").read_text() == f"{os.getpid()}\n"
            assert len(held.descriptors) == 2 and held.unlocked == []
            with pytest.raises(StateInUse, match=r"is in use by another gateway"):
                hold_state(governed, environ)
            held.retry_now()  # the file at the path is the one held now: nothing to do, nothing logged
        finally:
            held.release()
    relocked = [record.getMessage() for record in caplog.records if "locked again" in record.getMessage()]
    assert relocked == [
        f"the state directory {state}: its lock file was removed or replaced while the gateway ran; locked again "
        f"({state / 'gateway.lock'}): another gateway using it is refused again",
        f"the audit file {state / 'audit.db'}: its lock file was removed or replaced while the gateway ran; locked "
        f"again ({state / 'audit.db.lock'}): another gateway using it is refused again",
    ]
    assert all(record.levelno == logging.WARNING for record in caplog.records if "locked again" in record.message)
    assert (state / "gateway.lock").read_text() == ""  # emptied of its pid at release, as at any stop
    assert probe(state / "gateway.lock") == "free"


def test_a_lock_file_replaced_by_another_file_is_locked_again(state: Path, held: HeldState) -> None:
    lock = state / "gateway.lock"
    first = os.stat(lock).st_ino
    other = state / "other"
    other.write_text("")
    other.replace(lock)  # a file moved over it: the path now names another inode
    assert probe(lock) == "free"
    held.retry_now()
    assert probe(lock) == "held"
    assert os.stat(lock).st_ino != first and lock.read_text() == f"{os.getpid()}\n"
    assert len(held.descriptors) == 1


def test_another_process_that_locked_the_new_file_first_is_named_once_until_it_is_gone(
    state: Path, held: HeldState, caplog: pytest.LogCaptureFixture
) -> None:
    remake(state)
    lock = state / "gateway.lock"
    with another_gateway(lock) as other:
        assert_named_once(held, state, other, caplog)
        assert held.descriptors == []
    held.retry_now()  # the other is gone: this gateway takes the lock
    assert lock.read_text() == f"{os.getpid()}\n" and probe(lock) == "held"
    assert unlocked_problems() == []


def test_a_removed_directory_not_made_again_is_shown_until_it_is_back(
    state: Path, held: HeldState, caplog: pytest.LogCaptureFixture
) -> None:
    shutil.rmtree(state)
    with caplog.at_level(logging.INFO, logger="gateway.state"):
        held.retry_now()
        held.retry_now()
        assert not state.exists()  # not made again: a storage device gone is not replaced by a directory
        lost = [record.getMessage() for record in caplog.records if "cannot be locked again" in record.message]
        assert lost == [
            f"the state directory {state}: its lock file {state / 'gateway.lock'} was removed or replaced while "
            "the gateway ran and cannot be locked again (No such file or directory): another gateway using it "
            "would not be refused until it can be (tried again every 3600 s)"
        ]
        (problem,) = unlocked_problems()
        assert problem.severity == "warning" and "No such file or directory" in problem.evidence
        assert "make a removed directory again" in problem.fix
        state.mkdir(mode=0o700)
        held.retry_now()
    assert f"the state directory {state} is locked now ({state / 'gateway.lock'})" in caplog.text
    assert probe(state / "gateway.lock") == "held" and unlocked_problems() == []
