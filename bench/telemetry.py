"""The relay with [telemetry] on against off, side by side in one run: what recording and exporting
the spans and metrics of every call costs a caller.

    python -m bench.telemetry            # about 2 minutes
    python -m bench.telemetry --quick    # a smoke run of a few seconds (figures not meaningful)

Two gateways of this tree, each with its own SDK server (bench.relay_server, publishing into it): one
with the built-in defaults (telemetry off, trace context only), one exporting every span (sampling
ratio 1) and its metrics over OTLP/HTTP to a local endpoint that discards them (bench.otlp_sink).
One SDK client per path makes sequential 2026-07-28 calls in short blocks that take turns in a cycle
(the method of bench.relay_ab, whose measurement this reuses): each gateway against its own server's
direct path, then "on" against "off" round by round. Exit code 0 whatever the outcome.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

from bench.ports import free_port
from bench.processes import Child, run_interruptible
from bench.relay import REPO
from bench.relay_ab import MODE, TreeStack, measure, parse_options, report

NAMES = {"baseline": "telemetry off", "candidate": "telemetry on (every span exported)"}


def telemetry_env(sink_url: str) -> dict[str, str]:
    return {
        "MCP_GATEWAY_TELEMETRY__ENDPOINT": sink_url,
        "MCP_GATEWAY_TELEMETRY__SAMPLING_RATIO": "1.0",
    }


async def run(argv: Sequence[str] | None) -> str:
    _, options = parse_options(["HEAD", *(argv or [])])
    sink_port = free_port()
    sink = Child("OTLP sink", ["-m", "bench.otlp_sink", "--port", str(sink_port)], REPO)
    try:
        if await asyncio.to_thread(sink.read_line, 30.0) != "ready":
            raise RuntimeError(f"the OTLP sink did not start:\n{sink.output()[-3000:]}")
        stacks = {
            "baseline": TreeStack(REPO),
            "candidate": TreeStack(REPO, env=telemetry_env(f"http://127.0.0.1:{sink_port}")),
        }
        try:
            for stack in stacks.values():
                await stack.start()
            results = await measure(stacks, options, progress=True)
        finally:
            for stack in stacks.values():
                stack.stop()
    finally:
        sink.stop()
    return report(results, NAMES)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "-h" in args or "--help" in args:
        print(__doc__)
        return 0
    print(f"bench.telemetry: sequential {MODE} calls, a gateway with telemetry off against one with it on", flush=True)
    table = run_interruptible(run(args), "bench.telemetry: interrupted; gateways, servers and the sink gone")
    if table is None:
        return 130
    print()
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
