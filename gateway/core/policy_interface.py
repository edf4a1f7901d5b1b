"""The questions the core asks the policy layer, as protocols the policy layer implements.

The core never imports `gateway.policy`: the composition root (gateway/app.py) builds the policy
objects and hands them to the core as these interfaces: rate limits and connection counts. Any other
question the core asks the policy layer goes through an interface of the same kind.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sized
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.core import errors
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
    """Why it is refused, in words the caller can act on (a -32001 Forbidden, or a -32602 for a malformed
    request)."""
    code: int = 0
    """The JSON-RPC code of a refusal (0: -32001 Forbidden)."""
    data: dict[str, Any] | None = None
    arguments: dict[str, Any] | None = None
    """The arguments to forward when the policy changed them (clamped); None: as the caller sent them."""
    clamped: tuple[str, ...] = ()
    """What was clamped, for the result ("speed_rpm 2500 -> 2000 (policy limits[0])")."""
    ticket: object = None
    """The policy layer's own handle on the call (its audit record)."""
    admission: object = None
    """The policy layer's hold on the call's execution limits, given back by `call_ended`."""
    answer: dict[str, Any] | None = None
    """Not forwarded, answered with this result instead (a tool error: a person declined the call, or
    its arguments are refused)."""
    effect: str = ""
    """The decision in the audit trail's words (`allow`, `clamp`, `deny`, `refuse-arguments`, `declined`,
    `refuse-confirmation`, `refuse-limit`; `error`: a call the trail could not record), for the policy span."""


REFUSED_META_KEY = "io.github.mcp-gateway/refused"
"""In the _meta of a tool error the gateway answered itself (the call was not forwarded): why, for
programs (`reason`, `slot`, and what the reason names: `argument`, `rule`, ...)."""


CONFIRM_STATE_PREFIX = "mcpgwc1."
"""Marks a requestState the gateway issued when it asked a 2026-07-28 client to confirm a call."""
CONFIRM_INPUT_KEY = "confirm"
"""The key of the gateway's confirmation question in inputRequests (and of its answer in inputResponses)."""


@dataclass(frozen=True)
class ConfirmRetry:
    """A 2026-07-28 retry answering the gateway's confirmation: the requestState it echoes and its answer."""

    state: str
    answer: dict[str, Any] | None
    """inputResponses["confirm"]: the elicitation result; None when the retry carries none."""


class AnswerInstead(Exception):
    """Raised while a call is decided: answer the request with `result` (input_required) and forward nothing."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__("answered by the gateway")
        self.result = result


WAITING_REASON = "confirmation_required"
"""`error.data.reason` of a call that waits for an operator's approval (a -32001 from `admit_call`)."""

QUESTION_READ_REASON = "question_read_confirmed"
"""`error.data.reason` of a call the policy has a person confirm, refused to a confirmer that cannot ask
one (`QuestionRead`: the gateway's own read for a question, `_broker`'s resources/read)."""


def confirmation_effect(exc: BaseException) -> str:
    """The audit trail's effect of a call whose decision ended in `exc` instead of a verdict: `admit_call`
    raises AnswerInstead and RpcError only when a confirmation holds the call (it waits for the client's
    retry or an operator's approval) or cannot go ahead; anything else is `error`."""
    if isinstance(exc, AnswerInstead):
        return "wait-confirmation"
    if isinstance(exc, errors.RpcError):
        waiting = isinstance(exc.data, dict) and exc.data.get("reason") == WAITING_REASON
        return "wait-confirmation" if waiting else "refuse-confirmation"
    return "error"


class Confirmer(Protocol):
    """How the caller of one tools/call can be asked to confirm it: built by the core for each call."""

    @property
    def way(self) -> str:
        """ "elicit": ask now on the request's stream; "input": answer input_required, the retry answers;
        "": this caller cannot be asked (a person approves with `mcp-gateway approve`)."""
        ...

    @property
    def retry(self) -> ConfirmRetry | None: ...

    async def elicit(self, params: dict[str, Any]) -> dict[str, Any]:
        """Send elicitation/create to the caller and await its result (its error raised)."""
        ...

    async def device_state(self) -> object:
        """The device's state as its read tool reports it, for the question; None when there is none."""
        ...


SHUTDOWN_CANCEL = "the gateway is shutting down"
"""The message of the cancel HeldCalls.end_all sends: the call is answered with the shutdown error."""


class HeldCalls:
    """The tasks whose governed call is being decided (waiting for a person's confirmation, a limit, the
    audit trail's commit): at shutdown they are answered at once, as a call a provider holds is."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()
        self.ending = False

    def end_all(self) -> None:
        self.ending = True
        for task in list(self.tasks):
            task.cancel(SHUTDOWN_CANCEL)


class Governance(Protocol):
    """Decides requests by what they ask ([policy]); the core asks it only when a policy is configured."""

    held: HeldCalls
    """The calls being decided now (gateway/core/governed.py keeps it; Gateway.shutdown ends them)."""

    def permits(self, principal: Principal, slot: str, method: str) -> str | None:
        """None when `principal` may use `method` on `slot`; else why not (a -32001 Forbidden)."""
        ...

    def may_receive(self, principal: Principal, slot: str, method: str) -> bool:
        """Whether `principal` receives `slot`'s notification `method`: only when it holds there the
        capability the notification concerns (docs/governance.md), decided by the policy in force now."""
        ...

    def visible_tools(self, principal: Principal, slot: str, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The tools of `slot` the caller may call: the only ones it sees, in every catalog."""
        ...

    def may_see(self, principal: Principal, slot: str, tool: dict[str, Any]) -> bool: ...

    async def admit_call(
        self,
        principal: Principal,
        slot: str,
        tool: dict[str, Any] | None,
        name: str,
        arguments: object,
        via: str,
        confirmer: Confirmer | None = None,
        *,
        trace_id: str | None = None,
    ) -> CallVerdict:
        """Decide one tools/call, check its arguments, have a person confirm it where the policy says so
        (through `confirmer`; AnswerInstead when the answer comes with a retry, RpcError while it waits
        for an operator's approval or when a confirmation cannot go ahead), and record the decision
        durably before it is forwarded. `tool`: as the provider lists it (None: not listed); `via`: the way in;
        `trace_id`: the request's W3C trace id, recorded with the decision."""
        ...

    def approvals(self, principal: Principal) -> list[dict[str, Any]]:
        """The calls waiting for a person's approval, and those approved and not yet used, that `principal`
        may decide: those it could make itself under the policy in force (as decide_approval requires)."""
        ...

    def decide_approval(self, principal: Principal, approval_id: str, approve: bool) -> dict[str, Any]:
        """Approve or deny one waiting call as `principal`; RpcError -32602 when there is no such call."""
        ...

    async def recent_decisions(self, limit: int, slot: str | None, tool: str | None) -> list[dict[str, Any]]:
        """The newest decisions of the audit trail, oldest first (RpcError when the trail is off or unreadable)."""
        ...

    def call_ended(self, verdict: CallVerdict, outcome: str, latency_ms: float, error: str | None = None) -> None:
        """Record how an admitted call ended: "ok", "tool-error", "error", "timeout", "cancelled", and the
        error text its caller got (the JSON-RPC error's message, a tool error's first text; None for "ok")."""
        ...

    def answered_after_cancel(self, verdict: CallVerdict, outcome: str, error: str | None = None) -> None:
        """Record what the device answered to an admitted call after its result was recorded "cancelled"
        (the cancel crossed the answer): "ok", "tool-error" or "error", and the text of a failure."""
        ...

    def reload(self) -> str | None:
        """Load the policy again and swap it in whole; None when it worked, else why the old one stays."""
        ...

    def status(self) -> dict[str, Any]:
        """For broker_info and diagnosis: the policy in force and the audit trail's state
        (`audit.healthy`, `audit.last_error`; `audit` None when the trail is off)."""
        ...


@dataclass(frozen=True)
class ProviderOrigin:
    """Where a provider's `broker/*` message came from (docs/governance-providers.md)."""

    slot: str
    identity: str | None
    """The identity the link authenticated as ([providers.auth]); None: it has none."""
    transport: str
    link: object
    """The provider session it came on: one connection, compared by identity (`is`)."""


@dataclass(frozen=True)
class CallerReference:
    """What a declaring provider gets with one forwarded request, in `params._meta["io.cyanmycelium/caller"]`."""

    ref: str
    meta: dict[str, str]
    """The value put in _meta: {"ref", "correlationId", "traceId"}."""


class ProviderGovernance(Protocol):
    """Providers' declarations and decisions on mcp-broker's wire, decided by [policy]; the core asks it
    only for boards and providers that connect to the gateway (never for stdio or remote upstreams)."""

    async def provider_request(
        self, origin: ProviderOrigin, method: str, params: dict[str, Any] | None
    ) -> dict[str, Any]:
        """The result of one `broker/*` request; raises errors.RpcError (-32602 with `data.errors` for
        a refused declaration, -32601 for a method it does not serve)."""
        ...

    def provider_notification(self, origin: ProviderOrigin, method: str, params: dict[str, Any] | None) -> None:
        """A `broker/*` notification (`broker/audit/result` is recorded next to its decision)."""
        ...

    def caller_reference(
        self, origin: ProviderOrigin, principal: Principal, meta: Mapping[str, Any] | None
    ) -> CallerReference | None:
        """A reference to `principal` for one request forwarded to `origin`'s provider, live until
        `caller_done` and a grace after; None when the slot holds no live declaration. `meta`: the
        request's _meta (its traceparent gives the trace id)."""
        ...

    def caller_done(self, reference: CallerReference) -> None:
        """The request `reference` came with has been answered (or failed)."""
        ...

    def provider_gone(self, origin: ProviderOrigin) -> None:
        """The provider's link is gone: its slot's declaration is no longer live, its references end."""
        ...

    def status(self) -> dict[str, Any]:
        """For diagnosis: declarations, domain owners, caller references, results overdue."""
        ...


@dataclass(frozen=True)
class Policies:
    """What the policy layer answers the core with; built once by the composition root."""

    rate_limits: RateLimits
    connections: ConnectionCounts
    governance: Governance | None = None
    """None: no [policy], every request is allowed as authentication and scopes let it through."""
    provider_governance: ProviderGovernance | None = None
    """None: no [policy]; providers' `broker/*` requests are answered -32601."""
