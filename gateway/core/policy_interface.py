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
class CallVerdict:
    """The policy layer's answer to one tools/call, given back with its outcome (`Governance.call_ended`)."""

    allowed: bool
    visible: bool = True
    """False: the caller may not see the tool, and gets the answer an unknown tool gets."""
    reason: str = ""
    """Why it is refused, in words the caller can act on (a -32001 Forbidden, or the arguments' -32602)."""
    code: int = 0
    """The JSON-RPC code of a refusal (0: -32001 Forbidden)."""
    data: dict[str, Any] | None = None
    arguments: dict[str, Any] | None = None
    """The arguments to forward when the policy changed them (clamped); None: as the caller sent them."""
    clamped: tuple[str, ...] = ()
    """What was clamped, for the result ("speed_rpm 2500 -> 2000 (policy limits[0])")."""
    ticket: object = None
    """The policy layer's own handle on the call (its audit record)."""


class Governance(Protocol):
    """Decides requests by what they ask ([policy]); the core asks it only when a policy is configured."""

    def permits(self, principal: Principal, slot: str, method: str) -> str | None:
        """None when `principal` may use `method` on `slot`; else why not (a -32001 Forbidden)."""
        ...

    def visible_tools(self, principal: Principal, slot: str, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The tools of `slot` the caller may call: the only ones it sees, in every catalog."""
        ...

    def may_see(self, principal: Principal, slot: str, tool: dict[str, Any]) -> bool: ...

    async def admit_call(
        self, principal: Principal, slot: str, tool: dict[str, Any] | None, name: str, arguments: object, via: str
    ) -> CallVerdict:
        """Decide one tools/call, check its arguments and record the decision durably before it is
        forwarded. `tool`: as the provider lists it (None: not listed); `via`: the way in."""
        ...

    def call_ended(self, verdict: CallVerdict, outcome: str, latency_ms: float) -> None:
        """Record how an admitted call ended: "ok", "tool-error", "error", "timeout", "cancelled"."""
        ...

    def reload(self) -> str | None:
        """Load the policy again and swap it in whole; None when it worked, else why the old one stays."""
        ...

    def status(self) -> dict[str, Any]:
        """For broker_info and diagnosis: the policy in force and the audit trail's state
        (`audit.healthy`, `audit.last_error`; `audit` None when the trail is off)."""
        ...


@dataclass(frozen=True)
class Policies:
    """What the policy layer answers the core with; built once by the composition root."""

    rate_limits: RateLimits
    connections: ConnectionCounts
    governance: Governance | None = None
    """None: no [policy], every request is allowed as authentication and scopes let it through."""
