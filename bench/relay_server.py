"""The benchmark's one SDK server process: its own Streamable HTTP endpoint and a gateway publisher.

Both paths of `bench.relay` reach this one process, so the server side of a call costs the same on
each: `/mcp` on this process's uvicorn port (direct) and the gateway slot it publishes (relayed).

    python -m bench.relay_server --port 8123 --gateway http://127.0.0.1:3000 --slot bench \
        [--bare-relay http://127.0.0.1:8124]

With `--bare-relay` it publishes the same server a second time, into `bench.bare_relay` (the floor
of a relay hop). It prints one line, `ready`, once uvicorn listens and every publisher holds its
WebSocket, and runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

from gateway.publish import Publisher


def bench_server() -> MCPServer:
    """A server whose one tool costs next to nothing, so the transports are what is measured."""
    server = MCPServer("bench", instructions="Benchmark server: add two integers.")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    return server


async def serve(port: int, gateway_url: str, slot: str, json_response: bool, bare_relay: str | None) -> None:
    server = bench_server()
    # By default the SDK's defaults: a stateful session manager that answers session-era POSTs as
    # SSE (json_response=False) and 2026-07-28 requests as JSON unless they run long. The benchmark
    # compares against the server as its authors ship it; --json-response shows the cheaper mode.
    app = server.streamable_http_app(json_response=json_response)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="on")
    http = uvicorn.Server(config)
    publishers = [Publisher(server, url, slot) for url in (gateway_url, bare_relay) if url]

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    # uvicorn catches SIGTERM itself while it serves, then re-raises it into the handler above.

    def connected() -> bool:
        return all(publisher.connected.is_set() for publisher in publishers)

    http_task = asyncio.create_task(http.serve())
    publish_tasks = [asyncio.create_task(publisher.run()) for publisher in publishers]
    while not (http.started and connected()):
        if http_task.done() or any(task.done() for task in publish_tasks):
            break
        await asyncio.sleep(0.02)
    print("ready" if http.started and connected() else "failed", flush=True)
    stop_task = asyncio.create_task(stop.wait())
    await asyncio.wait({stop_task, http_task, *publish_tasks}, return_when=asyncio.FIRST_COMPLETED)
    for publisher in publishers:
        await publisher.stop()
    http.should_exit = True
    for task in (*publish_tasks, http_task, stop_task):
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(task, 5)


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench.relay_server", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--gateway", required=True, help="gateway URL, e.g. http://127.0.0.1:3000")
    parser.add_argument("--slot", default="bench")
    parser.add_argument("--json-response", action="store_true", help="answer session-era POSTs as JSON, not SSE")
    parser.add_argument("--bare-relay", help="also publish into this bench.bare_relay, e.g. http://127.0.0.1:8124")
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.gateway, args.slot, args.json_response, args.bare_relay))
    return 0


if __name__ == "__main__":
    sys.exit(main())
