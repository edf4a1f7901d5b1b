"""Asking a running gateway to let go of a serial port for a flash, and to take it back after.

The gateway's serial way in holds its ports open and locked (gateway/southbound/serial/ports.py). The
flash asks the gateway's `_broker` provider, over the same MCP endpoint `mcp-gateway reload` uses:

  broker_serial_release {"port": "<path>"}   close the port and keep it closed (its slots detach, as
                                             when a board is unplugged) until resumed; the answer's
                                             `already_held` says it was let go of before this call
  broker_serial_resume  {"port": "<path>"}   open it again now (the board re-registers)

A gateway that is not running, refuses, or does not have these tools (older versions) counts as "did
not release": the flash then reports port-in-use.

A command that has a port released must give it back however it ends: `stop_signals` makes SIGTERM
and SIGHUP (a closed terminal, a dropped SSH session) stop it as Ctrl-C does, by an exception, so that
the code that resumes the port runs. Should the command die anyway (SIGKILL, a power cut), the gateway
gives the port back by itself after its bound, `[serial] max_hold_s`, or sooner, when the next flash
of the port finds it free and released: that flash asks for the release too, takes the hold over,
and resumes the port at its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol

RELEASE_TOOL = "broker_serial_release"
RESUME_TOOL = "broker_serial_resume"


@dataclass(frozen=True)
class Release:
    """The holder let go of the port (it may take a moment to close it)."""

    already_held: bool
    """It had let go of it before this call (for another program, which may still be using it, or one
    that died without giving it back); False too from a gateway whose answer does not say."""


class Handover(Protocol):
    def let_go(self, port: str) -> Release | None:
        """The release when the holder let go of `port`, None when it did not."""
        ...

    def resume(self, port: str) -> None: ...


class GatewayHandover:
    """The running gateway at `url`, reached as a client (token as for the other client commands)."""

    def __init__(self, url: str, token: str | None) -> None:
        self.url = url
        self.token = token

    def _call(self, tool: str, port: str) -> dict[str, Any] | None:
        """The tool's result, None when the gateway could not be reached or refused."""
        from gateway.client import GatewayCallError, GatewayClient

        async def go() -> dict[str, Any]:
            async with GatewayClient(self.url, "_broker", timeout_s=10.0, token=self.token) as client:
                return await client.call_tool(tool, {"port": port})

        try:
            result = asyncio.run(go())
        except (GatewayCallError, OSError, TimeoutError):
            return None
        return None if result.get("isError") else result

    def let_go(self, port: str) -> Release | None:
        result = self._call(RELEASE_TOOL, port)
        if result is None:
            return None
        return Release(already_held=_answer(result).get("already_held") is True)

    def release(self, port: str) -> bool:
        """True when the gateway let go of `port` (also when it had already)."""
        return self.let_go(port) is not None

    def resume(self, port: str) -> None:
        self._call(RESUME_TOOL, port)


def _answer(result: dict[str, Any]) -> dict[str, Any]:
    """The tool's JSON answer: its structured content, else its text (a protocol era without the former)."""
    state = result.get("structuredContent")
    if isinstance(state, dict):
        return state
    with contextlib.suppress(ValueError, TypeError, KeyError, IndexError):
        state = json.loads(result["content"][0]["text"])
    return state if isinstance(state, dict) else {}


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived: raised where the command runs, as SIGINT raises KeyboardInterrupt."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.exit_code = 128 + signum
        """The shell's convention for a command ended by a signal: 143 for SIGTERM, 129 for SIGHUP."""


def _stop(signum: int, frame: FrameType | None) -> None:
    for stop in STOP_SIGNALS:  # a second signal must not cut short the port's resume
        signal.signal(stop, signal.SIG_IGN)
    if signum == signal.SIGHUP:
        # The terminal is gone: what is still printed (the resume step) would fail with EIO.
        with contextlib.suppress(OSError):
            nowhere = os.open(os.devnull, os.O_WRONLY)
            os.dup2(nowhere, 1)
            os.dup2(nowhere, 2)
            os.close(nowhere)
    raise Stopped(signum)


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise Stopped while inside (only the main thread can take signals; elsewhere,
    as when tests run a command in a thread, nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {stop: signal.signal(stop, _stop) for stop in STOP_SIGNALS}
    try:
        yield
    finally:
        for stop, handler in previous.items():
            signal.signal(stop, handler)
