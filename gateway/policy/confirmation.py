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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

import orjson

from gateway.core import errors, jsonrpc
from gateway.core.confirmer import CONTINUATIONS, QUESTION_READ, ClientConfirmer
from gateway.core.policy_interface import (
    CONFIRM_INPUT_KEY,
    CONFIRM_STATE_PREFIX,
    QUESTION_READ_REASON,
    AnswerInstead,
    Confirmer,
)
from gateway.core.relay import ClientAnswerError
from gateway.core.secret_keys import mask_secrets
from gateway.core.used_states import UsedStates
from gateway.policy.approvals import Approval, Approvals, ApprovalsFull, binding_of
from gateway.policy.rules.compiled import ConfirmRule
from gateway.policy.rules.subjects import ANONYMOUS, identity_of

MAX_STATE_CHARS = 2000
"""Longest device state quoted in a question; a longer one is cut (the person reads it, a page is enough)."""
MAX_ERROR_CHARS = 200
"""Longest part of a client's error answer to a question quoted in its record and tool error (the client's text)."""
DEFAULT_MAX_USED_CONFIRMATIONS = 4096
"""requestStates answered and not yet expired, remembered so none is answered twice; past it, answers wait
(limits.max_used_confirmations)."""
DEFAULT_MAX_USED_CONFIRMATIONS_PER_CALLER = 256
"""As many of one caller's, so one caller answering its own questions in a loop leaves room for the others'
(limits.max_used_confirmations_per_caller)."""
FULL_RETRY_MARGIN_MS = 1000
"""How long a requestState refused at one of those bounds must still hold after room frees for its refusal
to advise the same retry (the client's timer and the network take part of the window); with less, the
refusal says to ask again."""


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
    hint: bool | None = None
    """The tool's readOnlyHint: with slot and tool, what an approver must have the rights to call."""

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


def continues(confirmer: Confirmer | None) -> TypeGuard[ClientConfirmer]:
    """Whether the call continues a provider's input_required round of a call a person confirmed (its
    retry brings the gateway's continuation state, checked by continued_answer): it is not confirmed again."""
    return isinstance(confirmer, ClientConfirmer) and confirmer.continued is not None


def continued_answer(confirmer: ClientConfirmer, rule: ConfirmRule | None, at_ms: int) -> Answer:
    """The yes a continuing call brings (its `how` "input_required" when the caller gave it through its
    own client, else "approval"; `at_ms`, now on the wall clock, moved back to when it was given), for its
    record; RpcError when its continuation state does not hold or the confirmation's lifetime under
    `rule`, the [[confirm]] rule in force, has passed."""
    continued = confirmer.continued
    assert continued is not None
    if continued.problem is not None:
        raise continued.problem
    if rule is not None:
        CONTINUATIONS.within(continued, rule.expires_s)
    if continued.yes_ms is not None:  # when the yes was given, on the wall clock as it reads now
        at_ms -= max(CONTINUATIONS.clock_ms() - continued.yes_ms, 0)
    return Answer(True, continued.confirmed_by, at_ms, "input_required" if continued.own else "approval")


def spend_continued(confirmer: Confirmer | None) -> None:
    """Use up the continuation state a continuing call brings, its round admitted (RpcError at a bound)."""
    if isinstance(confirmer, ClientConfirmer):
        confirmer.spend_continued()


def give_back_continued(confirmer: Confirmer | None) -> None:
    """The continuation state counts again: its round was refused before it was decided on record."""
    if isinstance(confirmer, ClientConfirmer):
        confirmer.give_back_continued()


class Confirmations:
    """The confirmation step of Governor.admit_call, with the approvals waiting and the seal of the
    requestStates it issues (a key of this process: a state cannot be forged or moved to another call)."""

    def __init__(self, approvals: Approvals | None = None) -> None:
        self.approvals = approvals if approvals is not None else Approvals()
        self._key = secrets.token_bytes(32)
        self._used = UsedStates()
        """Each answered requestState's body, until it expires (monotonic ms), by its caller's identity."""
        self.max_used = DEFAULT_MAX_USED_CONFIRMATIONS
        self.max_used_per_caller = DEFAULT_MAX_USED_CONFIRMATIONS_PER_CALLER
        self.limit_hit: Callable[[str], None] = _uncounted
        """Counts an answer refused by one of the two bounds (mcpgw_limit_hits_total); set by the composition root."""

    def bound_used(self, limit: int, per_caller: int) -> None:
        """limits.max_used_confirmations(_per_caller): read at the next answer that comes. States already
        remembered stay remembered (forgetting one would let it be answered twice)."""
        self.max_used = limit
        self.max_used_per_caller = per_caller

    def claim(
        self, subjects: frozenset[str], slot: str, tool: str, arguments: object, confirmer: Confirmer | None
    ) -> Claim:
        """Take what this attempt brings towards its confirmation, used up now (see Claim)."""
        if (confirmer is not None and confirmer.way == QUESTION_READ) or continues(confirmer):
            # The gateway's own read for a question, or a confirmed call's later round: it uses up none
            # of the caller's approvals.
            return NO_CLAIM
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
            sealed = self._spend_state(retry.state, attempt, identity_of(subjects))
        except errors.RpcError as exc:
            return Claim(approval, problem=exc)
        return Claim(approval, sealed, retry.answer, spent=retry.state.rpartition(".")[0])

    def give_back(self, claim: Claim) -> None:
        """What an attempt brought counts again: the attempt was refused before anything was decided on
        record (the audit trail could not record it), so it used up nothing."""
        if claim.approval is not None:
            self.approvals.put_back(claim.approval)
        if claim.spent is not None:
            self._used.forget(claim.spent)

    async def ask(self, question: Question, confirmer: Confirmer | None, claim: Claim | None = None) -> Answer:
        """The person's answer; AnswerInstead (an input_required round) or RpcError (-32001 with how to
        approve) when it cannot be had now. `claim`: what the attempt brought (taken here when None).

        A yes is told to the core's confirmer: a provider's own input_required round of the call is then
        relayed so that its retry continues the confirmed call (gateway/core/confirmer.py, Continuations)."""
        answer = await self._ask(question, confirmer, claim)
        if answer.confirmed and isinstance(confirmer, ClientConfirmer):
            # A yes lasts the rule's expires_s from when it was given, through every provider round.
            elapsed_ms = max(self.approvals.now_ms() - answer.at_ms, 0)
            own = not answer.how.startswith("approval")
            confirmer.confirmed(answer.by, own, question.rule.expires_s * 1000, elapsed_ms)
        return answer

    async def _ask(self, question: Question, confirmer: Confirmer | None, claim: Claim | None) -> Answer:
        if confirmer is not None and confirmer.way == QUESTION_READ:
            raise _question_read_confirmed(question)
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
        way = confirmer.way if confirmer is not None else ""
        if question.rule.by == "another":
            if way == "input" and claim.sealed is not None:
                # The caller answers a question asked under a rule that a reload has since made
                # by = "another": its no stays a no, its yes is not the approval the policy asks for.
                answer = self._claimed(claim, question)
                if answer.confirmed:
                    raise callers_answer_refused(question, question.rule, answer)
                return answer
            raise self._waiting(question)  # the caller's own client is never asked
        if confirmer is not None and way == "input":
            if claim.problem is not None:
                raise claim.problem
            if claim.sealed is None:
                raise AnswerInstead(await self._input_required(question, confirmer))
            return self._claimed(claim, question)
        if confirmer is not None and way == "elicit":
            params = await self._elicitation(question, confirmer)
            try:
                async with asyncio.timeout(question.rule.expires_s):
                    result = await confirmer.elicit(params)
            except TimeoutError:
                return Answer(False, "nobody", self.approvals.now_ms(), "timeout")
            except ClientAnswerError as exc:
                # The client answered the question with an error (its form could not be shown, say): a no.
                return Answer(
                    False,
                    f"{question.who} via elicitation (an error answer: {exc.message[:MAX_ERROR_CHARS]})",
                    self.approvals.now_ms(),
                    "elicitation",
                )
            except errors.RpcError as exc:
                if not isinstance(exc.data, dict) or exc.data.get("reason") != "no_channel":
                    raise
                # The request's stream cannot carry the question (its POST accepts no text/event-stream):
                # the client cannot be asked, and its call waits for an operator's approval.
                raise self._waiting(question, "this request cannot carry the question (no text/event-stream)") from None
            return self._answer(result, question.who, "elicitation")
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

    def _waiting(self, question: Question, unaskable: str = "it declares no elicitation") -> errors.RpcError:
        """The refusal of a caller that cannot be asked (`unaskable`: why): the call waits for an operator's
        approval."""
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
                question.hint,
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
            why = f"this client cannot be asked ({unaskable})"
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

    def _answer(self, result: dict[str, Any] | None, who: str, how: str) -> Answer:
        """An elicitation result: only accept with content.approve exactly true confirms. An accept with
        anything else there does not match the question's schema and counts as a no (fail closed)."""
        action = result.get("action") if isinstance(result, dict) else None
        content = result.get("content") if isinstance(result, dict) else None
        approve = content.get("approve") if isinstance(content, dict) else None
        confirmed = action == "accept" and approve is True
        unusable = action == "accept" and approve is not True and approve is not False
        return Answer(confirmed, f"{who} via {how}", self.approvals.now_ms(), how, unusable)

    def _claimed(self, claim: Claim, question: Question) -> Answer:
        """The answer a retry brings with its requestState (claim.sealed is set), for the call it retries."""
        if claim.sealed != _digest(question.binding):
            raise _state_error(
                "requestState answers a question about other arguments than this call forwards now (the "
                "operator's policy changed since it was asked); send the call again without requestState "
                "to be asked again",
                "changed",
            )
        return self._answer(claim.answer, question.who, "input_required")

    def claimed_yes(self, claim: Claim, who: str) -> Answer | None:
        """The yes a retry brings with its requestState, read before its call is decided again: a refusal
        then (a limit tightened by a reload, say) records it, as the session era records the yes given to
        a call it decides again. None without a yes. `who`: the caller's name (caller_name)."""
        if claim.sealed is None:
            return None
        answer = self._answer(claim.answer, who, "input_required")
        return answer if answer.confirmed else None

    def _seal(self, question: Question) -> str:
        # On the monotonic clock: setting the wall clock neither stretches nor cuts a state's lifetime. A
        # state outlives no process (the key is the process's), so its clock is always this one.
        expires = self.approvals.monotonic_ms() + question.rule.expires_s * 1000
        body = f"{CONFIRM_STATE_PREFIX}{secrets.token_hex(8)}.{expires}.{_digest(question.binding)}"
        return f"{body}.{self._mac(body, question.attempt)}"

    def _mac(self, body: str, attempt: str) -> str:
        return hmac.new(self._key, f"{body}|{attempt}".encode(), hashlib.sha256).hexdigest()[:32]

    def _spend_state(self, state: str, attempt: str, caller: str) -> str:
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
        full = self._used.full(caller, self.max_used, self.max_used_per_caller, now)
        if full == "per_caller":
            # This caller's share is full: its own answers wait, every other caller's still count.
            raise self._full(
                f"{self._used.held_by(caller)} of this caller's confirmations were answered within their lifetime",
                "max_used_confirmations_per_caller",
                self._used.oldest(caller) - now,
                int(expires) - now,
            )
        if full == "all":
            raise self._full(
                f"{len(self._used)} confirmations were answered within their lifetime",
                "max_used_confirmations",
                self._used.oldest() - now,
                int(expires) - now,
            )
        self._used.add(body, int(expires), caller)
        return sealed

    def _full(self, text: str, limit: str, wait_ms: int, state_left_ms: int) -> errors.RpcError:
        """The refusal of an answer past a bound: the answered states are remembered until they expire, so
        none is answered twice; an answer counts once one of them has (data.retryAfterMs). The same retry
        counts then only if its requestState still holds (`state_left_ms`, its remaining lifetime): when it
        expires first, the refusal says to send the call again to be asked again (data.retry)."""
        self.limit_hit(limit)
        retry_after_ms = max(wait_ms, 1)
        wait_s = -(-retry_after_ms // 1000)
        if retry_after_ms + FULL_RETRY_MARGIN_MS <= state_left_ms:
            retry = "same"
            advice = f"send the same retry again in {wait_s} s, when the oldest of them expires"
        else:
            retry = "ask_again"
            advice = (
                f"this question expires in {-(-max(state_left_ms, 0) // 1000)} s, before the oldest of them (in "
                f"{wait_s} s) or less than {FULL_RETRY_MARGIN_MS / 1000:g} s after, so its retry cannot count: send "
                f"the call again without requestState in {wait_s} s to be asked again"
            )
        return errors.RpcError(
            jsonrpc.UNAVAILABLE,
            f"Not forwarded: {text} (limits.{limit}); {advice}, or ask the operator to raise the bound",
            {
                "reason": "confirmations_full",
                "limit": f"limits.{limit}",
                "retryAfterMs": retry_after_ms,
                "retry": retry,
            },
        )


def _uncounted(limit: str) -> None:
    """The count of a limit hit where nothing counts them (a Confirmations built outside the gateway)."""


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


class AnswerRefused(errors.RpcError):
    """The refusal of a call whose caller answered its question: the answer goes on record with it
    (confirmed_by, confirmed_ms), as it does for a call the person's answer let go ahead."""

    def __init__(self, code: int, message: str, data: dict[str, Any], answer: Answer) -> None:
        super().__init__(code, message, data)
        self.answer = answer


def callers_answer_refused(question: Question, rule: ConfirmRule, answer: Answer) -> AnswerRefused:
    """A yes the caller gave through its own client (an elicitation, or an input_required round answered
    by its retry) for a call that the policy in force, reloaded since the question was asked, has
    another principal approve: a caller never confirms its own call."""
    return AnswerRefused(
        jsonrpc.FORBIDDEN,
        f"Not forwarded: the operator's policy changed while {question.tool} on {question.slot} waited for its "
        f'confirmation, and it now requires approval by another principal ({rule.id}, by = "another"); the '
        f"answer came from the caller ({answer.by}), and a caller never confirms its own call. Send the call "
        "again: it then waits for another principal's `mcp-gateway approve`",
        {"reason": "confirmation_changed", "by": "another", "rule": rule.id, "slot": question.slot},
        answer,
    )


def _question_read_confirmed(question: Question) -> errors.RpcError:
    """The gateway's own read of a device's state, to quote it in a question, is never itself put to a
    person: where the policy has its read tool confirmed too, the question goes without the state."""
    return errors.forbidden(
        f"Not read: the operator's policy ({question.rule.id}) has a person confirm {question.tool} on "
        f"{question.slot} too, so the gateway does not read it to quote the device's state in a confirmation "
        "question; the question is asked without it",
        {"reason": QUESTION_READ_REASON, "slot": question.slot},
    )


def _state_error(message: str, reason: str) -> errors.RpcError:
    return errors.RpcError(jsonrpc.INVALID_PARAMS, message, {"reason": reason})
