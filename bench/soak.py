"""Does the gateway hold its memory, descriptors and metric series over a long mixed workload?

    python -m bench.soak              # 20 rounds, about 2.5 minutes on a 2-core machine
    python -m bench.soak --quick      # 3 short rounds (a smoke run)

An appliance runs for months, so what one request leaves behind matters more than what it costs.
Each round drives one gateway (built-in defaults, except rate limits off and a smaller
limits.max_slots, see MAX_SLOTS) with what a plant network sends it over time: stateless
`tools/call`s, session-era clients that open a session, call and leave,
calls of unknown tools and with bad arguments, malformed bodies, requests for slot names no provider
ever uses (more over the run than `limits.max_slots`), a provider that connects, serves calls,
has callers drop in the middle of slow ones, and leaves again. After every round it reads the
gateway's resident memory, open file descriptors, tracked slots and metric series. The table shows
them after the warm-up rounds, in the middle and at the end: a leak shows as growth that goes on
through the second half, a bound as a figure that levels off. No target: a measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp
from mcp import Client
from mcp.server.mcpserver import MCPServer

from bench.load import call_once
from bench.processes import memory_kib, open_fds, run_interruptible
from bench.relay import Stack
from bench.report import markdown_table
from gateway.core import eras
from gateway.core.jsonrpc import JsonObject
from gateway.publish import Publisher
from gateway.southbound.remote import wire as remote_wire

MODE_STATELESS = "2026-07-28"
EXTRA_SLOT = "soak-extra"
CLIENT_INFO = {"name": "bench-soak", "version": "0"}
MAX_SLOTS = 200
"""limits.max_slots for the soak (built-in default 1024): stray names fill it and get pruned every
few rounds, so the slot table reaches its largest size early in the run instead of near its end."""
LISTEN_HOLD_S = 1.0
"""How long the `_all` listeners stay open: across the extra provider's arrival and departure."""
SLOW_TOOL_S = 0.3
ABANDON_AFTER_S = 0.05


@dataclass
class Workload:
    rounds: int
    warmup_rounds: int
    stateless_calls: int
    sessions: int
    error_calls: int
    malformed: int
    stray_slots: int
    extra_calls: int
    abandoned: int
    listens: int


FULL = Workload(20, 3, 1000, 50, 100, 100, 150, 20, 5, 10)
QUICK = Workload(3, 1, 50, 3, 5, 5, 20, 3, 1, 2)


@dataclass
class Reading:
    rss_mib: float
    fds: int
    slots: int
    series: int
    streams: int
    stray_refused: int
    list_changes: int


def extra_server() -> MCPServer:
    """The provider that comes and goes each round: a quick tool and a slow one callers walk away from."""
    server = MCPServer("soak-extra", log_level="WARNING")  # not a line per HTTP request

    @server.tool()
    def echo(text: str) -> str:
        """Return the text."""
        return text

    @server.tool()
    async def slow() -> str:
        """Answer after a while."""
        await asyncio.sleep(SLOW_TOOL_S)
        return "done"

    return server


def stateless_post(request_id: int, method: str, params: JsonObject) -> tuple[JsonObject, dict[str, str]]:
    """Body and headers of one raw 2026-07-28 request, built as the gateway builds its own upstream ones."""
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    body = {**message, "params": eras.with_meta(params, eras.envelope({}, CLIENT_INFO))}
    return body, {"Accept": remote_wire.ACCEPT_BOTH, **remote_wire.stateless_headers(body)}


async def failed(client: Client, name: str, arguments: dict[str, object]) -> bool:
    """True when the call fails as it should: a tool error in the result, or a JSON-RPC error."""
    try:
        result = await client.call_tool(name, arguments)
    except Exception:  # the SDK raises a JSON-RPC error answer (an unknown tool is one)
        return True
    return bool(result.is_error)


class Soak:
    def __init__(self, stack: Stack, workload: Workload) -> None:
        self.stack = stack
        self.work = workload
        self.base = stack.gateway_url
        self.stray_refused = 0
        self.list_changes = 0

    async def stateless_calls(self) -> None:
        async with Client(self.stack.urls["gateway"], mode=MODE_STATELESS) as client:
            for n in range(self.work.stateless_calls):
                await call_once(client, n)

    async def sessions(self) -> None:
        for n in range(self.work.sessions):
            async with Client(self.stack.urls["gateway"], mode="legacy") as client:
                await call_once(client, n)

    async def error_calls(self) -> None:
        async with Client(self.stack.urls["gateway"], mode=MODE_STATELESS) as client:
            for _ in range(self.work.error_calls):
                for name, arguments in (("no_such_tool", {}), ("add", {"a": "not a number", "b": 1})):
                    if not await failed(client, name, arguments):
                        raise RuntimeError(f"a call of {name} with {arguments} that must fail did not")

    async def malformed(self, http: aiohttp.ClientSession) -> None:
        url = self.stack.urls["gateway"]
        for _ in range(self.work.malformed):
            async with http.post(
                url, data=b"{not json", headers={"Accept": remote_wire.ACCEPT_BOTH, "Content-Type": "application/json"}
            ) as r:
                await r.read()
                if r.status != 400:
                    raise RuntimeError(f"a malformed body got HTTP {r.status}")

    async def stray_slots(self, http: aiohttp.ClientSession, round_index: int) -> None:
        """Names no provider ever uses: each is tracked until the slot limit prunes it."""
        for n in range(self.work.stray_slots):
            body, headers = stateless_post(n, "tools/list", {})
            url = f"{self.base}/stray-{round_index}-{n}/mcp"
            async with http.post(url, json=body, headers=headers) as r:
                await r.read()
                if r.status not in (200, 503):  # 503: not connected, or the slot limit refused it
                    raise RuntimeError(f"a stray slot request got HTTP {r.status}")
                self.stray_refused += r.status == 503 and "Too many slots" in await r.text()

    async def abandon_slow_call(self, http: aiohttp.ClientSession, n: int) -> None:
        """A caller that leaves while the provider still works on its call (the gateway must cancel it)."""
        body, headers = stateless_post(n, "tools/call", {"name": "slow", "arguments": {}})
        url = f"{self.base}/{EXTRA_SLOT}/mcp"
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(ABANDON_AFTER_S):
                async with http.post(url, json=body, headers=headers) as r:
                    await r.read()

    async def extra_provider(self, http: aiohttp.ClientSession) -> None:
        publisher = Publisher(extra_server(), self.base, EXTRA_SLOT, aggregate=True, reconnect=False)
        task = asyncio.create_task(publisher.run())
        try:
            await asyncio.wait_for(publisher.connected.wait(), 10)
            async with Client(f"{self.base}/{EXTRA_SLOT}/mcp", mode=MODE_STATELESS) as client:
                for n in range(self.work.extra_calls):
                    result = await client.call_tool("echo", {"text": f"t{n}"})
                    if result.is_error:
                        raise RuntimeError(f"echo failed: {result!r}"[:300])
            for n in range(self.work.abandoned):
                await self.abandon_slow_call(http, n)
            await asyncio.sleep(SLOW_TOOL_S)  # the abandoned calls end on the provider's side too
        finally:
            await publisher.stop()
            await asyncio.wait_for(task, 10)

    async def listen(self, http: aiohttp.ClientSession, slot: str, request_id: int, hold_s: float) -> int:
        """A stateless-era subscriptions/listen stream, opened, held for `hold_s` and dropped by the
        client; the tools list_changed notifications it carried meanwhile."""
        body, headers = stateless_post(
            request_id, "subscriptions/listen", {"notifications": {"toolsListChanged": True}}
        )
        url = f"{self.base}/{slot}/mcp"
        changes = 0
        async with http.post(url, json=body, headers=headers) as r:
            if r.status != 200:
                raise RuntimeError(f"subscriptions/listen on {slot} got HTTP {r.status}: {(await r.text())[:200]}")
            async with asyncio.timeout(10):
                while b"acknowledged" not in await r.content.readline():
                    pass
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(hold_s):
                    while line := await r.content.readline():
                        changes += b"notifications/tools/list_changed" in line
        return changes

    async def listens(self, http: aiohttp.ClientSession) -> None:
        """Listeners on `_all` while the extra provider joins and leaves it, and brief ones on one slot."""
        held = [self.listen(http, "_all", n, LISTEN_HOLD_S) for n in range(self.work.listens)]
        brief = [self.listen(http, "bench", n, 0) for n in range(self.work.listens)]
        self.list_changes += sum(await asyncio.gather(*held, *brief))

    async def round(self, index: int) -> None:
        async with aiohttp.ClientSession() as http:
            await asyncio.gather(
                self.stateless_calls(),
                self.sessions(),
                self.error_calls(),
                self.malformed(http),
                self.stray_slots(http, index),
                self.extra_provider(http),
                self.listens(http),
            )

    async def reading(self) -> Reading:
        await self.stack.settle()
        pid = self.stack.gateway.pid
        async with aiohttp.ClientSession() as http, http.get(f"{self.base}/metrics") as r:
            text = await r.text()
        series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        slots = sum(1 for line in text.splitlines() if line.startswith("mcpgw_slot_connected{"))
        streams = sum(
            int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines() if line.startswith("mcpgw_client_streams{")
        )
        fds = await open_fds(pid)
        rss_mib = memory_kib(pid)["VmRSS"] / 1024
        return Reading(rss_mib, fds, slots, series, streams, self.stray_refused, self.list_changes)


def requests_per_round(work: Workload) -> int:
    return (
        work.stateless_calls
        + work.sessions * 2  # initialize and the call (notifications and DELETE not counted)
        + work.error_calls * 2
        + work.malformed
        + work.stray_slots
        + work.extra_calls
        + work.abandoned
        + work.listens * 2
    )


def summary(readings: Sequence[Reading], work: Workload) -> str:
    """Warm-up end, middle and end of the run: growth that goes on in the second half is a leak."""
    middle_round = (work.warmup_rounds + len(readings)) // 2
    settled, middle, last = readings[work.warmup_rounds - 1], readings[middle_round - 1], readings[-1]
    second_half = (len(readings) - middle_round) * requests_per_round(work)
    rows = [
        (
            "resident memory (MiB)",
            *(f"{r.rss_mib:.1f}" for r in (settled, middle, last)),
            f"{last.rss_mib - middle.rss_mib:+.1f}",
        ),
        ("open file descriptors", *(str(r.fds) for r in (settled, middle, last)), f"{last.fds - middle.fds:+d}"),
        ("slots tracked", *(str(r.slots) for r in (settled, middle, last)), f"{last.slots - middle.slots:+d}"),
        ("metric series", *(str(r.series) for r in (settled, middle, last)), f"{last.series - middle.series:+d}"),
        (
            "client streams open",
            *(str(r.streams) for r in (settled, middle, last)),
            f"{last.streams - middle.streams:+d}",
        ),
    ]
    header = [
        "gateway",
        f"after round {work.warmup_rounds}",
        f"after round {middle_round}",
        f"after round {len(readings)}",
        "second half",
    ]
    table = markdown_table(header, [list(row) for row in rows])
    per_10k = (last.rss_mib - middle.rss_mib) * 1024 / second_half * 10_000 if second_half else 0.0
    return (
        f"{table}\n\nSecond half of the run: {second_half:,} requests, resident memory {per_10k:+.1f} KiB per 10,000 "
        f"requests. Stray slot names refused at the slot limit: {last.stray_refused}. Tools list_changed "
        f"notifications the `_all` listeners received: {last.list_changes}."
    )


async def run(work: Workload) -> list[Reading]:
    stack = Stack(settings={"MCP_GATEWAY_LIMITS__MAX_SLOTS": str(MAX_SLOTS)})
    readings: list[Reading] = []
    try:
        await stack.start()
        soak = Soak(stack, work)
        for index in range(work.rounds):
            await soak.round(index)
            reading = await soak.reading()
            readings.append(reading)
            print(
                f"  round {index + 1}/{work.rounds}: RSS {reading.rss_mib:.1f} MiB, {reading.fds} fds, "
                f"{reading.slots} slots, {reading.series} metric series, {reading.streams} client streams",
                file=sys.stderr,
                flush=True,
            )
    finally:
        stack.stop()
    return readings


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, help=f"rounds (default {FULL.rounds})")
    parser.add_argument("--quick", action="store_true", help="3 short rounds")
    args = parser.parse_args(argv)
    work = QUICK if args.quick else FULL
    if args.rounds is not None:
        if args.rounds <= work.warmup_rounds:
            parser.error(f"--rounds must be more than the {work.warmup_rounds} warm-up round(s)")
        work = Workload(**{**work.__dict__, "rounds": args.rounds})
    print(f"bench.soak: {work.rounds} rounds of {requests_per_round(work):,} requests, {work.warmup_rounds} to warm up")
    readings = run_interruptible(run(work), "bench.soak: interrupted; gateway and server stopped")
    if readings is None:
        return 130
    print()
    print(summary(readings, work))
    return 0


if __name__ == "__main__":
    sys.exit(main())
