"""An SDK server whose tools ask their client something mid-call: elicitation, sampling, roots.

Published into a gateway (gateway.publish) it tags each request with the call it belongs to; run as
a stdio upstream (`python -m tests.support.asking_server`) it cannot, and the gateway attributes
the request to the only call pending. Each tool reports what it got, or the error the gateway (or
the client) answered, so a test reads the outcome in the tool's result.
"""

from __future__ import annotations

from collections.abc import Awaitable

import anyio
import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel


class Name(BaseModel):
    name: str


class Colour(BaseModel):
    colour: str


def refused(exc: MCPError) -> str:
    return f"refused {exc.code}: {exc.message}"


def asking_server(name: str = "asker", outcomes: list[str] | None = None) -> MCPServer:
    """The server; `outcomes` (when given) receives one line per question a tool asked, as it ended."""
    server = MCPServer(name, instructions="Tools that ask their client for input")
    log = outcomes if outcomes is not None else []

    async def elicit_name(ctx: Context) -> str:
        try:
            result = await ctx.elicit("What is your name?", Name)
        except MCPError as exc:
            log.append(f"ask_name: {refused(exc)}")
            return refused(exc)
        log.append(f"ask_name: {result.action}")
        return f"Hello, {result.data.name}!" if result.action == "accept" else f"no name ({result.action})"

    async def sample(ctx: Context, text: str) -> str:
        message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=text))
        try:
            result = await ctx.session.create_message([message], max_tokens=50, related_request_id=ctx.request_id)
        except MCPError as exc:
            return refused(exc)
        content = result.content
        return f"model said: {content.text}" if isinstance(content, types.TextContent) else "model said nothing"

    async def roots(ctx: Context) -> str:
        try:
            # The SDK sends roots/list on the connection, not the call: the gateway gets no tag.
            result = await ctx.session.list_roots()
        except MCPError as exc:
            return refused(exc)
        return "roots: " + ", ".join(str(root.uri) for root in result.roots)

    @server.tool()
    async def ask_name(ctx: Context) -> str:
        """Ask the user's name (elicitation)."""
        return await elicit_name(ctx)

    @server.tool()
    async def summarize(text: str, ctx: Context) -> str:
        """Ask the client's model about `text` (sampling)."""
        return await sample(ctx, text)

    @server.tool()
    async def count_roots(ctx: Context) -> str:
        """List the client's roots (roots/list)."""
        return await roots(ctx)

    @server.tool()
    async def two_questions(ctx: Context) -> str:
        """Ask the name, then the favourite colour: two rounds."""
        first = await ctx.elicit("What is your name?", Name)
        second = await ctx.elicit("What is your favourite colour?", Colour)
        if first.action != "accept" or second.action != "accept":
            return f"answers: {first.action}, {second.action}"
        return f"{first.data.name} likes {second.data.colour}"

    @server.tool()
    async def everything(ctx: Context) -> str:
        """Ask all three at once (one input_required round for a stateless-era client)."""
        answers: dict[str, str] = {}

        async def run(key: str, question: Awaitable[str]) -> None:
            answers[key] = await question

        async with anyio.create_task_group() as group:
            group.start_soon(run, "name", elicit_name(ctx))
            group.start_soon(run, "model", sample(ctx, "hello"))
            group.start_soon(run, "roots", roots(ctx))
        return " | ".join(f"{key}={answers[key]}" for key in ("name", "model", "roots"))

    @server.prompt()
    async def greeting(ctx: Context) -> str:
        """A prompt that needs the user's name first."""
        return f"Greet {await elicit_name(ctx)}"

    return server


def main() -> None:
    asking_server().run("stdio")


if __name__ == "__main__":
    main()
