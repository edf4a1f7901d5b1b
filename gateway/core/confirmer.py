"""How the caller of a governed tools/call can be asked to confirm it (the core's side of
policy_interface.Confirmer): on its session-era stream, by an input_required round in 2026-07-28, or
not at all; and the device's state for the question, read with the slot's read tool.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from gateway.core import errors, jsonrpc
from gateway.core.client_context import SESSION, ClientContext
from gateway.core.eras import ENVELOPE_KEYS
from gateway.core.jsonrpc import JsonObject
from gateway.core.policy_interface import CONFIRM_INPUT_KEY, CONFIRM_STATE_PREFIX, ConfirmRetry
from gateway.core.relay import missing_capability

ELICIT = "elicitation/create"
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


class ClientConfirmer:
    """One call's caller, as the policy layer may ask it to confirm the call."""

    __slots__ = ("ctx", "read_state", "retry")

    def __init__(self, ctx: ClientContext, retry: ConfirmRetry | None, read_state: StateReader | None) -> None:
        self.ctx = ctx
        self.retry = retry
        self.read_state = read_state

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
