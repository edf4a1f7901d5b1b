"""A governed gateway whose trail holds a torn record (a power cut on an SD card) starts, writes on and
answers `broker_audit_recent` with every record: the torn one's unreadable columns null and named
under `damaged` (docs/governance-audit.md, "A damaged trail")."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.conftest import GatewayFactory
from tests.integration.test_confirmation import POLICY, client
from tests.integration.test_governance import OPERATOR, auth
from tests.unit.test_audit_cli import fill
from tests.unit.test_audit_damaged import damage


@pytest.mark.timeout(60)
async def test_broker_audit_recent_lists_a_torn_record_with_its_damaged_columns(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    path = tmp_path / "audit.db"
    await asyncio.to_thread(fill, path)
    await asyncio.to_thread(damage, path, 2)
    server = await gateway_factory(auth=auth(), policy=POLICY, audit={"path": str(path)})
    async with client(server, OPERATOR, "2026-07-28", path="/_broker/mcp") as operator:
        recent = await operator.call_tool("broker_audit_recent", {"limit": 10, "slot": "pump-*"})
        assert not recent.is_error, recent.content
        assert recent.structured_content is not None
        found = recent.structured_content["decisions"]
        assert [entry["id"] for entry in found] == [1, 2, 3]
        assert found[1]["damaged"] == ["principal", "arguments", "rules"]
        assert found[1]["principal"] is None and found[1]["effect"] == "deny"
        assert "damaged" not in found[0] and found[0]["principal"] == ["token:agent-1"]
        # The gateway writes on beside the torn record: this very call is on record after it.
        again = await operator.call_tool("broker_audit_recent", {"limit": 1})
        assert again.structured_content is not None
        assert again.structured_content["decisions"][0]["tool"] == "broker_audit_recent"
