"""An audit trail whose directory is removed while the gateway runs: broker_diagnose's advice names
re-creating the directory (the gateway never creates it), and doing so mends the trail without a
restart (docs/governance-audit.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from mcp import MCPError

from tests.conftest import GatewayFactory
from tests.integration.test_governance import OPERATOR, POLICY, auth, client, one_pump


async def test_a_removed_audit_directory_is_advised_to_be_made_again(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    folder = tmp_path / "trail"
    folder.mkdir(mode=0o700)
    server = await gateway_factory(auth=auth(), policy=POLICY, audit={"path": str(folder / "audit.db")})
    async with one_pump(server):
        async with client(server, "/pump-1/mcp", OPERATOR, "legacy") as operator:
            assert (await operator.call_tool("get_status", {})).structured_content is not None
            shutil.rmtree(folder)
            with pytest.raises(MCPError, match="No such file or directory"):
                await operator.call_tool("get_status", {})
            [problem] = [p for p in server.gateway.broker.problems() if p.id == "audit.unavailable"]
            assert "No such file or directory" in problem.evidence
            assert problem.fix.startswith(
                f"If its directory {folder} is gone, mount its storage again or re-create it (mkdir -p {folder}"
            )
            folder.mkdir(mode=0o700)  # what the fix says, with the gateway left running
            assert (await operator.call_tool("get_status", {})).structured_content is not None
        assert not [p for p in server.gateway.broker.problems() if p.id.startswith("audit.")]
