"""An MCP server written with the SDK's ordinary API, knowing nothing of the gateway, for the era tests.

Its tools show what a provider sees of its caller and use the SDK's own means of asking for input:

- `seen`: what the server was told about this caller (protocol version, capabilities, client info);
- `greet`: asks the user's name with a hand-written `InputRequiredResult` (2026-07-28 only), keeping
  its own `requestState` (the SDK seals it);
- `needs_sampling`: refuses with -32021 when the caller did not declare sampling;
- `ask_model`: a `Resolve(...)` resolver that samples the client's model (both eras: a request
  mid-call in the session era, `input_required` in 2026-07-28);
- `flip`: adds or removes the tool `extra` and announces the change the way the request's era does;
- `blink`: adds `extra` and removes it again before announcing, so the list looks unchanged;
- `chat`: logs one message and reports progress.

    python -m tests.support.ordinary_provider --stdio          # as a stdio upstream
"""

from __future__ import annotations

import argparse
import json
from typing import Annotated

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Resolve, Sample
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from tests.conformance.scenario_data import NAME_SCHEMA, sampling_required


def question(prompt: str) -> Sample:
    return Sample(
        [types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))], max_tokens=20
    )


def make_server(name: str = "ordinary") -> MCPServer:
    server = MCPServer(name, version="1.0", instructions="An ordinary server")

    @server.tool()
    async def seen(ctx: Context) -> str:
        """What this server knows of its caller."""
        capabilities = ctx.session.client_capabilities
        info = ctx.session.client_params.client_info if ctx.session.client_params is not None else None
        return json.dumps(
            {
                "version": ctx.protocol_version,
                "capabilities": capabilities.model_dump(exclude_none=True) if capabilities is not None else None,
                "client": info.name if info is not None else None,
            },
            sort_keys=True,
        )

    @server.tool()
    async def greet(ctx: Context) -> types.CallToolResult | types.InputRequiredResult:
        """Asks the user's name first."""
        responses = ctx.input_responses or {}
        answer = responses.get("name")
        if ctx.request_state != "asked" or not isinstance(answer, types.ElicitResult):
            request = types.ElicitRequest(
                params=types.ElicitRequestFormParams(message="Your name?", requested_schema=NAME_SCHEMA)
            )
            return types.InputRequiredResult(input_requests={"name": request}, request_state="asked")
        name = (answer.content or {}).get("name") if answer.action == "accept" else "nobody"
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"Hello, {name}!")])

    @server.tool()
    async def needs_sampling(ctx: Context) -> str:
        """Works only for a client that can sample."""
        capabilities = ctx.session.client_capabilities
        if capabilities is None or capabilities.sampling is None:
            raise sampling_required("needs sampling")
        return "can sample"

    @server.tool()
    async def ask_model(prompt: str, answer: Annotated[types.CreateMessageResult, Resolve(question)]) -> str:
        """Asks the client's model."""
        content = answer.content
        return f"model: {content.text if isinstance(content, types.TextContent) else '?'}"

    def extra() -> str:
        return "extra"

    @server.tool()
    async def flip(ctx: Context) -> str:
        """Adds or removes the tool `extra`."""
        if any(tool.name == "extra" for tool in server._tool_manager.list_tools()):
            server.remove_tool("extra")
        else:
            server.add_tool(extra, name="extra", description="comes and goes")
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            await ctx.notify_tools_changed()
        else:
            await ctx.session.send_tool_list_changed()
        return "flipped"

    @server.tool()
    async def blink(ctx: Context) -> str:
        """Adds the tool `extra` and takes it away again, then announces the change once."""
        server.add_tool(extra, name="extra", description="comes and goes")
        server.remove_tool("extra")
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            await ctx.notify_tools_changed()
        else:
            await ctx.session.send_tool_list_changed()
        return "blinked"

    @server.tool()
    async def chat(ctx: Context) -> str:
        """Logs and reports progress."""
        await ctx.info("chatting")
        await ctx.report_progress(1, 2, "half way")
        return "chatted"

    return server


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.ordinary_provider")
    parser.add_argument("--stdio", action="store_true", required=True)
    parser.parse_args()
    make_server().run("stdio")


if __name__ == "__main__":
    main()
