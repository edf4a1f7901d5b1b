"""`mcp-gateway restore --with-config` with a backup whose configuration names a file by a path that leaves the
configuration file's directory in its text (`<dir>/../elsewhere`) or through a directory link under it
(docs/cli.md, `restore`): refused without --force (exit 2, the place named, nothing written), written with
--force exactly where it was judged to go; a `..` or a link that stays beside the configuration is restored."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_backup_restore import POLICY, write_config
from tests.integration.test_backup_restore_safety import backup_of, rewrite_manifest
from tests.support.gateway_process import run_to_exit

PLANTED = "#!/bin/sh\necho planted by a hostile backup\n"


def point_policy_at(dest: Path, policy: Path, named: str, content: str = PLANTED) -> None:
    """Rewrite the backup as one whose configuration names its policy file `named`, holding `content` (mode
    0755), with the manifest's sizes, sums and original made to agree: what a hostile backup can do."""
    config_copy = dest / "config" / "00-gateway.toml"
    config_copy.write_text(config_copy.read_text().replace(str(policy), named))

    def agree(entry: dict[str, Any]) -> None:
        if entry.get("setting") == "policy.file":
            (dest / entry["path"]).write_text(content)
            entry["original"], entry["mode"] = named, "0755"
        if entry["kind"] in ("config", "named"):
            data = (dest / entry["path"]).read_bytes()
            entry["size"], entry["sha256"] = len(data), hashlib.sha256(data).hexdigest()

    rewrite_manifest(dest, agree)


async def hostile_backup(tmp_path: Path, named: str, content: str = PLANTED) -> tuple[Path, Path]:
    """A real backup of a real configuration, then rewritten to name its policy file `named`; the
    configuration's directory is emptied, as on a new appliance."""
    config = write_config(tmp_path)
    dest = await backup_of(tmp_path, "--config", str(config))
    point_policy_at(dest, config.parent / "policy.toml", named, content)
    for path in config.parent.iterdir():
        path.unlink()
    return dest, config


@pytest.mark.timeout(60)
@pytest.mark.parametrize("spelled", ["with ..", "plain"])
async def test_a_named_file_that_leaves_the_configuration_directory_is_refused_without_force(
    tmp_path: Path, spelled: str
) -> None:
    lands = tmp_path / "outside" / "evil.sh"
    named = f"{tmp_path}/etc/../outside/evil.sh" if spelled == "with .." else str(lands)
    dest, config = await hostile_backup(tmp_path, named)
    # The list to read first (restore without --with-config) names the place as it would be written.
    preview_env = {"STATE_DIRECTORY": str(tmp_path / "preview")}
    code, out, err = await run_to_exit("restore", str(dest), env=preview_env)
    spelled_so = f", named {named}" if spelled == "with .." else ""
    assert code == 0 and f"-> {lands} (mode 0755, policy.file{spelled_so})" in out, (out, err)
    fresh = {"STATE_DIRECTORY": str(tmp_path / "fresh")}
    code, out, err = await run_to_exit("restore", str(dest), "--with-config", env=fresh)
    assert code == 2, (out, err)
    said = f"(named {named}) " if spelled == "with .." else ""
    assert f"  {lands} (policy.file) {said}is outside {config.parent}, the directory of the configuration" in err, err
    assert "nothing was restored" in err and "Traceback" not in err
    assert not lands.parent.exists() and not config.exists() and not (tmp_path / "fresh").exists()

    # --force writes it, at the place it was judged by and said
    code, out, err = await run_to_exit("restore", str(dest), "--with-config", "--force", env=fresh)
    assert code == 0, err
    assert f"restored the file of policy.file {lands} (" in out, out
    assert "/../" not in out
    assert lands.read_text() == PLANTED and config.exists()


@pytest.mark.timeout(60)
async def test_a_named_file_behind_a_directory_link_leading_elsewhere_is_refused_without_force(
    tmp_path: Path,
) -> None:
    named = tmp_path / "etc" / "hooks" / "evil.sh"
    dest, config = await hostile_backup(tmp_path, str(named))
    cron = tmp_path / "cron.d"
    cron.mkdir()
    (config.parent / "hooks").symlink_to(cron)  # a link in the configuration's directory leading out of it
    fresh = {"STATE_DIRECTORY": str(tmp_path / "fresh")}
    code, out, err = await run_to_exit("restore", str(dest), "--with-config", env=fresh)
    assert code == 2, (out, err)
    assert (
        f"  {named} (policy.file) is outside {config.parent}, the directory of the configuration file restored: a "
        f"directory on its way is a symbolic link, and it leads to {cron}" in err
    ), err
    assert "nothing was restored" in err and "Traceback" not in err
    assert list(cron.iterdir()) == [] and not config.exists() and not (tmp_path / "fresh").exists()

    code, out, err = await run_to_exit("restore", str(dest), "--with-config", "--force", env=fresh)
    assert code == 0, err
    assert (cron / "evil.sh").read_text() == PLANTED and (config.parent / "hooks").is_symlink()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("spelled", ["with ..", "through a link inside"])
async def test_a_named_file_that_stays_beside_the_configuration_is_restored_without_force(
    tmp_path: Path, spelled: str
) -> None:
    if spelled == "with ..":
        named = f"{tmp_path}/etc/sub/../policy.toml"
        lands = tmp_path / "etc" / "policy.toml"
    else:
        named = f"{tmp_path}/etc/current/policy.toml"
        lands = tmp_path / "etc" / "v2" / "policy.toml"
    dest, config = await hostile_backup(tmp_path, named, POLICY)
    if spelled != "with ..":
        lands.parent.mkdir()
        (config.parent / "current").symlink_to(lands.parent)  # a release link kept beside the configuration
    code, out, err = await run_to_exit(
        "restore", str(dest), "--with-config", env={"STATE_DIRECTORY": str(tmp_path / "fresh")}
    )
    assert code == 0, (out, err)
    assert lands.read_text() == POLICY and config.exists()
    shown = lands if spelled == "with .." else named
    assert f"restored the file of policy.file {shown} (" in out, out
