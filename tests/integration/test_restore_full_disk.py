"""`mcp-gateway restore --force` where the copy cannot be written (a full disk; here a file size limit
on the restoring process, which fails the write with EFBIG as a full file system fails it with ENOSPC):
exit 1, the destination's fault named with how to go on, and no partial `.<name>.restoring` copy left
behind to take the space (docs/operations.md, "Backup and restore")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_backup_restore import small_backup_source
from tests.integration.test_backup_restore_safety import grow_registry
from tests.support.gateway_process import run_to_exit

LIMIT_BYTES = 64 * 1024


@pytest.mark.timeout(60)
async def test_a_restore_that_cannot_write_the_copy_leaves_no_temporary_file(tmp_path: Path) -> None:
    env = small_backup_source(tmp_path)
    grow_registry(env, 1000)
    dest = tmp_path / "backup"
    code, _, err = await run_to_exit("backup", str(dest), env=env)
    assert code == 0, err
    fresh = tmp_path / "fresh"
    fresh.mkdir(mode=0o700)
    code, _, err = await run_to_exit(
        "restore", str(dest), "--force", env={"STATE_DIRECTORY": str(fresh)}, file_size_limit=LIMIT_BYTES
    )
    assert code == 1, err
    assert sorted(path.name for path in fresh.iterdir() if "devices" in path.name) == [], err
    assert err.startswith(f"mcp-gateway restore: cannot write {fresh}/.devices.db.restoring: "), err
    assert err.rstrip().endswith(
        f"{fresh}/devices.db was not written and no file was restored: free space on that file system (or repair "
        "it), then run restore again with --force"
    ), err
