"""The order of the stdio bridge: the host's messages reach the gateway in stdin order where the order
matters, while the answers to them stream back concurrently, and what the bridge holds of them is
bounded.

A reader takes stdin lines into a queue; a sender starts one task per line, in order, and starts the
next once the message before it went out: its POST's body written whole to its connection
(`SentPayload`), or its task ended without a POST (a refusal of the bridge's own, a cancel it
carried out itself). Requests are independent of each other, so that is all they wait for: parallel
calls go out at once. A message that acts on an earlier one (a notification such as
`notifications/cancelled`, an answer to the gateway's request, `logging/setLevel`) also waits, in its
task, for the message before it to have been taken in by the gateway (`after_previous`): its final
POST's answer begun (its headers; not a POST the gateway answered 404 or 401, which the bridge sends
again), or ANSWER_HEAD_WAIT_S after that POST's body went out (the gateway begins the answer of a
long call only with its first notification or keepalive, and has taken the call in by then). So a
cancel never overtakes its request, nor a `logging/setLevel` an earlier one.

Lines taken but not done (queued, or with their answer still on its way) are bounded by
MAX_PENDING_BYTES and MAX_PENDING_MESSAGES: at either bound stdin is not read until one is done, so a
host writing faster than the gateway answers waits, as on any full pipe.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from aiohttp.abc import AbstractStreamWriter
from aiohttp.payload import BytesPayload

from gateway.northbound.bridge_errors import MAX_LINE_BYTES

MAX_PENDING_BYTES = 2 * MAX_LINE_BYTES
"""The stdin bytes the bridge holds at most in lines taken but not done (two of the longest lines);
the line that reaches it is still taken, and asyncio's pipe reader holds up to as much again unread."""
MAX_PENDING_MESSAGES = 512
"""The most messages taken but not done: each one's answer holds a connection to the gateway."""
ANSWER_HEAD_WAIT_S = 0.1
"""How long after a message's POST body went out the next message waits for the gateway's answer to
begin; a gateway on loopback or a LAN has read and dispatched the message well within it."""


@dataclass
class Sending:
    """One message on its way: set when its POST went out (`sent`), and what names it."""

    seq: int
    """Its place in stdin order (1 for the first line)."""
    written: asyncio.Event = field(default_factory=asyncio.Event)
    """Its POST's body was written whole to the connection."""
    began: asyncio.Event = field(default_factory=asyncio.Event)
    """The gateway's answer to its POST began (status and headers came)."""
    body: Any = None
    """The message whose own POST sets `sent` (not one the bridge makes on the way, such as initialize)."""
    request_id: Any = None
    """The host's id when the message is a request: named on stderr when it is given up at EOF."""
    previous: tuple[asyncio.Task[None], Sending] | None = None
    """The message sent before it, which a message acting on an earlier one waits for."""
    answered: bool = False
    """A response to it was written to stdout (the gateway's or the bridge's): it has its one answer."""


SENDING: contextvars.ContextVar[Sending | None] = contextvars.ContextVar("stdio_sending", default=None)
"""The message the running task forwards (None outside the sender's tasks)."""


def own_message(body: Any) -> Sending | None:
    """The Sending to signal when `body` is the running task's own message, else None."""
    sending = SENDING.get()
    return sending if sending is not None and sending.body is body else None


class SentPayload(BytesPayload):
    """A POST body that says when it has been written whole to its connection (`Sending.written`)."""

    def __init__(self, body: bytes, sending: Sending) -> None:
        super().__init__(body, content_type="application/json")
        self.sending = sending

    async def write_with_length(self, writer: AbstractStreamWriter, content_length: int | None) -> None:
        await super().write_with_length(writer, content_length)
        self.sending.written.set()


Handle = Callable[[Any], Coroutine[Any, Any, None]]


class InOrder:
    """Reads stdin lines (`read`) and forwards them one after the other (`send`); see the module's doc."""

    def __init__(
        self, handle: Handle, max_bytes: int = MAX_PENDING_BYTES, max_messages: int = MAX_PENDING_MESSAGES
    ) -> None:
        self.handle = handle
        self.max_bytes = max_bytes
        self.max_messages = max_messages
        self.queue: asyncio.Queue[tuple[Any, int] | None] = asyncio.Queue()  # bounded by `room`
        self.room = asyncio.Event()
        self.room.set()
        self.pending_bytes = 0
        self.pending_messages = 0
        self.taken = 0
        """Lines taken from stdin so far: a message's `seq` is at most this."""
        self.started = 0
        """Lines whose tasks were started."""
        self.tasks: dict[asyncio.Task[None], Sending] = {}

    def _has_room(self) -> bool:
        return self.pending_bytes < self.max_bytes and self.pending_messages < self.max_messages

    async def read(self, lines: AsyncIterator[Any], size_of: Callable[[Any], int]) -> None:
        """Take lines into the queue while there is room; at EOF (or on failure) the queue is closed."""
        try:
            async for line in lines:
                size = size_of(line)
                self.pending_bytes += size
                self.pending_messages += 1
                self.taken += 1
                self.queue.put_nowait((line, size))
                while not self._has_room():
                    self.room.clear()
                    await self.room.wait()
        finally:
            self.queue.put_nowait(None)

    async def send(self) -> None:
        """Start each queued line's task in order, each once the one before it was sent; ends at EOF."""
        loop = asyncio.get_running_loop()
        previous: tuple[asyncio.Task[None], Sending] | None = None
        while (item := await self.queue.get()) is not None:
            line, size = item
            self.started += 1
            sending = Sending(self.started, previous=previous)
            context = contextvars.copy_context()
            context.run(SENDING.set, sending)
            task = loop.create_task(self.handle(line), context=context)
            self.tasks[task] = sending
            task.add_done_callback(functools.partial(self._done, size))
            await _first(task, sending.written)
            previous = (task, sending)

    def _done(self, size: int, task: asyncio.Task[None]) -> None:
        self.tasks.pop(task, None)
        self.pending_bytes -= size
        self.pending_messages -= 1
        if self._has_room():
            self.room.set()

    async def settled(self, sender: asyncio.Task[None]) -> None:
        """Every line taken has been sent and its task has ended."""
        await asyncio.shield(sender)
        while self.tasks:
            await asyncio.wait(set(self.tasks))

    def stop(self) -> dict[asyncio.Task[None], Sending]:
        """Cancel the tasks of the messages on their way (the sender stopped first); they and what they
        forward, which says whether each was answered."""
        tasks = dict(self.tasks)
        for task in tasks:
            task.cancel()
        return tasks

    def unsent(self) -> list[Any]:
        """The lines taken from stdin whose tasks never started (the sender stopped first)."""
        lines = []
        while not self.queue.empty():
            if (item := self.queue.get_nowait()) is not None:
                lines.append(item[0])
        return lines

    def cancel(self) -> list[asyncio.Task[None]]:
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        return tasks


async def after_previous(sending: Sending) -> None:
    """Until the message sent before `sending` has been taken in by the gateway (see the module's doc)."""
    if sending.previous is None:
        return
    task, before = sending.previous
    while not task.done() and not before.began.is_set():
        await _first(task, before.written)
        if task.done() or before.began.is_set():
            return
        await _first(task, before.began, ANSWER_HEAD_WAIT_S)
        if before.written.is_set():  # its final body went out long enough ago (a resend clears it first)
            return


async def _first(task: asyncio.Task[None], event: asyncio.Event, timeout: float | None = None) -> None:
    """Until `task` ends or `event` is set (or `timeout` passed)."""
    waiter = asyncio.get_running_loop().create_task(event.wait())
    try:
        await asyncio.wait({task, waiter}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
