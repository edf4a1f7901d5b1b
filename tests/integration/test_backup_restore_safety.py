"""`mcp-gateway backup` and `restore` where the place or the backup is not as expected (docs/operations.md,
"Backup and restore"): a manifest changed to move a secret or make it setuid, lock files and directories
left to the gateway's user when root restores, owners that do not exist here, configuration files behind
symbolic links, a full destination, the local CA of `tls self-signed`, a DEST inside the state directory
and a backup of a newer gateway."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.integration.test_backup_restore import POLICY, SECRET, mode, small_backup_source, write_config
from tests.support.gateway_process import run_to_exit

NOBODY = 65534
"""A uid and gid the test gives files and directories as root (the gateway's user stands for it)."""
as_root = pytest.mark.usefixtures("root")  # owners are given only by a restore run as root


def manifest_of(dest: Path) -> dict[str, Any]:
    return dict(orjson.loads((dest / "manifest.json").read_bytes()))


def rewrite_manifest(dest: Path, change: Any) -> None:
    manifest = manifest_of(dest)
    for entry in manifest["files"]:
        change(entry)
    (dest / "manifest.json").write_bytes(orjson.dumps(manifest))


async def backup_of(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Path:
    dest = tmp_path / "backup"
    code, _out, err = await run_to_exit("backup", str(dest), *args, env=env or small_backup_source(tmp_path))
    assert code == 0, err
    return dest


@pytest.mark.timeout(60)
@pytest.mark.parametrize("change", ["original", "mode 6777"])
async def test_a_manifest_changed_to_move_a_secret_or_make_it_setuid_is_refused(tmp_path: Path, change: str) -> None:
    config = write_config(tmp_path)
    dest = await backup_of(tmp_path, "--config", str(config))
    secret = tmp_path / "etc" / "provider-secret"
    elsewhere = tmp_path / "elsewhere" / "cron.d" / "x"

    def tamper(entry: dict[str, Any]) -> None:
        if entry.get("setting") == "providers.auth.shared_secret.file":
            if change == "original":
                entry["original"] = str(elsewhere)
            else:
                entry["mode"] = "6777"

    rewrite_manifest(dest, tamper)
    secret.unlink()
    fresh = tmp_path / "fresh"
    code, out, err = await run_to_exit("restore", str(dest), "--with-config", env={"STATE_DIRECTORY": str(fresh)})
    assert code == 1, (out, err)
    if change == "original":
        assert f"{elsewhere} (providers.auth.shared_secret.file) is not where the backed-up configuration" in err, err
        assert f"file puts it ({secret}): the manifest was changed" in err
    else:
        assert f"{secret}: the manifest gives it mode 6777 (setuid, setgid or sticky)" in err, err
    assert "nothing was restored" in err
    assert not elsewhere.parent.parent.exists() and not secret.exists() and not fresh.exists()


@pytest.mark.timeout(60)
async def test_modes_beyond_the_limits_are_narrowed_and_the_applied_mode_is_said(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    dest = await backup_of(tmp_path, "--config", str(config))
    secret = tmp_path / "etc" / "provider-secret"
    policy = tmp_path / "etc" / "policy.toml"

    def loosen(entry: dict[str, Any]) -> None:
        if entry.get("setting") in ("providers.auth.shared_secret.file", "policy.file"):
            entry["mode"] = "0666"

    rewrite_manifest(dest, loosen)
    secret.unlink()
    policy.unlink()
    code, out, err = await run_to_exit(
        "restore", str(dest), "--with-config", env={"STATE_DIRECTORY": str(tmp_path / "fresh")}
    )
    assert code == 0, err
    assert mode(secret) == 0o640 and mode(policy) == 0o644
    assert "mode 0640; the backup says 0666, restore gives a secret at most 0640)" in out, out
    assert "mode 0644; the backup says 0666, restore gives a file at most 0755)" in out, out


@as_root
@pytest.mark.timeout(60)
async def test_root_leaves_the_lock_files_it_made_to_the_state_directory_owner(tmp_path: Path) -> None:
    env = small_backup_source(tmp_path)
    audit = sqlite3.connect(Path(env["STATE_DIRECTORY"]) / "audit.db")
    audit.execute("CREATE TABLE decisions (id INTEGER PRIMARY KEY)")
    audit.commit()
    audit.close()
    dest = await backup_of(tmp_path, env=env)
    state = tmp_path / "gateway-state"
    state.mkdir(mode=0o700)
    os.chown(state, NOBODY, NOBODY)
    code, _out, err = await run_to_exit("restore", str(dest), env={"STATE_DIRECTORY": str(state)})
    assert code == 0, err
    for name in ("gateway.lock", "audit.db.lock", "audit.db", "devices.db"):
        info = (state / name).stat()
        assert (info.st_uid, info.st_gid) == (NOBODY, NOBODY), name


@as_root
@pytest.mark.timeout(60)
async def test_root_makes_a_missing_config_directory_as_it_was_and_says_which_owner_it_cannot_give(
    tmp_path: Path,
) -> None:
    tls = tmp_path / "etc" / "tls"
    tls.mkdir(parents=True)
    code, _out, err = await run_to_exit("tls", "self-signed", "--dir", str(tls), "--host", "gw.example")
    assert code == 0, err
    tokens = tmp_path / "etc" / "tokens.toml"
    code, _out, err = await run_to_exit("token", "create", "operator", "--file", str(tokens))
    assert code == 0, err
    config = tmp_path / "etc" / "gateway.toml"
    config.write_text(
        f'[tls]\ncert_file = "{tls}/server.pem"\nkey_file = "{tls}/server-key.pem"\n'
        f'[auth]\ntoken_files = ["{tokens}"]\n'
    )
    tls.chmod(0o750)
    for path in (tls, tls / "server.pem", tls / "server-key.pem"):
        os.chown(path, NOBODY, NOBODY)
    os.chown(tokens, 4242, 4242)  # an owner without a name
    dest = await backup_of(tmp_path, "--config", str(config))
    entries = {entry["original"]: entry for entry in manifest_of(dest)["files"]}
    assert entries[str(tokens)]["uid"] == 4242 and "owner" not in entries[str(tokens)]
    assert entries[str(tls / "server.pem")]["directory"]["mode"] == "0750"

    def unknown_owner(entry: dict[str, Any]) -> None:
        if entry["original"] == str(tls / "server-key.pem"):
            entry["owner"] = "no-such-gateway-user"

    rewrite_manifest(dest, unknown_owner)
    for path in (tls / "server.pem", tls / "server-key.pem", tls / "ca.pem", tls / "ca-key.pem", tokens):
        path.unlink()
    tls.rmdir()
    code, out, err = await run_to_exit(
        "restore", str(dest), "--with-config", env={"STATE_DIRECTORY": str(tmp_path / "fresh")}
    )
    assert code == 0, err
    info = tls.stat()
    assert (info.st_uid, info.st_gid, mode(tls)) == (NOBODY, NOBODY, 0o750)
    assert (tls / "server.pem").stat().st_uid == NOBODY
    assert (tokens.stat().st_uid, tokens.stat().st_gid) == (4242, 4242)
    key = (tls / "server-key.pem").stat()
    assert (key.st_uid, key.st_gid) == (0, NOBODY)
    assert (
        f"{tls / 'server-key.pem'}: owner no-such-gateway-user (recorded in the backup) does not exist on this "
        "machine, so it is left to root" in err
    ), err
    assert f"restored the file of ca-key.pem beside tls.cert_file {tls / 'ca-key.pem'}" in out, out


@pytest.mark.timeout(60)
async def test_the_local_ca_beside_the_certificate_is_backed_up(tmp_path: Path) -> None:
    tls = tmp_path / "etc" / "tls"
    code, _out, err = await run_to_exit("tls", "self-signed", "--dir", str(tls), "--host", "gw.example")
    assert code == 0, err
    config = tmp_path / "etc" / "gateway.toml"
    config.write_text(f'[tls]\ncert_file = "{tls}/server.pem"\nkey_file = "{tls}/server-key.pem"\n')
    env = small_backup_source(tmp_path)
    dest = await backup_of(tmp_path, "--config", str(config), env=env)
    settings = {entry["original"]: entry.get("setting") for entry in manifest_of(dest)["files"]}
    assert settings[str(tls / "ca.pem")] == "ca.pem beside tls.cert_file"
    assert settings[str(tls / "ca-key.pem")] == "ca-key.pem beside tls.cert_file"
    (tls / "ca-key.pem").unlink()
    again = tmp_path / "again"
    code, out, err = await run_to_exit("backup", str(again), "--config", str(config), env=env)
    assert code == 0, err
    assert f"not in the backup: named {tls / 'ca-key.pem'} (not found beside tls.cert_file" in out, out


@pytest.mark.timeout(60)
async def test_a_config_file_behind_a_symbolic_link_is_compared_and_written_through_it(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    policy = tmp_path / "etc" / "policy.toml"
    managed = tmp_path / "managed" / "policy.toml"
    managed.parent.mkdir()
    policy.rename(managed)
    policy.symlink_to(managed)
    dest = await backup_of(tmp_path, "--config", str(config))
    [entry] = [entry for entry in manifest_of(dest)["files"] if entry.get("setting") == "policy.file"]
    assert entry["link"] == str(managed)
    fresh = {"STATE_DIRECTORY": str(tmp_path / "fresh")}
    code, out, err = await run_to_exit("restore", str(dest), "--with-config", env=fresh)
    assert code == 0, err
    assert f"in place already: the file of policy.file {managed} (through the link {policy})" in out, out

    managed.write_text(POLICY + "# changed after the backup\n")
    code, _out, err = await run_to_exit("restore", str(dest), "--with-config", env=fresh)
    assert code == 2 and f"{managed} (the file of policy.file) exists with other content" in err, err
    code, out, err = await run_to_exit("restore", str(dest), "--with-config", "--force", env=fresh)
    assert code == 0, err
    assert policy.is_symlink() and os.readlink(policy) == str(managed)
    assert managed.read_text() == POLICY
    [kept] = [path for path in managed.parent.iterdir() if ".replaced-" in path.name]
    assert kept.read_text().endswith("# changed after the backup\n")

    managed.unlink()  # a link that leads nowhere is never replaced, --force or not
    code, _out, err = await run_to_exit("restore", str(dest), "--with-config", "--force", env=fresh)
    assert code == 2, err
    assert f"{policy} is a symbolic link to {managed}, which leads to no regular file" in err, err
    assert policy.is_symlink() and not managed.exists()
    assert (tmp_path / "etc" / "provider-secret").read_text() == SECRET + "\n"


def grow_registry(env: dict[str, str], boards: int) -> Path:
    """`boards` rows of about 400 bytes each in the device registry of the backup source `env`."""
    registry = Path(env["STATE_DIRECTORY"]) / "devices.db"
    db = sqlite3.connect(registry)
    db.executemany("INSERT INTO devices VALUES (?)", [(f"board-{n:04d}-{'x' * 400}",) for n in range(boards)])
    db.commit()
    db.close()
    return registry


@pytest.mark.timeout(60)
async def test_a_destination_that_cannot_take_the_copy_is_named_not_the_database(tmp_path: Path) -> None:
    env = small_backup_source(tmp_path)
    registry = grow_registry(env, 2000)
    dest = tmp_path / "backup"
    code, _out, err = await run_to_exit("backup", str(dest), env=env, file_size_limit=256 * 1024)
    assert code == 1, err
    assert err.startswith(f"mcp-gateway backup: cannot write {dest}/databases/devices.db: disk I/O error ("), err
    assert (
        f"bytes free on the file system of {dest}; {registry} is {registry.stat().st_size} bytes; this process may "
        f"write files of at most {256 * 1024} bytes (ulimit -f))" in err
    ), err
    assert "cannot be backed up" not in err and f"no backup was left in {dest}" in err
    assert not dest.exists()


@pytest.mark.timeout(60)
async def test_a_destination_inside_the_state_directory_is_refused(tmp_path: Path) -> None:
    env = small_backup_source(tmp_path)
    inside = Path(env["STATE_DIRECTORY"]) / "firmware" / "nightly"
    code, _out, err = await run_to_exit("backup", str(inside), env=env)
    assert code == 2, err
    assert err.startswith(f"mcp-gateway backup: {inside} is inside the state directory {env['STATE_DIRECTORY']}:")
    assert not inside.exists()


@pytest.mark.timeout(60)
async def test_a_backup_of_a_newer_gateway_is_restored_with_a_warning(tmp_path: Path) -> None:
    dest = await backup_of(tmp_path)
    manifest = manifest_of(dest)
    manifest["gateway_version"] = "99.0.0"
    (dest / "manifest.json").write_bytes(orjson.dumps(manifest))
    code, out, err = await run_to_exit("restore", str(dest), env={"STATE_DIRECTORY": str(tmp_path / "fresh")})
    assert code == 0, err
    assert "warning: the backup was made by gateway 99.0.0, newer than this one" in err, err
    assert "restored the device registry" in out


@as_root
@pytest.mark.timeout(60)
async def test_a_link_in_a_directory_the_gateway_user_owns_is_not_written_through(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    dest = await backup_of(tmp_path, "--config", str(config))
    secret = tmp_path / "etc" / "provider-secret"
    victim = tmp_path / "victim"
    victim.write_text("root's own file\n")
    secret.unlink()
    secret.symlink_to(victim)
    os.chown(secret.parent, NOBODY, NOBODY)  # the gateway's user could have made that link
    code, _out, err = await run_to_exit(
        "restore", str(dest), "--with-config", "--force", env={"STATE_DIRECTORY": str(tmp_path / "fresh")}
    )
    assert code == 2, err
    assert f"{secret} is a symbolic link in a directory another user may write (owner uid {NOBODY}" in err, err
    assert victim.read_text() == "root's own file\n" and secret.is_symlink()
