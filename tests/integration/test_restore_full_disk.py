"""`mcp-gateway restore --force` where the copy cannot be written (a full disk; here a file size limit
on the restoring process, which fails the write with EFBIG as a full file system fails it with ENOSPC):
exit 1, the destination's fault named with how to go on, and no partial `.<name>.restoring` copy left
behind to take the space (docs/operations.md, "Backup and restore")."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from pathlib import Path

import pytest

from tests.integration.test_backup_restore import small_backup_source
from tests.support.gateway_process import REPO, clean_environment, run_to_exit

LIMIT_BYTES = 64 * 1024


def limit_file_size() -> None:
    """In the child: files it writes stop at LIMIT_BYTES (the write fails with EFBIG; Python ignores SIGXFSZ)."""
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT_BYTES, resource.RLIM_INFINITY))


@pytest.mark.timeout(60)
async def test_a_restore_that_cannot_write_the_copy_leaves_no_temporary_file(tmp_path: Path) -> None:
    env = small_backup_source(tmp_path)
    state = Path(env["STATE_DIRECTORY"])
    db = sqlite3.connect(state / "devices.db")
    db.executemany("INSERT INTO devices VALUES (?)", [(f"board-{n:04d}-{'x' * 400}",) for n in range(1000)])
    db.commit()
    db.close()
    dest = tmp_path / "backup"
    code, _, err = await run_to_exit("backup", str(dest), env=env)
    assert code == 0, err
    fresh = tmp_path / "fresh"
    fresh.mkdir(mode=0o700)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli",
        "restore",
        str(dest),
        "--force",
        cwd=REPO,
        env=clean_environment({"STATE_DIRECTORY": str(fresh)}),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=limit_file_size,
    )
    _out, raw = await asyncio.wait_for(process.communicate(), 30)
    err = raw.decode()
    assert process.returncode == 1, err
    assert sorted(path.name for path in fresh.iterdir() if "devices" in path.name) == [], err
    assert err.startswith(f"mcp-gateway restore: cannot write {fresh}/.devices.db.restoring: "), err
    assert err.rstrip().endswith(
        f"{fresh}/devices.db was not written and the files said restored above stay in place: free space on that "
        "file system (or repair it), then run restore again with --force"
    ), err
