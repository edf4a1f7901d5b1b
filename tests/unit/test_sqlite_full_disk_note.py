"""A full disk under a WAL file: SQLite reports "disk I/O error" where it cannot set up the `-shm`, which
names no cause; the trail's and the registry's error texts then say "(the file system is full)" when the
file system holding the file has no free block (docs/operations.md). The I/O error is SQLite's own (a
`-shm` it cannot map: a FIFO in its place); the free blocks are injected through os.statvfs."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.config import AuditConfig
from gateway.devices.registry import DeviceRegistry, RegistryUnusable
from gateway.policy.audit import AuditTrail, AuditUnavailable, DecisionRecord, store
from gateway.policy.audit.reading import AuditReadError, read_records
from tests.unit.test_audit_export import record

pytestmark = pytest.mark.timeout(30)

IO_ERROR = "disk I/O error"
FULL = "disk I/O error (the file system is full)"


def file_system(monkeypatch: pytest.MonkeyPatch, free_blocks: int) -> None:
    """Every file system reports 4 KiB blocks (WAL) and `free_blocks` free for this user (f_bavail)."""
    real = os.statvfs

    def statvfs(path: object) -> os.statvfs_result:
        found = tuple(real(path))  # type: ignore[arg-type]
        return os.statvfs_result((4096, 4096, *found[2:4], free_blocks, *found[5:]))

    monkeypatch.setattr(os, "statvfs", statvfs)


def shm_that_cannot_be_mapped(path: Path) -> None:
    """A FIFO where the WAL file's `-shm` goes: SQLite's next open fails with an I/O error (SHMOPEN)."""
    os.mkfifo(f"{path}-shm")


def allowed() -> DecisionRecord:
    return record("allow", 0, rules=("assign[0]",))


def wal_trail(path: Path) -> None:
    conn = store.connect(path, 2.0)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    shm_that_cannot_be_mapped(path)


def wal_registry(path: Path) -> None:
    registry = DeviceRegistry(path)
    registry.record("aa:bb", slot="pump-1", transport="ws", firmware=None, version=None, schema=None)
    registry.close()
    shm_that_cannot_be_mapped(path)


@pytest.mark.parametrize(("free_blocks", "said"), [(0, FULL), (12, IO_ERROR)])
async def test_the_trail_says_the_file_system_is_full(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, free_blocks: int, said: str
) -> None:
    file_system(monkeypatch, free_blocks)
    path = tmp_path / "audit.db"
    wal_trail(path)
    trail = AuditTrail.open(AuditConfig(path=str(path)))
    await trail.start()
    try:
        with pytest.raises(AuditUnavailable) as refused:
            await trail.decision(allowed())
        assert str(refused.value).endswith(said)
        assert trail.last_error.endswith(said)  # what /readyz and broker_diagnose show
    finally:
        await trail.close()
    with pytest.raises(AuditReadError) as unread:
        read_records(path)  # mcp-gateway audit
    assert str(unread.value).endswith(said)


@pytest.mark.parametrize(("free_blocks", "said"), [(0, FULL), (12, IO_ERROR)])
def test_the_registry_says_the_file_system_is_full(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, free_blocks: int, said: str
) -> None:
    file_system(monkeypatch, free_blocks)
    path = tmp_path / "devices.db"
    wal_registry(path)
    registry = DeviceRegistry(path)
    with pytest.raises(sqlite3.Error) as unusable:
        registry.devices()  # the gateway's sightings, mcp-gateway devices
    assert str(unusable.value).endswith(said)
    assert isinstance(unusable.value, RegistryUnusable) == (said == FULL)
    with pytest.raises(RegistryUnusable) as unread, registry.read_only():
        pass
    assert str(unread.value).endswith(said)
    assert main(["devices", "--registry", str(path)]) != 0
    assert capsys.readouterr().err.rstrip().endswith(said)
