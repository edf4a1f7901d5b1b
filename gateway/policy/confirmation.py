"""A person confirms a call the policy marks [[confirm]]: asked through the caller's own client
(elicitation on a session-era stream, or an input_required round in 2026-07-28), or, when the client
cannot be asked or the rule says `by = "another"`, by another principal with `mcp-gateway approve`
before the caller tries again.

Every answer is bound to one call (caller, slot, tool, arguments as sent and as forwarded) and used once.
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
from gateway.policy.approvals import Approval, Approvals, ApprovalsFull, binding_of
from gateway.policy.audit.records import mask_secrets
from gateway.policy.rules.compiled import ConfirmRule
from gateway.policy.rules.subjects import ANONYMOUS, identity_of

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
    """As they are forwarded (clamped where a limit clamps): what the person confirms."""
    rule: ConfirmRule
    sent: object
    """The arguments as the caller sent them: what a retry is matched by."""

    @property
    def binding(self) -> str:
        """The call as it is forwarded."""
        return binding_of(self.subjects, self.slot, self.tool, self.arguments)

    @property
    def attempt(self) -> str:
        """The call as the caller sends it."""
        return binding_of(self.subjects, self.slot, self.tool, self.sent)


@dataclass(frozen=True)
class Answer:
    """What a person answered: `confirmed` or not, who, and when (ms)."""

    confirmed: bool
    by: str
    at_ms: int
    how: str
    """"elicitation", "input_required", "approval <id>", "timeout"."""
    unusable: bool = False
    """An accept whose content does not match the question's schema: counted as a no."""


@dataclass(frozen=True)
class Claim:
    """What one attempt brings that may answer its confirmation: a decided approval, or a requestState of
    its own (sealed for this very attempt), or why that state does not hold. Taken before the call is
    decided, so the attempt uses it up whatever the policy and the limits then make of the call."""

    approval: Approval | None = None
    sealed: str | None = None
    """The forwarded call the claimed requestState was issued for (a digest of its binding)."""
    answer: dict[str, Any] | None = None
    """The retry's inputResponses["confirm"]."""
    problem: errors.RpcError | None = None
    """Why the retry's requestState does not hold (mismatch, expired, used)."""
    spent: str | None = None
    """The body of the requestState this attempt used up (to give back: Confirmations.give_back)."""

    @property
    def retried(self) -> bool:
        return self.sealed is not None or self.problem is not None


NO_CLAIM = Claim()


class Confirmations:
    """The confirmation step of Governor.admit_call, with the approvals waiting and the seal of the
    requestStates it issues (a key of this process: a state cannot be forged or moved to another call)."""

    def __init__(self, approvals: Approvals | None = None) -> None:
        self.approvals = approvals if approvals is not None else Approvals()
        self._key = secrets.token_bytes(32)
        self._used: dict[str, int] = {}
        """Each answered requestState's body, with its expiry (monotonic ms)."""

    def claim(
        self, subjects: frozenset[str], slot: str, tool: str, arguments: object, confirmer: Confirmer | None
    ) -> Claim:
        """Take what this attempt brings towards its confirmation, used up now (see Claim)."""
        retry = confirmer.retry if confirmer is not None else None
        if retry is not None and confirmer is not None and confirmer.way != "input":
            retry = None  # a requestState answers only the input_required round it came from
        if retry is None and not len(self.approvals):
            return NO_CLAIM  # the common case: nothing to look up, no binding to compute
        attempt = binding_of(subjects, slot, tool, arguments)
        approval = self.approvals.take(attempt)
        if retry is None:
            return Claim(approval) if approval is not None else NO_CLAIM
        try:
            sealed = self._spend_state(retry.state, attempt)
        except errors.RpcError as exc:
            return Claim(approval, problem=exc)
        return Claim(approval, sealed, retry.answer, spent=retry.state.rpartition(".")[0])

    def give_back(self, claim: Claim) -> None:
        """What an attempt brought counts again: the attempt was refused before anything was decided on
        record (the audit trail could not record it), so it used up nothing."""
        if claim.approval is not None:
            self.approvals.put_back(claim.approval)
        if claim.spent is not None:
            self._used.pop(claim.spent, None)

    async def ask(self, question: Question, confirmer: Confirmer | None, claim: Claim | None = None) -> Answer:
        """The person's answer; AnswerInstead (an input_required round) or RpcError (-32001 with how to
        approve) when it cannot be had now. `claim`: what the attempt brought (taken here when None)."""
        if claim is None:
            claim = self.claim(question.subjects, question.slot, question.tool, question.sent, confirmer)
        approval = claim.approval
        if approval is not None:
            if approval.binding != question.binding:
                raise _approval_changed(question, approval)
            return Answer(
                approval.state == "approved",
                approval.decided_by or "an operator",
                approval.decided_ms or self.approvals.now_ms(),
                f"approval {approval.id}",
            )
        if question.rule.by == "another":
            raise self._waiting(question)  # the caller's own client is never asked
        way = confirmer.way if confirmer is not None else ""
        if confirmer is not None and way == "input":
            if claim.problem is not None:
                raise claim.problem
            if claim.sealed is None:
                raise AnswerInstead(await self._input_required(question, confirmer))
            if claim.sealed != _digest(question.binding):
                raise _state_error(
                    "requestState answers a question about other arguments than this call forwards now (the "
                    "operator's policy changed since it was asked); send the call again without requestState "
                    "to be asked again",
                    "changed",
                )
            return self._answer(claim.answer, question, "input_required")
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
                        # A form a client pre-fills from the schema and a person submits unread is a no.
                        "default": False,
                    }
                },
                "required": ["approve"],
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
                question.attempt,
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
                {"reason": "approvals_full", "slot": question.slot, "limit": f"limits.{exc.limit}"},
            )
        if question.rule.by == "another":
            why = "another principal approves it (the caller's own client is never asked)"
        else:
            why = "this client cannot be asked (it declares no elicitation)"
        if identity_of(question.subjects) == ANONYMOUS:
            # Only a gateway without [auth] has anonymous callers, and an anonymous caller approves no
            # anonymous call: telling the agent an operator can would have its user wait for nobody.
            how = (
                "No one can approve it on this gateway: without [auth] every caller is anonymous, and a caller "
                "never approves its own call. Its operator adds [auth] with a token for the approver "
                "(docs/governance.md#confirmation-of-device-writes); until then the call cannot be done."
            )
        else:
            how = (
                f"An operator runs `mcp-gateway approve {approval.id}` (or the _broker tool broker_approve); then "
                f"send the same call again, with the same arguments, within {question.rule.expires_s} s of the "
                "first attempt."
            )
        return errors.forbidden(
            f"Not forwarded yet: the operator's policy ({question.rule.id}) has a person confirm {question.tool} "
            f"on {question.slot}, and {why}. {how}",
            {
                "reason": "confirmation_required",
                "approval": approval.id,
                "expires_ms": approval.expires_ms,
                "slot": question.slot,
            },
        )

    # -- the answer ---------------------------------------------------------------------------

    def _answer(self, result: dict[str, Any] | None, question: Question, how: str) -> Answer:
        """An elicitation result: only accept with content.approve exactly true confirms. An accept with
        anything else there does not match the question's schema and counts as a no (fail closed)."""
        action = result.get("action") if isinstance(result, dict) else None
        content = result.get("content") if isinstance(result, dict) else None
        approve = content.get("approve") if isinstance(content, dict) else None
        confirmed = action == "accept" and approve is True
        unusable = action == "accept" and approve is not True and approve is not False
        return Answer(confirmed, f"{question.who} via {how}", self.approvals.now_ms(), how, unusable)

    def _seal(self, question: Question) -> str:
        # On the monotonic clock: setting the wall clock neither stretches nor cuts a state's lifetime. A
        # state outlives no process (the key is the process's), so its clock is always this one.
        expires = self.approvals.monotonic_ms() + question.rule.expires_s * 1000
        body = f"{CONFIRM_STATE_PREFIX}{secrets.token_hex(8)}.{expires}.{_digest(question.binding)}"
        return f"{body}.{self._mac(body, question.attempt)}"

    def _mac(self, body: str, attempt: str) -> str:
        return hmac.new(self._key, f"{body}|{attempt}".encode(), hashlib.sha256).hexdigest()[:32]

    def _spend_state(self, state: str, attempt: str) -> str:
        """Check a requestState against the attempt carrying it and mark it used; the digest of the
        forwarded call it was issued for. RpcError when it does not hold."""
        body, _, mac = state.rpartition(".")
        fields = body.removeprefix(CONFIRM_STATE_PREFIX).split(".")
        if not mac.isascii() or not hmac.compare_digest(mac, self._mac(body, attempt)) or len(fields) != 3:
            raise _state_error(
                "requestState does not belong to this call: retry the same tool with the same arguments as the "
                "call that was asked to confirm, or send the call again without requestState",
                "mismatch",
            )
        _, expires, sealed = fields
        now = self.approvals.monotonic_ms()
        if not expires.isdigit() or int(expires) <= now:
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
        for old in [old for old, until in self._used.items() if until <= now]:
            del self._used[old]  # expired: refused as expired anyway, no need to remember it
        if len(self._used) >= MAX_USED_STATES:
            raise errors.RpcError(
                jsonrpc.UNAVAILABLE,
                f"Too many confirmations answered within their lifetime ({MAX_USED_STATES}); try again later",
                {"reason": "confirmations_full"},
            )
        self._used[body] = int(expires)
        return sealed


def _digest(binding: str) -> str:
    """The part of a binding a requestState carries: enough to tell two forwarded calls apart."""
    return binding[:32]


def _approval_changed(question: Question, approval: Approval) -> errors.RpcError:
    """A retry whose approval was given for other forwarded arguments than the policy in force gives."""
    forwarded = orjson.dumps(mask_secrets(question.arguments)).decode()
    return errors.forbidden(
        f"Not forwarded: approval {approval.id} was given for {question.tool} on {question.slot} with "
        f"{orjson.dumps(approval.arguments).decode()}, and the operator's policy now forwards {forwarded} (it "
        "changed since). The approval is used up; send the call again to have it approved again.",
        {"reason": "approval_changed", "approval": approval.id, "slot": question.slot},
    )


def _state_error(message: str, reason: str) -> errors.RpcError:
    return errors.RpcError(jsonrpc.INVALID_PARAMS, message, {"reason": reason})
