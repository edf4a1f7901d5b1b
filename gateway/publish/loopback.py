"""In-process publishing: an SDK server attached to a gateway in the same event loop, no sockets."""

from __future__ import annotations

import asyncio
import contextlib

from gateway.core.gateway import Gateway
from gateway.core.link import CLOSE_NORMAL, LinkInfo, ProviderLink
from gateway.core.provider_session import ProviderSession
from gateway.publish.sdk_bridge import SdkServer, SdkSession


class _Started:
    """The task status `SdkSession.run` reports its start to (anyio's protocol, in plain asyncio)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def started(self, value: object = None) -> None:
        self.event.set()


async def start_session(session: SdkSession) -> asyncio.Task[None]:
    """`session.run()` as a task, returned once the session takes messages; its error if it fails first."""
    status = _Started()
    task = asyncio.get_running_loop().create_task(session.run(task_status=status))
    waiter = asyncio.ensure_future(status.event.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if not status.event.is_set():
        await task  # raises what ended it; a session that returned without starting is an error too
        raise RuntimeError("the SDK session ended before it started")
    return task


class LoopbackLink(ProviderLink):
    def __init__(self) -> None:
        self.info = LinkInfo(transport="loopback", remote="in-process")
        self.session: SdkSession | None = None
        self.task: asyncio.Task[None] | None = None

    async def send(self, data: bytes) -> None:
        if self.session is None or self.task is None or self.task.done():
            raise ConnectionError("loopback provider stopped")
        await self.session.feed(data)

    def send_ping(self) -> None:
        """Loopback links use JSON-RPC ping (info.native_ping is false)."""

    async def close(self, code: int, reason: str) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task


async def attach_loopback(
    gateway: Gateway, slot: str, server: SdkServer, *, aggregate: bool = False
) -> ProviderSession:
    """Publish `server` in `slot` of an in-process gateway; returns the provider session.

    Raises SlotRefused (gateway.core.slots) when the slot may not be had, as a dialling provider
    would be refused. `await session.close(code, reason)` takes the server out of its slot again."""
    link = LoopbackLink()
    holder: dict[str, ProviderSession] = {}

    async def deliver(data: bytes) -> None:
        session = holder.get("session")
        if session is not None:
            session.receive(data)

    link.session = SdkSession(server, deliver)
    link.task = await start_session(link.session)
    try:
        provider = await gateway.registry.attach(slot, link, aggregate=aggregate)
    except BaseException:
        # Refused (SlotRefused: held, reserved, undeclared): the server must not keep running unseen.
        await link.close(CLOSE_NORMAL, "refused")
        raise
    holder["session"] = provider
    link.task.add_done_callback(lambda _: provider.link_lost("loopback provider stopped"))
    return provider
