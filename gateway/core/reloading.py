"""What the core asks of the configuration reload it does not own (gateway/reload/ owns it): run one,
and say how the last ones went, for `_broker`'s broker_reload tool and broker_info."""

from __future__ import annotations

from typing import Protocol

from gateway.core.jsonrpc import JsonObject


class Reloading(Protocol):
    async def reload(self) -> JsonObject:
        """Load the configuration again and apply it whole, or nothing of it: the report as JSON
        (outcome "applied", "unchanged" or "refused", changes, refusals, text)."""
        ...

    def status(self) -> JsonObject:
        """How many reloads were applied and refused, and the last of each, for broker_info."""
        ...
