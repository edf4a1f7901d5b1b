"""A multi-MiB answer from a remote session-era upstream, read as an event stream, side by side with
the same read straight from the server, in one run:

    python -m bench.big_answer              # 8 MiB, three reads each way
    python -m bench.big_answer --mib 2 --reads 1

The remote is a real SDK server (`MCPServer.streamable_http_app`, which answers a session-era POST as
one SSE event) in a process of its own; the gateway runs its built-in defaults in another, with
`limits.max_frame_bytes` raised to hold the answer. Printed: the best read each way and their ratio,
and how long a small request to another slot (`_broker`'s tools/list) waits while the big answer
streams through the gateway, against the same request with nothing else going on. The gateway reads
an event stream in time linear in its size (gateway/southbound/remote/sse_events.py); an event loop
held by the parsing would show as other-slot waits near the relayed read's own time. Exit code 0
whatever the figures: it is a measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import sys
import tempfile
import time
from pathlib import Path

import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from bench.ports import free_port
from bench.processes import Child, gateway_env, run_interruptible, wait_healthy
from bench.relay import REPO
from bench.report import markdown_table, median

SLOT = "far"
URI = "blob://big"


def serve(port: int, size: int) -> None:
    import uvicorn
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("far")
    blob = bytes(range(256)) * (size // 256)

    @server.resource(URI, mime_type="application/octet-stream")
    def big() -> bytes:
        """The blob, base64 in the answer."""
        return blob

    uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=port, log_level="warning", access_log=False)


async def read_big(client: Client, size: int) -> float:
    started = time.perf_counter()
    result = await asyncio.wait_for(client.read_resource(URI), 300)
    elapsed = time.perf_counter() - started
    content = result.contents[0]
    if not isinstance(content, types.BlobResourceContents) or len(base64.b64decode(content.blob)) != size:
        raise RuntimeError("the answer did not arrive whole")
    return elapsed


async def wait_listening(port: int, child: Child, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and child.alive():
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        writer.close()
        return
    raise RuntimeError(f"the {child.name} did not come up:\n{child.output()[-3000:]}")


async def run(size: int, reads: int) -> None:
    server_port, gateway_port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="mcp-gateway-bench-big-") as work:
        config = Path(work) / "gateway.toml"
        config.write_text(
            f"port = {gateway_port}\n[limits]\nmax_frame_bytes = {4 * size + 1024 * 1024}\n"
            f'[[upstreams.remote]]\nname = "{SLOT}"\nurl = "http://127.0.0.1:{server_port}/mcp"\n'
            'transport = "streamable-http"\n'
        )
        server = Child("server", ["-m", "bench.big_answer", "--serve", str(server_port), "--bytes", str(size)], REPO)
        gateway = Child("gateway", ["-m", "gateway.cli", "run", "--config", str(config)], REPO, env=gateway_env())
        try:
            gateway_url = f"http://127.0.0.1:{gateway_port}"
            await wait_listening(server_port, server)
            await wait_healthy(f"{gateway_url}/readyz", gateway)
            direct_url = f"http://127.0.0.1:{server_port}/mcp"
            async with (
                Client(streamable_http_client(direct_url, max_sse_event_size=4 * size), mode="legacy") as direct,
                Client(f"{gateway_url}/{SLOT}/mcp", mode="legacy") as relayed,
                Client(f"{gateway_url}/_broker/mcp", mode="legacy") as other,
            ):
                direct_s = [await read_big(direct, size) for _ in range(reads)]
                quiet: list[float] = []
                for _ in range(20):
                    started = time.perf_counter()
                    await other.list_tools()
                    quiet.append(time.perf_counter() - started)
                relayed_s: list[float] = []
                waits: list[float] = []
                for _ in range(reads):
                    reading = asyncio.create_task(read_big(relayed, size))
                    while not reading.done():
                        started = time.perf_counter()
                        await asyncio.wait_for(other.list_tools(), 60)
                        waits.append(time.perf_counter() - started)
                        await asyncio.sleep(0.02)
                    relayed_s.append(await reading)
        finally:
            gateway.stop()
            server.stop()
    best_direct, best_relayed = min(direct_s), min(relayed_s)
    rows = [
        ["read, straight from the server (best)", f"{best_direct * 1000:.0f} ms", "1.00"],
        ["read, through the gateway (best)", f"{best_relayed * 1000:.0f} ms", f"{best_relayed / best_direct:.2f}"],
        ["other slot, alone (median)", f"{median(quiet) * 1000:.1f} ms", ""],
        ["other slot, during the read (worst)", f"{max(waits) * 1000:.1f} ms", f"{max(waits) / best_direct:.2f}"],
    ]
    print(f"{size / 1048576:g} MiB as one SSE event, {reads} read(s) each way; ratios against the direct read")
    print(markdown_table(["", "time", "ratio"], rows))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.big_answer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=float, default=8.0, help="size of the answer's blob (default 8)")
    parser.add_argument("--reads", type=int, default=3, help="reads each way (default 3)")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--bytes", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve, args.bytes)
        return
    size = int(args.mib * 1048576) // 256 * 256
    if run_interruptible(run(size, args.reads), "big_answer: interrupted") is None:
        sys.exit(130)


if __name__ == "__main__":
    main()
