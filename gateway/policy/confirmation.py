"""A person confirms a call the policy marks [[confirm]]: asked through the caller's own client
(elicitation on a session-era stream, or an input_required round in 2026-07-28), or, when the client
cannot be asked, by an operator with `mcp-gateway approve` before the caller tries again.

Every answer is bound to one call (caller, slot, tool, arguments) and used once.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core import errors, jsonrpc
from gateway.core.policy_interface import (
    CONFIRM_INPUT_KEY,
    CONFIRM_STATE_PREFIX,
    AnswerInstead,
    Confirmer,
)
from gateway.policy.approvals import Approvals, ApprovalsFull, binding_of
from gateway.policy.rules.compiled import ConfirmRule

MAX_STATE_CHARS = 2000
"""Longest device state quoted in a question; a longer one is cut (the person reads it, a page is enough)."""
MAX_USED_STATES = 4096
"""requestStates answered and not yet expired, remembered so none is answered twice; past it, answers wait."""


@dataclass(frozen=True)
class Question:
    """One call waiting for a person: who asks for what, and the rule that makes it wait."""

    subjects: frozenset[str]
    who: str
    slot: str
    resource: str
    tool: str
    arguments: object
    rule: ConfirmRule

    @property
    def binding(self) -> str:
        return binding_of(self.subjects, self.slot, self.tool, self.arguments)


@dataclass(frozen=True)
class Answer:
    """What a person answered: `confirmed` or not, who, and when (ms)."""

    confirmed: bool
    by: str
    at_ms: int
    how: str
    """"elicitation", "input_required", "approval <id>", "timeout"."""


class Confirmations:
    """The confirmation step of Governor.admit_call, with the approvals waiting and the seal of the
    requestStates it issues (a key of this process: a state cannot be forged or moved to another call)."""

    def __init__(self, approvals: Approvals | None = None) -> None:
        self.approvals = approvals if approvals is not None else Approvals()
        self._key = secrets.token_bytes(32)
        self._used: dict[str, int] = {}
        """Each answered requestState's body, with its expiry (ms)."""

    async def ask(self, question: Question, confirmer: Confirmer | None) -> Answer:
        """The person's answer; AnswerInstead (an input_required round) or RpcError (-32001 with how to
        approve) when it cannot be had now."""
        approval = self.approvals.take(question.binding)
        if approval is not None:
            return Answer(
                approval.state == "approved",
                approval.decided_by or "an operator",
                approval.decided_ms or self.approvals.now_ms(),
                f"approval {approval.id}",
            )
        way = confirmer.way if confirmer is not None else ""
        if confirmer is not None and way == "input":
            retry = confirmer.retry
            if retry is None:
                raise AnswerInstead(await self._input_required(question, confirmer))
            self._check_state(retry.state, question)
            return self._answer(retry.answer, question, "input_required")
        if confirmer is not None and way == "elicit":
            params = await self._elicitation(question, confirmer)
            try:
                async with asyncio.timeout(question.rule.expires_s):
                    result = await confirmer.elicit(params)
            except TimeoutError:
                return Answer(False, "nobody", self.approvals.now_ms(), "timeout")
            return self._answer(result, question, "elicitation")
        raise self._waiting(question)

    # -- the question -------------------------------------------------------------------------

    async def _elicitation(self, question: Question, confirmer: Confirmer) -> dict[str, Any]:
        """elicitation/create params: the call described, the device's state when it has a read tool."""
        arguments = orjson.dumps(question.arguments if question.arguments is not None else {}).decode()
        lines = [
            f"Confirm a device action: {question.who} asks to call {question.tool} on {question.slot} "
            f"({question.resource}) with {arguments}.",
        ]
        try:
            state = await asyncio.wait_for(confirmer.device_state(), timeout=5)
        except (TimeoutError, errors.RpcError):
            state = None
        if state is not None:
            text = state if isinstance(state, str) else orjson.dumps(state).decode()
            lines.append(f"The device reports now: {text[:MAX_STATE_CHARS]}")
        lines.append(
            f"The operator's policy ({question.rule.id}) has a person confirm this call; "
            f"answer within {question.rule.expires_s} s. Approve to forward it to the device."
        )
        return {
            "message": "\n".join(lines),
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "approve": {
                        "type": "boolean",
                        "title": "Approve",
                        "description": f"Forward {question.tool} to {question.slot}",
                        "default": True,
                    }
                },
            },
        }

    async def _input_required(self, question: Question, confirmer: Confirmer) -> dict[str, Any]:
        params = await self._elicitation(question, confirmer)
        return {
            "resultType": "input_required",
            "inputRequests": {CONFIRM_INPUT_KEY: {"method": "elicitation/create", "params": params}},
            "requestState": self._seal(question),
        }

    def _waiting(self, question: Question) -> errors.RpcError:
        """The refusal of a caller that cannot be asked: the call waits for an operator's approval."""
        try:
            approval = self.approvals.request(
                question.binding,
                question.subjects,
                question.slot,
                question.resource,
                question.tool,
                question.arguments,
                question.rule.id,
                question.rule.expires_s,
            )
        except ApprovalsFull as exc:
            return errors.RpcError(
                jsonrpc.UNAVAILABLE,
                f"Not forwarded: {question.tool} on {question.slot} needs a person's confirmation and {exc}; "
                "an operator approves or denies them with `mcp-gateway approve`",
                {"reason": "approvals_full", "slot": question.slot},
            )
        return errors.forbidden(
            f"Not forwarded yet: the operator's policy ({question.rule.id}) has a person confirm {question.tool} "
            f"on {question.slot}, and this client cannot be asked (it declares no elicitation). An operator runs "
            f"`mcp-gateway approve {approval.id}` (or the _broker tool broker_approve); then send the same call "
            f"again, with the same arguments, within {question.rule.expires_s} s of the first attempt.",
            {
                "reason": "confirmation_required",
                "approval": approval.id,
                "expires_ms": approval.expires_ms,
                "slot": question.slot,
            },
        )

    # -- the answer ---------------------------------------------------------------------------

    def _answer(self, result: dict[str, Any] | None, question: Question, how: str) -> Answer:
        """An elicitation result: accept (without approve: false) confirms; decline, cancel or else does not."""
        action = result.get("action") if isinstance(result, dict) else None
        content = result.get("content") if isinstance(result, dict) else None
        approve = content.get("approve", True) if isinstance(content, dict) else True
        confirmed = action == "accept" and approve is not False
        return Answer(confirmed, f"{question.who} via {how}", self.approvals.now_ms(), how)

    def _seal(self, question: Question) -> str:
        expires = self.approvals.now_ms() + question.rule.expires_s * 1000
        body = f"{CONFIRM_STATE_PREFIX}{secrets.token_hex(8)}.{expires}"
        return f"{body}.{self._mac(body, question.binding)}"

    def _mac(self, body: str, binding: str) -> str:
        return hmac.new(self._key, f"{body}|{binding}".encode(), hashlib.sha256).hexdigest()[:32]

    def _check_state(self, state: str, question: Question) -> None:
        body, _, mac = state.rpartition(".")
        _, _, expires = body.rpartition(".")
        if not hmac.compare_digest(mac, self._mac(body, question.binding)):
            raise _state_error(
                "requestState does not belong to this call: retry the same tool with the same arguments as the "
                "call that was asked to confirm, or send the call again without requestState",
                "mismatch",
            )
        if not expires.isdigit() or int(expires) <= self.approvals.now_ms():
            raise _state_error(
                "requestState has expired: nobody confirmed in time; send the call again without requestState",
                "expired",
            )
        if body in self._used:
            raise _state_error(
                "requestState was already answered: a confirmation counts for one call; send the call again "
                "without requestState to be asked again",
                "used",
            )
        now = self.approvals.now_ms()
        for old in [old for old, until in self._used.items() if until <= now]:
            del self._used[old]  # expired: refused as expired anyway, no need to remember it
        if len(self._used) >= MAX_USED_STATES:
            raise errors.RpcError(
                jsonrpc.UNAVAILABLE,
                f"Too many confirmations answered within their lifetime ({MAX_USED_STATES}); try again later",
                {"reason": "confirmations_full"},
            )
        self._used[body] = int(expires)


def _state_error(message: str, reason: str) -> errors.RpcError:
    return errors.RpcError(jsonrpc.INVALID_PARAMS, message, {"reason": reason})
