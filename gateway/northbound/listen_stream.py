"""One 2026-07-28 `subscriptions/listen` stream: the notification kinds it asked for, and its caller.

The stream's caller is the principal its credential stands for now: each time the stream's credential is
judged again (CredentialWatch: before a write, at least every limits.sse_keepalive_s, and at once when a
catalog it listens to changes after a configuration reload), the stream takes the scopes it holds then
(`adopt`), so the slots' notifications and `_all`'s and the tool groups' list_changed follow a reload
that changed them. A change of what it may list is itself news: the stream is sent
notifications/tools/list_changed. A credential that no longer stands ends the stream (`watch.failed`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.core import jsonrpc
from gateway.core.eras import META_SUBSCRIPTION_ID
from gateway.core.jsonrpc import JsonObject
from gateway.core.listener_views import FollowedCaller
from gateway.core.principal import Principal
from gateway.core.streams import MessageQueue
from gateway.northbound.credential_watch import CredentialWatch

TOOLS_CHANGED = "notifications/tools/list_changed"


class SubscriptionStream(FollowedCaller):
    """One stateless-era `subscriptions/listen` stream: only the notification kinds asked for."""

    KIND_BY_METHOD = {
        TOOLS_CHANGED: "toolsListChanged",
        "notifications/prompts/list_changed": "promptsListChanged",
        "notifications/resources/list_changed": "resourcesListChanged",
    }

    def __init__(self, subscription_id: Any, honored: JsonObject, queue_limit: int, principal: Principal) -> None:
        super().__init__()
        self.subscription_id = subscription_id
        self.principal = principal  # under a policy, the slot delivers only what this caller may know of
        self.honored = honored
        self.uris = set(honored.get("resourceSubscriptions") or ())
        self.queue = MessageQueue(queue_limit)
        self.watch: CredentialWatch | None = None
        self.rejudging: asyncio.Task[None] | None = None

    def watched_by(self, watch: CredentialWatch) -> None:
        self.watch = watch
        watch.adopt = self.adopt

    def adopt(self, principal: Principal) -> None:
        """The caller as its credential was judged again (the same caller, its scopes as granted now)."""
        if principal != self.principal:
            self.principal = principal
            self.tell_if_changed()

    def tell_if_changed(self) -> None:
        if self.readopted():
            self.deliver(jsonrpc.notification(TOOLS_CHANGED))

    def stale(self) -> bool:
        return self.watch is not None and self.watch.stale() and not self.queue.closed

    def rejudge_soon(self) -> None:
        if self.rejudging is None or self.rejudging.done():
            self.rejudging = asyncio.get_running_loop().create_task(self.rejudge())

    async def rejudge(self) -> None:
        """Judge the credential until it is judged under the configuration in force; compare the views
        then (adopt does when the principal changed). One that no longer stands ends the stream."""
        watch = self.watch
        while watch is not None and watch.stale():
            before = self.principal
            if await watch.failure() is not None:
                self.queue.close(drop=True)  # the listen handler ends it with watch.failed
                return
            if self.principal == before:
                self.tell_if_changed()  # the views kept what it was last told of: a rebuild may have changed it

    def close(self) -> None:
        self.queue.close()
        if self.rejudging is not None:
            self.rejudging.cancel()

    def deliver(self, message: JsonObject) -> None:
        method = message.get("method")
        params = message.get("params")
        params = dict(params) if isinstance(params, dict) else {}
        if method == "notifications/resources/updated":
            if params.get("uri") not in self.uris:
                return
        else:
            kind = self.KIND_BY_METHOD.get(str(method))
            if kind is None or not self.honored.get(kind):
                return
        meta = params.get("_meta")
        params["_meta"] = {
            **(meta if isinstance(meta, dict) else {}),
            META_SUBSCRIPTION_ID: self.subscription_id,
        }
        self.queue.put(jsonrpc.notification(str(method), params))

    def slot_reclaimed(self) -> None:
        self.queue.close()  # the slot went to a provider (SlotRegistry._reclaim_client_names)
