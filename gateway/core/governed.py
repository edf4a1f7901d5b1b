"""Requests a policy governs: the methods a caller may use, the tools it may see, and each tools/call
decided, its arguments checked and its decision recorded before it is forwarded.

Every target that serves tools (a slot, `_all`, the tool groups) goes through here when [policy] is
configured; without one nothing here runs and the hot path is as it was.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from gateway.core import eras, errors, jsonrpc, method_rules, trace_relay
from gateway.core.cancelled_requests import cancel_reason, late_answer_sink
from gateway.core.client_context import SESSION, ClientContext
from gateway.core.confirmer import (
    CONTINUATIONS,
    QUESTION_VIA,
    ClientConfirmer,
    Continued,
    Forward,
    QuestionRead,
    StateReader,
    call_of,
    forwarded_digest,
    split_continuation,
    split_retry,
)
from gateway.core.input_required import caller_id
from gateway.core.jsonrpc import JsonObject
from gateway.core.names import BROKER_SLOT
from gateway.core.policy_interface import (
    REFUSED_META_KEY,
    SHUTDOWN_CANCEL,
    AnswerInstead,
    CallVerdict,
    Confirmer,
    Governance,
    confirmation_effect,
)
from gateway.core.principal import Principal
from gateway.core.provider_session import AnswerLost

CLAMPED_META_KEY = "io.github.mcp-gateway/clamped"
"""In a result's _meta: the arguments the gateway clamped to the operator's limits before forwarding."""

GOVERNED_PREFIXES = method_rules.GOVERNED_PREFIXES
"""Methods decided by their capability (mcp.resources.read, mcp.prompts.read, mcp.completion.use)."""


def permit(governance: Governance, ctx: ClientContext, slot: str, method: str) -> None:
    """Raise -32001 Forbidden when the caller may not use `method` on `slot`; for a method outside MCP's
    governed families, `data.governed_families` lists the only ones relayed under a [policy]."""
    reason = governance.permits(ctx.principal, slot, method)
    if reason is not None:
        data: dict[str, Any] = {"slot": slot, "method": method}
        if not method_rules.is_governed(method) and method != method_rules.LOGGING_SET_LEVEL:
            data["governed_families"] = list(method_rules.GOVERNED_FAMILIES)
        raise errors.forbidden(reason, data)


def lists(governance: Governance, principal: Principal, slot: str, tool: JsonObject) -> bool:
    """Whether a catalog (`_all`, a tool group, GET /mcp-servers) lists `slot`'s `tool` to the caller: as
    the slot itself would (mcp.tools.list there, so a deny of it wins) and only a tool it may call."""
    return governance.permits(principal, slot, "tools/list") is None and governance.may_see(principal, slot, tool)


async def hidden_call(
    governance: Governance, ctx: ClientContext, slot: str, tool: JsonObject, params: JsonObject, where: str
) -> JsonObject | None:
    """A tools/call through a catalog (`_all`, a tool group) of `slot`'s `tool` that the caller may not
    see: decided and recorded as on the slot itself, and answered as an unknown tool at `where`; None
    when the caller may see the tool. Asked before the slot's connection and rate limit are looked at, so
    neither tells the caller the tool exists, and its calls never drain the slot's rate limit."""
    if governance.may_see(ctx.principal, slot, tool):
        return None

    async def never_forwarded(admitted: JsonObject) -> JsonObject:
        # The policy refuses a tool the caller may not see before it would be forwarded.
        raise errors.unknown_tool(str(params.get("name")), where)

    return await call(governance, ctx, slot, tool, params, where, never_forwarded)


def outcome_of(result: JsonObject) -> str:
    return "tool-error" if result.get("isError") is True else "ok"


def tool_error_text(result: JsonObject) -> str | None:
    """The first text item of a tool error's content: what its caller reads first (None: it has none)."""
    content = result.get("content")
    for item in content if isinstance(content, list) else ():
        if isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str):
            return str(item["text"])
    return None


def cancelled_text(cancel: asyncio.CancelledError) -> str:
    """Why a forwarded call ended without its answer, for its record."""
    return f"cancelled before the answer came: {cancel_reason(cancel)}"


def answered_after_cancel(body: JsonObject) -> tuple[str, str | None] | None:
    """What the device answered to a call cancelled while it was forwarded: "ok", "tool-error" and its
    text, or "error" and its message (the outcomes a result records, in the same words); None for a
    2026-07-28 provider's input_required, which says the call has not run."""
    error = body.get("error")
    if error is not None:
        message = error.get("message") if isinstance(error, dict) else None
        return "error", None if message is None else str(message)
    result = body.get("result")
    result = result if isinstance(result, dict) else {}
    if eras.is_input_required(result):
        return None
    outcome = outcome_of(result)
    return outcome, tool_error_text(result) if outcome == "tool-error" else None


class AfterCancel:
    """Hears the device's answer to a forwarded call that is cancelled, once the answer comes after the
    cancel: the trail records it next to the call's `cancelled` result. The answer may be heard before
    that result is known; it waits for it then."""

    def __init__(self) -> None:
        self.answer: JsonObject | None = None
        self.record: Callable[[JsonObject], None] | None = None

    def heard(self, body: JsonObject) -> None:
        if self.record is None:
            self.answer = body
        else:
            self.record(body)

    def cancelled(self, record: Callable[[JsonObject], None]) -> None:
        """The call's result is `cancelled`: `record` takes the answer, now if it came already."""
        self.record = record
        if self.answer is not None:
            answer, self.answer = self.answer, None
            record(answer)


def failure_outcome(exc: errors.RpcError) -> str:
    """How a forwarded call that failed ended, for its record: `timeout` past its deadline; `lost` when the
    link ended after the request was sent (no answer can come, and the device may have carried it out);
    else `error` (a call refused before it was sent among them: no provider, the link already closed)."""
    if isinstance(exc, AnswerLost):
        return "lost"
    reason = exc.data.get("reason") if isinstance(exc.data, dict) else None
    return "timeout" if reason == "deadline" else "error"


async def call(
    governance: Governance,
    ctx: ClientContext,
    slot: str,
    tool: dict[str, Any] | None,
    params: JsonObject,
    where: str,
    forward: Callable[[JsonObject], Awaitable[JsonObject]],
    read_state: StateReader | None = None,
    confirmer: Confirmer | None = None,
) -> JsonObject:
    """Decide one tools/call of `tool` (as `slot`'s provider lists it; None when it lists no such
    tool), then forward it with `forward(params)` and record how it ended.

    `params["name"]` is the name the caller used (at `where`), for the unknown-tool answer;
    `read_state` reads the device's state for a confirmation question; `confirmer` asks for a
    confirmation in place of the caller (a request that is the answer of a tool but cannot ask,
    `_broker`'s resources/read)."""
    name = params.get("name")
    # What the policy decides and the audit records: the tool as the provider lists it (not an
    # aggregate name such as `pump-1-get_status` the caller used on _all or a group).
    decided = str(tool["name"]) if tool else str(name)
    params, retry = split_retry(params)
    caller = caller_id(ctx.principal, ctx.peer)
    # What a continuation state is bound to: hashed only for a call that brings one or gets one.
    bound = partial(call_of, caller, slot, decided, params.get("arguments"))
    params, continued = split_continuation(params, bound)
    if read_state is not None:
        read_state = read_state.through(partial(question_read, governance, ctx, slot))
    if confirmer is None:
        confirmer = ClientConfirmer(ctx, retry, read_state, continued, repr(caller))
    span = trace_relay.start_policy(ctx, slot, decided)
    held, task = governance.held, asyncio.current_task()
    if task is not None:
        held.tasks.add(task)
    try:
        verdict = await governance.admit_call(
            ctx.principal,
            slot,
            tool,
            decided,
            params.get("arguments"),
            ctx.transport,
            confirmer,
            trace_id=trace_relay.trace_id(ctx),
        )
    except AnswerInstead as answered:
        trace_relay.end_policy(ctx, span, confirmation_effect(answered))
        return answered.result
    except BaseException as exc:
        trace_relay.end_policy(ctx, span, confirmation_effect(exc))
        if isinstance(exc, asyncio.CancelledError) and held.ending and exc.args == (SHUTDOWN_CANCEL,):
            assert task is not None
            task.uncancel()  # answered, as a call a provider holds is at shutdown
            raise errors.shutting_down(slot) from None
        raise
    finally:
        held.tasks.discard(task)
    trace_relay.end_policy(ctx, span, verdict.effect)
    if not verdict.visible:
        raise errors.unknown_tool(str(name), where)
    if verdict.answer is not None:
        return verdict.answer
    if not verdict.allowed:
        raise refusal(verdict, slot)
    if not isinstance(confirmer, ClientConfirmer) or (confirmer.confirmed_by is None and continued is None):
        return await forwarded(governance, verdict, slot, params, forward)
    sent = verdict.arguments if verdict.arguments is not None else params.get("arguments")
    if continued is not None and forwarded_digest(sent) != continued.forwarded:
        raise refused_continuation(governance, verdict, slot)
    result = await forwarded(governance, verdict, slot, params, forward)
    if not eras.is_input_required(result) or ctx.era == SESSION:
        return result
    # The provider asks its own question of a confirmed call: the client's retry continues this call,
    # with the provider's requestState restored and no second confirmation.
    if continued is None:  # the first provider round: the confirmation's lifetime runs from the person's yes
        deadline_ms = CONTINUATIONS.clock_ms() + confirmer.confirmed_left_ms
        by, own, yes_ms = str(confirmer.confirmed_by), confirmer.confirmed_own, confirmer.confirmed_yes_ms
        continued = Continued(None, by, "", own, deadline_ms, 0, yes_ms=yes_ms)
    state = CONTINUATIONS.seal(
        bound(),
        result.get("requestState"),
        dataclasses.replace(continued, forwarded=forwarded_digest(sent), rounds=continued.rounds + 1),
    )
    return {**result, "requestState": state}


def refused_continuation(governance: Governance, verdict: CallVerdict, slot: str) -> errors.RpcError:
    """A retry of a confirmed call's provider round that the policy in force now forwards with other
    arguments than the person confirmed (a reload changed a limit): refused, and recorded as its result."""
    text = (
        f"Not forwarded: the operator's policy changed while the provider of {slot} asked its question, and it "
        "now forwards other arguments than the person confirmed; send the call again without requestState to "
        "be asked again"
    )
    governance.call_ended(verdict, "error", 0.0, text)
    return errors.RpcError(jsonrpc.INVALID_PARAMS, text, {"reason": "confirmation_changed", "slot": slot})


async def question_read(
    governance: Governance, ctx: ClientContext, slot: str, tool: JsonObject, params: JsonObject, forward: Forward
) -> JsonObject:
    """The gateway's read of a device's state, to quote it in the caller's confirmation question: the
    caller's own call of the read tool, decided by the policy, within the caller's execution limits and
    recorded (way in `confirmation-question`, the confirmed call's trace id) before it reaches the device.
    A refusal raises RpcError or comes back as a tool error: the question is then asked without the state."""
    verdict = await governance.admit_call(
        ctx.principal,
        slot,
        tool,
        str(tool["name"]),
        params.get("arguments"),
        QUESTION_VIA,
        QuestionRead(),
        trace_id=trace_relay.trace_id(ctx),
    )
    if verdict.answer is not None:
        return verdict.answer
    if not verdict.allowed:
        raise refusal(verdict, slot)
    return await forwarded(governance, verdict, slot, params, forward)


async def forwarded(
    governance: Governance, verdict: CallVerdict, slot: str, params: JsonObject, forward: Forward
) -> JsonObject:
    """Forward an allowed call with `forward` (its arguments as the verdict clamped them) and record how
    it ended."""
    if verdict.arguments is not None:
        params = {**params, "arguments": verdict.arguments}
    started = time.monotonic()
    outcome = "error"
    error: str | None = "the call ended without an answer"
    after_cancel = AfterCancel()
    listening = late_answer_sink.set(after_cancel.heard)
    try:
        result = await forward(params)
        if slot != BROKER_SLOT:  # _broker's results are the gateway's own
            result = provider_answer(result)
        outcome = outcome_of(result)
        error = tool_error_text(result) if outcome == "tool-error" else None
        return with_clamped(result, verdict.clamped) if verdict.clamped else result
    except errors.RpcError as exc:
        outcome, error = failure_outcome(exc), exc.message
        raise
    except asyncio.CancelledError as cancel:
        outcome, error = "cancelled", cancelled_text(cancel)
        raise
    finally:
        late_answer_sink.reset(listening)
        governance.call_ended(verdict, outcome, (time.monotonic() - started) * 1000, error)
        if outcome in ("cancelled", "timeout"):
            # The device may still have acted: what it answers after the cancel (a deadline cancels it
            # upstream too) goes in the trail as well.
            after_cancel.cancelled(partial(record_after_cancel, governance, verdict))


def record_after_cancel(governance: Governance, verdict: CallVerdict, body: JsonObject) -> None:
    """The device's late answer: recorded, and the call's execution-limit places given back (any answer,
    an input_required too, says the device is done with the call)."""
    answered = answered_after_cancel(body)
    governance.answered_after_cancel(verdict, *(answered or ("input_required", None)))


def refusal(verdict: CallVerdict, slot: str) -> errors.RpcError:
    data = {"slot": slot, **(verdict.data or {})}
    if verdict.code:
        return errors.RpcError(verdict.code, verdict.reason, data)
    return errors.forbidden(verdict.reason, data)


GATEWAY_RESULT_KEYS = (CLAMPED_META_KEY, REFUSED_META_KEY)
"""The _meta keys the gateway writes on results: its word alone, never a provider's."""


def provider_answer(result: JsonObject) -> JsonObject:
    """A provider's result without the _meta keys only the gateway writes: a provider that wrote one
    would pass its own answer off as the gateway's refusal or clamp."""
    meta = result.get("_meta")
    if isinstance(meta, dict) and (CLAMPED_META_KEY in meta or REFUSED_META_KEY in meta):
        return {**result, "_meta": {key: value for key, value in meta.items() if key not in GATEWAY_RESULT_KEYS}}
    return result


def with_clamped(result: JsonObject, clamped: tuple[str, ...]) -> JsonObject:
    """The result, saying which arguments the gateway clamped: in _meta for programs, and as a last
    text item for the agent reading the content."""
    meta = result.get("_meta")
    content = result.get("content")
    note = {"type": "text", "text": "The gateway clamped arguments to the operator's limits: " + "; ".join(clamped)}
    return {
        **result,
        "_meta": {**(meta if isinstance(meta, dict) else {}), CLAMPED_META_KEY: list(clamped)},
        "content": [*(content if isinstance(content, list) else []), note],
    }
