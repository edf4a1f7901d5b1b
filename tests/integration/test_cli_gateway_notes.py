"""`mcp-gateway call` says what the gateway changed in a call: a clamped argument is named on stderr,
while stdout stays the device's answer (docs/configuration.md, "call"). A real gateway with a [policy]
clamp and a simulated pump, or an SDK server whose tools answer without text items; the command runs
in a process of its own."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from mcp.server import MCPServer
from mcp.types import ImageContent, TextContent

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers
from tests.integration.test_governance import OPERATOR, auth, plant  # noqa: F401 (the fixture)
from tests.support.gateway_process import run_cli

IMAGE = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}


def motor() -> MCPServer:
    """Tools that answer without a text item: nothing at all, or an image only."""
    server = MCPServer("motor")

    @server.tool()
    def set_silent(speed_rpm: int) -> list[TextContent]:
        """Set the speed; answers nothing."""
        return []

    @server.tool()
    def set_image(speed_rpm: int) -> list[ImageContent]:
        """Set the speed; answers a picture of the dial."""
        return [ImageContent(type="image", data=IMAGE["data"], mime_type=IMAGE["mimeType"])]

    return server


def clamp(tool: str) -> dict[str, Any]:
    return {"resources": ["/motor"], "tool": tool, "argument": "speed_rpm", "min": 300, "max": 2000, "action": "clamp"}


MOTOR_POLICY: dict[str, Any] = {
    "roles": {"operator": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]}},
    "assign": [{"principal": "token:operator", "role": "operator", "resources": ["/**"]}],
    "limits": [clamp("set_silent"), clamp("set_image")],
}


async def test_call_names_a_clamped_argument_on_stderr(plant: GatewayServer) -> None:  # noqa: F811
    env = {"MCP_GATEWAY_TOKEN": OPERATOR}
    code, out, err = await run_cli("call", "--url", plant.url, "pump-1", "start", "speed_rpm=1000", env=env)
    assert (code, err) == (0, ""), err
    try:
        code, out, err = await run_cli("call", "--url", plant.url, "pump-1", "set_speed", "speed_rpm=2600", env=env)
        assert code == 0, err
        # stdout: the pump's own structured answer, parseable by a script.
        answer = orjson.loads(out)
        assert isinstance(answer, dict)
        assert "clamped" not in out
        # stderr: what the gateway did to the call.
        assert err == (
            "mcp-gateway call: The gateway clamped arguments to the operator's limits: "
            "speed_rpm 2600 -> 2000 (policy limits[0])\n"
        )
    finally:
        await run_cli("call", "--url", plant.url, "pump-1", "stop", env=env)


@pytest.mark.parametrize(
    ("tool", "content", "rule"), [("set_silent", [], 0), ("set_image", [IMAGE], 1)], ids=["empty", "image"]
)
async def test_a_clamped_answer_without_text_items_keeps_the_note_off_stdout(
    gateway_factory: GatewayFactory, publishers: Publishers, tmp_path: Any, tool: str, content: list[Any], rule: int
) -> None:
    gateway = await gateway_factory(auth=auth(), policy=MOTOR_POLICY, audit={"path": str(tmp_path / "audit.db")})
    await publishers.start(gateway, "motor", motor())
    env = {"MCP_GATEWAY_TOKEN": OPERATOR}
    code, out, err = await run_cli("call", "--url", gateway.url, "motor", tool, "speed_rpm=2600", env=env)
    assert code == 0, err
    # stdout: the device's whole answer as JSON, without the gateway's note item or _meta key.
    assert "clamped" not in out, out
    assert orjson.loads(out) == {"content": content, "isError": False}
    assert err == (
        "mcp-gateway call: The gateway clamped arguments to the operator's limits: "
        f"speed_rpm 2600 -> 2000 (policy limits[{rule}])\n"
    )
