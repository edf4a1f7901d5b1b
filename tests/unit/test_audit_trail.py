"""The audit trail (gateway/policy/audit/) on a real SQLite file: durable before `decision()` returns,
masked, group-committed, failing closed and recovering, bounded, pruned, queried."""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from gateway.config import AuditConfig, GatewayConfig, load_config
from gateway.core.secret_keys import MASK, mask_secrets
from gateway.policy.audit import (
    AuditTrail,
    AuditUnavailable,
    DecisionRecord,
    audit_path,
    default_audit_path,
)
from gateway.policy.audit.records import now_ms
from gateway.policy.audit.store import SCHEMA_VERSION
from tests.conftest import wait_for

THIS_FILE = Path(__file__).resolve()
ROOT = THIS_FILE.parents[2]

DAY_MS = 86_400_000
TrailFactory = Callable[..., Awaitable[AuditTrail]]


def record(**overrides: Any) -> DecisionRecord:
    fields: dict[str, Any] = {
        "principal": {"token:agent-1"},
        "transport": "streamable-http",
        "slot": "pump-1",
        "resource": "/site1/line2/pump-1",
        "capability": "tool.control",
        "effect": "allow",
        "tool": "set_speed",
        "arguments": {"speed_rpm": 1200},
        "rules": ("assign[0]",),
        **overrides,
    }
    return DecisionRecord(**fields)


@pytest.fixture
async def trails(tmp_path: Path) -> AsyncIterator[TrailFactory]:
    """Open and start trails (default: tmp_path/state/audit.db); every one is closed after the test."""
    opened: list[AuditTrail] = []

    async def make(path: Path | None = None, **settings: Any) -> AuditTrail:
        options = {key: settings.pop(key) for key in ("lock_timeout_s", "prune_interval_s") if key in settings}
        config = AuditConfig(path=str(path or tmp_path / "state" / "audit.db"), **settings)
        trail = AuditTrail.open(config, **options)
        opened.append(trail)
        await trail.start()
        return trail

    yield make
    for trail in opened:
        await trail.close()


def mode(path: Path | str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def dump_file(path: Path) -> list[bytes]:
    with open(path, "rb") as file:
        return file.readlines()


def rows(path: Path, sql: str = "SELECT id FROM decisions ORDER BY id") -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


async def test_a_decision_is_committed_when_decision_returns(trails: TrailFactory) -> None:
    trail = await trails()
    decision_id = await trail.decision(record(client_id="claude-desktop", trace_id="abc123"))
    # A second connection sees the row at once: it was committed (fsynced, synchronous=FULL) before the return.
    [row] = rows(trail.path, "SELECT id, principal, client_id, slot, tool, effect, rules, trace_id FROM decisions")
    assert row == (
        decision_id,
        '["token:agent-1"]',
        "claude-desktop",
        "pump-1",
        "set_speed",
        "allow",
        '["assign[0]"]',
        "abc123",
    )
    assert trail.healthy and trail.last_error == ""
    assert rows(trail.path, "PRAGMA journal_mode") == [("wal",)]


async def test_secret_looking_keys_are_masked_at_any_depth(trails: TrailFactory) -> None:
    arguments = {
        "speed_rpm": 900,
        "Password": "hunter2",
        "config": {"db": {"api_key": "k1", "X-Api-Key": "k2", "refresh_TOKEN": "t", "host": "plc.lan"}},
        "headers": [{"Authorization": "Bearer x"}, {"name": "client_secret", "passwd": "p"}],
        "credentials": {"user": "u", "pass": "p"},
    }
    masked = mask_secrets(arguments)
    assert masked == {
        "speed_rpm": 900,
        "Password": MASK,
        "config": {"db": {"api_key": MASK, "X-Api-Key": MASK, "refresh_TOKEN": MASK, "host": "plc.lan"}},
        "headers": [{"Authorization": MASK}, {"name": "client_secret", "passwd": MASK}],  # values are not keys
        "credentials": MASK,
    }
    assert arguments["Password"] == "hunter2"  # the caller's arguments are left as they are
    trail = await trails()
    decision_id = await trail.decision(record(arguments=arguments))
    [stored] = trail.query()
    assert stored["id"] == decision_id and stored["arguments"] == masked
    await trail.close()
    assert b"hunter2" not in b"".join(dump_file(trail.path))


async def test_concurrent_decisions_share_commits(trails: TrailFactory) -> None:
    trail = await trails()
    await trail.decision(record())
    before = trail.commits
    ids = await asyncio.gather(*(trail.decision(record(arguments={"n": n})) for n in range(50)))
    assert len(set(ids)) == 50
    assert trail.commits - before < 50  # group commit: one fsync for each batch, not each record
    assert len(rows(trail.path)) == 51


async def test_a_record_sqlite_cannot_bind_is_stored_as_text(trails: TrailFactory) -> None:
    trail = await trails()
    decision_id = await trail.decision(record(tool="\ud800odd", arguments={"x": "\udcff", "when": object()}))
    [stored] = trail.query()
    assert stored["id"] == decision_id and stored["tool"] == "\\ud800odd"
    assert "unstorable" in stored["arguments"]


async def test_a_directory_turned_into_a_file_fails_closed_then_recovers(trails: TrailFactory, tmp_path: Path) -> None:
    # A regular file where the directory was: no write can succeed, not even as root.
    trail = await trails()
    first = await trail.decision(record())
    shutil.rmtree(tmp_path / "state")
    (tmp_path / "state").write_text("not a directory")
    with pytest.raises(AuditUnavailable) as refused:
        await trail.decision(record())
    assert str(trail.path) in refused.value.reason
    assert not trail.healthy and str(trail.path) in trail.last_error
    # Results queued meanwhile are kept for the next write.
    trail.result(first, "ok", 1.0)
    with pytest.raises(AuditUnavailable):
        await trail.decision(record())
    (tmp_path / "state").unlink()
    (tmp_path / "state").mkdir()
    second = await trail.decision(record())  # the next decision tries again, and succeeds
    assert trail.status()["healthy"] and trail.last_error  # the last error is kept for diagnosis
    assert second > 0 and rows(trail.path) == [(second,)]  # a new file: the old one was deleted
    assert trail.status()["results_written"] == 1


async def test_a_database_path_that_is_a_directory_fails_closed_then_recovers(
    trails: TrailFactory, tmp_path: Path
) -> None:
    path = tmp_path / "audit.db"
    path.mkdir()
    trail = await trails(path)
    assert not trail.healthy and str(path) in trail.last_error  # opened unhealthy; open() does not raise
    with pytest.raises(AuditUnavailable):
        await trail.decision(record())
    path.rmdir()
    assert await trail.decision(record()) == 1
    assert trail.healthy


async def test_a_directory_removed_is_not_created_again_behind_the_operator(
    trails: TrailFactory, tmp_path: Path
) -> None:
    trail = await trails()
    await trail.decision(record())
    shutil.rmtree(tmp_path / "state")
    with pytest.raises(AuditUnavailable, match="No such file or directory"):
        await trail.decision(record())
    assert not (tmp_path / "state").exists()


def permissions_bind(tmp_path: Path) -> bool:
    """Whether a mode 0400 file stops this process's writes (not for root with CAP_DAC_OVERRIDE)."""
    probe = tmp_path / "probe"
    probe.write_text("")
    probe.chmod(0o400)
    try:
        with open(probe, "a"):
            return False
    except PermissionError:
        return True
    finally:
        probe.unlink()


async def test_a_read_only_file_fails_closed(trails: TrailFactory, tmp_path: Path) -> None:
    if not permissions_bind(tmp_path):
        # Root (CI) writes to read-only files through CAP_DAC_OVERRIDE: this test runs again in a pytest
        # whose bounding set lacks it (util-linux's setpriv), where a mode 0400 file binds root too.
        setpriv = shutil.which("setpriv")
        assert setpriv is not None, "setpriv (util-linux) is needed to run this test as root"
        test = f"{THIS_FILE}::test_a_read_only_file_fails_closed"
        process = await asyncio.create_subprocess_exec(
            *(setpriv, "--bounding-set=-dac_override", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"),
            test,
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output = (await asyncio.wait_for(process.communicate(), 120))[0].decode()
        assert process.returncode == 0 and "1 passed" in output, output
        return
    trail = await trails()
    await trail.decision(record())
    await trail.close()
    trail.path.chmod(0o400)
    trail = await trails()
    with pytest.raises(AuditUnavailable, match="Permission denied"):
        await trail.decision(record())
    trail.path.chmod(0o600)
    assert await trail.decision(record()) == 2  # no read-only -wal or -shm file was left behind to stop it


async def test_a_full_disk_fails_closed(trails: TrailFactory) -> None:
    trail = await trails()
    await trail.decision(record())
    await trail.prune()  # the writer is idle from here on
    # SQLite's own "disk full" (SQLITE_FULL), from a page cap on the writer's connection while it is idle.
    conn = trail._writer._conn
    assert conn is not None
    conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")
    with pytest.raises(AuditUnavailable, match="full"):
        await trail.decision(record(arguments={"pad": "x" * 15_000}))  # under max_arguments_bytes
    assert not trail.healthy
    assert await trail.decision(record()) == 2  # a fresh connection, without the cap: written again
    assert trail.healthy


async def test_a_lock_held_beyond_the_timeout_fails_closed(trails: TrailFactory) -> None:
    trail = await trails(lock_timeout_s=0.2)
    await trail.decision(record())
    other = sqlite3.connect(trail.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holding the write lock
    try:
        with pytest.raises(AuditUnavailable, match="locked"):
            await trail.decision(record())
        assert not trail.healthy
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert await trail.decision(record()) == 2
    assert trail.healthy


async def test_a_full_queue_refuses_the_decision(trails: TrailFactory) -> None:
    trail = await trails(max_queue=3, lock_timeout_s=5.0)
    await trail.prune()  # the pruning due at start is done: the writer now waits for records only
    other = sqlite3.connect(trail.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # the writer waits for this lock with the first decision
    try:
        first = asyncio.ensure_future(trail.decision(record()))
        await asyncio.sleep(0)
        await wait_for(lambda: trail.status()["queued"] == 0, what="the writer to take the first decision")
        queued = [asyncio.ensure_future(trail.decision(record())) for _ in range(3)]
        await asyncio.sleep(0)
        with pytest.raises(AuditUnavailable, match="audit queue full"):
            await trail.decision(record())
        trail.result(1, "ok", 1.0)  # a result beyond the bound is dropped and counted, never queued
        assert trail.status()["results_dropped"] == 1
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert sorted(await asyncio.gather(first, *queued)) == [1, 2, 3, 4]


async def test_close_writes_what_is_queued_and_refuses_afterwards(tmp_path: Path) -> None:
    trail = AuditTrail.open(AuditConfig(path=str(tmp_path / "audit.db")))
    with pytest.raises(AuditUnavailable, match="not running"):
        await trail.decision(record())
    await trail.start()
    pending = [asyncio.ensure_future(trail.decision(record())) for _ in range(20)]
    await asyncio.sleep(0)
    trail.result(1, "ok", 2.0)
    await trail.close()
    assert sorted(await asyncio.gather(*pending)) == list(range(1, 21))
    assert not os.access(f"{trail.path}-wal", os.F_OK)  # the last connection checkpointed the WAL and removed it
    assert trail.query()[0]["status"] == "ok"
    with pytest.raises(AuditUnavailable):
        await trail.decision(record())


async def test_close_refuses_what_a_stuck_writer_has_not_taken(trails: TrailFactory) -> None:
    trail = await trails(lock_timeout_s=3.0)
    await trail.prune()  # the pruning due at start is done
    other = sqlite3.connect(trail.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        taken = asyncio.ensure_future(trail.decision(record()))
        await asyncio.sleep(0)
        await wait_for(lambda: trail.status()["queued"] == 0, what="the writer to take the first decision")
        waiting = asyncio.ensure_future(trail.decision(record()))
        await asyncio.sleep(0)
        await trail.close(timeout_s=0.1)
        with pytest.raises(AuditUnavailable, match="closed"):
            await waiting  # refused at once, not left waiting for the stuck writer
        with pytest.raises(AuditUnavailable, match="locked"):
            await taken  # the writer answers it when its lock wait ends
    finally:
        other.execute("ROLLBACK")
        other.close()


async def test_results_are_joined_to_their_decisions(trails: TrailFactory) -> None:
    trail = await trails()
    allowed = await trail.decision(record())
    denied = await trail.decision(record(effect="deny", rules=["deny[1]"], reason="token:agent-1 may not call"))
    clamped = await trail.decision(record(effect="clamp", constraints=["speed_rpm 2500 -> 2000 (policy limits[0])"]))
    trail.result(allowed, "ok", 12.5)
    trail.result(clamped, "tool-error", 3.25, error="motor stalled")
    trail.result(clamped, "ok", 1.0)  # a second result for a decision is ignored
    await trail.close()
    by_id = {entry["id"]: entry for entry in trail.query()}
    assert (by_id[allowed]["status"], by_id[allowed]["latency_ms"], by_id[allowed]["error"]) == ("ok", 12.5, None)
    assert by_id[allowed]["result_ms"] >= by_id[allowed]["time_ms"]
    assert by_id[denied]["status"] is None and by_id[denied]["reason"] == "token:agent-1 may not call"
    assert by_id[clamped]["constraints"] == ["speed_rpm 2500 -> 2000 (policy limits[0])"]
    assert (by_id[clamped]["status"], by_id[clamped]["error"]) == ("tool-error", "motor stalled")


async def test_query_filters(trails: TrailFactory) -> None:
    trail = await trails()
    now = now_ms()
    await trail.decision(record(time_ms=now - 3 * 3_600_000, principal={"user:ann", "group:operators"}))
    await trail.decision(record(time_ms=now - 2 * 3_600_000, slot="pump-2", tool="stop", effect="deny"))
    await trail.decision(record(time_ms=now - 3_600_000, slot="valve-1", tool="open", principal={"token:scada"}))
    await trail.decision(record(time_ms=now, slot="pump-2", confirmed_by="user:bob", confirmed_ms=now))

    def ids(**filters: Any) -> list[int]:
        return [entry["id"] for entry in trail.query(**filters)]

    assert ids() == [1, 2, 3, 4]  # oldest first
    assert ids(principal="group:operators") == [1]  # any one of the subjects
    assert ids(principal="token:*") == [2, 3, 4]
    assert ids(slot="pump-2") == [2, 4]
    assert ids(slot="pump-*") == [1, 2, 4]
    assert ids(tool="stop") == [2]
    assert ids(effect="deny") == [2]
    assert ids(since_ms=now - 2 * 3_600_000) == [2, 3, 4]  # since inclusive
    assert ids(until_ms=now - 3_600_000) == [1, 2]  # until exclusive
    assert ids(slot="pump-2", effect="allow") == [4]
    assert ids(limit=2) == [3, 4]  # the newest two
    assert trail.query(slot="pump-2")[-1]["confirmed_by"] == "user:bob"


async def test_records_past_max_age_are_pruned_with_their_results(tmp_path: Path, trails: TrailFactory) -> None:
    path = tmp_path / "audit.db"
    earlier = await trails(path, max_age_days=30)  # an earlier run: this run's records age from its start
    old = [await earlier.decision(record(time_ms=now_ms() - 31 * DAY_MS)) for _ in range(5)]
    recent = await earlier.decision(record(time_ms=now_ms() - 29 * DAY_MS))
    for decision_id in (*old, recent):
        earlier.result(decision_id, "ok", 1.0)
    await earlier.close()
    trail = await trails(path, max_age_days=30)
    await trail.prune()  # the pruning due at start has run
    assert [entry["id"] for entry in trail.query()] == [recent]
    assert rows(trail.path, "SELECT decision_id FROM results") == [(recent,)]
    assert await trail.prune() == 0
    assert trail.status()["pruned"] == 5


async def test_the_file_is_kept_under_max_bytes(trails: TrailFactory) -> None:
    max_bytes = 1024 * 1024
    trail = await trails(max_bytes=max_bytes)
    padding = "x" * 1000
    for start in range(0, 3000, 500):
        await asyncio.gather(
            *(trail.decision(record(arguments={"n": n, "pad": padding})) for n in range(start, start + 500))
        )
    await trail.prune()
    # Pruned as the file passed the bound, after a batch, not only when the minute's pruning came.
    assert trail.status()["pruned_by_size"] > 0
    newest = trail.query(limit=1)[0]["id"]
    await trail.close()
    assert newest == 3000  # the oldest went first
    assert os.stat(trail.path).st_size <= max_bytes  # freed pages handed back (incremental_vacuum)
    assert len(rows(trail.path)) < 3000


async def test_an_audit_file_of_a_newer_gateway_is_not_written(trails: TrailFactory, tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    trail = await trails(path)
    assert not trail.healthy and "schema version 99" in trail.last_error
    with pytest.raises(AuditUnavailable, match="newer"):
        await trail.decision(record())


async def test_reopening_keeps_the_records(trails: TrailFactory) -> None:
    trail = await trails()
    await trail.decision(record())
    await trail.close()
    again = await trails()
    assert await again.decision(record()) == 2
    assert rows(again.path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]


def test_default_location(tmp_path: Path) -> None:
    assert default_audit_path({"STATE_DIRECTORY": "/var/lib/mcp-gateway", "XDG_STATE_HOME": "/x"}) == Path(
        "/var/lib/mcp-gateway/audit.db"
    )
    assert default_audit_path({"STATE_DIRECTORY": "/var/lib/a:/var/lib/b"}) == Path("/var/lib/a/audit.db")
    assert default_audit_path({"XDG_STATE_HOME": "/home/u/.st", "HOME": "/home/u"}) == Path(
        "/home/u/.st/mcp-gateway/audit.db"
    )
    assert default_audit_path({"XDG_STATE_HOME": "relative", "HOME": "/home/u"}) == Path(
        "/home/u/.local/state/mcp-gateway/audit.db"
    )
    assert audit_path(AuditConfig(path="~/trail.db"), {}) == Path.home() / "trail.db"


async def test_the_directory_and_file_are_private(tmp_path: Path) -> None:
    trail = AuditTrail.open(AuditConfig(), environ={"XDG_STATE_HOME": str(tmp_path / "state")})
    await trail.start()
    try:
        assert trail.path == tmp_path / "state" / "mcp-gateway" / "audit.db"
        await trail.decision(record())
        assert mode(tmp_path / "state") == mode(trail.path.parent) == 0o700
        assert mode(trail.path) == mode(f"{trail.path}-wal") == 0o600
    finally:
        await trail.close()


def test_the_audit_section(tmp_path: Path) -> None:
    config = GatewayConfig()
    assert config.audit == AuditConfig()
    assert (config.audit.enabled, config.audit.path, config.audit.max_age_days) == (True, None, 90)
    assert (config.audit.max_bytes, config.audit.max_queue) == (256 * 1024 * 1024, 10_000)
    file = tmp_path / "gateway.toml"
    file.write_text('[audit]\npath = "/data/audit.db"\nmax_age_days = 30\n')
    loaded = load_config(file, environ={"MCP_GATEWAY_AUDIT__MAX_QUEUE": "500"})
    assert (loaded.audit.path, loaded.audit.max_age_days, loaded.audit.max_queue) == ("/data/audit.db", 30, 500)
    for bad in ({"max_bytes": 1000}, {"max_age_days": 0}, {"path": " "}, {"unknown": 1}):
        with pytest.raises(ValidationError):
            AuditConfig.model_validate(bad)


async def test_a_file_that_cannot_be_opened_is_refused_with_its_own_cause(trails: TrailFactory, tmp_path: Path) -> None:
    # A link to a file that is gone: the refusal names it ("No such file"), not a permission it does
    # not lack (a read-only file system reads "Read-only file system" the same way).
    link = tmp_path / "audit.db"
    link.symlink_to(tmp_path / "gone" / "audit.db")
    trail = await trails(link)
    with pytest.raises(AuditUnavailable, match="No such file or directory"):
        await trail.decision(record())
    assert not (tmp_path / "gone").exists()
