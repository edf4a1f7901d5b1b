"""`mcp-gateway backup` and `restore` where the places or the backup are not as planned (docs/operations.md,
"Backup and restore"): a stale rollback journal beside the database replaced, a gateway whose lock files
were removed, a state directory on read-only media, provider identity secrets, a damaged or hostile
manifest, pre-release versions, an [audit] path under a regular file, and the closing hint."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.cli.backup_files import Entry
from gateway.cli.restore_targets import is_secret, newer
from tests.integration.test_backup_restore import POLICY, mode, small_backup_source, write_config
from tests.integration.test_backup_restore_safety import backup_of, manifest_of
from tests.support.gateway_process import gateway_process, run_to_exit

as_root = pytest.mark.usefixtures("root")
IDENTITY_SECRET = "identity-secret-for-the-backup-fix-test-0123456789"
SECRET_SETTINGS = (
    "auth.token_files[0]",
    "auth.tokens[1].file",
    "auth.hmac.keys[0].file",
    "providers.auth.shared_secret.file",
    "providers.auth.identities[0].file",
    "providers.auth.identities[12].file",
    "tls.key_file",
    "ca-key.pem beside tls.cert_file",
    "mqtt.brokers[0].password.file",
    "mqtt.brokers[0].key_password.file",
    "mqtt.brokers[2].key_file",
    "upstreams.remote[0].secret.file",
    "upstreams.remote[0].headers_file",
    "upstreams.remote[0].oauth_client_credentials.client_secret.file",
    "telemetry.headers_file",
)
"""Every setting of gateway/config whose file holds a secret."""


def hot_journal(database: Path) -> None:
    """Leave `database` with a hot rollback journal: a transaction that spilled pages, then a crash."""
    scratch = database.with_name("scratch.db")
    writer = sqlite3.connect(scratch, isolation_level=None)
    writer.execute("PRAGMA journal_mode = DELETE")
    writer.execute("CREATE TABLE t (x)")
    writer.execute("INSERT INTO t VALUES (randomblob(100000))")
    writer.execute("BEGIN")
    writer.execute("PRAGMA cache_size = 1")
    writer.execute("UPDATE t SET x = randomblob(100000)")  # spills: the file changed, the journal hot
    shutil.copy(f"{scratch}-journal", f"{database}-journal")
    shutil.copy(scratch, database)
    writer.execute("ROLLBACK")
    writer.close()
    scratch.unlink()


@pytest.mark.timeout(60)
async def test_a_stale_rollback_journal_goes_aside_with_the_database_it_belongs_to(tmp_path: Path) -> None:
    dest = await backup_of(tmp_path)
    fresh = tmp_path / "fresh"
    fresh.mkdir(mode=0o700)
    hot_journal(fresh / "devices.db")
    code, _out, err = await run_to_exit("restore", str(dest), "--force", env={"STATE_DIRECTORY": str(fresh)})
    assert code == 0, err
    kept = sorted(name for name in os.listdir(fresh) if ".replaced-" in name)
    assert len(kept) == 2 and kept[1] == kept[0] + "-journal", kept
    assert not (fresh / "devices.db-journal").exists()
    db = sqlite3.connect(f"file:{fresh / 'devices.db'}?mode=ro", uri=True)
    assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert db.execute("SELECT count(*) FROM devices").fetchone() == (200,)
    db.close()
    # a journal with no database beside it is removed: SQLite would replay it into the restored file
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    hot_journal(other / "devices.db")
    (other / "devices.db").unlink()
    code, _out, err = await run_to_exit("restore", str(dest), env={"STATE_DIRECTORY": str(other)})
    assert code == 0, err
    assert not (other / "devices.db-journal").exists()
    db = sqlite3.connect(f"file:{other / 'devices.db'}?mode=ro", uri=True)
    assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    db.close()


@pytest.mark.timeout(90)
async def test_restore_beside_a_gateway_whose_lock_files_were_removed_is_refused(tmp_path: Path) -> None:
    state = Path(os.environ["STATE_DIRECTORY"])
    config = write_config(tmp_path)
    async with gateway_process("--config", str(config), "--port", "0") as gateway:
        for _ in range(100):
            if (state / "audit.db").exists():
                break
            await asyncio.sleep(0.1)
        code, _out, err = await run_to_exit("backup", str(tmp_path / "backup"), "--config", str(config))
        assert code == 0, err
        (state / "gateway.lock").unlink()
        (state / "audit.db.lock").unlink()
        before = (state / "audit.db").stat()
        code, out, err = await run_to_exit("restore", str(tmp_path / "backup"), "--config", str(config), "--force")
        assert code == 2, (out, err)
        assert f"{state / 'audit.db'} (the audit trail) is in use by process {gateway.process.pid}" in err, err
        assert "nothing was restored" in err
        assert not [name for name in os.listdir(state) if ".replaced-" in name]
        assert (state / "audit.db").stat().st_ino == before.st_ino


@contextlib.contextmanager
def read_only_mount(source: Path, place: Path) -> Iterator[None]:
    """`source` seen read-only at `place` (a bind mount, as a card mounted ro)."""
    place.mkdir()
    subprocess.run(["mount", "--bind", str(source), str(place)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(place)], check=True)
        yield
    finally:
        subprocess.run(["umount", str(place)], check=True)


@as_root
@pytest.mark.timeout(60)
@pytest.mark.parametrize("log", ["no log", "a log"])
async def test_a_state_directory_on_read_only_media_is_backed_up(tmp_path: Path, log: str) -> None:
    source = tmp_path / "card"
    source.mkdir(mode=0o700)
    db = sqlite3.connect(source / "audit.db")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA wal_autocheckpoint = 0")
    db.execute("CREATE TABLE t (x)")
    db.executemany("INSERT INTO t VALUES (?)", [(n,) for n in range(50)])
    db.commit()
    if log == "a log":  # a crash with rows only in the log: a copy of both files, as the card holds them
        shutil.copy(source / "audit.db", tmp_path / "main")
        shutil.copy(source / "audit.db-wal", tmp_path / "wal")
    db.close()
    if log == "a log":
        shutil.copy(tmp_path / "main", source / "audit.db")
        shutil.copy(tmp_path / "wal", source / "audit.db-wal")
        assert (source / "audit.db-wal").stat().st_size > 0
    config = tmp_path / "ro.toml"
    config.write_text(f'[audit]\npath = "{tmp_path / "ro" / "audit.db"}"\n')
    with read_only_mount(source, tmp_path / "ro"):
        dest = tmp_path / "backup"
        code, out, err = await run_to_exit(
            "backup", str(dest), "--config", str(config), env={"STATE_DIRECTORY": str(tmp_path / "ro")}
        )
    assert code == 0, (out, err)
    assert "DEST" not in err
    copy = sqlite3.connect(f"file:{dest / 'databases' / 'audit.db'}?mode=ro", uri=True)
    assert copy.execute("SELECT count(*) FROM t").fetchone() == (50,)
    copy.close()
    assert not [name for name in os.listdir(dest / "databases") if name.startswith(".")]


@pytest.mark.timeout(60)
async def test_a_damaged_source_database_is_named_not_the_destination(tmp_path: Path) -> None:
    env = small_backup_source(tmp_path)
    database = Path(env["STATE_DIRECTORY"]) / "devices.db"
    database.write_bytes(b"SQLite format 3\x00" + bytes(80) + b"no database past its header")
    code, _out, err = await run_to_exit("backup", str(tmp_path / "backup"), env=env)
    assert code == 1, err
    assert f"{database} cannot be backed up" in err, err
    assert "cannot write" not in err


def identity_config(tmp_path: Path) -> tuple[Path, Path]:
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "policy.toml").write_text(POLICY)
    secret = etc / "ident-secret"
    secret.write_text(IDENTITY_SECRET + "\n")
    secret.chmod(0o600)
    config = etc / "gateway.toml"
    config.write_text(
        f'[policy]\nfile = "{etc / "policy.toml"}"\n[providers.auth]\nmode = "identities"\n'
        f'[[providers.auth.identities]]\nname = "room-a"\nfile = "{secret}"\nslots = ["pump-*"]\n'
    )
    return config, secret


@pytest.mark.timeout(60)
async def test_a_provider_identity_secret_is_restored_at_most_0640(tmp_path: Path) -> None:
    config, secret = identity_config(tmp_path)
    dest = await backup_of(tmp_path, "--config", str(config))
    manifest = manifest_of(dest)
    for entry in manifest["files"]:
        if entry.get("setting") == "providers.auth.identities[0].file":
            entry["mode"] = "0644"
    (dest / "manifest.json").write_bytes(orjson.dumps(manifest))
    secret.unlink()
    code, out, err = await run_to_exit(
        "restore", str(dest), "--with-config", env={"STATE_DIRECTORY": str(tmp_path / "fresh")}
    )
    assert code == 0, err
    assert mode(secret) == 0o640, oct(mode(secret))
    assert "the backup says 0644, restore gives a secret at most 0640" in out


@pytest.mark.parametrize("setting", SECRET_SETTINGS)
def test_every_secret_setting_is_a_secret(setting: str) -> None:
    assert is_secret(Entry("named", "/etc/x", "config/x", 1, "0" * 64, "0644", setting=setting))


@pytest.mark.parametrize("setting", ["policy.file", "tls.cert_file", "mqtt.brokers[0].ca_file"])
def test_certificates_and_policies_are_not_secrets(setting: str) -> None:
    assert not is_secret(Entry("named", "/etc/x", "config/x", 1, "0" * 64, "0644", setting=setting))


def hostile(dest: Path, how: str) -> None:
    where = dest / "manifest.json"
    if how == "fifo":
        where.unlink()
        os.mkfifo(where)
    elif how == "link to /dev/zero":
        where.unlink()
        where.symlink_to("/dev/zero")
    elif how == "too large":
        where.write_bytes(b" " * (5 << 20) + where.read_bytes())
    else:
        manifest: dict[str, Any] = manifest_of(dest)
        if how == "absent 5":
            manifest["absent"] = 5
        elif how == "absent [5]":
            manifest["absent"] = [5]
        else:
            manifest["files"][0]["uid"] = 2**40
        where.write_bytes(orjson.dumps(manifest))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("fifo", "is a FIFO, not the regular file"),
        ("link to /dev/zero", "is a symbolic link, not the regular file"),
        ("too large", "is larger than 4194304 bytes"),
        ("absent 5", "absent 5 is not a list"),
        ("absent [5]", "absent[0] is not an object of texts"),
        ("uid 2**40", "uid 1099511627776 is out of range (0 to 4294967294)"),
    ],
)
async def test_a_damaged_or_hostile_manifest_is_named(tmp_path: Path, how: str, said: str) -> None:
    dest = await backup_of(tmp_path)
    hostile(dest, how)
    fresh = tmp_path / "fresh"
    code, out, err = await run_to_exit("restore", str(dest), env={"STATE_DIRECTORY": str(fresh)}, timeout=20)
    assert code == 1, (out, err)
    assert err.startswith(f"mcp-gateway restore: {dest / 'manifest.json'}"), err
    assert said in err, err
    assert "Traceback" not in err and not fresh.exists()


@as_root
@pytest.mark.timeout(60)
async def test_an_out_of_range_uid_leaves_no_copy_of_a_secret(tmp_path: Path) -> None:
    config, secret = identity_config(tmp_path)
    dest = await backup_of(tmp_path, "--config", str(config))
    manifest = manifest_of(dest)
    for entry in manifest["files"]:
        if entry.get("setting") == "providers.auth.identities[0].file":
            entry.pop("owner", None)
            entry["uid"] = 2**40
    (dest / "manifest.json").write_bytes(orjson.dumps(manifest))
    secret.unlink()
    code, out, err = await run_to_exit(
        "restore", str(dest), "--with-config", env={"STATE_DIRECTORY": str(tmp_path / "fresh")}
    )
    assert code == 1, (out, err)
    assert "out of range" in err and "Traceback" not in err
    assert not [name for name in os.listdir(secret.parent) if name.endswith(".restoring")]
    assert not secret.exists()


@pytest.mark.parametrize("version", ["0.4.0", "0.4.0rc1", "1.0.0.dev1", "0.4.0-beta.1", "0.3.0.post1"])
def test_a_newer_pre_release_is_newer(version: str) -> None:
    assert newer(version, "0.3.0")


@pytest.mark.parametrize("version", ["0.3.0", "0.3.0rc1", "0.3.0.dev1", "0.2.9", "not a version", "9" * 200])
def test_an_older_or_unreadable_version_is_not_newer(version: str) -> None:
    assert not newer(version, "0.3.0")


@pytest.mark.timeout(60)
async def test_a_pre_release_of_a_newer_gateway_is_restored_with_the_warning(tmp_path: Path) -> None:
    from gateway import __version__

    dest = await backup_of(tmp_path)
    manifest = manifest_of(dest)
    major, minor, *_rest = __version__.split(".")
    manifest["gateway_version"] = f"{major}.{int(minor) + 1}.0rc1"
    (dest / "manifest.json").write_bytes(orjson.dumps(manifest))
    code, _out, err = await run_to_exit("restore", str(dest), env={"STATE_DIRECTORY": str(tmp_path / "fresh")})
    assert code == 0, err
    assert f"warning: the backup was made by gateway {manifest['gateway_version']}, newer than this one" in err


@pytest.mark.timeout(60)
async def test_an_audit_path_under_a_regular_file_is_refused_naming_the_setting(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file\n")
    config = tmp_path / "gateway.toml"
    config.write_text(f'[audit]\npath = "{blocker / "trail" / "audit.db"}"\n')
    # a backup with an audit trail: the default one of a fresh gateway's state directory
    source = tmp_path / "with-audit"
    source.mkdir(mode=0o700)
    shutil.copy(Path(small_backup_source(tmp_path)["STATE_DIRECTORY"]) / "devices.db", source / "audit.db")
    code, _out, err = await run_to_exit("backup", str(tmp_path / "b2"), env={"STATE_DIRECTORY": str(source)})
    assert code == 0, err
    code, out, err = await run_to_exit(
        "restore", str(tmp_path / "b2"), "--config", str(config), env={"STATE_DIRECTORY": str(tmp_path / "fresh")}
    )
    assert code == 2, (out, err)
    assert f"{blocker} is a file, not a directory" in err, err
    assert "[audit] path of the configuration" in err and "nothing was restored" in err
    assert "Errno" not in err


@pytest.mark.timeout(60)
async def test_the_closing_hint_names_the_configuration_and_state_directory_given(tmp_path: Path) -> None:
    source = tmp_path / "with-audit"
    source.mkdir(mode=0o700)
    shutil.copy(Path(small_backup_source(tmp_path)["STATE_DIRECTORY"]) / "devices.db", source / "audit.db")
    code, _out, err = await run_to_exit("backup", str(tmp_path / "b2"), env={"STATE_DIRECTORY": str(source)})
    assert code == 0, err
    fresh = tmp_path / "fresh dir"
    code, out, err = await run_to_exit("restore", str(tmp_path / "b2"), "--state-dir", str(fresh))
    assert code == 0, err
    said = f"mcp-gateway audit --limit 5 --path '{fresh}/audit.db', mcp-gateway devices --registry '{fresh}/devices.db'"
    assert said in out, out
    config = tmp_path / "gateway.toml"
    config.write_text(f'[audit]\npath = "{tmp_path / "trail" / "audit.db"}"\n')
    code, out, err = await run_to_exit(
        "restore", str(tmp_path / "b2"), "--config", str(config), "--state-dir", str(tmp_path / "third")
    )
    assert code == 0, err
    said = f"mcp-gateway audit --limit 5 --config {config}, mcp-gateway devices --registry {tmp_path}/third/devices.db"
    assert said in out, out
