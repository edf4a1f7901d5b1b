"""A real SDK MCP server on stdin/stdout, for stdio upstream tests; it misbehaves on command.

    python -m tests.support.stdio_server [--exit-at-start CODE] [--stderr TEXT] [--hang-at-start]
                                         [--hang-once FILE] [--ignore-sigterm] [--record-stdin FILE]

Start-up faults are decided before the SDK is imported, so a child that exits at once costs little.
The tools misbehave at run time: crash the process mid-call, print text or an over-long line on
stdout, answer with as many bytes as asked, flood stderr, report the environment, leave a grandchild
process behind; one sends log messages.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context, MCPServer


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.support.stdio_server")
    parser.add_argument("--exit-at-start", type=int, metavar="CODE", help="exit with CODE before serving")
    parser.add_argument("--stderr", metavar="TEXT", help="write TEXT as a line on stderr first")
    parser.add_argument("--hang-at-start", action="store_true", help="never answer anything")
    parser.add_argument("--hang-once", metavar="FILE", help="hang at start unless FILE exists (then create it)")
    parser.add_argument("--ignore-sigterm", action="store_true", help="ignore SIGTERM (only SIGKILL stops it)")
    parser.add_argument("--record-stdin", metavar="FILE", help="append every byte read on stdin to FILE")
    return parser.parse_args(argv)


def record_stdin(path: str) -> None:
    """Put a tee between the real stdin and the server: every byte the gateway sends lands in `path` first."""
    import threading

    original = os.dup(0)
    read_end, write_end = os.pipe()
    os.dup2(read_end, 0)
    os.close(read_end)

    def tee() -> None:
        with open(path, "ab", buffering=0) as record:
            while chunk := os.read(original, 65536):
                record.write(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(write_end, view) :]
        os.close(write_end)  # EOF reaches the server too

    threading.Thread(target=tee, daemon=True).start()


WIRE: list[int] = []
"""A duplicate of the original stdout, taken before the SDK diverts fd 1 to stderr (SDK servers keep
stray prints off the wire): writing here is what a server that prints on stdout does."""


def write_stdout(data: bytes) -> None:
    """Write on the wire around the SDK's writer (the tool's own answer is written after it returns)."""
    view = memoryview(data)
    while view:
        written = os.write(WIRE[0], view)
        view = view[written:]


def build_server() -> MCPServer:
    import asyncio
    import json
    import subprocess

    # Context is bound at module level: the SDK resolves a tool's annotations in the module's globals.
    global Context  # noqa: PLW0603
    from mcp.server.mcpserver import Context, MCPServer

    server = MCPServer("stdio-demo", instructions="A stdio test server that misbehaves on command")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def echo(text: str) -> str:
        """Echo text back."""
        return text

    @server.tool()
    async def sleep(seconds: float) -> str:
        """Wait, then answer."""
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool()
    async def crash(after_s: float = 0.0, code: int = 3) -> str:
        """Exit the whole process with `code` after `after_s` seconds, in the middle of this call."""
        asyncio.get_running_loop().call_later(after_s, os._exit, code)
        await asyncio.sleep(3600)
        return "unreachable"

    @server.tool()
    def print_stdout(text: str = "", size: int = 0) -> str:
        """Print a line that is not JSON-RPC on stdout: `text`, or `size` bytes of x."""
        line = text.encode() if not size else b"x" * size
        write_stdout(line + b"\n")
        return "printed"

    @server.tool()
    def big(size: int) -> str:
        """Answer with `size` bytes of text (one stdout line longer than a small limits.max_frame_bytes)."""
        return "y" * size

    @server.tool()
    def flood_stderr(lines: int, width: int = 100) -> str:
        """Write `lines` lines of `width` characters to stderr."""
        block = ("e" * width + "\n") * 100
        for _ in range(lines // 100):
            sys.stderr.write(block)
        sys.stderr.write(("e" * width + "\n") * (lines % 100))
        sys.stderr.write("flood done\n")
        sys.stderr.flush()
        return "flooded"

    @server.tool()
    def environment() -> str:
        """The process environment as a JSON object."""
        return json.dumps(dict(os.environ))

    @server.tool()
    async def log_lines(count: int, ctx: Context) -> str:
        """Send `count` info log messages (untagged on stdio: the SDK names no request), then answer."""
        for line in range(1, count + 1):
            await ctx.info(f"line {line}")
        return f"logged {count}"

    @server.tool()
    def pid() -> int:
        """This process's id."""
        return os.getpid()

    @server.tool()
    def spawn_grandchild() -> int:
        """Start a long sleeper that inherits stdout and stderr; returns its pid."""
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        return sleeper.pid

    return server


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.stderr:
        sys.stderr.write(args.stderr + "\n")
        sys.stderr.flush()
    if args.exit_at_start is not None:
        return int(args.exit_at_start)
    hang = args.hang_at_start
    if args.hang_once:
        marker = Path(args.hang_once)
        hang = not marker.exists()
        marker.touch()
    if hang:
        while True:
            time.sleep(3600)
    if args.record_stdin:
        record_stdin(args.record_stdin)
    WIRE.append(os.dup(1))
    build_server().run("stdio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
