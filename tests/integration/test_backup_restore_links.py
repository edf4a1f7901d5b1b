"""`mcp-gateway backup` and `restore` where whoever may write the state directory or the backup tries to make
them read or write another file (docs/operations.md, "Backup and restore"): a firmware/ that is a link, a
directory link inside it, an image swapped for a link while the backup reads, a state directory whose
firmware/ leads elsewhere when restore writes, a backup file swapped after restore checked it, a manifest
that moves a file out of its folder, and a configuration that names files outside its own directory."""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.integration.test_backup_restore import small_backup_source, write_config
from tests.integration.test_backup_restore_safety import NOBODY, as_root, backup_of, manifest_of, rewrite_manifest
from tests.support.gateway_process import cli_process, run_to_exit

PRIVATE = "root-only-secret-0123456789\n"
IMAGE = b"firmware image\n"


def private_directory(tmp_path: Path) -> Path:
    """A directory standing for one only root may read, holding a secret."""
    folder = tmp_path / "root-only"
    folder.mkdir(mode=0o700)
    (folder / "secret.key").write_text(PRIVATE)
    return folder


def backed_up_bytes(dest: Path) -> list[bytes]:
    return [path.read_bytes() for path in dest.rglob("*") if path.is_file()]


@pytest.mark.timeout(60)
async def test_a_firmware_directory_that_is_a_link_is_listed_not_followed(tmp_path: Path) -> None:
    env = small_backup_source(tmp_path)
    firmware = Path(env["STATE_DIRECTORY"]) / "firmware"
    private = private_directory(tmp_path)
    firmware.symlink_to(private)  # what the gateway's user may do to its own state directory
    code, out, err = await run_to_exit("backup", str(tmp_path / "backup"), env=env)
    assert code == 0, err
    dest = tmp_path / "backup"
    assert not (dest / "firmware").exists()
    assert all(PRIVATE.encode() not in data for data in backed_up_bytes(dest))
    why = f"a symbolic link to {private}: not copied"
    assert {"kind": "firmware", "original": str(firmware), "why": why} in manifest_of(dest)["absent"]
    assert f"not in the backup: firmware {firmware} ({why})" in out, out


@pytest.mark.timeout(60)
async def test_links_fifos_and_directory_links_inside_firmware_are_listed_not_copied(tmp_path: Path) -> None:
    env = small_backup_source(tmp_path)
    firmware = Path(env["STATE_DIRECTORY"]) / "firmware"
    (firmware / "pump1").mkdir(parents=True)
    (firmware / "pump1" / "1.0.0.bin").write_bytes(IMAGE)
    private = private_directory(tmp_path)
    (firmware / "linked-dir").symlink_to(private)
    (firmware / "pump1" / "linked.bin").symlink_to(private / "secret.key")
    os.mkfifo(firmware / "pump1" / "pipe")
    dest = await backup_of(tmp_path, env=env)
    manifest = manifest_of(dest)
    assert [entry["path"] for entry in manifest["files"] if entry["kind"] == "firmware"] == ["firmware/pump1/1.0.0.bin"]
    absent = {item["original"]: item["why"] for item in manifest["absent"]}
    assert absent[str(firmware / "linked-dir")] == f"a symbolic link to {private}: not copied"
    assert absent[str(firmware / "pump1" / "linked.bin")] == f"a symbolic link to {private / 'secret.key'}: not copied"
    assert absent[str(firmware / "pump1" / "pipe")] == "a FIFO: not copied"
    assert all(PRIVATE.encode() not in data for data in backed_up_bytes(dest))


SWAPPER = """
import sys
from pathlib import Path

secret, images = Path(sys.argv[1]), [Path(name) for name in sys.argv[2:]]
for image in images:
    image.with_name(image.name + ".l").symlink_to(secret)
print("ready", flush=True)
while True:
    for image in images:
        if image.is_symlink():
            image.rename(image.with_name(image.name + ".l2"))
            image.with_name(image.name + ".r").write_bytes(b"firmware image\\n")
            image.with_name(image.name + ".r").rename(image)
            image.with_name(image.name + ".l2").rename(image.with_name(image.name + ".l"))
        else:
            image.with_name(image.name + ".l").rename(image)
"""
"""Turns each image into a link to the secret and back, each change one rename, until killed."""


@pytest.mark.timeout(180)
async def test_an_image_swapped_for_a_link_while_the_backup_reads_is_never_read_through_it(tmp_path: Path) -> None:
    env = small_backup_source(tmp_path)
    firmware = Path(env["STATE_DIRECTORY"]) / "firmware"
    # Deep folders: a backup that checks a name, then makes the copy's folders, then opens the name gives
    # the swap time; one that opens the name once and reads only what it opened gives none.
    deep = firmware.joinpath(*["level"] * 150)
    deep.mkdir(parents=True)
    images = [deep / f"img{number:02d}.bin" for number in range(20)]
    for image in images:
        image.write_bytes(IMAGE)
    secret = private_directory(tmp_path) / "secret.key"
    swapper = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SWAPPER, str(secret), *map(str, images), stdout=asyncio.subprocess.PIPE
    )
    try:
        assert swapper.stdout is not None
        assert await asyncio.wait_for(swapper.stdout.readline(), 30) == b"ready\n"
        for attempt in range(3):
            dest = tmp_path / f"backup-{attempt}"
            code, _out, err = await run_to_exit("backup", str(dest), env=env, timeout=60)
            assert code == 0, err
            copies = [entry for entry in manifest_of(dest)["files"] if entry["path"].endswith(".bin")]
            assert all((dest / entry["path"]).read_bytes() == IMAGE for entry in copies)
            assert all(PRIVATE.encode() not in data for data in backed_up_bytes(dest))
    finally:
        swapper.kill()
        await swapper.wait()


async def a_backup_with_firmware(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    env = small_backup_source(tmp_path)
    firmware = Path(env["STATE_DIRECTORY"]) / "firmware"
    (firmware / "pump1").mkdir(parents=True)
    (firmware / "pump1" / "1.0.0.bin").write_bytes(IMAGE)
    (firmware / "top.bin").write_bytes(IMAGE)
    return await backup_of(tmp_path, env=env), env


@pytest.mark.timeout(60)
@pytest.mark.parametrize("link", ["firmware", "firmware/pump1"])
async def test_restore_never_writes_through_a_directory_link_in_the_state_directory(tmp_path: Path, link: str) -> None:
    dest, _env = await a_backup_with_firmware(tmp_path)
    target = tmp_path / "target-state"
    private = private_directory(tmp_path)
    (target / link).parent.mkdir(parents=True, exist_ok=True)
    (target / link).symlink_to(private)
    for force in ((), ("--force",)):
        code, out, err = await run_to_exit("restore", str(dest), *force, env={"STATE_DIRECTORY": str(target)})
        assert code == 2, (out, err)
        assert err.startswith(
            f"mcp-gateway restore: {target / link} is a symbolic link to {private}: restore never writes through a "
            "link (or into what is no directory) under the state directory"
        ), err
        assert err.rstrip().endswith("nothing was restored"), err
        assert sorted(path.name for path in private.iterdir()) == ["secret.key"]
        assert not (target / "devices.db").exists()


@as_root
@pytest.mark.timeout(60)
async def test_root_gives_the_firmware_folders_it_makes_to_the_state_directory_owner(tmp_path: Path) -> None:
    dest, _env = await a_backup_with_firmware(tmp_path)
    target = tmp_path / "target-state"
    target.mkdir(mode=0o700)
    os.chown(target, NOBODY, NOBODY)
    code, _out, err = await run_to_exit("restore", str(dest), env={"STATE_DIRECTORY": str(target)})
    assert code == 0, err
    for path in (target / "firmware", target / "firmware" / "pump1", target / "firmware" / "pump1" / "1.0.0.bin"):
        info = path.lstat()
        assert (info.st_uid, info.st_gid) == (NOBODY, NOBODY), path
    assert (target / "firmware" / "pump1" / "1.0.0.bin").read_bytes() == IMAGE


def open_names(pid: int) -> list[str]:
    try:
        return [os.readlink(f"/proc/{pid}/fd/{name}") for name in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("swap", ["a link", "other content"])
async def test_a_backup_file_swapped_after_restore_checked_it_is_not_written(tmp_path: Path, swap: str) -> None:
    source = tmp_path / "src"
    (source / "firmware").mkdir(parents=True)
    big = bytes(64 * 1024 * 1024)  # restore checks it after a.bin: long enough to swap a.bin meanwhile
    files = {"a.bin": IMAGE, "zz-big.bin": big}

    def entry(name: str, data: bytes) -> dict[str, Any]:
        (source / "firmware" / name).write_bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        place = {"original": f"/x/firmware/{name}", "path": f"firmware/{name}"}
        return {"kind": "firmware", **place, "size": len(data), "sha256": digest, "mode": "0644"}

    manifest = {
        "format": "mcp-gateway-backup/1",
        "gateway_version": "0.0.1",
        "created": "2026-05-09T14:15:00Z",
        "state_directory": "/x",
        "files": [entry(name, data) for name, data in files.items()],
        "absent": [],
    }
    (source / "manifest.json").write_bytes(orjson.dumps(manifest))
    del big
    secret = private_directory(tmp_path) / "secret.key"
    target = tmp_path / "target-state"
    process = await cli_process("restore", str(source), env={"STATE_DIRECTORY": str(target)})
    swapped = False
    while process.returncode is None and not swapped:
        if any(name.endswith("src/firmware/zz-big.bin") for name in open_names(process.pid)):
            image = source / "firmware" / "a.bin"
            image.unlink()
            if swap == "a link":
                image.symlink_to(secret)
            else:
                image.write_bytes(b"another image\n")
            swapped = True
        await asyncio.sleep(0.001)
    out, err = (part.decode() for part in await asyncio.wait_for(process.communicate(), 60))
    assert swapped, "the restore ended before it checked zz-big.bin"
    assert process.returncode == 1, (out, err)
    copy = source / "firmware" / "a.bin"
    if swap == "a link":
        assert f"{copy} (backup of /x/firmware/a.bin) is a symbolic link now, after restore checked it" in err, err
    else:
        assert f"{copy} (backup of /x/firmware/a.bin) changed after restore checked it (size 14," in err, err
    assert f"{target / 'firmware' / 'a.bin'} was not written and no file was restored: " in err  # the first
    assert "Traceback" not in err
    assert sorted(path.name for path in (target / "firmware").iterdir()) == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("kind", "path"), [("firmware", "config/00-gateway.toml"), ("registry", "firmware")])
async def test_a_file_out_of_its_kinds_folder_is_refused(tmp_path: Path, kind: str, path: str) -> None:
    config = write_config(tmp_path)
    dest = await backup_of(tmp_path, "--config", str(config))

    def move(entry: dict[str, Any]) -> None:
        if entry["path"] == "config/00-gateway.toml":
            entry["kind"], entry["path"] = kind, path

    rewrite_manifest(dest, move)
    fresh = tmp_path / "fresh"
    code, out, err = await run_to_exit("restore", str(dest), env={"STATE_DIRECTORY": str(fresh)})
    assert code == 1, (out, err)
    assert f"a {kind} file at {path!r}, not in {'firmware' if kind == 'firmware' else 'databases'}/ where" in err, err
    assert "the manifest was changed; nothing was restored" in err and "Traceback" not in err
    assert not fresh.exists()


@pytest.mark.timeout(60)
async def test_with_config_writes_outside_the_configuration_directory_only_with_force(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    policy = tmp_path / "etc" / "policy.toml"
    elsewhere = tmp_path / "elsewhere" / "cron.d" / "policy"
    elsewhere.parent.mkdir(parents=True)
    policy.rename(elsewhere)
    config.write_text(config.read_text().replace(str(policy), str(elsewhere)))
    dest = await backup_of(tmp_path, "--config", str(config))
    elsewhere.unlink()
    fresh = {"STATE_DIRECTORY": str(tmp_path / "fresh")}
    code, out, err = await run_to_exit("restore", str(dest), "--with-config", env=fresh)
    assert code == 2, (out, err)
    assert (
        f"{elsewhere} (policy.file) is outside {config.parent}, the directory of the configuration file restored" in err
    ), err
    assert "nothing was restored" in err and not elsewhere.exists() and not (tmp_path / "fresh").exists()
    code, out, err = await run_to_exit("restore", str(dest), "--with-config", "--force", env=fresh)
    assert code == 0, err
    assert elsewhere.exists() and f"restored the file of policy.file {elsewhere}" in out


@pytest.mark.timeout(60)
async def test_a_configuration_link_in_a_directory_others_may_write_is_not_followed(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    secret = tmp_path / "etc" / "provider-secret"
    private = private_directory(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # whoever may write here may point a link at any file
    config.write_text(config.read_text().replace(str(secret), str(shared / "provider-secret")))
    (shared / "provider-secret").symlink_to(private / "secret.key")
    dest = await backup_of(tmp_path, "--config", str(config))
    assert all(PRIVATE.encode() not in data for data in backed_up_bytes(dest))
    why = (
        f"a symbolic link through {shared}, a directory another user may write: not followed (named by "
        "providers.auth.shared_secret.file)"
    )
    assert {"kind": "named", "original": str(shared / "provider-secret"), "why": why} in manifest_of(dest)["absent"]


@as_root
@pytest.mark.timeout(60)
async def test_a_registry_that_is_a_link_in_the_gateway_users_directory_is_not_read(tmp_path: Path) -> None:
    # SQLite opens by name: the gateway's user could point devices.db at any database root may read.
    env = small_backup_source(tmp_path)
    state = Path(env["STATE_DIRECTORY"])
    elsewhere = tmp_path / "roots-own.db"
    os.rename(state / "devices.db", elsewhere)
    os.symlink(elsewhere, state / "devices.db")
    os.chown(state, NOBODY, NOBODY)
    dest = tmp_path / "backup"
    code, _out, err = await run_to_exit("backup", str(dest), env=env)
    assert code == 1, err
    assert f"{state / 'devices.db'} cannot be backed up: it is a symbolic link in {state}" in err
    assert not dest.exists()
