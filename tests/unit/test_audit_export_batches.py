"""An export (`stream_records`) gives the same records as one query, whichever journal the trail uses: a
rollback-journal trail is read in batches keyed by id (docs/governance-audit.md, "`mcp-gateway audit`"),
across gaps in the ids and with every filter."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gateway.policy.audit import store
from gateway.policy.audit.reading import STREAM_BATCH, Filters, read_records, stream_records
from tests.unit.test_sqlite_journal import blocks_of

pytestmark = pytest.mark.timeout(30)

RECORDS = STREAM_BATCH * 3 + 7


def write_trail(path: Path) -> None:
    conn = store.connect(path, 2.0)
    try:
        conn.execute("BEGIN IMMEDIATE")
        for number in range(RECORDS):
            slot = f"pump-{number % 3}"
            row = [number, '["token:agent-1"]', None, "ws", slot, f"/{slot}", "set_speed", "c", "{}"]
            row += ["deny" if number % 5 else "allow", "[]", *[None] * 5]
            decision_id = store.insert_decision(conn, row)
            if number % 2:
                store.insert_results(conn, [(decision_id, number, "ok", 1.0, None)])
        # A gap wider than a batch (a file edited by hand): the export goes past it.
        conn.execute("DELETE FROM decisions WHERE id BETWEEN ? AND ?", (100, 100 + STREAM_BATCH + 50))
        conn.execute("COMMIT")
    finally:
        conn.close()


@pytest.mark.parametrize("block", [1024, 4096], ids=["rollback journal", "WAL"])
@pytest.mark.parametrize(
    "filters",
    [Filters(), Filters(slot="pump-1"), Filters(since_ms=50, until_ms=RECORDS - 3, effect="allow"), Filters(tool="x")],
)
def test_an_export_gives_what_one_query_gives(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, block: int, filters: Filters
) -> None:
    blocks_of(monkeypatch, block)
    path = tmp_path / "audit.db"
    write_trail(path)
    exported = list(stream_records(path, filters))
    assert exported == read_records(path, **dataclasses.asdict(filters), limit=RECORDS)
    assert filters != Filters() or len(exported) == RECORDS - STREAM_BATCH - 51
