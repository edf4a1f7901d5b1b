"""An ordinary SDK MCP server on stdin/stdout that logs while serving a call and asks its client:
what an off-the-shelf stdio server does, for the tests of where its untagged log messages go.

    python -m tests.support.stdio_log_server
"""

from __future__ import annotations

import asyncio

from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel


class Answer(BaseModel):
    answer: str


def build_server() -> MCPServer:
    server = MCPServer("stdio-log-demo")

    @server.tool()
    async def chatter(tag: str, ctx: Context, wait_s: float = 0.0) -> str:
        """Wait `wait_s` seconds, then log at debug, info and warning (`ctx.info(...)` names no request on stdio)."""
        await asyncio.sleep(wait_s)
        await ctx.debug(f"{tag} debug")
        await ctx.info(f"{tag} info")
        await ctx.warning(f"{tag} warning")
        return f"chattered {tag}"

    @server.tool()
    async def ask(question: str, ctx: Context) -> str:
        """Ask the client a question (elicitation, the session era's way) and answer what it said."""
        result = await ctx.elicit(question, Answer)
        return f"{question}: {result.action}"

    return server


if __name__ == "__main__":
    build_server().run("stdio")
