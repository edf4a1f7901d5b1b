"""The stateless era's answer when a provider asks its client something: `input_required` (SEP-2322).

A 2026-07-28 client has no stream the gateway could send it a request on. When the provider of its
tools/call, prompts/get or resources/read sends sampling/createMessage, elicitation/create or
roots/list, the gateway answers the client's request with

    {"resultType": "input_required", "inputRequests": {"<key>": {"method": ..., "params": ...}},
     "requestState": "<sealed>"}

and keeps the provider's call, and the provider's requests, open. The client retries its request
(a new id) with `inputResponses` keyed like `inputRequests` and the echoed `requestState`; the gateway
checks the state's seal (HMAC with a key of this gateway run), that it is the latest round's and that
the retry is the same request of the same caller (method, name or URI, arguments, principal, and an
anonymous caller's peer address), answers the held provider requests, and the retry waits for the
same provider call, which may ask again (another round) or finish. Held calls are bounded
(limits.max_input_required_states, limits.max_input_required_states_per_caller) and end at the call's
deadline.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core import errors, jsonrpc
from gateway.core.jsonrpc import JsonObject
from gateway.core.principal import Principal
from gateway.core.relay import (
    INPUT_KEY,
    RELAYED_METHODS,
    RequestRelay,
    client_params,
    missing_capability,
    missing_capability_call,
)
from gateway.telemetry.metrics import Metrics

log = logging.getLogger("gateway.provider")

STATE_PREFIX = "mcpgw1"
"""Marks a requestState this gateway issued; any other state belongs to the provider and passes through."""

EXPIRY_GRACE_S = 1.0
"""A held call outlives its deadline by this much, so the provider's own deadline error reaches a
client that is waiting rather than an "expired" one."""

MAX_KEY_CHARS = 128
"""Longest input key a provider may name (INPUT_KEY); longer ones get a minted key."""

CallerId = tuple[str, str, str | None]
"""Whose a held call is: (principal kind, principal name, peer address of an anonymous caller, else None)."""


def caller_id(principal: Principal, peer: str | None) -> CallerId:
    """The caller a held call belongs to. Anonymous callers are told apart by peer address, as
    limits.max_pending_per_client counts them: without it, any host could continue (and answer the
    questions of) another anonymous host's call, and one host's held calls would count as everyone's. An
    OAuth subject is told apart by its issuer (Principal.key): another authorization server's "alice" is
    another caller."""
    return (principal.kind, principal.name, peer if principal.kind == "anonymous" else principal.issuer)


NotificationSink = Callable[[JsonObject], None]
ProviderCall = Callable[[RequestRelay, JsonObject, NotificationSink], Awaitable[JsonObject]]
"""Starts the provider call with the params to forward; the relay takes its requests towards the
client, the sink its request-tied notifications (both follow whichever client request waits now)."""


def _state_error(message: str, reason: str) -> errors.RpcError:
    return errors.RpcError(jsonrpc.INVALID_PARAMS, message, {"reason": reason})


class StateSeal:
    """Issues and checks requestState values: `mcpgw1.<run>.<call>.<round>.<hmac>`.

    The key lives only in this process, so a state cannot be forged or altered, and a state from an
    earlier run of the gateway is recognised as such (its run differs)."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)
        self.run = secrets.token_hex(4)

    def seal(self, call_id: int, round_number: int) -> str:
        body = f"{STATE_PREFIX}.{self.run}.{call_id}.{round_number}"
        return f"{body}.{self._mac(body)}"

    @staticmethod
    def owns(state: object) -> bool:
        return isinstance(state, str) and state.startswith(f"{STATE_PREFIX}.")

    def open(self, state: str) -> tuple[int, int]:
        """The call id and round sealed in `state`; RpcError -32602 when it was altered or is from another run."""
        parts = state.split(".")
        if len(parts) == 5 and parts[1] != self.run:
            raise _state_error(
                "requestState was issued by an earlier run of this gateway; send the request again without "
                "requestState and inputResponses",
                "expired",
            )
        body = ".".join(parts[:4])
        valid = len(parts) == 5 and hmac.compare_digest(parts[4], self._mac(body))
        if not valid or not parts[2].isdigit() or not parts[3].isdigit():
            raise _state_error("requestState failed its integrity check: it was altered or not issued here", "tampered")
        return int(parts[2]), int(parts[3])

    def _mac(self, body: str) -> str:
        return hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()


def continues_held_call(params: JsonObject) -> bool:
    """Whether a request carries what only a retry of an input_required round carries."""
    return "requestState" in params or "inputResponses" in params


class CannotAsk:
    """The relay of a stateless-era call whose client declared none of sampling, elicitation and
    roots: nothing can be asked of it, so the call is never held and needs no HeldCall. Each provider
    request is refused exactly as HeldCall.relay refuses it for that client."""

    waiting = True

    async def relay(self, method: str, params: JsonObject | None) -> JsonObject:
        raise missing_capability_call(method, missing_capability({}, method, params) or method)


CANNOT_ASK = CannotAsk()


@dataclass(frozen=True)
class Caller:
    """The client request now waiting on a call: what may be relayed to it and where its notifications go."""

    capabilities: JsonObject
    principal: CallerId
    sink: NotificationSink | None = None
    progress_token: Any = None


@dataclass
class Question:
    """A provider request held until the client answers it in a retry."""

    key: str
    method: str
    params: JsonObject | None
    future: asyncio.Future[JsonObject]


def _subject(method: str, params: JsonObject) -> Any:
    """What a request is about (a tool or prompt name, a resource URI): a retry must name the same."""
    return params.get("uri") if method == "resources/read" else params.get("name")


def _arguments_digest(params: JsonObject) -> bytes:
    """A digest of the request's arguments (canonical JSON: keys sorted) that a retry must match: the
    provider runs the call with the first request's arguments, so a retry that sent others would be
    answered, and audited, for a call that never ran. A resource's arguments are its URI (_subject)."""
    try:
        canonical = orjson.dumps(params.get("arguments"), option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:  # unreachable for decoded JSON; never equal to anything then
        canonical = secrets.token_bytes(16)
    return hashlib.sha256(canonical).digest()


class HeldCall:
    """One provider call of a stateless-era client, from its first request to its final answer."""

    def __init__(self, book: InputRequired, call_id: int, session: object, method: str, params: JsonObject) -> None:
        self.book = book
        self.call_id = call_id
        self.session = session
        self.method = method
        self.subject = _subject(method, params)
        self.arguments = _arguments_digest(params)
        self.caller: Caller | None = None
        self.principal: CallerId | None = None
        self.questions: dict[str, Question] = {}
        self.offered: dict[str, JsonObject] = {}
        self.minted: dict[str, int] = {}
        self.round = 0
        self.waiters = 0
        self.held = False
        self.deadline = 0.0
        self.expiry: asyncio.TimerHandle | None = None
        self.changed = asyncio.Event()
        self.task: asyncio.Task[JsonObject] | None = None

    # -- the provider's side (RequestRelay) ----------------------------------------------------

    @property
    def waiting(self) -> bool:
        return self.waiters > 0

    async def relay(self, method: str, params: JsonObject | None) -> JsonObject:
        capabilities = self.caller.capabilities if self.caller is not None else {}
        missing = missing_capability(capabilities, method, params)
        if missing is not None:
            raise missing_capability_call(method, missing)
        if len(self.questions) >= self.book.max_questions:
            raise errors.RpcError(
                jsonrpc.UNAVAILABLE,
                f"Too many requests waiting on this client (limit {self.book.max_questions}, "
                "limits.max_relayed_requests_per_client)",
                {"reason": "relay_limit", "limit": self.book.max_questions},
            )
        key = self._key(method, params)
        offered = self.offered.pop(key, None)
        if offered is not None:
            return offered  # the client answered before it was asked (a key it knew)
        question = Question(key, method, client_params(params), asyncio.get_running_loop().create_future())
        self.questions[key] = question
        self.changed.set()
        try:
            return await question.future
        finally:
            if self.questions.get(key) is question:
                del self.questions[key]

    def emit(self, message: JsonObject) -> None:
        """A notification tied to the call: to the client request waiting now, if any."""
        caller = self.caller
        if caller is None or caller.sink is None or not self.waiting:
            return
        if message.get("method") == "notifications/progress":
            if caller.progress_token is None:
                return
            message = jsonrpc.notification(
                "notifications/progress", {**(message.get("params") or {}), "progressToken": caller.progress_token}
            )
        caller.sink(message)

    def _key(self, method: str, params: JsonObject | None) -> str:
        meta = params.get("_meta") if params is not None else None
        named = meta.get(INPUT_KEY) if isinstance(meta, dict) else None
        if isinstance(named, str) and 0 < len(named) <= MAX_KEY_CHARS and named not in self.questions:
            return named
        kind = RELAYED_METHODS[method]
        while True:
            self.minted[kind] = self.minted.get(kind, 0) + 1
            key = f"{kind}-{self.minted[kind]}"
            if key not in self.questions:
                return key

    # -- the client's side ---------------------------------------------------------------------

    def start(self, call: Awaitable[JsonObject], timeout_ms: int) -> None:
        self.deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
        self.task = asyncio.ensure_future(call)
        self.task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[JsonObject]) -> None:
        # The outcome is for the client request waiting when the call ends (_final), and there may be
        # none: the client hung up just as the call ended, or took an input_required result and never
        # retried. It is read here, where the task is owned, so that an error nobody takes is not
        # reported by asyncio as a lost task exception when the task is collected.
        if not task.cancelled():
            failure = task.exception()
            if failure is not None and not isinstance(failure, errors.RpcError) and not self.waiting:
                log.error("A held %s call failed with no client request waiting", self.method, exc_info=failure)
        self.changed.set()

    async def serve(self, caller: Caller, responses: dict[str, JsonObject]) -> JsonObject:
        """Wait, on behalf of one client request, for the call's answer or its next questions."""
        self.caller = caller
        self.principal = caller.principal
        self._answer(responses)
        self.waiters += 1
        try:
            return await self._outcome()
        except asyncio.CancelledError:
            if self.waiters == 1:
                # Closing the stream is how a stateless-era client cancels: the call ends.
                self.abandon("client disconnected")
            raise
        finally:
            self.waiters -= 1

    def _answer(self, responses: dict[str, JsonObject]) -> None:
        self.offered = {}
        for key, answer in responses.items():
            question = self.questions.pop(key, None)
            if question is not None and not question.future.done():
                question.future.set_result(answer)
            else:
                # Not asked (yet): the provider may still ask it during this call. Keys nobody asks
                # for are ignored (SEP-2322: unexpected inputResponses are not an error).
                self.offered[key] = answer

    async def _outcome(self) -> JsonObject:
        task = self.task
        assert task is not None
        while True:
            if task.done():
                self.book.release(self)
                return self._final(task)
            if self.questions:
                # A provider may ask several things at once: give the rest a moment to arrive, so
                # they go out in one input_required result instead of one round each.
                await asyncio.wait({task}, timeout=self.book.gather_s)
                if task.done() or not self.questions:
                    continue
                return self.book.input_required(self)
            self.changed.clear()
            await self.changed.wait()

    @staticmethod
    def _final(task: asyncio.Task[JsonObject]) -> JsonObject:
        if task.cancelled():
            raise errors.RpcError(
                jsonrpc.UNAVAILABLE,
                "The call was abandoned before it finished (its deadline passed while it waited for input)",
                {"reason": "expired"},
            )
        return task.result()

    def abandon(self, why: str) -> None:
        """End the call: the provider's call is cancelled, and it gets `why` for each request it holds."""
        self.book.release(self)
        if self.task is not None and not self.task.done():
            self.task.cancel(why)


class InputRequired:
    """Every held stateless-era call of this gateway, and the seal of their request states."""

    def __init__(self, limit: int, per_caller: int, max_questions: int, gather_ms: int, metrics: Metrics) -> None:
        self.limit = limit
        self.per_caller = per_caller
        self.max_questions = max_questions
        self.gather_s = gather_ms / 1000
        self.metrics = metrics
        self.seal = StateSeal()
        self.calls: dict[int, HeldCall] = {}
        self.held_by: dict[CallerId, int] = {}
        """Calls held per caller (callers with none hold no entry), bounded by `per_caller`."""
        self._next_id = 0

    async def serve(
        self,
        session: object,
        method: str,
        params: JsonObject,
        caller: Caller,
        timeout_ms: int,
        call: ProviderCall,
    ) -> JsonObject:
        """Answer one stateless-era request that may ask its client for input (see the module docstring)."""
        responses, state, forwarded = self._split(params)
        if state is not None and self.seal.owns(state):
            held = self._resume(state, session, method, params, caller)
        else:
            self._next_id += 1
            held = HeldCall(self, self._next_id, session, method, params)
            held.start(call(held, forwarded, held.emit), timeout_ms)
        return await held.serve(caller, responses)

    @staticmethod
    def _split(params: JsonObject) -> tuple[dict[str, JsonObject], str | None, JsonObject]:
        """(inputResponses, requestState, the params to forward); RpcError -32602 when malformed."""
        state = params.get("requestState")
        if "requestState" in params and not isinstance(state, str):
            raise _state_error("requestState must be the string an input_required result carried", "malformed")
        responses: dict[str, JsonObject] = {}
        if "inputResponses" in params:
            given = params["inputResponses"]
            if not isinstance(given, dict):
                raise _state_error(
                    "inputResponses must be an object: each inputRequests key mapped to the client's result",
                    "malformed",
                )
            for key, value in given.items():
                if not isinstance(value, dict):
                    raise _state_error(
                        f"inputResponses[{key!r}] must be an object (the result of the request under that key)",
                        "malformed",
                    )
            responses = given
        if state is not None and not StateSeal.owns(state):
            # Not ours: the provider issued it (a provider that answers input_required itself).
            return {}, state, params
        forwarded = {key: value for key, value in params.items() if key not in ("inputResponses", "requestState")}
        return responses, state, forwarded

    def _resume(self, state: str, session: object, method: str, params: JsonObject, caller: Caller) -> HeldCall:
        call_id, round_number = self.seal.open(state)
        held = self.calls.get(call_id)
        if held is None:
            raise _state_error(
                "requestState has expired: the call it continues finished or passed its deadline; send the "
                "request again without requestState and inputResponses",
                "expired",
            )
        if (
            held.session is not session
            or held.method != method
            or held.subject != _subject(method, params)
            or held.arguments != _arguments_digest(params)
        ):
            raise _state_error(
                "requestState belongs to another request: retry the same method, name and arguments as the "
                "caller that got it",
                "mismatch",
            )
        if held.principal != caller.principal:
            raise _state_error(
                "requestState belongs to another caller: only the caller that got it (the same credential, or "
                "without one the same host) continues its call",
                "mismatch",
            )
        if round_number != held.round:
            # An answer to questions the call has moved past: only the latest round's state continues it.
            raise _state_error(
                f"requestState is from round {round_number} of this call, which has moved on to round "
                f"{held.round}; retry with the requestState of the latest input_required result",
                "superseded",
            )
        return held

    def input_required(self, held: HeldCall) -> JsonObject:
        """Hold `held` (bounded) and build the input_required result asking its open questions."""
        if not held.held:
            self._admit(held)
            held.held = True
            self.calls[held.call_id] = held
            owner = held.principal
            assert owner is not None  # set by serve, which is waiting now
            self.held_by[owner] = self.held_by.get(owner, 0) + 1
            loop = asyncio.get_running_loop()
            held.expiry = loop.call_at(
                held.deadline + EXPIRY_GRACE_S, held.abandon, "the client did not send its inputResponses in time"
            )
            self.metrics.input_required_held.set(len(self.calls))
        held.round += 1
        requests: JsonObject = {}
        for question in held.questions.values():
            request: JsonObject = {"method": question.method}
            if question.params is not None:
                request["params"] = question.params
            requests[question.key] = request
        return {
            "resultType": "input_required",
            "inputRequests": requests,
            "requestState": self.seal.seal(held.call_id, held.round),
        }

    def _admit(self, held: HeldCall) -> None:
        """Refuse to hold `held` (its provider call is cancelled) past either bound: the gateway's, and
        its caller's share of it, so that one caller's unanswered calls cannot keep every other caller
        from being asked anything."""
        if len(self.calls) >= self.limit:
            setting, limit, reason = "max_input_required_states", self.limit, "input_required_limit"
            whose, advice = "calls are", "try again later"
            why = "too many calls are"
        elif held.principal is not None and self.held_by.get(held.principal, 0) >= self.per_caller:
            setting, reason = "max_input_required_states_per_caller", "input_required_caller_limit"
            limit = self.per_caller
            whose, advice = "of your calls are", "answer them first (retry each with its inputResponses)"
            why = "too many of this caller's calls are"
        else:
            return
        self.metrics.limit_hit(setting)
        held.abandon(f"{why} waiting for client input (limits.{setting})")
        raise errors.RpcError(
            jsonrpc.UNAVAILABLE,
            f"Too many {whose} waiting for client input (limit {limit}, limits.{setting}); {advice}",
            {"reason": reason, "limit": limit},
        )

    def release(self, held: HeldCall) -> None:
        """Stop holding `held` (it answered, was abandoned, or expired)."""
        if self.calls.get(held.call_id) is held:
            del self.calls[held.call_id]
            self.metrics.input_required_held.set(len(self.calls))
            owner = held.principal
            if owner is not None:
                count = self.held_by.get(owner, 0) - 1
                if count > 0:
                    self.held_by[owner] = count
                else:
                    self.held_by.pop(owner, None)
        if held.expiry is not None:
            held.expiry.cancel()
            held.expiry = None

    def close(self) -> None:
        """Gateway shutdown: every held call ends."""
        for held in list(self.calls.values()):
            held.abandon("the gateway is shutting down")
