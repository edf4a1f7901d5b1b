"""The client side of `bench.relay`: SDK clients calling `add`, one at a time or many at once.

Sequential calls run in the benchmark process. Concurrent clients run in worker processes: one
Python process driving 32 SDK clients spends most of a core on the SDK client alone, and a client
that cannot keep up caps both paths at the same rate and hides what the gateway costs.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from mcp import Client

TOOL = "add"
MAX_ERRORS_PER_CLIENT = 100  # a broken path reports errors instead of spinning for the whole window


class CallFailed(RuntimeError):
    pass


async def call_once(client: Client, n: int) -> None:
    result = await client.call_tool(TOOL, {"a": n, "b": 1})
    if result.is_error or result.structured_content != {"result": n + 1}:
        raise CallFailed(f"unexpected answer to add({n}, 1): {result!r}"[:300])


class SequentialClient:
    """One SDK client session, opened and warmed up before anything is timed."""

    def __init__(self, url: str, mode: str) -> None:
        self.client = Client(url, mode=mode)
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> SequentialClient:
        await self._stack.enter_async_context(self.client)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def warm_up(self, calls: int) -> None:
        for n in range(calls):
            await call_once(self.client, n)

    async def timed_calls(self, calls: int) -> list[float]:
        """Seconds per call, each measured from the SDK call to its parsed result."""
        latencies: list[float] = []
        clock = time.perf_counter
        for n in range(calls):
            started = clock()
            await call_once(self.client, n)
            latencies.append(clock() - started)
        return latencies


# -- concurrent clients in worker processes -----------------------------------------------------


@dataclass
class Burst:
    """What one worker's clients did in one timed window."""

    calls: int
    errors: int
    first_error: str


async def _drive(client: Client, start_at: float, end_at: float) -> Burst:
    await asyncio.sleep(max(0.0, start_at - time.monotonic()))
    calls = errors = 0
    first_error = ""
    n = 0
    while errors < MAX_ERRORS_PER_CLIENT:
        n += 1
        try:
            await call_once(client, n)
            succeeded = True
        except Exception as exc:
            succeeded = False
            first_error = first_error or f"{type(exc).__name__}: {exc}"[:300]
        # A call that ends after the window closes is not counted: the window is what is measured.
        if time.monotonic() >= end_at:
            break
        if succeeded:
            calls += 1
        else:
            errors += 1
    return Burst(calls, errors, first_error)


async def _worker_loop(conn: Connection) -> None:
    clients: list[Client] = []
    stack = AsyncExitStack()
    while True:
        command, *args = await asyncio.to_thread(conn.recv)
        if command == "open":
            url, mode, count = args
            # Sessions are entered and left in this one task (the SDK's task groups require it).
            stack = AsyncExitStack()
            clients = [await stack.enter_async_context(Client(url, mode=mode)) for _ in range(count)]
            for client in clients:
                await call_once(client, 0)
            conn.send(("opened",))
        elif command == "run":
            start_at, end_at = args
            bursts = await asyncio.gather(*(_drive(client, start_at, end_at) for client in clients))
            errors = [burst.first_error for burst in bursts if burst.first_error]
            conn.send(
                (
                    "done",
                    sum(burst.calls for burst in bursts),
                    sum(burst.errors for burst in bursts),
                    errors[0] if errors else "",
                )
            )
        elif command == "close":
            await stack.aclose()
            clients = []
            conn.send(("closed",))
        else:
            return


def _worker_main(conn: Connection) -> None:
    with contextlib.suppress(EOFError, KeyboardInterrupt):
        asyncio.run(_worker_loop(conn))


def split(total: int, parts: int) -> list[int]:
    """`total` clients spread as evenly as possible over `parts` workers."""
    base, extra = divmod(total, parts)
    return [base + (1 if index < extra else 0) for index in range(parts)]


@dataclass
class Throughput:
    calls: int
    errors: int
    seconds: float
    first_error: str

    @property
    def per_second(self) -> float:
        return self.calls / self.seconds if self.seconds > 0 else 0.0


class WorkerPool:
    """Processes that each hold a share of the concurrent SDK clients, started once per benchmark."""

    def __init__(self, workers: int) -> None:
        context = multiprocessing.get_context("spawn")  # no inherited event loop or sockets
        self.pipes: list[Connection] = []
        self.processes: list[Any] = []
        for _ in range(workers):
            ours, theirs = context.Pipe()
            process = context.Process(target=_worker_main, args=(theirs,), daemon=True)
            process.start()
            theirs.close()
            self.pipes.append(ours)
            self.processes.append(process)

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    async def _all(self, commands: Sequence[tuple[Any, ...]], timeout_s: float) -> list[tuple[Any, ...]]:
        for pipe, command in zip(self.pipes, commands, strict=True):
            pipe.send(command)
        return await self._replies(timeout_s)

    async def _replies(self, timeout_s: float) -> list[tuple[Any, ...]]:
        async def answer(pipe: Connection) -> tuple[Any, ...]:
            if not await asyncio.to_thread(pipe.poll, timeout_s):
                raise TimeoutError(f"a client worker did not answer within {timeout_s}s")
            reply: tuple[Any, ...] = pipe.recv()
            return reply

        return list(await asyncio.gather(*(answer(pipe) for pipe in self.pipes)))

    async def open(self, url: str, mode: str, clients: int) -> None:
        await self._all([("open", url, mode, count) for count in split(clients, len(self.pipes))], 60)

    async def run(self, duration_s: float, at_start: Callable[[], None] | None = None) -> Throughput:
        """Every client calls for `duration_s`; `at_start` runs as the window opens (to sample CPU)."""
        start_at = time.monotonic() + 0.2  # every worker starts at once (CLOCK_MONOTONIC is system-wide)
        end_at = start_at + duration_s
        for pipe in self.pipes:
            pipe.send(("run", start_at, end_at))
        await asyncio.sleep(max(0.0, start_at - time.monotonic()))
        if at_start is not None:
            at_start()
        replies = await self._replies(duration_s + 60)
        errors = [reply[3] for reply in replies if reply[3]]
        return Throughput(
            calls=sum(reply[1] for reply in replies),
            errors=sum(reply[2] for reply in replies),
            seconds=duration_s,
            first_error=errors[0] if errors else "",
        )

    async def close_clients(self) -> None:
        await self._all([("close",)] * len(self.pipes), 60)

    def stop(self) -> None:
        for pipe in self.pipes:
            with contextlib.suppress(OSError):
                pipe.send(("exit",))
        for process in self.processes:
            process.join(5)
            if process.is_alive():
                process.terminate()
                process.join(5)
