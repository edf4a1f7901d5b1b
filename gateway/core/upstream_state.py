"""State that clients ask a provider to keep (resource subscriptions, log level), counted per slot.

One provider session serves every client, so the gateway keeps the union: it subscribes upstream when
the first client subscribes, unsubscribes when the last one leaves, sends the most verbose log level
anyone asked for, and replays all of it when a provider reconnects (docs/protocol.md, "The gateway
owns the provider session").
"""

from __future__ import annotations

from collections.abc import Hashable

from gateway.core.jsonrpc import JsonObject

LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


def level_rank(level: object) -> int:
    """A level's severity, 0 (debug) for anything unknown. Only a provider's message can carry an
    unknown level here (ranked least severe, so delivered to the fewest): a level a client asks for
    is refused where it enters (logging/setLevel, the stateless envelope's logLevel), because ranking
    a wanted level as debug would stream every message."""
    return LOG_LEVELS.index(level) if isinstance(level, str) and level in LOG_LEVELS else 0


class UpstreamState:
    def __init__(self) -> None:
        self.subscribers: dict[str, set[Hashable]] = {}
        self.log_levels: dict[Hashable, str] = {}
        self.sent_level: str | None = None

    def subscribe(self, uri: str, who: Hashable) -> bool:
        """Record a subscription; True when it is the first for this URI (forward it upstream)."""
        holders = self.subscribers.setdefault(uri, set())
        first = not holders
        holders.add(who)
        return first

    def unsubscribe(self, uri: str, who: Hashable) -> bool:
        """Drop a subscription; True when it was the last for this URI (forward it upstream)."""
        holders = self.subscribers.get(uri)
        if not holders or who not in holders:
            return False
        holders.discard(who)
        if not holders:
            del self.subscribers[uri]
            return True
        return False

    def subscribed(self, uri: str, who: Hashable) -> bool:
        return who in self.subscribers.get(uri, ())

    def set_level(self, who: Hashable, level: str) -> str | None:
        """Record a client's level; returns the level to send upstream when the effective one changed."""
        self.log_levels[who] = level
        return self._effective_change()

    def forget(self, who: Hashable) -> tuple[list[str], str | None]:
        """A client left: the URIs to unsubscribe upstream and the new level to send, if any."""
        last = [uri for uri in list(self.subscribers) if self.unsubscribe(uri, who)]
        self.log_levels.pop(who, None)
        return last, self._effective_change()

    def _effective_change(self) -> str | None:
        if not self.log_levels:
            return None
        effective = min(self.log_levels.values(), key=level_rank)
        if effective == self.sent_level:
            return None
        self.sent_level = effective
        return effective

    def replay(self) -> list[tuple[str, JsonObject]]:
        """Requests that rebuild this state on a fresh provider session."""
        requests: list[tuple[str, JsonObject]] = []
        if self.log_levels:
            self.sent_level = min(self.log_levels.values(), key=level_rank)
            requests.append(("logging/setLevel", {"level": self.sent_level}))
        requests.extend(("resources/subscribe", {"uri": uri}) for uri in sorted(self.subscribers))
        return requests
