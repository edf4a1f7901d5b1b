"""Which journal the state directory's SQLite files use: WAL, or a rollback journal where WAL's
shared-memory index could kill the process with SIGBUS when the file system fills.

SQLite maps the WAL index (the `-shm` file) into memory and grows it by writing one byte at the end of
each 4096 bytes (SHM_STRIDE_BYTES, fixed in SQLite's unix VFS whatever the OS page size). On a file
system whose blocks are smaller (ext4 made with 1 KiB blocks, mkfs.ext4's default under 512 MiB: a
small SD card partition) the other blocks of each 4096 bytes stay holes, and a store through the
mapping into a hole on a full file system cannot be refused with an error: the kernel raises SIGBUS.
There the files use a rollback journal (no `-shm`, no mapping), whose writes fail with SQLITE_FULL.
The audit trail and the device registry share this module (the devices part stands below policy)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

SHM_STRIDE_BYTES = 4096
"""SQLite extends its `-shm` file by one byte per this many bytes; smaller blocks leave holes."""
WAL = "WAL"
ROLLBACK = "TRUNCATE"
"""The rollback journal: truncated at each commit, so its inode stays and no directory entry is made per
transaction (DELETE would), and no journal blocks stay held between commits (PERSIST would)."""
HEADER_BYTES = 100
MAGIC = b"SQLite format 3\x00"
WAL_FORMAT = 2
"""Bytes 18 and 19 of a database file's header: 2 in WAL mode, 1 with a rollback journal."""


def block_size(directory: Path) -> int:
    """The allocation unit of the file system holding `directory` (the smaller of statvfs's block and
    fragment sizes; 0 when neither is known). OSError when `directory` cannot be examined."""
    found = os.statvfs(directory)
    sizes = [size for size in (found.f_bsize, found.f_frsize) if size > 0]
    return min(sizes) if sizes else 0


def wal_is_safe(block_bytes: int) -> bool:
    """Whether every block of a `-shm` file SQLite grows is written, so none is a hole (unknown: not safe)."""
    return block_bytes >= SHM_STRIDE_BYTES


def journal_for(directory: Path) -> str:
    """WAL where the file system's blocks hold SQLite's `-shm` stride, ROLLBACK where they do not (or the
    directory cannot be examined: the open that follows names why)."""
    try:
        return WAL if wal_is_safe(block_size(directory)) else ROLLBACK
    except OSError:
        return ROLLBACK


def in_wal_format(path: Path) -> bool:
    """Whether the database file at `path` says it is in WAL mode (its first reader opens the `-shm`)."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(HEADER_BYTES)
    except OSError:
        return False
    return len(header) == HEADER_BYTES and header.startswith(MAGIC) and header[18] == WAL_FORMAT


def shm_unsafe(path: Path) -> bool:
    """Whether opening the database at `path` as usual would map a `-shm` file that may have holes: it is
    in WAL mode on a file system with blocks smaller than SQLite's stride (a file a gateway without this
    check left there)."""
    return in_wal_format(path) and journal_for(path.parent) != WAL


def exclusive_first(conn: sqlite3.Connection, journal: str) -> None:
    """Call before the connection's first read when `journal` is ROLLBACK: a file still in WAL mode is then
    opened with its WAL index in the process's heap (SQLite's exclusive locking mode makes no `-shm`), so
    switching it to the rollback journal maps nothing. settle() ends the exclusive mode."""
    if journal != WAL:
        conn.execute("PRAGMA locking_mode = EXCLUSIVE")


def set_journal(conn: sqlite3.Connection, journal: str) -> str:
    """Set `journal` (after exclusive_first) and return the mode SQLite reports, lower case. With the rollback
    journal the file is never memory-mapped either (mmap_size 0) and the exclusive lock goes at the
    connection's next transaction, so readers and other writers share the file."""
    mode = str(conn.execute(f"PRAGMA journal_mode = {journal}").fetchone()[0]).lower()
    if journal != WAL:
        conn.execute("PRAGMA mmap_size = 0")
        conn.execute("PRAGMA locking_mode = NORMAL")
    return mode


def connect_reader(path: Path, timeout_s: float) -> sqlite3.Connection:
    """A connection that only reads the database at `path` (never makes it). A file in WAL mode where its
    `-shm` may have holes (shm_unsafe) is read with its WAL index in the heap: opened read-write in exclusive
    locking mode, queries only, its lock held until it is closed (it waits `timeout_s` for a writer, and a
    writer waits for it). Any other file: SQLite's read-only mode."""
    if not shm_unsafe(path) or not os.access(path, os.W_OK):
        return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=timeout_s)
    return heap_index_reader(path, timeout_s)


def heap_index_reader(path: Path, timeout_s: float) -> sqlite3.Connection:
    """A connection that reads a WAL file without its `-shm`: the WAL index in the heap (opened read-write in
    exclusive locking mode, set before the first read), queries only. Its lock is held until it is closed."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True, timeout=timeout_s)
    try:
        conn.execute("PRAGMA locking_mode = EXCLUSIVE")
        conn.execute("PRAGMA query_only = 1")
    except BaseException:
        conn.close()
        raise
    return conn


FULL_NOTE = " (the file system is full)"
"""Said after an SQLite I/O error when the file system holding the file has no free block left."""


def full_disk_note(exc: BaseException, path: Path) -> str:
    """FULL_NOTE when `exc` is SQLite's I/O error (any of its extended codes) and the file system holding
    `path` has no block left for this user, else "": SQLite reports a full disk as "disk I/O error" where it
    cannot grow a WAL file's `-shm`, which names no cause."""
    code = getattr(exc, "sqlite_errorcode", None)
    if not isinstance(exc, sqlite3.Error) or not isinstance(code, int) or code & 0xFF != sqlite3.SQLITE_IOERR:
        return ""
    try:
        free_blocks = os.statvfs(Path(os.path.abspath(path)).parent).f_bavail
    except OSError:
        return ""
    return FULL_NOTE if free_blocks == 0 else ""
