"""A change of mosquitto's password file while another program holds its lock (`<file>.lock`) past
LOCK_WAIT_S: the change is refused with the lock and its holder named, the file untouched, instead of
waiting without end (an install that waits so has already written the board and adopted it).

The holder: a real process that takes the flock on the lock file and keeps it.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gateway.devices import mosquitto_passwd
from gateway.devices.mosquitto_passwd import PasswordFileError, set_user
from gateway.flash.port import process_text
from tests.support.mosquitto import write_password_file

HOLD = (
    "import fcntl, os, sys, time\n"
    "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
    "fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "print('held', flush=True)\n"
    "time.sleep(120)\n"
)


def test_a_lock_held_past_the_bound_refuses_the_change_and_names_its_holder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    passwd = write_password_file(tmp_path / "passwd", {"mcp-gateway": "the-gateway-s-password"})
    before = passwd.read_bytes()
    lock = tmp_path / "passwd.lock"
    monkeypatch.setattr(mosquitto_passwd, "LOCK_WAIT_S", 1.0, raising=False)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], stdout=subprocess.PIPE, text=True)
    outcome: list[BaseException | bool] = []

    def change() -> None:
        try:
            outcome.append(set_user(passwd, "pump-9", "a-password"))
        except BaseException as exc:  # what the change raised is the outcome
            outcome.append(exc)

    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        named = process_text(holder.pid)  # "python3 (pid N)": the kernel's name for it
        worker = threading.Thread(target=change, daemon=True)
        worker.start()
        worker.join(20)  # far past the bound: a change that still waits has no bound
        assert outcome, "set_user still waits for the lock"
    finally:
        holder.kill()
        holder.wait()
        worker.join(10)
    [error] = outcome
    assert isinstance(error, PasswordFileError), error
    assert str(error) == (
        f"the lock {lock} of the mosquitto password file {passwd} is held by {named} for more than 1 s "
        "(another install or revoke takes it for a fraction of a second): the file was not changed; end that "
        "program, or run the command again once it has ended"
    ), error
    assert passwd.read_bytes() == before

    # The lock free: the change goes through.
    assert set_user(passwd, "pump-9", "a-password") is False
    assert "pump-9" in mosquitto_passwd.read(passwd)
