"""A multi-MiB answer from a remote session-era upstream, read as an event stream, side by side with
the same read straight from the server, in one run:

    python -m bench.big_answer              # 8 MiB, three reads each way
    python -m bench.big_answer --mib 2 --reads 1

The remote is a real SDK server (`MCPServer.streamable_http_app`, which answers a session-era POST as
one SSE event) in a process of its own; the gateway runs its built-in defaults in another, with
`limits.max_frame_bytes` raised to hold the answer. Printed: the best read each way and their ratio,
and how long a small request to another slot (`_broker`'s tools/list) waits while the big answer
streams through the gateway, against the same request with nothing else going on. Both ways are
timed alike, each read alone and the two ways interleaved; the other-slot waits come from further
relayed reads of their own, untimed, since the polling shares this process's event loop with the read. The gateway reads
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
from mcp.shared.exceptions import MCPError

from bench.ports import free_port
from bench.processes import Child, gateway_env, run_interruptible, wait_healthy
from bench.relay import REPO
from bench.report import markdown_table, median

SLOT = "far"
URI = "blob://big"
POLL_S = 0.02
"""How often the other slot is asked while a big answer streams through."""
QUIET_REQUESTS = 20
CONNECT_S = 30.0
"""Longest wait for the gateway's first relayed answer (its link to the remote comes up after /readyz)."""
MAX_MIB = 256.0
"""The largest blob: the server, the gateway and this process each hold a few copies of it."""


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


async def first_relayed_read(relayed: Client, size: int, timeout_s: float = CONNECT_S) -> None:
    """One read through the gateway, asked again every 100 ms while the gateway answers an error (it
    is ready before it has connected to the remote); the last error once `timeout_s` has passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await read_big(relayed, size)
            return
        except MCPError:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.1)


async def timed_reads(direct: Client, relayed: Client, size: int, reads: int) -> tuple[list[float], list[float]]:
    """`reads` timed reads each way, alike: nothing else running, interleaved (each pair starts with
    the way the previous one ended on, so drift on the machine hits both), after one untimed read
    each way (first-use costs)."""
    await read_big(direct, size)
    await first_relayed_read(relayed, size)
    timed: dict[str, list[float]] = {"direct": [], "relayed": []}
    for index in range(reads):
        order = [("direct", direct), ("relayed", relayed)]
        for way, client in order if index % 2 == 0 else reversed(order):
            timed[way].append(await read_big(client, size))
    return timed["direct"], timed["relayed"]


async def polled_read(relayed: Client, other: Client, size: int, waits: list[float]) -> None:
    """One relayed read, untimed, while `other` asks every 20 ms: each wait appended to `waits`. Apart
    from the timed reads: the polling shares this process's event loop with the read and would slow it."""
    reading = asyncio.create_task(read_big(relayed, size))
    try:
        while not reading.done():
            started = time.perf_counter()
            await asyncio.wait_for(other.list_tools(), 60)
            waits.append(time.perf_counter() - started)
            await asyncio.sleep(POLL_S)
        await reading
    finally:
        reading.cancel()


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


async def run(size: int, reads: int) -> str:
    """The stack, the reads, and the table of what they took."""
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
                direct_s, relayed_s = await timed_reads(direct, relayed, size, reads)
                quiet: list[float] = []
                for _ in range(QUIET_REQUESTS):
                    started = time.perf_counter()
                    await other.list_tools()
                    quiet.append(time.perf_counter() - started)
                waits: list[float] = []
                for _ in range(reads):
                    await polled_read(relayed, other, size, waits)
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
    title = (
        f"{size / 1048576:g} MiB as one SSE event, {reads} timed read(s) each way, alone and interleaved; other-slot "
        f"waits over {reads} more relayed read(s); ratios against the direct read"
    )
    return title + "\n" + markdown_table(["", "time", "ratio"], rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.big_answer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=float, default=8.0, help="size of the answer's blob (default 8)")
    parser.add_argument("--reads", type=int, default=3, help="reads each way (default 3)")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--bytes", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not 0 < args.mib <= MAX_MIB:
        parser.error(f"--mib must be over 0 and at most {MAX_MIB:g}, not {args.mib}")
    if args.reads < 1:
        parser.error(f"--reads must be at least 1, not {args.reads}")
    if args.serve is not None:
        serve(args.serve, args.bytes)
        return
    size = int(args.mib * 1048576) // 256 * 256
    if size < 256:
        parser.error(f"--mib {args.mib} is under 256 bytes")
    table = run_interruptible(run(size, args.reads), "big_answer: interrupted")
    if table is None:
        sys.exit(130)
    print(table)


if __name__ == "__main__":
    main()
