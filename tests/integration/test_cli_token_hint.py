"""The technician commands refused with 401 say how to give them a token (--token-file FILE or
$MCP_GATEWAY_TOKEN), with or without one sent, against a real gateway with client authentication."""

from __future__ import annotations

import pytest

from tests.conftest import GatewayFactory, Publishers
from tests.integration.test_client_auth import SCADA, static_auth
from tests.support.gateway_process import run_cli
from tests.support.servers import demo_server

# The demo provider logs on purpose (logging is deprecated in 2026-07-28, still part of the session era).
pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


async def test_a_401_tells_the_technician_how_to_give_the_cli_a_token(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    server = await gateway_factory(auth=static_auth())
    await publishers.start(server, "pump-1", demo_server("pump"))
    for command in (("slots",), ("tools", "pump-1"), ("call", "pump-1", "add", "a=1", "b=2")):
        code, _, err = await run_cli(*command, "--url", server.url)
        assert code == 1, command
        first, second = err.rstrip("\n").split("\n")
        assert first.startswith("mcp-gateway: HTTP 401 unauthorized: This endpoint needs authentication")
        assert second == (
            "No client token was sent: give one with --token-file FILE (a file holding it) "
            "or in the environment variable MCP_GATEWAY_TOKEN."
        )
    wrong = SCADA[:-2] + ("AA" if not SCADA.endswith("AA") else "BB")
    code, _, err = await run_cli("slots", "--url", server.url, env={"MCP_GATEWAY_TOKEN": wrong})
    assert code == 1
    first, second = err.rstrip("\n").split("\n")
    assert first.startswith("mcp-gateway: HTTP 401 invalid_token: The bearer token is not known")
    assert second == (
        "The client token sent (from --token-file FILE, else the environment variable "
        "MCP_GATEWAY_TOKEN) was refused: give one this gateway accepts."
    )
    assert wrong not in err
