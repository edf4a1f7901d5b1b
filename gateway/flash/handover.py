"""Asking a running gateway to let go of a serial port for a flash, and to take it back after.

The gateway's serial way in holds its ports open and locked (gateway/southbound/serial/ports.py). The
flash asks the gateway's `_broker` provider, over the same MCP endpoint `mcp-gateway reload` uses:

  broker_serial_release {"port": "<path>"}   close the port and keep it closed (its slots detach, as
                                             when a board is unplugged) until resumed; the answer's
                                             `already_held` says it was let go of before this call
  broker_serial_resume  {"port": "<path>"}   open it again now (the board re-registers)

A gateway that is not running, refuses, or does not have these tools (older versions) counts as "did
not release": the flash then reports port-in-use, and when the gateway was asked for a port whose lock
another process is seen to hold, the message ends with its answer ("the gateway at --url URL refused to let go of it:
<its refusal>"), so that a refusal such as a token that is no operator of `_broker` is not taken for a
busy port.

The call carries the client token, so it goes only to the gateway that may hold the port: the port is
local, so that gateway is a local process (gateway/flash/peer.py finds who listens at the URL). When
this command holds the port itself (it opened at once: asking takes over a hold a killed flash left),
the gateway is asked only when every socket listening at the URL is seen to be held by an
`mcp-gateway run` process; a listener this user cannot see (another user's process, the command not
run as root) is not asked. When another process holds the port, the gateway is not asked when nothing
listens at the URL, when the URL's host is no address of this machine, when a listener is seen that
is not `mcp-gateway run`, or when the port's lock holders are known and are not the listener (nor a
gateway at all); a listener that cannot be seen is asked, as the token's holder means it to be.

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol

RELEASE_TOOL = "broker_serial_release"
RESUME_TOOL = "broker_serial_resume"
REFUSAL_CHARS = 2000
"""The most characters of the gateway's answer a refusal quotes (its own refusals are a few hundred)."""


@dataclass(frozen=True)
class Release:
    """The holder let go of the port (it may take a moment to close it)."""

    already_held: bool
    """It had let go of it before this call (for another program, which may still be using it, or one
    that died without giving it back); False too from a gateway whose answer does not say."""


class Handover(Protocol):
    def let_go(self, port: str) -> Release | None:
        """The release when the holder let go of `port`, None when it did not (or was not asked); a
        FlashError port-in-use that says why when another process holds the port and the holder was
        not asked (the gateway it reaches is not the one holding the port), or refused (its answer
        quoted)."""
        ...

    def resume(self, port: str) -> None: ...


class GatewayHandover:
    """The running gateway at `url`, reached as a client (token as for the other client commands)."""

    def __init__(self, url: str, token: str | None, runs_gateway: Callable[[int], bool] | None = None) -> None:
        from gateway.flash import peer

        self.url = url
        self.token = token
        self.runs_gateway = runs_gateway or peer.runs_gateway
        """Whether a process (by pid) is the gateway: by default, whether it runs as `mcp-gateway run`."""
        self.asked: set[str] = set()
        """The ports this command asked the gateway to let go of: the only ones it asks to take back."""
        self.why_not: dict[str, str] = {}
        """Why the gateway did not let go of a port it was asked for, as the end of a sentence naming it:
        "refused to let go of it: <its answer>", or "did not let go of it: <what failed>"."""

    def _call(self, tool: str, port: str) -> dict[str, Any]:
        """The tool's result (isError too); GatewayCallError when the gateway refused the call (a
        JSON-RPC error, an HTTP refusal) or could not be reached, OSError or TimeoutError."""
        from gateway.client import GatewayClient

        async def go() -> dict[str, Any]:
            async with GatewayClient(self.url, "_broker", timeout_s=10.0, token=self.token) as client:
                return await client.call_tool(tool, {"port": port})

        return asyncio.run(go())

    def let_go(self, port: str) -> Release | None:
        from gateway.client import GatewayCallError
        from gateway.flash.port import holders, in_use_error, lock_holder_pids, lock_holders

        holder_pids = lock_holder_pids(port)
        # Said only when another process is seen holding the port: this command may hold it (a
        # takeover, where a gateway that does not serve the port rightly refuses) unless the lock says not.
        quiet = holder_pids is None or os.getpid() in holder_pids
        if not self._may_ask(port, holder_pids):
            return None
        self.asked.add(port)
        self.why_not.pop(port, None)
        try:
            result = self._call(RELEASE_TOOL, port)
        except (GatewayCallError, OSError, TimeoutError) as exc:
            self.why_not[port] = _why_not(exc)
        else:
            if not result.get("isError"):
                return Release(already_held=_answer(result).get("already_held") is True)
            self.why_not[port] = f"refused to let go of it: {_shown(_error_text(result))}"
        if quiet:
            return None
        said = f"The gateway at --url {self.url} {self.why_not[port]}"
        raise in_use_error(port, lock_holders(port) or holders(port), said)

    def _may_ask(self, port: str, holder_pids: list[int] | None) -> bool:
        """Whether the gateway at the URL may be asked to let go of `port`, whose lock `holder_pids`
        hold (the module's rules); raises port-in-use when another process holds the port and the URL
        does not lead to it."""
        from gateway.flash.peer import listener
        from gateway.flash.port import holders, in_use_error, lock_holders

        found = listener(self.url)
        if holder_pids is not None and os.getpid() in holder_pids:  # this command has the port: a takeover
            return found.is_gateway(self.runs_gateway)
        if found.nobody:
            return False
        if holder_pids is not None and not any(map(self.runs_gateway, holder_pids)):
            return False  # another program holds the port: no gateway can give it
        if found.local and found.unseen and not found.pids:
            return True
        leads_to_holder = holder_pids is None or bool(set(found.pids) & set(holder_pids))
        if found.is_gateway(self.runs_gateway) and leads_to_holder:
            return True
        elsewhere = f"--url {self.url} does not lead to the gateway that holds the port ({found.describe()})"
        raise in_use_error(port, lock_holders(port) or holders(port), elsewhere)

    def release(self, port: str) -> bool:
        """True when the gateway let go of `port` (also when it had already)."""
        from gateway.flash.errors import FlashError

        try:
            return self.let_go(port) is not None
        except FlashError:
            return False

    def resume(self, port: str) -> None:
        from gateway.client import GatewayCallError

        if port in self.asked:
            # Not held (the release was refused) or not reached: there is nothing to take back here.
            with contextlib.suppress(GatewayCallError, OSError, TimeoutError):
                self._call(RESUME_TOOL, port)


def _why_not(exc: BaseException) -> str:
    """Why the gateway did not let go, as the end of a sentence about it: "refused" for its JSON-RPC
    error; for anything else (an HTTP refusal such as a bad token, no answer) what the client says."""
    from gateway.client import GatewayCallError

    text = _shown(str(exc) or type(exc).__name__)
    if isinstance(exc, GatewayCallError) and exc.code is not None:
        return f"refused to let go of it: {text}"
    return f"did not let go of it: {text}"


def _shown(text: str) -> str:
    """The gateway's words on the user's terminal, on one line (its line breaks as spaces): what does
    not print escaped, bounded."""
    from gateway.flash.shown import printable

    return printable(" ".join(text.split()), REFUSAL_CHARS)


def _error_text(result: dict[str, Any]) -> str:
    """The text of a tool's isError result (its content's text parts)."""
    content = result.get("content")
    parts = [item.get("text") for item in content if isinstance(item, dict)] if isinstance(content, list) else []
    return " ".join(part for part in parts if isinstance(part, str)) or "the tool answered isError without a text"


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
