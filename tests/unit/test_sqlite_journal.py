"""The journal of the state directory's SQLite files: WAL where the file system's blocks hold SQLite's
4096-byte -shm stride, a rollback journal (no -shm, nothing memory-mapped) where they do not, so no
process can die of SIGBUS on a full disk. The block size is injected through os.statvfs; the real
1 KiB-block file system is checked by bench/full_disk.py (it needs root to mount an image)."""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gateway.cli.backup_files import copy_database
from gateway.devices import sqlite_journal
from gateway.devices.registry import DeviceRegistry
from gateway.policy.audit import store
from gateway.policy.audit.reading import read_records

pytestmark = pytest.mark.timeout(30)


def blocks_of(monkeypatch: pytest.MonkeyPatch, size: int) -> None:
    """Every file system reports `size`-byte blocks."""
    real = os.statvfs

    def statvfs(path: object) -> os.statvfs_result:
        found = real(path)  # type: ignore[arg-type]
        return os.statvfs_result((size, size, *tuple(found)[2:]))

    monkeypatch.setattr(os, "statvfs", statvfs)


def decision(index: int) -> list[object]:
    return [index, '["alice"]', None, "ws", "pump-1", "/pump-1", "set_speed", "c", "{}", "allow", "[]"] + [None] * 5


def write_records(conn: sqlite3.Connection, count: int) -> None:
    conn.execute("BEGIN IMMEDIATE")
    for index in range(count):
        store.insert_decision(conn, decision(index))
    conn.execute("COMMIT")


def header_journal(path: Path) -> int:
    """Byte 18 of the database header: 2 in WAL mode, 1 with a rollback journal."""
    return path.read_bytes()[18]


def wal_trail(path: Path) -> sqlite3.Connection:
    """A trail opened as a gateway that always used WAL opened it."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    store.migrate(conn)
    return conn


def legacy_wal_trail(path: Path, records: int) -> None:
    """A trail as a gateway that always used WAL leaves it after a clean stop (no -shm, no -wal)."""
    conn = wal_trail(path)
    write_records(conn, records)
    conn.close()
    assert not Path(f"{path}-shm").exists()


@contextmanager
def opened_on(monkeypatch: pytest.MonkeyPatch, block: int, trail: Path) -> Iterator[sqlite3.Connection]:
    """The trail as the gateway opens it, on a file system of `block`-byte blocks; closed at the end."""
    blocks_of(monkeypatch, block)
    conn = store.connect(trail, 2.0)
    try:
        yield conn
    finally:
        conn.close()


@pytest.mark.parametrize(("block", "safe"), [(0, False), (512, False), (1024, False), (2048, False), (4096, True)])
def test_wal_only_where_blocks_hold_the_shm_stride(block: int, safe: bool) -> None:
    assert sqlite_journal.wal_is_safe(block) is safe
    assert sqlite_journal.wal_is_safe(65536)  # a 64 KiB-block file system writes every block SQLite touches


def test_the_smaller_of_block_and_fragment_size_counts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = os.statvfs
    monkeypatch.setattr(os, "statvfs", lambda path: os.statvfs_result((4096, 1024, *tuple(real(path))[2:])))
    assert sqlite_journal.block_size(tmp_path) == 1024
    assert sqlite_journal.journal_for(tmp_path) == sqlite_journal.ROLLBACK


def test_trail_on_small_blocks_uses_a_rollback_journal_and_no_shm(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    trail = tmp_path / "audit.db"
    with opened_on(monkeypatch, 1024, trail) as conn:
        write_records(conn, 3)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "truncate"
        assert conn.execute("PRAGMA mmap_size").fetchone()[0] == 0
        assert not Path(f"{trail}-shm").exists()
        assert not Path(f"{trail}-wal").exists()
        # A reader (mcp-gateway audit) reads while the gateway holds the trail open, and the writer goes on.
        assert [record["time_ms"] for record in read_records(trail)] == [0, 1, 2]
        write_records(conn, 1)
        assert len(read_records(trail)) == 4
        assert not Path(f"{trail}-shm").exists()
    assert header_journal(trail) == 1


def test_trail_on_4k_blocks_keeps_wal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    trail = tmp_path / "audit.db"
    with opened_on(monkeypatch, 4096, trail) as conn:
        write_records(conn, 1)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert Path(f"{trail}-shm").exists()


def test_a_trail_left_in_wal_is_switched_without_making_a_shm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    trail = tmp_path / "audit.db"
    legacy_wal_trail(trail, 5)
    with opened_on(monkeypatch, 1024, trail) as conn:
        assert not Path(f"{trail}-shm").exists()
        assert conn.execute("SELECT count(*) FROM decisions").fetchone()[0] == 5
    assert header_journal(trail) == 1


def test_records_only_in_a_crashed_gateways_wal_survive_the_switch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    live = tmp_path / "live.db"
    conn = wal_trail(live)
    conn.execute("PRAGMA wal_autocheckpoint = 0")  # the records stay in the -wal, as at a power cut
    write_records(conn, 7)
    trail = tmp_path / "audit.db"
    shutil.copyfile(live, trail)  # the files as a power cut leaves them: the -wal holds the records, no -shm
    shutil.copyfile(f"{live}-wal", f"{trail}-wal")
    conn.close()
    with opened_on(monkeypatch, 1024, trail) as conn:
        assert not Path(f"{trail}-shm").exists()
        assert conn.execute("SELECT count(*) FROM decisions").fetchone()[0] == 7
    assert not Path(f"{trail}-wal").exists()


def test_the_first_reader_of_a_wal_trail_on_small_blocks_makes_no_shm(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    trail = tmp_path / "audit.db"
    legacy_wal_trail(trail, 4)
    blocks_of(monkeypatch, 1024)
    assert len(read_records(trail)) == 4
    assert not Path(f"{trail}-shm").exists()
    assert header_journal(trail) == 2  # a reader reads; it never switches the journal


def test_registry_on_small_blocks_uses_a_rollback_journal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "state" / "devices.db"
    blocks_of(monkeypatch, 1024)
    registry = DeviceRegistry(path)
    try:
        registry.check_writable()
        assert registry.connection().execute("PRAGMA journal_mode").fetchone()[0] == "truncate"
        assert not Path(f"{path}-shm").exists()
        with registry.read_only() as db:
            assert db is not None
    finally:
        registry.close()
    assert header_journal(path) == 1


def test_backup_copies_a_wal_trail_on_small_blocks_into_one_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    trail = tmp_path / "audit.db"
    legacy_wal_trail(trail, 6)
    blocks_of(monkeypatch, 1024)
    target = tmp_path / "backup" / "audit.db"
    target.parent.mkdir()
    copy_database(trail, target, 2.0, target.parent)
    assert sorted(os.listdir(target.parent)) == ["audit.db"]
    assert header_journal(target) == 1
    assert len(read_records(target)) == 6
