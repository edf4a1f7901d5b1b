"""Polls a gateway's /healthz from a process of its own, writing each answer's latency to a file.

    python -m bench.health_probe http://127.0.0.1:3000 samples.txt

One line per poll, `<monotonic time> <seconds>` (a failed poll: `<monotonic time> fail`), every 10 ms,
until killed; once its first poll is in the file it prints `ready` on stdout (importing aiohttp alone can
outlast any fixed wait on a loaded machine, so the benchmark waits for that line). A benchmark that also
drives hundreds of connections from its own event loop cannot time the gateway's answers from that loop:
the wait would be its own. time.monotonic() is the same clock in every process of the machine, so the
benchmark reads the samples of any window it timed.
"""

from __future__ import annotations

import asyncio
import sys
import time

import aiohttp

POLL_S = 0.01
READY = "ready"
"""The line the probe prints once its first poll is in the file."""


async def probe(url: str, path: str) -> None:
    with open(path, "a", buffering=1) as out:  # noqa: ASYNC230 - a line per 10 ms, to a local file
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as http:
            ready = True
            while True:
                started = time.monotonic()
                try:
                    async with http.get(f"{url}/healthz", timeout=aiohttp.ClientTimeout(total=30)) as response:
                        await response.read()
                        ok = response.status == 200
                except (aiohttp.ClientError, TimeoutError):
                    ok = False
                took = time.monotonic() - started
                out.write(f"{started:.6f} {took:.6f}\n" if ok else f"{started:.6f} fail\n")
                if ready:
                    print(READY, flush=True)
                    ready = False
                await asyncio.sleep(POLL_S)


def slowest(path: str, since: float, until: float) -> tuple[float | None, int]:
    """(the slowest answer, failed polls) among the polls that started in [since, until]; None for
    the slowest when no poll in the window was answered."""
    worst: float | None = None
    failures = 0
    with open(path) as samples:
        for line in samples:
            started, _, took = line.partition(" ")
            if not since <= float(started) <= until:
                continue
            if took.strip() == "fail":
                failures += 1
            else:
                worst = float(took) if worst is None else max(worst, float(took))
    return worst, failures


if __name__ == "__main__":
    asyncio.run(probe(sys.argv[1], sys.argv[2]))
