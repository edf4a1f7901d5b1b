"""The event loop `mcp-gateway run` serves on: uvloop where it is installed, else asyncio's own.

uvloop runs the loop, its timers and its socket transports in C (libuv): every relayed call wakes
the gateway's loop three times and writes twice, and on the stock loop that machinery is about 90 of
the 268 Python calls the gateway makes per relayed call; side by side, uvloop took 4.5-8% off its
CPU per call (docs/performance-internals.md, "What keeps the gateway's path cheap"). Nothing in the
gateway depends on which loop runs it; `event_loop = "asyncio"` is there for a platform without
uvloop wheels, and for telling a loop problem from any other one."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

EventLoopChoice = Literal["auto", "uvloop", "asyncio"]
EVENT_LOOPS: tuple[EventLoopChoice, ...] = ("auto", "uvloop", "asyncio")
LoopFactory = Callable[[], asyncio.AbstractEventLoop]
T = TypeVar("T")


class EventLoopUnavailable(Exception):
    """event_loop = "uvloop" on a machine without it."""


def loop_factory(choice: EventLoopChoice) -> LoopFactory | None:
    """The factory asyncio.Runner is given; None is asyncio's own loop."""
    if choice == "asyncio":
        return None
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        if choice == "uvloop":
            raise EventLoopUnavailable(
                'event_loop = "uvloop", but uvloop is not installed: pip install uvloop, '
                'or set event_loop = "auto" (uvloop when it is there) or "asyncio"'
            ) from None
        return None
    factory: LoopFactory = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T], choice: EventLoopChoice) -> T:
    """asyncio.run(main) on the chosen loop."""
    try:
        factory = loop_factory(choice)
    except EventLoopUnavailable:
        main.close()  # never awaited: no "coroutine was never awaited" warning on the way out
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def running_loop_name() -> str:
    """What broker_info reports: "uvloop 0.23.0", "asyncio", or "none" outside a running loop."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # the guide rendered by a test or a tool outside the gateway
        return "none"
    module = type(loop).__module__.split(".")[0]
    if module == "uvloop":
        version = getattr(importlib.import_module("uvloop"), "__version__", "")
        return f"uvloop {version}".strip()
    return "asyncio"
