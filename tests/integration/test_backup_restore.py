"""`mcp-gateway backup` and `mcp-gateway restore` (docs/operations.md, "Backup and restore"): a backup taken
while a real gateway serves simulated pumps and writes its audit trail, restored into a fresh state
directory where `mcp-gateway audit` and `devices` read the same records; modes kept, the manifest checked,
a changed backup refused, a running gateway's state left alone, replaced files kept aside."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from gateway.cli.backup_files import sha256_of
from sim.link import LinkSecurity
from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings
from tests.support.gateway_process import gateway_process, run_to_exit

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

POLICY = """
[roles.worker]
capabilities = ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]
[[assign]]
principal = "anonymous"
role = "worker"
resources = ["/**"]
"""
SECRET = "provider-secret-for-the-backup-test-0123456789"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def write_config(tmp_path: Path) -> Path:
    """A configuration naming a policy file (0640) and a provider secret file (0600)."""
    policy = tmp_path / "etc" / "policy.toml"
    policy.parent.mkdir()
    policy.write_text(POLICY)
    policy.chmod(0o640)
    secret = tmp_path / "etc" / "provider-secret"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    config = tmp_path / "etc" / "gateway.toml"
    config.write_text(
        f'[policy]\nfile = "{policy}"\n[providers.auth]\nmode = "shared"\nshared_secret = {{file = "{secret}"}}\n'
    )
    return config


@contextlib.asynccontextmanager
async def caller(url: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(timeout=30) as transport,
        Client(streamable_http_client(url, http_client=transport), mode="legacy") as client,
    ):
        yield client


async def keep_calling(url: str, slot: str, done: list[int], stop: asyncio.Event) -> None:
    """Call `slot`'s get_status until `stop`: each call is one audit record; `done` counts those answered."""
    async with caller(f"{url}/{slot}/mcp") as client:
        while not stop.is_set():
            try:
                answer = await client.call_tool("get_status", {})
            except MCPError:  # not connected yet: decided and recorded too
                await asyncio.sleep(0.05)
                continue
            assert not answer.is_error, answer
            done[0] += 1
            await asyncio.sleep(0.01)


def trail_ids(path: Path) -> set[int]:
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return {row[0] for row in db.execute("SELECT id FROM decisions")}
    finally:
        db.close()


async def audit_records(path: Path) -> list[dict[str, Any]]:
    code, out, err = await run_to_exit("audit", "--path", str(path), "--format", "jsonl")
    assert code == 0, err
    return [orjson.loads(line) for line in out.splitlines()]


async def devices(state: Path) -> list[dict[str, Any]]:
    code, out, err = await run_to_exit("devices", "--json", env={"STATE_DIRECTORY": str(state)})
    assert code == 0, err
    return [orjson.loads(line) for line in out.splitlines()]


@pytest.mark.timeout(180)
async def test_a_backup_taken_while_the_gateway_writes_restores_into_a_fresh_state_directory(tmp_path: Path) -> None:
    state = Path(os.environ["STATE_DIRECTORY"])  # the test's own (tests/conftest.py), the gateway's too
    config = write_config(tmp_path)
    image = state / "firmware" / "pump1-1.0.0.bin"
    image.parent.mkdir(parents=True)
    image.write_bytes(b"\xe9" + bytes(4095))
    image.chmod(0o644)
    dest = tmp_path / "backups" / "monday"
    async with gateway_process("--config", str(config), "--port", "0") as gateway:
        simulator = Simulator(
            gateway.url,
            SimulatorSettings(pumps=2, pump=PumpSettings(), backoff_min_s=0.05),
            LinkSecurity(token=SECRET),
        )
        simulator.start()
        stop = asyncio.Event()
        done = [0]
        calls = [asyncio.create_task(keep_calling(gateway.url, slot, done, stop)) for slot in ("pump-1", "pump-2")]
        try:
            for _ in range(300):
                if done[0] >= 40 and (state / "devices.db").exists() and len(await devices(state)) == 2:
                    break
                await asyncio.sleep(0.1)
            before = done[0]
            assert before >= 40, gateway.log
            code, out, err = await run_to_exit("backup", str(dest), "--config", str(config))
            assert code == 0, err
            during = done[0] - before
            assert during > 0  # the gateway answered and recorded calls while the backup ran
            await asyncio.sleep(0.3)
        finally:
            stop.set()
            await asyncio.gather(*calls)
            await simulator.stop()
        assert out.startswith("backed up 6 files, ") and f"to {dest} (listed in {dest}/manifest.json)" in out, out

        # The backup: private, complete, each file as the manifest says, modes kept.
        assert mode(dest) == 0o700
        manifest = orjson.loads((dest / "manifest.json").read_bytes())
        assert manifest["format"] == "mcp-gateway-backup/1" and manifest["absent"] == []
        files = {entry["original"]: entry for entry in manifest["files"]}
        assert set(files) == {
            str(state / "audit.db"),
            str(state / "devices.db"),
            str(image),
            str(config),
            str(tmp_path / "etc" / "policy.toml"),
            str(tmp_path / "etc" / "provider-secret"),
        }
        for entry in manifest["files"]:
            copy = dest / entry["path"]
            assert sha256_of(copy) == (entry["size"], entry["sha256"])
            assert f"{mode(copy):04o}" == entry["mode"]
        assert files[str(tmp_path / "etc" / "policy.toml")]["mode"] == "0640"
        assert files[str(tmp_path / "etc" / "provider-secret")]["setting"] == "providers.auth.shared_secret.file"
        assert files[str(tmp_path / "etc" / "provider-secret")]["mode"] == "0600"
        assert files[str(state / "audit.db")]["mode"] == files[str(state / "devices.db")]["mode"] == "0600"
        backed_up = trail_ids(dest / "databases" / "audit.db")
        assert len(backed_up) >= before  # every call answered before the backup began is in it
        assert backed_up <= trail_ids(state / "audit.db")

        # Not while a gateway runs on the target's state directory: its pid is named, nothing written.
        code, _, err = await run_to_exit("restore", str(dest), "--config", str(config))
        assert code == 2, err
        assert f"is in use by a running gateway (pid {gateway.process.pid}," in err, err
        assert "stop it first" in err

    # Into a fresh state directory: the same records and boards, databases 0600 in a 0700 directory.
    fresh = tmp_path / "fresh-state"
    env = {"STATE_DIRECTORY": str(fresh)}
    code, out, err = await run_to_exit("restore", str(dest), "--config", str(config), env=env)
    assert code == 0, err
    assert f"restored the audit trail {fresh / 'audit.db'}" in out
    assert f"not restored (--with-config puts it there): {dest}/config/00-gateway.toml -> {config}" in out
    assert mode(fresh) == 0o700 and mode(fresh / "audit.db") == 0o600 and mode(fresh / "devices.db") == 0o600
    assert (fresh / "firmware" / image.name).read_bytes() == image.read_bytes()
    assert mode(fresh / "firmware" / image.name) == 0o644
    assert await audit_records(fresh / "audit.db") == await audit_records(dest / "databases" / "audit.db")
    assert {row["device_id"] for row in await devices(fresh)} == {"sim-pump-1", "sim-pump-2"}

    # Again: refused while the restored databases are there; with --force they are kept aside, not deleted.
    code, _, err = await run_to_exit("restore", str(dest), "--config", str(config), env=env)
    assert code == 2, err
    assert f"{fresh / 'audit.db'} (the audit trail) exists" in err and "nothing was restored" in err
    first = (fresh / "audit.db").read_bytes()
    code, out, err = await run_to_exit("restore", str(dest), "--config", str(config), "--force", env=env)
    assert code == 0, err
    kept = sorted(path.name for path in fresh.iterdir() if ".replaced-" in path.name)
    assert [name.split(".replaced-")[0] for name in kept] == ["audit.db", "devices.db"], kept
    assert (fresh / kept[0]).read_bytes() == first
    assert f"in place already: the firmware image {fresh / 'firmware' / image.name}" in out


def small_backup_source(tmp_path: Path) -> dict[str, str]:
    """A state directory holding a device registry (no gateway needed to back it up)."""
    state = tmp_path / "state-small"
    state.mkdir(mode=0o700)
    db = sqlite3.connect(state / "devices.db")
    db.execute("CREATE TABLE devices (device_id TEXT PRIMARY KEY)")
    db.executemany("INSERT INTO devices VALUES (?)", [(f"board-{n}",) for n in range(200)])
    db.commit()
    db.close()
    return {"STATE_DIRECTORY": str(state)}


@pytest.mark.timeout(60)
async def test_a_changed_backup_is_refused_and_nothing_is_restored(tmp_path: Path) -> None:
    dest = tmp_path / "backup"
    code, out, err = await run_to_exit("backup", str(dest), env=small_backup_source(tmp_path))
    assert code == 0, err
    assert "not in the backup: audit" in out and "no audit trail configured" in out
    copy = dest / "databases" / "devices.db"
    data = bytearray(copy.read_bytes())
    data[-10] ^= 0xFF
    copy.write_bytes(bytes(data))
    fresh = tmp_path / "fresh"
    code, _, err = await run_to_exit("restore", str(dest), env={"STATE_DIRECTORY": str(fresh)})
    assert code == 1, err
    assert err.startswith(f"mcp-gateway restore: {copy} (backup of {tmp_path}/state-small/devices.db) does not match")
    assert "nothing was restored" in err
    assert not fresh.exists()
    copy.unlink()
    code, _out, err = await run_to_exit("restore", str(dest), env={"STATE_DIRECTORY": str(fresh)})
    assert code == 1 and f"{copy} (backup of" in err and "is missing" in err, err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("damage", ["not a database", "pages overwritten"])
async def test_a_damaged_database_is_named_and_leaves_no_backup(tmp_path: Path, damage: str) -> None:
    env = small_backup_source(tmp_path)
    registry = Path(env["STATE_DIRECTORY"]) / "devices.db"
    if damage == "not a database":
        registry.write_bytes(b"this is a text file, not SQLite\n" * 200)
    else:
        data = bytearray(registry.read_bytes())
        data[4096:8192] = b"\xa5" * 4096  # the table's second page
        registry.write_bytes(bytes(data))
    dest = tmp_path / "backup"
    code, _out, err = await run_to_exit("backup", str(dest), env=env)
    assert code == 1, err
    assert err.startswith(f"mcp-gateway backup: {registry} cannot be backed up: "), err
    assert f"no backup was left in {dest}" in err and "Traceback" not in err
    assert not dest.exists()


@pytest.mark.timeout(60)
async def test_a_directory_that_holds_files_is_refused(tmp_path: Path) -> None:
    dest = tmp_path / "backup"
    dest.mkdir()
    (dest / "notes.txt").write_text("keep me")
    code, _out, err = await run_to_exit("backup", str(dest), env=small_backup_source(tmp_path))
    assert code == 2, err
    assert err.startswith(f"mcp-gateway backup: {dest} is not empty: give a new or empty directory"), err
    assert [path.name for path in dest.iterdir()] == ["notes.txt"]


@pytest.mark.timeout(60)
async def test_with_config_puts_the_configuration_back_and_keeps_a_changed_file_aside(tmp_path: Path) -> None:
    env = small_backup_source(tmp_path)
    config = write_config(tmp_path)
    dest = tmp_path / "backup"
    code, _, err = await run_to_exit("backup", str(dest), "--config", str(config), env=env)
    assert code == 0, err
    secret = tmp_path / "etc" / "provider-secret"
    policy = tmp_path / "etc" / "policy.toml"
    secret.write_text("another-secret-written-after-the-backup-0123456789\n")
    policy.unlink()
    fresh = {"STATE_DIRECTORY": str(tmp_path / "fresh")}
    code, _, err = await run_to_exit("restore", str(dest), "--with-config", env=fresh)
    assert code == 2, err
    assert f"{secret} (the file of providers.auth.shared_secret.file) exists with other content" in err, err
    assert not policy.exists() and not (tmp_path / "fresh" / "devices.db").exists()  # nothing written
    code, out, err = await run_to_exit("restore", str(dest), "--with-config", "--force", env=fresh)
    assert code == 0, err
    assert secret.read_text() == SECRET + "\n" and mode(secret) == 0o600
    assert policy.read_text() == POLICY and mode(policy) == 0o640
    assert f"in place already: the configuration file {config}" in out
    [kept] = [path for path in secret.parent.iterdir() if path.name.startswith("provider-secret.replaced-")]
    assert kept.read_text().startswith("another-secret") and f"kept the file it replaced as {kept}" in out


@pytest.mark.timeout(60)
async def test_a_backup_leaves_no_log_files_beside_a_database_nobody_holds(tmp_path: Path) -> None:
    # The registry is in write-ahead-log mode and the gateway holds it open only while it uses it: the
    # backup's own connection is the last to close, and must fold and remove what it opened beside it.
    env = small_backup_source(tmp_path)
    registry = Path(env["STATE_DIRECTORY"]) / "devices.db"
    db = sqlite3.connect(registry)
    db.execute("PRAGMA journal_mode = WAL")
    db.close()
    assert not registry.with_name("devices.db-wal").exists()
    code, _out, err = await run_to_exit("backup", str(tmp_path / "backup"), env=env)
    assert code == 0, err
    assert sorted(path.name for path in registry.parent.iterdir()) == ["devices.db"]
