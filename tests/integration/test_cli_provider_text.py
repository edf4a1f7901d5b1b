"""What a provider writes reaches an operator's terminal escaped: `mcp-gateway tools` and `call` write a
character that does not print (an escape sequence that clears the screen or sets the window title, a
carriage return that overwrites the line, a bidi override) as its JSON escape (`\\u001b`), while a
result's lines stay lines and `--json` stays the same JSON (docs/cli.md). A real gateway, a provider
written with the SDK's low-level server, the command in a process of its own."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import orjson
from mcp.server.lowlevel import Server

from gateway.app import GatewayServer
from tests.conftest import Publishers
from tests.support.gateway_process import run_cli

CLEAR = "\x1b[2J"
TITLE = "\x1b]0;pwned\x07"
RED = "\x1b[31m"
CSI = "\x9b"  # C1: a terminal in UTF-8 may read it as ESC [
RIGHT_TO_LEFT = "\u202e"
TOOLS = [
    types.Tool(
        name="evil",  # the gateway leaves a tool name with a control character out of tools/list
        description=f"line1{CLEAR}{TITLE}\nline2\rOVER{RIGHT_TO_LEFT}txt",
        input_schema={
            "type": "object",
            "properties": {
                f"a{RED}b": {"type": "string"},
                "mode": {"enum": [f"on{CSI}", "off\x7f"]},
            },
            "required": ["mode"],
        },
    ),
    types.Tool(name="table", description="Plain words. More.", input_schema={"type": "object"}),
    types.Tool(name="fail", description="Fails.", input_schema={"type": "object"}),
]


def board() -> Server[Any]:
    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name == "table":
            return types.CallToolResult(
                content=[], structured_content={"label": f"x{CSI}y{RIGHT_TO_LEFT}z", "line": "a\nb"}
            )
        if params.name == "fail":
            return types.CallToolResult(content=[types.TextContent(type="text", text=f"bad{CLEAR}")], is_error=True)
        text = f"res{CLEAR}ult\r\nsecond\tline\rFAKE{TITLE}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    return Server("evil", on_list_tools=list_tools, on_call_tool=call_tool)


def no_control(text: str) -> bool:
    """Nothing a terminal would act on or reorder: only printing characters, newlines and tabs."""
    return all(char.isprintable() or char in "\n\t" for char in text)


async def test_tools_shows_a_providers_escape_sequences_escaped(gateway: GatewayServer, publishers: Publishers) -> None:
    await publishers.start(gateway, "evt-1", board())
    code, out, err = await run_cli("tools", "--url", gateway.url, "evt-1")
    assert (code, err) == (0, "")
    assert no_control(out)
    lines = out.splitlines()
    assert lines[0] == 'evil mode=on\\u009b|off\\u007f ["a\\u001b[31mb"=STRING]'
    assert lines[1] == "    line1\\u001b[2J\\u001b]0;pwned\\u0007 line2 OVER\\u202etxt"
    assert lines[2:4] == ["table", "    Plain words."]  # plain names and words as they are

    code, out, err = await run_cli("tools", "--url", gateway.url, "--json", "evt-1")
    assert (code, err) == (0, "")
    assert no_control(out)
    listed = orjson.loads(out)  # the same JSON: the escapes stand for the same characters
    assert [tool["name"] for tool in listed] == ["evil", "table", "fail"]
    assert listed[0]["inputSchema"]["properties"]["mode"]["enum"] == [f"on{CSI}", "off\x7f"]
    assert listed[0]["description"] == TOOLS[0].description


async def test_call_shows_a_providers_result_escaped_and_keeps_its_lines(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    await publishers.start(gateway, "evt-2", board())
    code, out, err = await run_cli("call", "--url", gateway.url, "evt-2", "evil", "mode=on")
    assert (code, err) == (0, "")
    assert out == "res\\u001b[2Jult\nsecond\tline\\rFAKE\\u001b]0;pwned\\u0007\n"

    code, out, err = await run_cli("call", "--url", gateway.url, "evt-2", "table")
    assert (code, err) == (0, "")
    assert no_control(out)
    assert orjson.loads(out) == {"label": f"x{CSI}y{RIGHT_TO_LEFT}z", "line": "a\nb"}

    code, out, err = await run_cli("call", "--url", gateway.url, "evt-2", "fail")
    assert (code, out, err) == (1, "bad\\u001b[2J\n", "")
