"""`mcp-gateway audit --format jsonl` of a rollback-journal trail into a pipe nobody reads (a pager, a slow
ssh link): the export holds no lock while it waits to write, so the gateway's writer commits beside it,
and the export still gives every record written before it began, in order (docs/governance-audit.md,
"`mcp-gateway audit`"). The journal choice is injected through os.statvfs, as tests/unit/test_sqlite_journal.py
does; the reader is a real `mcp-gateway audit` process."""

from __future__ import annotations

import asyncio
import fcntl
import os
import select
import subprocess
import sys
import termios
import time
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from gateway.config import AuditConfig
from gateway.devices import sqlite_journal
from gateway.policy.audit import AuditTrail, DecisionRecord, store
from gateway.policy.audit.records import now_ms
from tests.support.gateway_process import clean_environment
from tests.unit.test_sqlite_journal import blocks_of

pytestmark = pytest.mark.timeout(90)

RECORDS = 3000
"""Enough JSON lines to fill a pipe many times over, and more than one of the export's batches."""
STALLED_S = 1.0
"""The export's pipe holding the same bytes this long, the process alive: it is blocked writing."""


def record(number: int) -> DecisionRecord:
    return DecisionRecord(
        {"token:agent-1"},
        transport="streamable-http",
        slot="pump-1",
        resource="/l2/pump-1",
        capability="tool.control",
        tool="set_speed",
        effect="allow",
        arguments={"n": number, "note": "x" * 200},
        rules=("assign[0]",),
    )


def write_trail(path: Path, count: int, first_ms: int) -> None:
    """`count` decisions from `first_ms` on, one a millisecond, each with a result, in one transaction."""
    conn = store.connect(path, 2.0)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == sqlite_journal.ROLLBACK.lower()
        conn.execute("BEGIN IMMEDIATE")
        for number in range(count):
            row = [first_ms + number, '["token:agent-1"]', None, "ws", "pump-1", "/pump-1", "set_speed", "c"]
            row += [orjson.dumps({"n": number, "note": "x" * 200}).decode(), "allow", '["assign[0]"]', *[None] * 5]
            decision_id = store.insert_decision(conn, row)
            store.insert_results(conn, [(decision_id, first_ms + number, "ok", 1.5, None)])
        conn.execute("COMMIT")
    finally:
        conn.close()


def queued_bytes(descriptor: int) -> int:
    """The bytes waiting in the pipe behind `descriptor` (FIONREAD)."""
    found = bytearray(4)
    fcntl.ioctl(descriptor, termios.FIONREAD, found)
    return int.from_bytes(found, sys.byteorder)


def export(path: Path, *options: str) -> subprocess.Popen[bytes]:
    """`mcp-gateway audit --path PATH --format jsonl OPTIONS` in a process of its own, its stdout a pipe."""
    return subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "audit", "--path", str(path), "--format", "jsonl", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_environment(),
    )


def wait_until_stalled(process: subprocess.Popen[bytes]) -> None:
    """Until the export's stdout pipe stays as full as it got (nothing read from it): the process is blocked
    writing its output, as behind a pager."""
    assert process.stdout is not None
    descriptor = process.stdout.fileno()
    deadline = time.monotonic() + 30
    held, since = -1, time.monotonic()
    while True:
        assert process.poll() is None, "the export ended before it filled its pipe"
        assert time.monotonic() < deadline, "the export never stalled"
        queued = queued_bytes(descriptor)
        if queued != held:
            held, since = queued, time.monotonic()
        elif queued > 0 and time.monotonic() - since >= STALLED_S:
            return
        time.sleep(0.05)


def drain(process: subprocess.Popen[bytes]) -> bytes:
    """Everything the export writes from here on, until it ends."""
    assert process.stdout is not None
    chunks = []
    deadline = time.monotonic() + 30
    while chunk := _read_some(process, deadline):
        chunks.append(chunk)
    return b"".join(chunks)


def _read_some(process: subprocess.Popen[bytes], deadline: float) -> bytes:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], max(0.0, deadline - time.monotonic()))
    assert ready, "the export did not end"
    return os.read(process.stdout.fileno(), 65536)


async def test_an_export_stalled_on_its_pipe_lets_the_gateway_commit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    blocks_of(monkeypatch, 1024)  # the trail on a file system of 1 KiB blocks: a rollback journal
    path = tmp_path / "audit.db"
    first_ms = now_ms() - 60_000
    write_trail(path, RECORDS, first_ms)
    stalled = export(path)
    trail = AuditTrail.open(AuditConfig(path=str(path)), lock_timeout_s=5.0)
    try:
        await trail.start()
        await asyncio.to_thread(wait_until_stalled, stalled)
        # The gateway's writer commits while the export waits: its lock timeout is never reached.
        assert await trail.decision(record(RECORDS + 1)) == RECORDS + 1
        assert trail.healthy, trail.status()
    finally:
        out = await asyncio.to_thread(drain, stalled)
        assert stalled.wait(10) == 0, stalled.stderr.read() if stalled.stderr else ""
        await trail.close()
    lines = out.splitlines()
    exported = [orjson.loads(line) for line in lines]
    # Every record written before the export began, oldest first; the one written meanwhile is not there.
    assert [item["id"] for item in exported] == list(range(1, RECORDS + 1))
    assert exported[0]["status"] == "ok"
    # The same lines as an export of the trail at rest gives for those records.
    until = datetime.fromtimestamp((first_ms + RECORDS) / 1000, UTC).isoformat()
    at_rest = export(path, "--until", until)
    assert (await asyncio.to_thread(drain, at_rest)).splitlines() == lines
    assert at_rest.wait(10) == 0
