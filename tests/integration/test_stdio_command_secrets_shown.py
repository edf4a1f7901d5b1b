"""What `_broker` shows agents of a stdio upstream's command: secret arguments masked, as `config show`
masks them (docs/upstreams.md, "Secrets in command arguments"), while the child runs with them as
written. The command is an ordinary one: `env NAME=VALUE` in front of a server, as a user writes it
to give a child a variable."""

from __future__ import annotations

import json

from mcp import Client

from tests.conftest import GatewayFactory, wait_ready_slot
from tests.integration.test_stdio_upstreams import REPO, SERVER, START_S, diagnose, text_of
from tests.support.southbound import provider_status

SECRET = "s3cr3t-in-the-command-line"


async def test_provider_status_providers_list_and_diagnosis_mask_a_secret_argument(
    gateway_factory: GatewayFactory,
) -> None:
    command = ["env", f"DEMO_TOKEN={SECRET}", *SERVER]
    server = await gateway_factory(upstreams={"stdio": [{"name": "demo", "command": command, "cwd": str(REPO)}]})
    await wait_ready_slot(server, "demo", START_S)
    async with Client(f"{server.url}/demo/mcp", mode="legacy") as client:
        assert text_of(await client.call_tool("add", {"a": 2, "b": 40})) == "42"  # it runs as written
    status = await provider_status(server.url, "demo")
    assert status["upstream"]["command"] == ["env", "DEMO_TOKEN=***", *SERVER]
    async with Client(f"{server.url}/_broker/mcp", mode="legacy") as client:
        listing = await client.call_tool("providers_list", {})
    shown = json.dumps([status, listing.structured_content, await diagnose(server)])
    assert "DEMO_TOKEN=***" in shown
    assert SECRET not in shown
