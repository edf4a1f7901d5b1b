"""How the caller of a governed tools/call can be asked to confirm it (the core's side of
policy_interface.Confirmer): on its session-era stream, by an input_required round in 2026-07-28, or
not at all; and the device's state for the question, read with the slot's read tool.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core import errors, jsonrpc
from gateway.core.client_context import SESSION, ClientContext
from gateway.core.eras import ENVELOPE_KEYS
from gateway.core.input_required import CallerId
from gateway.core.jsonrpc import JsonObject
from gateway.core.policy_interface import CONFIRM_INPUT_KEY, CONFIRM_STATE_PREFIX, ConfirmRetry
from gateway.core.relay import missing_capability
from gateway.core.used_states import UsedStates

ELICIT = "elicitation/create"
CONTINUE_STATE_PREFIX = "mcpgwk1."
"""Marks a requestState the gateway issued for a provider's own input_required round of a call a person
confirmed: it seals the provider's requestState and that the call is confirmed (Continuations)."""
CONTINUE_S = 600
"""How long such a state holds (s): a person answering the provider's question has this long, and never
past the confirmation's own lifetime (Continued.deadline_ms)."""
MAX_CONTINUED = 4096
"""Continuation states answered and not yet expired, remembered so none is used twice; past it, new
ones are refused until one expires."""
MAX_CONTINUED_PER_CALLER = 256
"""As many of one caller's, so one caller continuing its own calls in a loop leaves room for the others'."""
MAX_ROUNDS = 32
"""Provider rounds one confirmed call continues; past it, the call is sent again and confirmed again."""
QUESTION_READ = "question-read"
"""The `way` of the gateway's own read of a device's state for a question: it is decided, limited and
recorded as the caller's call of the read tool, and never itself put to a person."""
QUESTION_VIA = "confirmation-question"
"""The way in the audit trail records for that read (its trace id is the confirmed call's)."""
Forward = Callable[[JsonObject], Awaitable[JsonObject]]
ReadGate = Callable[[JsonObject, JsonObject, Forward], Awaitable[JsonObject]]
"""Takes a read (the read tool as the provider lists it, the tools/call params, the raw forward) through
the governed call path: gateway/core/governed.py, question_read."""


def split_retry(params: JsonObject) -> tuple[JsonObject, ConfirmRetry | None]:
    """A 2026-07-28 retry answering the gateway's confirmation: the params without the answer, and the answer.

    Any other requestState (the provider's own, or the gateway's input_required translation) stays."""
    state = params.get("requestState")
    if not isinstance(state, str) or not state.startswith(CONFIRM_STATE_PREFIX):
        return params, None
    responses = params.get("inputResponses")
    answer = responses.get(CONFIRM_INPUT_KEY) if isinstance(responses, dict) else None
    rest = {key: value for key, value in params.items() if key not in ("requestState", "inputResponses")}
    return rest, ConfirmRetry(state, answer if isinstance(answer, dict) else None)


@dataclass(frozen=True)
class Continued:
    """What a continuation state brings: the provider's own requestState (None: it gave none), who
    confirmed the call, and the digest of the arguments the call was forwarded with."""

    provider_state: str | None
    confirmed_by: str
    forwarded: str
    own: bool
    """The caller confirmed it through its own client (not another principal's approval)."""
    deadline_ms: int
    """When the confirmation's lifetime ends (Continuations.clock_ms): the same through every round."""
    rounds: int
    """The provider rounds continued with this state, counting its own."""
    used: str = ""
    """The digest of the state's body, the key it is remembered by once used (Continuations.spend)."""
    until_ms: int = 0
    """When the state expires (Continuations.clock_ms)."""
    yes_ms: int | None = None
    """When the person's yes was given (Continuations.clock_ms): ClientConfirmer.confirmed_yes_ms in a
    call's first state; None only in a state that does not hold (problem)."""
    problem: errors.RpcError | None = None
    """Why the state does not hold (mismatch, expired, used): the call is refused once it is decided, so
    the refusal is on record like any other (the other fields then mean nothing)."""


def _digest(value: object) -> str:
    try:
        canonical = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:  # unreachable for decoded JSON; never equal to anything then
        canonical = secrets.token_bytes(16)
    return hashlib.sha256(canonical).hexdigest()[:32]


def _continue_error(message: str, reason: str, **data: object) -> errors.RpcError:
    return errors.RpcError(jsonrpc.INVALID_PARAMS, message, {"reason": reason, **data})


class Continuations:
    """Seals and opens continuation states (CONTINUE_STATE_PREFIX): HMAC with a key of this process, as
    the gateway's other requestStates, over the state and the call it continues (caller, slot, tool,
    arguments as sent), so it cannot be forged, altered or moved to another call; each is used once."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)
        # Times in a state are on the monotonic clock plus an offset of this process: a client reads
        # them, and the offset hides the host's uptime (a wall-clock change stretches no lifetime).
        self._offset_ms = secrets.randbelow(1 << 40)
        self._used = UsedStates()
        """The digest of each used state's body, until it expires (clock_ms)."""

    def clock_ms(self) -> int:
        return int(time.monotonic() * 1000) + self._offset_ms

    def seal(self, call: str, provider_state: object, continued: Continued) -> str:
        inner = orjson.dumps(
            {
                "s": provider_state if isinstance(provider_state, str) else None,
                "by": continued.confirmed_by,
                "f": continued.forwarded,
                "o": continued.own,
                "d": continued.deadline_ms,
                "n": continued.rounds,
                "y": continued.yes_ms,
            }
        )
        expires = min(self.clock_ms() + CONTINUE_S * 1000, continued.deadline_ms)
        body = f"{CONTINUE_STATE_PREFIX}{secrets.token_hex(8)}.{expires}.{base64.urlsafe_b64encode(inner).decode()}"
        return f"{body}.{self._mac(body, call)}"

    def open(self, state: str, call: str) -> Continued:
        """The continuation `state` carries for `call` (not used up: see spend); RpcError -32602 when it
        does not hold."""
        body, _, mac = state.rpartition(".")
        fields = body.removeprefix(CONTINUE_STATE_PREFIX).split(".")
        if len(fields) != 3 or not mac.isascii() or not hmac.compare_digest(mac, self._mac(body, call)):
            raise _continue_error(
                "requestState does not belong to this call (altered, from another run of the gateway, or sent "
                "with another tool, other arguments or by another caller): retry the same tool with the same "
                "arguments as the call that got it, or send the call again without requestState",
                "mismatch",
            )
        inner = orjson.loads(base64.urlsafe_b64decode(fields[2]))
        now = self.clock_ms()
        deadline = inner.get("d")
        if not isinstance(deadline, int) or deadline <= now:
            raise _lifetime_passed()
        if not fields[1].isdigit() or int(fields[1]) <= now:
            raise _continue_error(
                "requestState has expired: the provider's question was not answered in time; send the call "
                "again without requestState",
                "expired",
            )
        used = hashlib.sha256(body.encode()).hexdigest()  # a provider's state may be long: its digest is kept
        if used in self._used:
            raise _used_error()
        state = inner.get("s")
        rounds = inner.get("n")
        yes = inner.get("y")
        return Continued(
            state if isinstance(state, str) else None,
            str(inner.get("by")),
            str(inner.get("f")),
            inner.get("o") is True,
            deadline,
            rounds if isinstance(rounds, int) else MAX_ROUNDS + 1,
            used,
            int(fields[1]),
            yes if isinstance(yes, int) else None,
        )

    def within(self, continued: Continued, expires_s: int) -> None:
        """Refuse (RpcError, expired) a round past the confirmation's lifetime as the [[confirm]] rule in
        force gives it: min(the sealed deadline, the yes + that rule's expires_s), so a reload that shortens
        expires_s shortens the lifetime of the states already sealed."""
        deadline = continued.deadline_ms
        if continued.yes_ms is not None:
            deadline = min(deadline, continued.yes_ms + expires_s * 1000)
        if deadline <= self.clock_ms():
            raise _lifetime_passed()

    def spend(self, continued: Continued, caller: str) -> None:
        """Use up an opened state, once its round is admitted; RpcError when it was used meanwhile or a
        bound is reached (MAX_ROUNDS, MAX_CONTINUED_PER_CALLER, MAX_CONTINUED) or the state does not hold."""
        if continued.problem is not None:
            raise continued.problem
        if continued.rounds > MAX_ROUNDS:
            raise _continue_error(
                f"Not forwarded: a confirmed call continues at most {MAX_ROUNDS} rounds of its provider's "
                "questions (MAX_ROUNDS); send the call again without requestState to be confirmed again",
                "too_many_rounds",
                limit=MAX_ROUNDS,
            )
        if continued.used in self._used:
            raise _used_error()
        now = self.clock_ms()
        full = self._used.full(caller, MAX_CONTINUED, MAX_CONTINUED_PER_CALLER, now)
        if full == "per_caller":
            # This caller's share is full: its own rounds wait, every other caller's still count.
            raise _full(
                f"{self._used.held_by(caller)} of this caller's continued rounds",
                "max_continued_per_caller",
                MAX_CONTINUED_PER_CALLER,
                self._used.oldest(caller) - now,
            )
        if full == "all":
            raise _full(
                f"{len(self._used)} continued rounds", "max_continued", MAX_CONTINUED, self._used.oldest() - now
            )
        self._used.add(continued.used, continued.until_ms, caller)

    def give_back(self, continued: Continued) -> None:
        """A spent state counts again: its round was refused before anything was decided on record."""
        if continued.problem is not None:
            return
        self._used.forget(continued.used)

    def _mac(self, body: str, call: str) -> str:
        return hmac.new(self._key, f"{body}|{call}".encode(), hashlib.sha256).hexdigest()[:32]


def _lifetime_passed() -> errors.RpcError:
    return _continue_error(
        "requestState has expired: the person's confirmation of this call lasts the confirm rule's "
        "expires_s, and that lifetime passed before this round; send the call again without "
        "requestState to be confirmed again",
        "expired",
    )


def _used_error() -> errors.RpcError:
    return _continue_error(
        "requestState was already used: each round of a confirmed call continues once; send the call "
        "again without requestState",
        "used",
    )


def _full(text: str, limit: str, bound: int, wait_ms: int) -> errors.RpcError:
    """The refusal of a round past a bound of remembered states: one counts once the oldest expires."""
    retry_after_ms = max(wait_ms, 1)
    return errors.RpcError(
        jsonrpc.UNAVAILABLE,
        f"Not forwarded: {text} are remembered within their lifetime ({limit} = {bound}); send the same retry "
        f"again in {-(-retry_after_ms // 1000)} s, when the oldest of them expires",
        {"reason": "continuations_full", "limit": limit, "bound": bound, "retryAfterMs": retry_after_ms},
    )


CONTINUATIONS = Continuations()


def call_of(caller: CallerId, slot: str, tool: str, arguments: object) -> str:
    """What a continuation state is bound to: the caller, the slot, the tool, the arguments as sent."""
    return orjson.dumps([*caller, slot, tool, _digest(arguments)]).decode()  # JSON: no part runs into the next


def forwarded_digest(arguments: object) -> str:
    """The digest of the arguments a call was forwarded with, sealed with its continuation."""
    return _digest(arguments)


def split_continuation(params: JsonObject, call: Callable[[], str]) -> tuple[JsonObject, Continued | None]:
    """A 2026-07-28 retry of a confirmed call's provider round: the params with the provider's own
    requestState back in place of the gateway's, and what the state brings (Continued.problem: why it
    does not hold).
    `call` gives what the state must be bound to (call_of), asked only when a state came."""
    state = params.get("requestState")
    if not isinstance(state, str) or not state.startswith(CONTINUE_STATE_PREFIX):
        return params, None
    rest = {key: value for key, value in params.items() if key != "requestState"}
    try:
        continued = CONTINUATIONS.open(state, call())
    except errors.RpcError as exc:
        # Refused when the call is decided (Continuations.spend), so the refusal is on record.
        return rest, Continued(None, "", "", False, 0, MAX_ROUNDS + 1, problem=exc)
    if continued.provider_state is not None:
        rest["requestState"] = continued.provider_state
    return rest, continued


class ClientConfirmer:
    """One call's caller, as the policy layer may ask it to confirm the call.

    `confirmed_by` is set by the policy layer when a person confirmed this call (with `confirmed_own`,
    `confirmed_left_ms`, what is left of the confirmation's lifetime, and `confirmed_yes_ms`), and
    `continued` by the core when the call continues a provider round of a call confirmed earlier: either
    way a provider's input_required answer is relayed with a continuation state, and its retry is not
    confirmed again."""

    __slots__ = (
        "caller",
        "confirmed_by",
        "confirmed_left_ms",
        "confirmed_own",
        "confirmed_yes_ms",
        "continued",
        "ctx",
        "read_state",
        "retry",
    )

    def __init__(
        self,
        ctx: ClientContext,
        retry: ConfirmRetry | None,
        read_state: StateReader | None,
        continued: Continued | None = None,
        caller: str = "",
    ) -> None:
        self.ctx = ctx
        self.retry = retry
        self.read_state = read_state
        self.continued = continued
        self.caller = caller
        """Whose `continued` is, for its share of the remembered states."""
        self.confirmed_by: str | None = None
        self.confirmed_own = True
        self.confirmed_left_ms = CONTINUE_S * 1000
        self.confirmed_yes_ms: int | None = None
        """When the yes was given (Continuations.clock_ms): sealed into the call's first continuation state."""

    def confirmed(self, by: str, own: bool, lifetime_ms: int, age_ms: int) -> None:
        """A person confirmed this call `age_ms` ago, for `lifetime_ms` (the rule's expires_s)."""
        self.confirmed_by = by
        self.confirmed_own = own
        self.confirmed_left_ms = max(lifetime_ms - age_ms, 0)
        self.confirmed_yes_ms = CONTINUATIONS.clock_ms() - age_ms

    def spend_continued(self) -> None:
        """Use up the continuation state this call brings, once its round is admitted (Continuations.spend)."""
        if self.continued is not None:
            CONTINUATIONS.spend(self.continued, self.caller)

    def give_back_continued(self) -> None:
        if self.continued is not None:
            CONTINUATIONS.give_back(self.continued)

    @property
    def way(self) -> str:
        # Worked out only for a call that needs confirming: built for every governed call, asked by few.
        ctx = self.ctx
        if missing_capability(ctx.client_capabilities, ELICIT, {}) is not None:
            return ""
        if ctx.era == SESSION:
            return "elicit" if ctx.requester is not None else ""
        return "input"

    async def elicit(self, params: dict[str, Any]) -> dict[str, Any]:
        requester = self.ctx.requester
        if requester is None:  # way is "elicit" only with a requester
            raise errors.RpcError(jsonrpc.INTERNAL_ERROR, "no stream to ask the client on")
        return await requester.request(ELICIT, params)

    async def device_state(self) -> object:
        return await self.read_state() if self.read_state is not None else None


class QuestionRead:
    """The confirmer of the gateway's own read for a question: that read is never put to a person (the
    policy layer refuses it where the read tool needs confirming too, and the question goes without it)."""

    way = QUESTION_READ
    retry: ConfirmRetry | None = None

    async def elicit(self, params: dict[str, Any]) -> dict[str, Any]:
        raise errors.RpcError(jsonrpc.INTERNAL_ERROR, "a read for a confirmation question asks nobody")

    async def device_state(self) -> object:
        return None


class StateReader:
    """Reads the device's state for a confirmation question with the slot's first read-only tool that
    needs no arguments and the caller may see (pump-1's get_status); its structured content, else its
    text; None when it has no such tool or the read is refused or fails.

    `meta` is the `_meta` of the call being confirmed: a 2026-07-28 caller's envelope in it goes with
    the read, as with every request of that caller (a 2026-07-28 provider refuses a request without one).
    Under [policy] the read goes through `gate` (governed.call sets it): a read that reaches the device
    is the caller's call, decided, limited and recorded like any other."""

    __slots__ = ("call", "envelope", "gate", "may_see", "tools")

    def __init__(
        self,
        tools: list[JsonObject],
        may_see: Callable[[JsonObject], bool],
        call: Forward,
        meta: object = None,
        gate: ReadGate | None = None,
    ) -> None:
        self.tools = tools
        self.may_see = may_see
        self.call = call
        self.envelope = (
            {key: value for key, value in meta.items() if key in ENVELOPE_KEYS} if isinstance(meta, dict) else {}
        )
        self.gate = gate

    def through(self, gate: ReadGate) -> StateReader:
        """This reader, its read taken through `gate`."""
        reader = StateReader(self.tools, self.may_see, self.call, gate=gate)
        reader.envelope = self.envelope
        return reader

    async def __call__(self) -> object:
        for tool in self.tools:
            annotations = tool.get("annotations")
            schema = tool.get("inputSchema")
            if not isinstance(annotations, dict) or annotations.get("readOnlyHint") is not True:
                continue
            if isinstance(schema, dict) and schema.get("required"):
                continue
            if not self.may_see(tool):
                continue
            request: JsonObject = {"name": tool["name"], "arguments": {}}
            if self.envelope:
                request["_meta"] = self.envelope
            result = await (self.call(request) if self.gate is None else self.gate(tool, request, self.call))
            if result.get("isError") is True:
                return None
            structured = result.get("structuredContent")
            if structured is not None:
                return structured
            content = result.get("content")
            texts = [item.get("text") for item in content or [] if isinstance(item, dict)]
            return "\n".join(text for text in texts if isinstance(text, str)) or None
        return None


def state_reader(
    tools: list[JsonObject],
    may_see: Callable[[JsonObject], bool],
    call: Forward,
    meta: object = None,
) -> StateReader:
    """The StateReader of a slot's tools (see there)."""
    return StateReader(tools, may_see, call, meta)
