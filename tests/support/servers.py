"""SDK servers used as providers in tests (real `mcp` SDK servers, nothing faked)."""

from __future__ import annotations

import asyncio

from mcp.server.mcpserver import Context, MCPServer


def demo_server(name: str = "demo", instructions: str | None = None) -> MCPServer:
    """A small server with the tools the integration tests drive."""
    server = MCPServer(name, instructions=instructions or f"Demo server {name}")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    async def echo(text: str, ctx: Context) -> str:
        """Echo text back, reporting progress and a log message on the way."""
        await ctx.report_progress(0.5, 1.0, "half way")
        await ctx.info(f"echoing {text}")
        return text

    @server.tool()
    async def sleep(seconds: float) -> str:
        """Wait, then answer (for deadlines, cancellation and concurrency tests)."""
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool()
    def fail(message: str = "boom") -> str:
        """Raise an error inside the tool."""
        raise ValueError(message)

    @server.resource("demo://greeting")
    def greeting() -> str:
        """A static text resource."""
        return "hello"

    @server.prompt()
    def ask(topic: str) -> str:
        """A prompt with one argument."""
        return f"Tell me about {topic}"

    return server
