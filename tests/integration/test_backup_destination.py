"""Who owns a backup's DEST (docs/operations.md, "Backup and restore"): a second `mcp-gateway backup` into
the DEST a first one is writing is refused by name and takes none of its files, a claim a stopped backup
left is named, a DEST that cannot be written is named with exit 2, and a restore of a database that fails
its check leaves the target as it was."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from tests.integration.test_backup_restore import small_backup_source
from tests.support.gateway_process import PIPE, REPO, clean_environment, cli_process, run_to_exit

CLAIM = ".mcp-gateway-backup.lock"


async def wait_for(path: Path, seconds: float = 20) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not await asyncio.to_thread(path.exists):
        assert loop.time() < deadline, f"{path} did not appear"
        await asyncio.sleep(0.02)


@dataclass
class HeldBackup:
    env: dict[str, str]
    registry: Path
    process: asyncio.subprocess.Process
    out: str = ""
    err: str = ""


@contextlib.asynccontextmanager
async def backup_held_in_its_copy(tmp_path: Path, dest: Path) -> AsyncIterator[HeldBackup]:
    """A real backup of a small state directory into `dest`, held inside its copy of the registry (a lock
    as a running gateway holds it): it has claimed DEST and written part of it, no timing involved. On
    leaving, the lock goes and the backup runs to its end (`out`, `err`)."""
    env = small_backup_source(tmp_path)
    registry = Path(env["STATE_DIRECTORY"]) / "devices.db"
    holder = sqlite3.connect(registry, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    held = HeldBackup(env, registry, await cli_process("backup", str(dest), "--busy-timeout", "60", env=env))
    try:
        await wait_for(dest / "databases" / "devices.db")
        yield held
    finally:
        holder.rollback()
        holder.close()
        out, err = await asyncio.wait_for(held.process.communicate(), 60)
        held.out, held.err = out.decode(), err.decode()


@pytest.mark.timeout(90)
async def test_a_second_backup_into_the_destination_a_first_writes_is_refused_and_takes_nothing(
    tmp_path: Path,
) -> None:
    dest = tmp_path / "same"
    async with backup_held_in_its_copy(tmp_path, dest) as first:
        pid = first.process.pid
        assert (dest / CLAIM).read_text().strip() == str(pid)
        code, _out, err = await run_to_exit("backup", str(dest), env=first.env)
        assert code == 2, err
        assert err.startswith(f"mcp-gateway backup: another backup (pid {pid}) is writing {dest}: "), err
        assert "cannot be backed up" not in err and "damaged" not in err
        assert sorted(path.name for path in dest.iterdir()) == sorted([CLAIM, "databases"])
        assert (dest / "databases" / "devices.db").exists()
    assert first.process.returncode == 0, first.err
    assert first.out.startswith(f"backed up 1 file, {first.registry.stat().st_size} bytes, to {dest}")
    assert sorted(path.name for path in dest.iterdir()) == ["databases", "manifest.json"]
    fresh = tmp_path / "fresh"
    code, _out, err = await run_to_exit("restore", str(dest), env={"STATE_DIRECTORY": str(fresh)})
    assert code == 0, err
    rows = sqlite3.connect(fresh / "devices.db").execute("SELECT count(*) FROM devices").fetchone()
    assert rows == (200,)


@pytest.mark.timeout(60)
async def test_a_claim_a_stopped_backup_left_is_named(tmp_path: Path) -> None:
    env = small_backup_source(tmp_path)
    dest = tmp_path / "stopped"
    (dest / "databases").mkdir(parents=True)
    (dest / "databases" / "devices.db").write_bytes(b"part of a copy")
    (dest / CLAIM).write_text("4242\n")  # no process holds its lock: the run that wrote it is gone
    code, _out, err = await run_to_exit("backup", str(dest), env=env)
    assert code == 2, err
    assert err.startswith(
        f"mcp-gateway backup: {dest} holds an incomplete backup: the backup (pid 4242) that wrote it was stopped "
        f"before it finished ({CLAIM} is left); remove {dest} (restore refuses it) and back up again"
    ), err
    assert (dest / "databases" / "devices.db").read_bytes() == b"part of a copy"
    # Restore says the same of it, not that it is no backup of mcp-gateway's.
    fresh = tmp_path / "fresh"
    code, out, err = await run_to_exit("restore", str(dest), env={"STATE_DIRECTORY": str(fresh)})
    assert (code, out) == (1, ""), err
    assert err == (
        f"mcp-gateway restore: {dest} holds an incomplete backup: the backup (pid 4242) that wrote it was stopped "
        f"before it finished ({CLAIM} is left); remove {dest} (restore refuses it) and back up again\n"
    )
    assert not fresh.exists()


@pytest.mark.timeout(60)
async def test_an_empty_claim_is_a_starting_backup_only_while_it_is_young(tmp_path: Path) -> None:
    """A run stopped between making its claim and writing its pid leaves an empty claim: once older than a
    run needs to lock it, it is an incomplete backup, not "another backup is writing" for ever."""
    env = small_backup_source(tmp_path)
    dest = tmp_path / "empty-claim"
    dest.mkdir()
    (dest / CLAIM).write_bytes(b"")
    code, _out, err = await run_to_exit("backup", str(dest), env=env)
    assert code == 2, err
    assert err.startswith(f"mcp-gateway backup: another backup is writing {dest}: "), err
    old = time.time() - 60
    os.utime(dest / CLAIM, (old, old))
    code, _out, err = await run_to_exit("backup", str(dest), env=env)
    assert code == 2, err
    assert err.startswith(
        f"mcp-gateway backup: {dest} holds an incomplete backup: the backup that wrote it was stopped before it "
        f"finished ({CLAIM} is left)"
    ), err
    assert [path.name for path in dest.iterdir()] == [CLAIM]
    ahead = time.time() + 3600  # the clock stepped back since the claim was made: it ages all the same
    os.utime(dest / CLAIM, (ahead, ahead))
    code, _out, err = await run_to_exit("backup", str(dest), env=env)
    assert code == 2, err
    assert " holds an incomplete backup: " in err, err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["directory", "link"])
async def test_a_claim_no_backup_could_have_made_is_not_taken_for_one_writing(tmp_path: Path, kind: str) -> None:
    env = small_backup_source(tmp_path)
    dest = tmp_path / "odd-claim"
    dest.mkdir()
    if kind == "directory":
        (dest / CLAIM).mkdir()
    else:
        (dest / CLAIM).symlink_to("/etc/passwd")
    code, _out, err = await run_to_exit("backup", str(dest), env=env)
    assert code == 2, err
    assert err.startswith(f"mcp-gateway backup: {dest} holds an incomplete backup: "), err
    code, _out, err = await run_to_exit("restore", str(dest), env={"STATE_DIRECTORY": str(tmp_path / "fresh")})
    assert code == 1, err
    assert " holds an incomplete backup: " in err, err


@pytest.mark.timeout(60)
async def test_a_destination_in_a_loop_of_links_is_named(tmp_path: Path) -> None:
    env = small_backup_source(tmp_path)
    (tmp_path / "loop-a").symlink_to("loop-b")
    (tmp_path / "loop-b").symlink_to("loop-a")
    code, _out, err = await run_to_exit("backup", str(tmp_path / "loop-a"), env=env)
    assert code == 2, err
    assert err.startswith(f"mcp-gateway backup: {tmp_path / 'loop-a'} is a symbolic link (to loop-b): "), err
    dest = tmp_path / "loop-a" / "b"
    code, _out, err = await run_to_exit("backup", str(dest), env=env)
    assert code == 2, err
    assert err == f"mcp-gateway backup: {dest} cannot be reached: its path runs into a loop of symbolic links\n"


@pytest.mark.timeout(60)
async def test_a_destination_that_is_a_link_to_an_empty_directory_is_named_as_a_link(tmp_path: Path) -> None:
    env = small_backup_source(tmp_path)
    (tmp_path / "empty").mkdir()
    dest = tmp_path / "link"
    dest.symlink_to("empty")
    code, _out, err = await run_to_exit("backup", str(dest), env=env)
    assert code == 2, err
    assert err == f"mcp-gateway backup: {dest} is a symbolic link (to empty): give the directory itself, new or empty\n"
    assert not any((tmp_path / "empty").iterdir())


@pytest.mark.timeout(60)
async def test_a_claim_held_without_other_files_is_still_in_use(tmp_path: Path) -> None:
    env = small_backup_source(tmp_path)
    dest = tmp_path / "held"
    dest.mkdir()
    with open(dest / CLAIM, "w") as claim:  # noqa: ASYNC230 - a tiny local file, held as a backup holds it
        fcntl.flock(claim, fcntl.LOCK_EX)
        claim.write(f"{os.getpid()}\n")
        claim.flush()
        code, _out, err = await run_to_exit("backup", str(dest), env=env)
    assert code == 2, err
    assert err.startswith(f"mcp-gateway backup: another backup (pid {os.getpid()}) is writing {dest}: "), err
    assert [path.name for path in dest.iterdir()] == [CLAIM]


@pytest.mark.timeout(60)
@pytest.mark.usefixtures("root")  # mounting a read-only file system, in a mount namespace of its own
@pytest.mark.parametrize("below", ["b", "x/b", ""])
async def test_a_read_only_destination_is_named_with_exit_2(tmp_path: Path, below: str) -> None:
    env = small_backup_source(tmp_path)
    mount = tmp_path / "ro"
    mount.mkdir()
    dest = mount / below if below else mount
    script = 'mount -t tmpfs -o ro,size=64k tmpfs "$1" && shift && exec "$@"'
    process = await asyncio.create_subprocess_exec(
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        "sh",
        str(mount),
        sys.executable,
        "-m",
        "gateway.cli",
        "backup",
        str(dest),
        cwd=REPO,
        stdout=PIPE,
        stderr=PIPE,
        env=clean_environment(env),
    )
    _out, err_bytes = await asyncio.wait_for(process.communicate(), 30)
    err = err_bytes.decode()
    assert process.returncode == 2, err
    where = f" ({mount / 'x'})" if below == "x/b" else ""
    assert err == f"mcp-gateway backup: cannot write {dest}{where}: read-only file system; no backup was left\n"


@pytest.mark.timeout(60)
async def test_a_restored_database_that_fails_its_check_leaves_the_target_as_it_was(tmp_path: Path) -> None:
    env = small_backup_source(tmp_path)
    damaged = tmp_path / "damaged"
    code, _out, err = await run_to_exit("backup", str(damaged), env=env)
    assert code == 0, err
    copy = damaged / "databases" / "devices.db"
    data = bytearray(copy.read_bytes())
    data[4096:8192] = b"\xa5" * 4096  # the table's second page
    copy.write_bytes(bytes(data))
    manifest = orjson.loads((damaged / "manifest.json").read_bytes())
    from gateway.cli.backup_files import sha256_of

    manifest["files"][0]["size"], manifest["files"][0]["sha256"] = sha256_of(copy)  # sums made to match
    (damaged / "manifest.json").write_bytes(orjson.dumps(manifest))
    fresh = tmp_path / "fresh"
    code, _out, err = await run_to_exit("restore", str(damaged), env={"STATE_DIRECTORY": str(fresh)})
    assert code == 1, err
    assert err.startswith(
        f"mcp-gateway restore: {copy} (backup of {env['STATE_DIRECTORY']}/devices.db) fails SQLite's quick_check ("
    ), err
    assert f"{fresh}/devices.db was not written and no file was restored: " in err
    assert "restored above" not in err  # nothing was said restored
    assert [path.name for path in fresh.iterdir() if "devices" in path.name] == []
    whole = tmp_path / "whole"
    code, _out, err = await run_to_exit("backup", str(whole), env=env)
    assert code == 0, err
    code, out, err = await run_to_exit("restore", str(whole), env={"STATE_DIRECTORY": str(fresh)})
    assert code == 0, err
    assert f"restored the device registry {fresh}/devices.db" in out


@pytest.mark.timeout(90)
async def test_a_copy_removed_under_the_backup_is_named_as_the_destinations_fault_not_the_database(
    tmp_path: Path,
) -> None:
    dest = tmp_path / "backup"
    copy = dest / "databases" / "devices.db"
    async with backup_held_in_its_copy(tmp_path, dest) as backup:
        copy.unlink()  # another process writing DEST (not a backup: those are refused) removes the copy
    err, registry = backup.err, backup.registry
    assert backup.process.returncode == 1, err
    assert err.startswith(f"mcp-gateway backup: cannot write {copy}: "), err  # SQLite: "disk I/O error"
    assert "the copy was removed or replaced while it was written: another process writes this directory" in err
    assert "cannot be backed up" not in err and "damaged" not in err and f"no backup was left in {dest}" in err
    assert not dest.exists()
    assert sqlite3.connect(registry).execute("PRAGMA quick_check").fetchone() == ("ok",)


def damaged_backup_of_many_pages(tmp_path: Path) -> tuple[dict[str, str], int]:
    """A state directory whose registry spans many pages, with a SQLite quick_check report of many lines
    once one of its leaf pages is zeroed: its environment and where the zeroed page starts."""
    state = tmp_path / "state-large"
    state.mkdir(mode=0o700)
    db = sqlite3.connect(state / "devices.db")
    db.execute("CREATE TABLE devices (device_id TEXT PRIMARY KEY, note TEXT)")
    db.executemany("INSERT INTO devices VALUES (?, ?)", [(f"board-{n}", f"note {n}" * 20) for n in range(2000)])
    db.commit()
    page = db.execute("PRAGMA page_size").fetchone()[0]
    db.close()
    return {"STATE_DIRECTORY": str(state)}, page * 2  # the third page: an interior page of the table


@pytest.mark.timeout(60)
async def test_a_damaged_databases_many_line_report_is_one_line_with_a_count(tmp_path: Path) -> None:
    env, offset = damaged_backup_of_many_pages(tmp_path)
    damaged = tmp_path / "damaged"
    code, _out, err = await run_to_exit("backup", str(damaged), env=env)
    assert code == 0, err
    copy = damaged / "databases" / "devices.db"
    data = bytearray(copy.read_bytes())
    data[offset : offset + 4096] = bytes(4096)
    copy.write_bytes(bytes(data))
    report = sqlite3.connect(copy).execute("PRAGMA quick_check").fetchall()
    assert len(report[0][0].splitlines()) > 3, report  # the premise: SQLite reports many lines
    manifest = orjson.loads((damaged / "manifest.json").read_bytes())
    from gateway.cli.backup_files import sha256_of

    manifest["files"][0]["size"], manifest["files"][0]["sha256"] = sha256_of(copy)
    (damaged / "manifest.json").write_bytes(orjson.dumps(manifest))
    code, _out, err = await run_to_exit("restore", str(damaged), env={"STATE_DIRECTORY": str(tmp_path / "fresh")})
    assert code == 1, err
    assert err.count("\n") == 1, err
    more = len(report[0][0].splitlines()) - 2  # less the header and the line kept
    assert "fails SQLite's quick_check (Page " in err and f" (and {more} more problems)): " in err, err


@pytest.mark.timeout(60)
async def test_a_database_copy_stopped_by_a_file_size_limit_names_the_size_with_its_log(tmp_path: Path) -> None:
    state = tmp_path / "state-wal"
    state.mkdir(mode=0o700)
    registry = state / "devices.db"
    # A writer keeps its pages in the -wal (no checkpoint, the connection open): the copy holds them too.
    writer = sqlite3.connect(registry, isolation_level=None)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("CREATE TABLE devices (device_id TEXT PRIMARY KEY, note TEXT)")
    writer.executemany("INSERT INTO devices VALUES (?, ?)", [(f"board-{n}", "x" * 200) for n in range(500)])
    try:
        main, log = os.stat(registry).st_size, os.stat(f"{registry}-wal").st_size
        assert log > main, (main, log)  # the premise: the log holds most of it
        dest = tmp_path / "backup"
        code, _out, err = await run_to_exit(
            "backup", str(dest), env={"STATE_DIRECTORY": str(state)}, file_size_limit=main + 4096
        )
    finally:
        writer.close()
    assert code == 1, err
    assert err.startswith(f"mcp-gateway backup: cannot write {dest}/databases/devices.db: "), err
    assert (
        f"; {registry} is {main} bytes, {log} more in its write-ahead log: the copy needs up to {main + log} bytes; "
        f"this process may write files of at most {main + 4096} bytes (ulimit -f))" in err
    ), err


NOBODY = 65534  # a user other than the one running the backup (root, in CI)


@pytest.mark.timeout(60)
@pytest.mark.usefixtures("root")  # giving DEST to another user
async def test_an_empty_destination_another_user_owns_is_refused(tmp_path: Path) -> None:
    """Its owner could swap it for a link to any directory while a root-run backup writes and, failing,
    empties it by name."""
    env = small_backup_source(tmp_path)
    public = tmp_path / "public"
    public.mkdir()
    public.chmod(0o1777)  # like /tmp: sticky, so only the owner of `dest` can rename it
    dest = public / "dest"
    dest.mkdir()
    os.chown(dest, NOBODY, NOBODY)
    code, _out, err = await run_to_exit("backup", str(dest), env=env)
    assert code == 2, err
    assert err.startswith(
        f"mcp-gateway backup: {dest} belongs to uid {NOBODY} (nobody), not to the user running this backup: another "
        "user could swap it for a link while the backup writes; give a new directory or one you own\n"
    ), err
    assert not any(dest.iterdir())


@pytest.mark.timeout(60)
@pytest.mark.usefixtures("root")  # giving the parent to another user
@pytest.mark.parametrize("exists", [False, True])
async def test_a_destination_in_a_directory_another_user_owns_is_refused(tmp_path: Path, exists: bool) -> None:
    env = small_backup_source(tmp_path)
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    dest = theirs / "dest"
    if exists:
        dest.mkdir()  # root's own, but the owner of its parent may rename it
    os.chown(theirs, NOBODY, NOBODY)
    code, _out, err = await run_to_exit("backup", str(dest), env=env)
    assert code == 2, err
    assert err.startswith(
        f"mcp-gateway backup: {dest} is in {theirs}, which belongs to uid {NOBODY} (nobody), not to root or the "
        f"user running this backup: that user could swap {dest} for a link while the backup writes; "
    ), err
    assert [path.name for path in theirs.iterdir()] == (["dest"] if exists else [])
    assert not exists or not any(dest.iterdir())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("below", ["dest", "new/dest"])
async def test_a_destination_in_a_directory_others_may_write_without_a_sticky_bit_is_refused(
    tmp_path: Path, below: str
) -> None:
    env = small_backup_source(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # whoever may write here may rename any entry in it
    dest = shared / below
    code, _out, err = await run_to_exit("backup", str(dest), env=env)
    assert code == 2, err
    where = "in" if below == "dest" else "below"
    assert err.startswith(
        f"mcp-gateway backup: {dest} is {where} {shared} (mode 0777), which group or others may write and which has "
        f"no sticky bit: any of them could swap {dest} for a link while the backup writes; "
    ), err
    assert not any(shared.iterdir())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("exists", [False, True])
async def test_a_destination_of_this_user_in_a_sticky_directory_others_may_write_is_taken(
    tmp_path: Path, exists: bool
) -> None:
    """Like /tmp: in a sticky directory only an entry's owner renames it, and DEST is this user's."""
    env = small_backup_source(tmp_path)
    public = tmp_path / "public"
    public.mkdir()
    public.chmod(0o1777)
    dest = public / "dest"
    if exists:
        dest.mkdir()
    code, out, err = await run_to_exit("backup", str(dest), env=env)
    assert code == 0, err
    assert out.startswith("backed up 1 file, "), out
    assert sorted(path.name for path in dest.iterdir()) == ["databases", "manifest.json"]


@pytest.mark.timeout(90)
async def test_a_failing_backup_removes_nothing_through_a_destination_replaced_under_it(tmp_path: Path) -> None:
    """DEST renamed away and another directory put in its place while the backup writes: the failing backup
    leaves that directory's files alone (they are not this run's) and says where its own part is."""
    dest = tmp_path / "backup"
    moved = tmp_path / "moved"
    async with backup_held_in_its_copy(tmp_path, dest) as backup:
        dest.rename(moved)
        (dest / "keep-dir").mkdir(parents=True)
        (dest / "keep-dir" / "x").write_text("x\n")
        (dest / "keep-me.txt").write_text("precious\n")
    err = backup.err
    assert backup.process.returncode == 1, err
    assert (
        f"mcp-gateway backup: {dest} is no longer the directory this backup claimed (it was renamed or replaced "
        f"meanwhile): nothing was removed through it; find the part this backup wrote (it holds {CLAIM}) and "
        "remove it\n"
    ) in err, err
    assert (dest / "keep-me.txt").read_text() == "precious\n"
    assert (dest / "keep-dir" / "x").read_text() == "x\n"
    assert sorted(path.name for path in dest.iterdir()) == ["keep-dir", "keep-me.txt"]
    assert CLAIM in [path.name for path in moved.iterdir()]
