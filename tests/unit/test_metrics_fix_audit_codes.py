"""The reason code /readyz gives for an audit trail that cannot be written: read from the trail's own
words (`describe`), never from its path, and never quoting either."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import pytest

from gateway.policy.audit.errors import AuditSchemaError
from gateway.policy.audit.writer import cleared_by_probe, describe, failure_code

# A path whose own words would read as another failure if the code looked at them.
PATH = Path("/var/lib/locked-disk-full-readonly database/audit.db")


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (sqlite3.OperationalError("database is locked"), "locked"),
        (sqlite3.OperationalError("database or disk is full"), "disk_full"),
        (OSError(errno.ENOSPC, "No space left on device"), "disk_full"),
        (sqlite3.OperationalError("attempt to write a readonly database"), "read_only"),
        (OSError(errno.EROFS, "Read-only file system"), "read_only"),
        (sqlite3.DatabaseError("database disk image is malformed"), "damaged"),
        (AuditSchemaError("the audit database has schema version 9, newer than this gateway's 3"), "newer_schema"),
        (sqlite3.OperationalError("unable to open database file"), "unwritable"),
    ],
)
def test_each_failure_has_its_code_whatever_the_path_says(exc: BaseException, code: str) -> None:
    assert failure_code(PATH, describe(PATH, exc)) == code


def test_only_a_held_lock_is_what_a_probe_can_tell_is_over() -> None:
    assert cleared_by_probe(sqlite3.OperationalError("database is locked"))
    assert not cleared_by_probe(sqlite3.OperationalError("database or disk is full"))
    assert not cleared_by_probe(sqlite3.DatabaseError("database disk image is malformed"))
