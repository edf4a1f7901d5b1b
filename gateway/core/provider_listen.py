"""A 2026-07-28 provider's `subscriptions/listen`: how the gateway hears of its list changes.

2026-07-28 has no session to send notifications on: a provider announces tool, prompt and resource
list changes, and updates of subscribed resources, only on the stream of a `subscriptions/listen`
request. The gateway keeps one open per such provider, asking for every list change the provider
declares and for the resources its clients subscribed to, reopens it with jittered back-off when it
ends, opens it again when the subscribed resources change, and lists the tools again after a
reopening (nothing is replayed across streams). A change of the subscribed resources while a listen
serves is make-before-break: the new listen opens beside the serving one, which ends only once the new
one is acknowledged (or has failed), so no update is lost in between; changes made while the new one
opens are asked for by one more listen after its acknowledgement, so a burst of changes costs a few
reopenings, not one each. A provider that does not serve it (-32601) has its tools listed again
every `tools_poll_s`, when set. The session routes what the stream carries
(ProviderSession._on_listen_event); this class only keeps the request open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Protocol

from gateway.core import eras, errors, jsonrpc
from gateway.core.backoff import Backoff
from gateway.core.jsonrpc import JsonObject

log = logging.getLogger("gateway.provider")

RETRY_INITIAL_S = 0.5
RETRY_MAX_S = 30.0


class PollSettings(Protocol):
    @property
    def tools_poll_s(self) -> float: ...


class ListeningSession(Protocol):
    """What the listen request needs of its provider session (gateway/core/provider_session.py)."""

    @property
    def slot(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def ready(self) -> bool: ...

    @property
    def modern(self) -> bool: ...

    @property
    def settings(self) -> PollSettings: ...

    @property
    def capabilities(self) -> JsonObject: ...

    @property
    def listen_uris(self) -> Callable[[], list[str]]: ...

    def own_params(self, params: JsonObject | None = None) -> JsonObject | None: ...

    async def request(
        self, method: str, params: JsonObject | None, *, timeout_ms: int | None = None, internal: bool = False
    ) -> JsonObject: ...

    def warn_once(self, kind: str, text: str, *args: Any) -> None: ...

    def relist(self, *, noticed: bool = False) -> None: ...


class ProviderListen:
    """One provider's listen request, from the session being ready to its end."""

    def __init__(self, session: ListeningSession) -> None:
        self.session = session
        self.state = "none"  # none | opening | open | reconnecting | unsupported | polling
        self.opens = 0
        self.drops = 0
        self.last_error = ""
        self.asked: JsonObject = {}
        self._task: asyncio.Task[None] | None = None
        self._next: asyncio.Task[None] | None = None
        """A listen opening beside the serving one (make-before-break) until it is acknowledged."""
        self._next_asked: JsonObject = {}
        self._changed = False
        """The subscribed resources changed while a listen was opening: ask again once it is acknowledged."""
        self._backoff = Backoff(RETRY_INITIAL_S, RETRY_MAX_S)
        self._reopened = False

    def start(self) -> None:
        """Open the listen request (or the poll that stands in for it) in the background."""
        self.stop()
        if self.session.state == "closed":
            return
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"listen {self.session.slot}")

    def refresh(self) -> None:
        """The subscribed resources changed: ask again with the new list (a served listen only)."""
        if self.state in ("unsupported", "polling") or not self.session.modern or not self.session.ready:
            return
        if self._next is not None:
            self._changed = True  # asked for once the listen opening beside the serving one is acknowledged
        elif self.state == "open" and self._task is not None and not self._task.done():
            self._open_next()
        else:
            self.start()  # no listen serves yet, so there is nothing to lose: ask again at once

    def _open_next(self) -> None:
        """Open a listen beside the serving one; the serving one ends once this one is acknowledged."""
        self._next = asyncio.get_running_loop().create_task(self._run(), name=f"listen {self.session.slot} (next)")

    def _promote_next(self) -> None:
        """The listen opened beside the serving one takes over (acknowledged or failed): end the old one."""
        old, self._task, self._next = self._task, self._next, None
        if old is not None and not old.done() and old is not asyncio.current_task():
            old.cancel()

    def _take_over(self) -> None:
        """A listen opened beside the serving one ended or needs none before its acknowledgement: the
        serving one asks for an outdated list, so it ends, and this one goes on in its place."""
        if self._next is asyncio.current_task():
            self.asked = self._next_asked
            self._promote_next()

    def stop(self) -> None:
        self._changed = False
        for task in (self._task, self._next):
            if task is not None and not task.done() and task is not asyncio.current_task():
                task.cancel()
        self._task = self._next = None

    def acknowledged(self, params: JsonObject) -> None:
        """The provider's first event on the stream: it is open.

        Only one listen opens beside a serving one at a time (changes meanwhile wait in `_changed`), and
        the serving one was acknowledged already, so an acknowledgement meanwhile is the new one's.
        """
        if self._next is not None:
            self.asked = self._next_asked
            self._promote_next()
        self.state = "open"
        self.opens += 1
        self._backoff.reset()
        if self._reopened:
            # Nothing is replayed across listen streams: a change made while none was open is found
            # by listing again (clients hear of it only if the list really differs).
            self.session.relist()
        if self._changed:
            self._changed = False
            self._open_next()

    async def _run(self) -> None:
        session = self.session
        while session.state != "closed":
            capabilities = session.capabilities
            wanted = eras.listen_filter(capabilities, session.listen_uris())
            if not wanted:
                self._take_over()
                self.state = "none"
                await self._poll()
                return
            self._changed = False  # `wanted` holds every change made so far
            if self._next is asyncio.current_task():
                self._next_asked = wanted  # the serving listen stays what the status shows until the handover
            else:
                self.asked = wanted
                self.state = "opening"
            params = session.own_params({"notifications": wanted})
            try:
                reply = await session.request("subscriptions/listen", params, timeout_ms=0, internal=True)
            except errors.RpcError as exc:
                if session.state == "closed":
                    return
                self.last_error = exc.message
            else:
                error = reply.get("error")
                if isinstance(error, dict) and error.get("code") == jsonrpc.METHOD_NOT_FOUND:
                    self._take_over()
                    self.state = "unsupported"
                    self.last_error = str(error.get("message", ""))
                    await self._poll()
                    return
                self.last_error = (
                    f"subscriptions/listen failed: {error.get('message')}"
                    if isinstance(error, dict)
                    else "the provider ended its subscriptions/listen stream"
                )
            if session.state == "closed":
                return
            if self._next is not None and self._next is not asyncio.current_task():
                # The serving listen ended while another opens beside it: that one serves from its
                # acknowledgement on, which lists again for what the gap may have hidden.
                self.drops += 1
                self._reopened = True
                self.asked = self._next_asked
                self.state = "opening"
                self._task, self._next = self._next, None
                session.warn_once("listen", "subscriptions/listen of slot %s ended: %s", session.slot, self.last_error)
                return
            self._take_over()
            self.state = "reconnecting"
            self.drops += 1
            self._reopened = True
            session.warn_once("listen", "subscriptions/listen of slot %s ended: %s", session.slot, self.last_error)
            await asyncio.sleep(self._backoff.next_delay())

    async def _poll(self) -> None:
        """No way to hear of changes: list the tools again every tools_poll_s (when configured)."""
        interval = self.session.settings.tools_poll_s
        if interval <= 0:
            return
        if self.state != "unsupported":
            self.state = "polling"
        while self.session.state != "closed":
            await asyncio.sleep(interval)
            with contextlib.suppress(errors.RpcError):
                self.session.relist()

    def status(self) -> JsonObject:
        return {
            "state": self.state,
            "asked": sorted(self.asked),
            "opens": self.opens,
            "drops": self.drops,
            "last_error": self.last_error or None,
        }
