"""The questions the core asks the policy layer, as protocols the policy layer implements.

The core never imports `gateway.policy`: the composition root (gateway/app.py) builds the policy
objects and hands them to the core as these interfaces: rate limits and connection counts. Any other
question the core asks the policy layer goes through an interface of the same kind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sized
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.core.principal import Principal


class RateRefusal(Protocol):
    """Why a request is refused by a rate limit, in the words the caller gets."""

    @property
    def scope(self) -> str:
        """Whose bucket ran dry: "principal" or "slot" (the label of mcpgw_rate_limited_total)."""
        ...

    @property
    def limit(self) -> str:
        """The bound's key under [limits], as mcpgw_limit_hits labels it."""
        ...

    def message(self) -> str: ...

    def data(self) -> dict[str, object]: ...


class RateLimits(Protocol):
    """Token buckets per principal and per slot ([limits.rate])."""

    @property
    def enabled(self) -> bool: ...

    @property
    def tables(self) -> Mapping[str, Sized]:
        """The buckets held, by scope, for the mcpgw_rate_buckets gauge."""
        ...

    def admit(self, principal: Principal | None = None, slot: str | None = None) -> RateRefusal | None:
        """Take a token for the principal and the slot (None: that limit does not apply), or refuse."""
        ...


class ConnectionCounts(Protocol):
    """The connections held against [limits.connections], for broker_info and /metrics."""

    @property
    def open_count(self) -> int: ...

    @property
    def per_peer(self) -> Mapping[str, int]: ...

    @property
    def refusing(self) -> int: ...

    def largest_peer(self) -> int: ...

    def status(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Policies:
    """What the policy layer answers the core with; built once by the composition root."""

    rate_limits: RateLimits
    connections: ConnectionCounts
