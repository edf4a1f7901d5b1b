"""The policy layer's answer to the core's Governance questions: the loaded [policy] decides, the
tool's schema and the operator's limits check the arguments, and the audit trail records each call
before it is forwarded (gateway/core/policy_interface.py, docs/governance.md).

The policy is one immutable object, read once per request: a reload swaps it whole, so no request is
ever decided by half of one policy and half of another. A call held for a person's answer is decided
again, whole, by the policy in force when the answer comes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.config import ConfigError, GatewayConfig, PolicyConfig
from gateway.core import errors, jsonrpc
from gateway.core.confirmer import ClientConfirmer
from gateway.core.names import BROKER_SLOT
from gateway.core.policy_interface import (
    AnswerInstead,
    CallVerdict,
    Confirmer,
    HeldCalls,
    ProviderGovernance,
    confirmation_effect,
)
from gateway.core.principal import Principal
from gateway.core.secret_keys import mask_secrets
from gateway.policy.approvals import Approval, ApprovalUnknown, binding_of
from gateway.policy.arguments import PATTERN_TIMEOUT, ArgumentRefused, Checked, UntakenLimits, check_arguments
from gateway.policy.audit.errors import AuditUnavailable
from gateway.policy.audit.reading import AuditReadError
from gateway.policy.audit.records import DecisionRecord, now_ms
from gateway.policy.audit.trail import AuditTrail
from gateway.policy.confirmation import (
    Answer,
    AnswerRefused,
    Claim,
    Confirmations,
    Question,
    callers_answer_refused,
    continued_answer,
    continues,
    give_back_continued,
    spend_continued,
)
from gateway.policy.execution.admission import Admission, ExecutionLimits
from gateway.policy.refusal_results import declined_result, refused_arguments_result, waiting_result
from gateway.policy.rules import Ask, Policy, PolicyError, load_policy, subjects_of
from gateway.policy.rules.capabilities import TOOLS_CALL
from gateway.policy.rules.compiled import ConfirmRule
from gateway.policy.rules.decision import Decision
from gateway.policy.rules.notices import receives
from gateway.policy.rules.subjects import ANONYMOUS, ANYONE, caller_name, identity_of
from gateway.policy.schemas import SchemaCache

log = logging.getLogger("gateway.policy")

MAX_SUBJECT_CACHE = 4096
"""Callers whose subject strings are kept; emptied when full (a principal is a few strings)."""
MAX_UNKNOWN_NAME = 128
"""Longest unknown tool name recorded as the caller sent it; a longer one is cut (a tool name is at most 128)."""
CLIENT_SUBJECT_KINDS = ("client:", "token:", "service:")
"""Which subject names a caller's client in the audit trail, first found first (see client_id_of)."""


def client_id_of(subjects: frozenset[str]) -> str | None:
    """The audit trail's client_id of a caller known by `subjects`: the OAuth client its access token was
    issued to (client:<azp or client_id>), else the name of its static token (token:<name>) or of the key
    that signed its request (service:<name>, the stdio bridge); None for the anonymous caller, an access
    token that names no client, and a provider asking for its own work."""
    for kind in CLIENT_SUBJECT_KINDS:
        for subject in sorted(subjects):
            if subject.startswith(kind):
                return subject[len(kind) :]
    return None


@dataclass(frozen=True, slots=True)
class Call:
    """One tools/call as admit_call decides it: who calls which tool of which slot, how, with what."""

    subjects: frozenset[str]
    slot: str
    tool: dict[str, Any]
    """As the provider lists it."""
    name: str
    arguments: object
    """As the caller sent them."""
    hint: bool | None
    via: str
    trace_id: str | None


@dataclass(frozen=True, slots=True)
class Judged:
    """A call the policy allows with arguments that pass its limits: its record so far, and what to forward."""

    decision: Decision
    record: DecisionRecord
    checked: Checked
    forwarded: object
    """The arguments to forward: the caller's, or the clamped ones."""


def read_only(tool: dict[str, Any] | None) -> bool | None:
    """The tool's annotations.readOnlyHint: True makes it an observe tool (None: unknown, a control tool)."""
    annotations = tool.get("annotations") if tool is not None else None
    hint = annotations.get("readOnlyHint") if isinstance(annotations, dict) else None
    return hint if isinstance(hint, bool) else None


class Governor:
    """Implements gateway.core.policy_interface.Governance over one swappable Policy."""

    def __init__(
        self,
        policy: Policy,
        trail: AuditTrail | None,
        schemas: SchemaCache | None = None,
        source: PolicyConfig | None = None,
    ) -> None:
        self.policy = policy
        self.source = source
        """Where the policy comes from, for reload (its file is read again; None: it cannot be reloaded)."""
        self.trail = trail
        """None: [audit] enabled = false; decisions are then made and not recorded."""
        self.clients_authenticated = True
        """[auth] is configured (fixed until a restart). Without it every caller is anonymous and nobody can
        approve a call that waits for `mcp-gateway approve` (status: unapprovable_confirm_rules)."""
        self.schemas = schemas or SchemaCache()
        self.untaken = UntakenLimits()
        """Limits whose tool takes no argument of their name, seen at calls (governance status)."""
        self._subjects: dict[Principal, frozenset[str]] = {}
        self.reloads = 0
        self.providers: ProviderGovernance | None = None
        """Providers' declarations and decisions (gateway/policy/declarations/), shown in status(); set by the
        composition root."""
        self.confirmations = Confirmations()
        self.held = HeldCalls()
        """The calls being decided now, answered at once at shutdown (gateway/core/governed.py)."""
        self._confirms_changed_s = -math.inf
        """When a reload last changed the [[confirm]] rules (the approvals' monotonic clock): a call waiting since
        before then names its rule by its index in a policy no longer in force."""
        self.limits = ExecutionLimits(policy.document.execution_limits)
        """[[execution_limits]]: their counters live here, across reloads (docs/governance-limits.md)."""
        self.limit_hit: Callable[[str], None] = _uncounted
        """Counts a refusal by a [limits] bound (mcpgw_limit_hits_total); set by the composition root."""
        self.repeat_interval_s = 60.0
        """logging.repeat_interval_s: how often a call answered without a record is warned of again."""
        self._unrecorded: tuple[float, int] = (-math.inf, 0)
        """When a call answered without a record was last warned of, and how many since."""
        self.decided: Callable[[str], None] = _uncounted
        """Counts a tools/call decision by its effect (mcpgw_policy_decisions_total); set by the composition
        root."""
        self.visibility_changed: Callable[[], None] = _unannounced
        """Told after a swap to a policy with other rules: what each caller sees at each endpoint may differ,
        so listening clients are told their tool lists changed; set by the composition root."""

    @property
    def confirms_changed_s(self) -> float:
        """When a reload last changed the [[confirm]] rules; a refused reload puts back what it found."""
        return self._confirms_changed_s

    @confirms_changed_s.setter
    def confirms_changed_s(self, when_s: float) -> None:
        self._confirms_changed_s = when_s

    def swap(self, policy: Policy) -> None:
        """Use `policy` from the next request on (requests being decided finish with the old one)."""
        changed = policy.document != self.policy.document
        if policy.document.confirm != self.policy.document.confirm:
            self._confirms_changed_s = self.confirmations.approvals.monotonic()
        self.policy = policy
        self.limits.swap(policy.document.execution_limits)
        self.reloads += 1
        if changed:  # the same rules read again show every caller what it saw
            self.untaken.clear()  # rule ids may name other rules now; the next calls tell again
            self.visibility_changed()

    def subjects(self, principal: Principal) -> frozenset[str]:
        found = self._subjects.get(principal)
        if found is None:
            if len(self._subjects) >= MAX_SUBJECT_CACHE:
                self._subjects.clear()
            found = self._subjects[principal] = subjects_of(principal)
        return found

    # -- Governance ---------------------------------------------------------------------------

    def permits(self, principal: Principal, slot: str, method: str) -> str | None:
        decision = self.policy.decide(Ask(self.subjects(principal), slot, method))
        return None if decision.allowed else decision.reason

    def may_receive(self, principal: Principal, slot: str, method: str) -> bool:
        return receives(self.policy, self.subjects(principal), slot, method)

    def visible_tools(self, principal: Principal, slot: str, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        policy, subjects = self.policy, self.subjects(principal)
        return [tool for tool in tools if policy.may_see_tool(subjects, slot, str(tool.get("name")), read_only(tool))]

    def may_see(self, principal: Principal, slot: str, tool: dict[str, Any]) -> bool:
        return self.policy.may_see_tool(self.subjects(principal), slot, str(tool.get("name")), read_only(tool))

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
        subjects = self.subjects(principal)
        if tool is None:
            # Not listed by the provider: the same answer as a tool the caller may not see, recorded.
            await self._record_refusal(self._unknown_tool(subjects, slot, name, arguments, via, trace_id))
            self.decided("deny")
            return CallVerdict(False, visible=False, effect="deny")
        if not self.schemas.cached(tool):
            await self.schemas.ready(tool)  # compiled off the event loop, within limits.max_schema_compile_ms
        call = Call(subjects, slot, tool, name, arguments, read_only(tool), via, trace_id)
        try:
            verdict = await self._decide(call, confirmer)
        except (AnswerInstead, errors.RpcError) as exc:  # held for a confirmation, or its answer refused
            self.decided(confirmation_effect(exc))
            raise
        self.decided(verdict.effect)
        return verdict

    async def _decide(self, call: Call, confirmer: Confirmer | None) -> CallVerdict:
        """admit_call for a tool the provider lists."""
        subjects, slot, name, arguments = call.subjects, call.slot, call.name, call.arguments
        policy = self.policy
        # Taken before anything is decided: an attempt matching an approval (or bringing its own
        # requestState) uses it up, whatever the checks below make of the call.
        claim = self.confirmations.claim(subjects, slot, name, arguments, confirmer)
        # A 2026-07-28 retry brings its yes before its call is decided again: a refusal records it.
        yes = self.confirmations.claimed_yes(claim, caller_name(subjects))
        judged = await self._judge(policy, call, **({} if yes is None else _confirmed_fields(yes)))
        if isinstance(judged, CallVerdict):
            return judged
        if continues(confirmer):
            continued = await self._continued(call, judged, confirmer)
            if isinstance(continued, CallVerdict):
                return continued
            judged = continued
        elif judged.decision.confirm is not None:
            confirmed = await self._confirm(policy, call, judged, confirmer, claim)
            if isinstance(confirmed, CallVerdict):
                return confirmed
            judged = confirmed
        record, checked = judged.record, judged.checked
        admitted = await self._admit_limits(record, subjects, call.hint)
        if isinstance(admitted, CallVerdict):
            return admitted
        try:
            spend_continued(confirmer)  # only an admitted round uses its continuation state up
        except errors.RpcError as exc:
            self.limits.release(admitted)
            await self._record_refusal(_replace(record, effect="refuse-confirmation", reason=exc.message))
            raise
        ticket: int | None = None
        if self.trail is not None:
            try:
                ticket = await self.trail.decision(record, forwarding=True)
            except AuditUnavailable as exc:
                if slot == BROKER_SLOT and call.hint is True:
                    # The gateway's own read-only tools reach no device, and broker_diagnose among
                    # them is how the operator learns why the trail fails: answered, unrecorded.
                    self._warn_unrecorded("%s on %s answered without a record: %s", name, slot, exc)
                    return CallVerdict(True, admission=admitted, effect="allow")
                self.limits.release(admitted)  # not forwarded: its concurrency places are free again
                self.confirmations.give_back(claim)  # nor is an approval it brought used up
                give_back_continued(confirmer)
                return CallVerdict(
                    False,
                    reason=f"The call was not forwarded: the audit trail cannot record it ({exc}); every call of a "
                    "governed gateway is recorded before it reaches the device. The operator must fix the trail "
                    "(broker_diagnose shows why).",
                    code=jsonrpc.UNAVAILABLE,
                    data={"reason": "audit_unavailable"},
                    effect="error",
                )
            except BaseException:
                self.limits.release(admitted)  # cancelled while recording: never forwarded either
                raise
        clamped = tuple(checked.clamped)
        return CallVerdict(
            True,
            arguments=checked.arguments if clamped else None,
            clamped=clamped,
            ticket=ticket,
            admission=admitted,
            effect=record.effect,
        )

    async def _judge(self, policy: Policy, call: Call, **recorded: Any) -> Judged | CallVerdict:
        """Decide `call` by `policy` and check its arguments against the limits there; a refusal is
        recorded (with `recorded` added to its record) and comes back as the verdict to answer."""
        subjects, slot, name = call.subjects, call.slot, call.name
        decision = policy.decide(Ask(subjects, slot, "tools/call", name, call.hint))
        record = DecisionRecord(
            principal=sorted(subjects),
            client_id=client_id_of(subjects),
            transport=call.via,
            slot=slot,
            resource=decision.resource,
            capability=decision.capability,
            effect="allow" if decision.allowed else "deny",
            tool=name,
            arguments=call.arguments,
            rules=decision.rules,
            reason=None if decision.allowed else decision.reason,
            trace_id=call.trace_id,
            **recorded,
        )
        if not decision.allowed:
            await self._record_refusal(record)
            return CallVerdict(
                False,
                visible=policy.may_see_tool(subjects, slot, name, call.hint),
                reason=decision.reason,
                effect=record.effect,
            )
        try:
            checked = check_arguments(
                call.tool,
                call.arguments,
                decision.limits,
                self.schemas,
                resource=decision.resource,
                untaken=(slot, self.untaken),
            )
        except ArgumentRefused as exc:
            if exc.data.get("reason") == PATTERN_TIMEOUT:
                self.limit_hit("max_pattern_ms")
            rules = (*record.rules, *exc.rules)
            await self._record_refusal(_replace(record, effect="refuse-arguments", reason=exc.message, rules=rules))
            if exc.malformed_request:
                return CallVerdict(False, reason=exc.message, code=exc.code, data=exc.data, effect="refuse-arguments")
            return CallVerdict(False, answer=refused_arguments_result(exc, slot), effect="refuse-arguments")
        if checked.clamped:
            rules = (*record.rules, *checked.rules)
            record = _replace(record, effect="clamp", constraints=list(checked.clamped), rules=rules)
        return Judged(decision, record, checked, checked.arguments if checked.clamped else call.arguments)

    async def _confirm(
        self, policy: Policy, call: Call, judged: Judged, confirmer: Confirmer | None, claim: Claim
    ) -> Judged | CallVerdict:
        """Have a person confirm a call `policy` allowed; the call as it goes ahead, or the refusal (recorded).

        A wait for the person ends with the policy in force then: the call is decided and its arguments
        checked again, and it goes ahead only if that still allows it with the arguments the person saw."""
        rule = judged.decision.confirm
        assert rule is not None
        record = judged.record
        question = _question(call, judged, rule)
        try:
            answer = await self.confirmations.ask(question, confirmer, claim)
        except AnswerInstead:
            reason = (
                f"Not forwarded yet: the operator's policy ({rule.id}) has a person confirm {call.name} on "
                f"{call.slot}; the client was asked with input_required, and its retry carrying the answer is "
                "decided again"
            )
            await self._record_refusal(_replace(record, effect="wait-confirmation", reason=reason, time_ms=now_ms()))
            raise
        except errors.RpcError as exc:
            # Waiting for an operator's approval, or a retry whose answer does not hold (used, expired, ...).
            effect = confirmation_effect(exc)
            refused = _replace(record, effect=effect, reason=exc.message, time_ms=now_ms())
            if isinstance(exc, AnswerRefused):  # the caller answered: its answer is on record with the refusal
                refused = _replace(refused, rules=(*record.rules, rule.id), **_confirmed_fields(exc.answer))
            await self._record_refusal(refused)
            if effect == "wait-confirmation":
                return CallVerdict(False, answer=waiting_result(exc), effect=effect)
            raise
        except asyncio.CancelledError:
            # The call ended before anyone answered: the gateway stopping, or its client (closed the stream,
            # cancelled it).
            ended_by = (
                "the gateway shut down"
                if self.held.ending
                else "the call ended (its client closed the stream or cancelled it)"
            )
            unanswered = _replace(
                record,
                time_ms=now_ms(),  # written now, not when the call arrived before the wait
                effect="declined",
                confirmed_by="nobody",
                confirmed_ms=self.confirmations.approvals.now_ms(),
                rules=(*record.rules, rule.id),
                reason=f"Not done: nobody answered the question of {rule.id}; {ended_by} before an answer came",
            )
            await asyncio.shield(self._record_refusal(unanswered))
            raise
        confirmed = _confirmed_fields(answer)
        # The record is written now, with the answer: time_ms is the decision's, not the call's arrival.
        record = _replace(record, time_ms=now_ms())
        if not answer.confirmed:
            result = declined_result(question, answer)
            declined = _replace(
                record, effect="declined", rules=(*record.rules, rule.id), reason=result["content"][0]["text"]
            )
            await self._record_refusal(_replace(declined, **confirmed))
            return CallVerdict(False, answer=result, effect="declined")
        if self.policy is not policy:
            # The policy was reloaded while the person was asked: the one in force now decides.
            again = await self._judge(self.policy, call, **confirmed)
            if isinstance(again, CallVerdict):
                return again
            if binding_of(call.subjects, call.slot, call.name, again.forwarded) != question.binding:
                return await self._changed(again, question)
            in_force = again.decision.confirm
            # An approval is another principal's answer and holds under any rule; the caller's own does not.
            if in_force is not None and in_force.by == "another" and not answer.how.startswith("approval"):
                return await self._now_by_another(again, question, in_force, answer)
            judged = again
        return Judged(
            judged.decision,
            _replace(judged.record, rules=(*judged.record.rules, rule.id), time_ms=record.time_ms, **confirmed),
            judged.checked,
            judged.forwarded,
        )

    async def _continued(self, call: Call, judged: Judged, confirmer: ClientConfirmer) -> Judged | CallVerdict:
        """A round continuing a call a person confirmed: on record with who confirmed it. Refused (recorded)
        when its continuation state does not hold, when the confirmation's lifetime under the [[confirm]]
        rule in force has passed, or when that rule has another principal approve and the caller confirmed."""
        rule = judged.decision.confirm
        rules = judged.record.rules if rule is None else (*judged.record.rules, rule.id)
        try:
            yes = continued_answer(confirmer, rule, now_ms())
        except errors.RpcError as exc:
            await self._record_refusal(
                _replace(judged.record, effect="refuse-confirmation", reason=exc.message, rules=rules)
            )
            raise
        record = _replace(judged.record, **_confirmed_fields(yes))
        if rule is not None and rule.by == "another" and yes.how == "input_required":
            judged = dataclasses.replace(judged, record=record)
            return await self._now_by_another(judged, _question(call, judged, rule), rule, yes)
        return dataclasses.replace(judged, record=_replace(record, rules=rules))

    async def _changed(self, judged: Judged, question: Question) -> CallVerdict:
        """A confirmed call the reloaded policy would forward with other arguments than the person saw."""
        forwarded = orjson.dumps(mask_secrets(judged.forwarded)).decode()
        confirmed = orjson.dumps(mask_secrets(question.arguments)).decode()
        reason = (
            f"Not forwarded: the operator's policy changed while {question.tool} on {question.slot} waited for its "
            f"confirmation, and it now forwards {forwarded}, not the {confirmed} that was confirmed; send the call "
            "again to be asked again"
        )
        rules = (*judged.record.rules, question.rule.id)
        await self._record_refusal(_replace(judged.record, effect="refuse-confirmation", reason=reason, rules=rules))
        return CallVerdict(False, reason=reason, data={"reason": "confirmation_changed"}, effect="refuse-confirmation")

    async def _now_by_another(
        self, judged: Judged, question: Question, rule: ConfirmRule, answer: Answer
    ) -> CallVerdict:
        """A call its caller confirmed through its own client, which the reloaded policy has another principal
        approve: the caller's yes is not the approval the policy in force asks for."""
        refused = callers_answer_refused(question, rule, answer)
        rules = (*judged.record.rules, rule.id)
        await self._record_refusal(
            _replace(judged.record, effect="refuse-confirmation", reason=refused.message, rules=rules)
        )
        return CallVerdict(False, reason=refused.message, data=refused.data, effect="refuse-confirmation")

    def _unknown_tool(
        self, subjects: frozenset[str], slot: str, name: str, arguments: object, via: str, trace_id: str | None
    ) -> DecisionRecord:
        """The record of a call of a tool the slot's provider does not list (a deny no rule made)."""
        if len(name) > MAX_UNKNOWN_NAME:
            name = name[: MAX_UNKNOWN_NAME - 1] + "…"
        quoted = orjson.dumps(name).decode()  # a trailing space or a control character stays visible
        return DecisionRecord(
            principal=sorted(subjects),
            client_id=client_id_of(subjects),
            transport=via,
            slot=slot,
            resource=self.policy.resource_of(slot),
            capability=TOOLS_CALL,
            effect="deny",
            tool=name,
            arguments=arguments,
            reason=f'Unknown tool: {quoted} is not offered by "{slot}" (its provider lists no tool of that '
            "name); call tools/list",
            trace_id=trace_id,
        )

    async def _admit_limits(
        self, record: DecisionRecord, subjects: frozenset[str], hint: bool | None
    ) -> Admission | CallVerdict:
        """Debit every execution limit matching the call, or none: a refusal is recorded and answered
        -32029 (data: reason, ruleId, retryAfterMs) without reaching the device."""
        admitted = self.limits.admit_call(subjects, record.slot, record.tool or "", hint, record.resource)
        if isinstance(admitted, Admission):
            return admitted
        data = admitted.data()
        rule = admitted.rule_id or "execution_limits"
        refused = _replace(
            record, effect="refuse-limit", rules=(*record.rules, rule), reason=admitted.message(), constraints=data
        )
        await self._record_refusal(refused)
        return CallVerdict(
            False, reason=admitted.message(), code=jsonrpc.RATE_LIMITED, data=data, effect="refuse-limit"
        )

    def reload(self) -> str | None:
        if self.source is None:
            return "the policy was given directly, not from [policy]"
        try:
            policy = load_policy(self.source)
        except PolicyError as exc:
            log.error("policy reload failed, the policy in force stays: %s", exc)
            return str(exc)
        warn_of(policy)
        self.swap(policy)
        log.info("policy reloaded (%d reloads)", self.reloads)
        return None

    def status(self) -> dict[str, Any]:
        return {
            "policy": {"reloads": self.reloads, "unapprovable_confirm_rules": self.unapprovable_confirm_rules()},
            "audit": self.trail.status() if self.trail is not None else None,
            "limits": self.limits.status() | {"arguments_not_taken": self.untaken.status()},
            "providers": self.providers.status() if self.providers is not None else None,
        }

    def unapprovable_confirm_rules(self) -> list[str]:
        """The [[confirm]] rules covering the anonymous caller, on a gateway without [auth]: their calls that
        wait for `mcp-gateway approve` are approved by nobody (an anonymous caller approves no anonymous call)."""
        if self.clients_authenticated:
            return []
        document = self.policy.document
        return [
            f"confirm[{index}]" for index, rule in enumerate(document.confirm) if rule.principal in (ANYONE, ANONYMOUS)
        ]

    def bound_approvals(self, limit: int, per_caller: int) -> None:
        """limits.max_pending_approvals(_per_caller): read at the next call that waits for approval."""
        self.confirmations.approvals.limit = limit
        self.confirmations.approvals.per_caller = per_caller

    def approvals(self, principal: Principal | None = None) -> list[dict[str, Any]]:
        """The waiting calls (those `principal` may decide: may_decide), each with `rule_reloaded`: its `rule`
        (confirm[N]) is the index of a policy a reload has replaced with other [[confirm]] rules since, where
        confirm[N] may be another rule or none."""
        approvals = self.confirmations.approvals
        listed = approvals.listed()
        if principal is not None:
            subjects = self.subjects(principal)
            listed = [item for item in listed if self._may_decide(subjects, approvals.get(item["id"]))]
        for item in listed:
            approval = approvals.get(item["id"])
            began_s = approval.deadline_s - (approval.expires_ms - approval.created_ms) / 1000 if approval else 0.0
            item["rule_reloaded"] = began_s <= self._confirms_changed_s
        return listed

    def decide_approval(self, principal: Principal, approval_id: str, approve: bool) -> dict[str, Any]:
        approvals = self.confirmations.approvals
        subjects = self.subjects(principal)
        waiting = approvals.get(approval_id)
        # By stable identity, as sessions go: the same user through another OAuth client or with other
        # groups in its token is still the person whose call it is.
        if waiting is not None and approve and identity_of(subjects) == waiting.caller:
            raise errors.forbidden(
                f"Approval {approval_id} is for a call of yours ({_own_call_who(waiting.caller)}): another person "
                "approves it (a caller never confirms its own device action)",
                {"reason": "own_call", "approval": approval_id},
            )
        if waiting is not None and not self._may_decide(subjects, waiting):
            raise errors.forbidden(
                f"Approval {approval_id} is for a call the operator's policy in force does not let you make: only a "
                "principal that may make a call itself approves or denies it (nor learns its tool and slot)",
                {"reason": "approver_not_permitted", "approval": approval_id},
            )
        if waiting is not None and waiting.state != "pending":
            raise _already_decided(waiting, approvals.monotonic())
        try:
            decided = approvals.decide(approval_id, approve, caller_name(subjects))
        except ApprovalUnknown:
            raise errors.RpcError(
                jsonrpc.INVALID_PARAMS,
                f"No call waits for approval {approval_id!r}: it was never issued, or its call already used it, or "
                "it expired; broker_approvals lists the waiting calls",
                {"reason": "unknown_approval", "approval": approval_id},
            ) from None
        log.info(
            "approval %s %s by %s: %s on %s",
            decided.id,
            decided.state,
            decided.decided_by,
            decided.tool,
            decided.slot,
        )
        return decided.to_json()

    def _may_decide(self, subjects: frozenset[str], approval: Approval | None) -> bool:
        """Whether `subjects` may make the waiting call itself (tools/call of its tool on its slot, as the
        policy in force decides a call): only such a principal approves or denies it."""
        if approval is None:
            return False
        ask = Ask(subjects, approval.slot, "tools/call", approval.tool, approval.hint)
        return self.policy.decide(ask).allowed

    async def recent_decisions(self, limit: int, slot: str | None, tool: str | None) -> list[dict[str, Any]]:
        trail = self.trail
        if trail is None:
            raise errors.RpcError(
                jsonrpc.UNAVAILABLE, "The audit trail is off ([audit] enabled = false)", {"reason": "audit_off"}
            )
        try:
            return await asyncio.to_thread(trail.query, slot=slot, tool=tool, limit=limit)
        except AuditReadError as exc:
            raise errors.RpcError(jsonrpc.UNAVAILABLE, str(exc), {"reason": "audit_unreadable"}) from None

    def call_ended(self, verdict: CallVerdict, outcome: str, latency_ms: float, error: str | None = None) -> None:
        if isinstance(verdict.admission, Admission):
            self.limits.ended(verdict.admission, outcome)  # a cancelled call's places wait for its late answer
        if self.trail is not None and isinstance(verdict.ticket, int):
            self.trail.result(verdict.ticket, outcome, latency_ms, error)

    def answered_after_cancel(self, verdict: CallVerdict, outcome: str, error: str | None = None) -> None:
        if isinstance(verdict.admission, Admission):
            self.limits.release(verdict.admission)  # the device answered: it is done with the call
        if self.trail is not None and isinstance(verdict.ticket, int) and outcome != "input_required":
            self.trail.answered_after_cancel(verdict.ticket, outcome, error)

    async def _record_refusal(self, record: DecisionRecord) -> None:
        """A refused call is recorded too; it is not forwarded, so a trail that cannot take it loses
        only the record (logged), never a device action."""
        if self.trail is None:
            return
        try:
            await self.trail.decision(record)
        except AuditUnavailable as exc:
            self._warn_unrecorded("a refusal of %s on %s was not recorded: %s", record.tool, record.slot, exc)

    def _warn_unrecorded(self, text: str, *args: object) -> None:
        """A call answered or refused without a record while the trail cannot be written: warned of at most
        once per repeat_interval_s, with how many came since (each call would write a line, on the very
        storage that is failing; the trail's own failure is logged apart, once)."""
        since, left_out = self._unrecorded
        now = time.monotonic()
        if now - since < self.repeat_interval_s:
            self._unrecorded = (since, left_out + 1)
            return
        self._unrecorded = (now, 0)
        more = f" ({left_out} more calls without a record since the last line)" if left_out else ""
        log.warning("audit trail: " + text + "%s", *args, more)


def _already_decided(approval: Approval, now_s: float) -> errors.RpcError:
    """The answer to deciding a call another decision came first for (two operators at once, say): whose
    decision holds, and what the caller's retry gets; a decision is final until the call's retry uses it."""
    left_s = max(0, int(approval.deadline_s - now_s))
    then = "forwarded, once" if approval.state == "approved" else "answered as declined"
    return errors.RpcError(
        jsonrpc.INVALID_PARAMS,
        f"Approval {approval.id!r} was already {approval.state} by {approval.decided_by} ({approval.tool} on "
        f"{approval.slot}); its caller's next attempt with the same arguments within {left_s} s is {then}. A "
        "decision is final: nothing changed",
        {
            "reason": "already_decided",
            "approval": approval.id,
            "state": approval.state,
            "decided_by": approval.decided_by,
            "decided_ms": approval.decided_ms,
        },
    )


def _own_call_who(caller: str) -> str:
    """Who the own-call refusal says the caller is: a user whatever client or groups its token names; the
    anonymous caller, which is everyone on a gateway without [auth]; else the identity alone."""
    if caller.startswith("user:"):
        return f"{caller}, whichever client or groups your token names"
    if caller == ANONYMOUS:
        return (
            f"{caller}: every caller is anonymous on a gateway without [auth]; add [auth] with a token for the "
            "approver (docs/governance.md#confirmation-of-device-writes)"
        )
    return caller


def warn_of(policy: Policy) -> None:
    """Log what the policy holds that loads but is likely not what its author meant."""
    for warning in policy.document.warnings:
        log.warning("policy: %s", warning)


def _uncounted(limit: str) -> None:
    pass


def _unannounced() -> None:
    pass


def _question(call: Call, judged: Judged, rule: ConfirmRule) -> Question:
    """What a person is asked about `call`, as `judged` would forward it under `rule`."""
    return Question(
        call.subjects,
        caller_name(call.subjects),
        call.slot,
        judged.decision.resource,
        call.name,
        judged.forwarded,
        rule,
        call.arguments,
        call.hint,
    )


def _replace(record: DecisionRecord, **changes: Any) -> DecisionRecord:
    return dataclasses.replace(record, **changes)


def _confirmed_fields(answer: Answer) -> dict[str, Any]:
    """The record's fields of a person's answer."""
    return {"confirmed_by": answer.by, "confirmed_ms": answer.at_ms}


def governor_from_config(config: GatewayConfig, environ: Mapping[str, str] | None = None) -> Governor | None:
    """The Governor [policy] and [audit] describe; None without [policy] (nothing is governed).

    Raises ConfigError when the policy cannot be loaded (every mistake listed)."""
    if config.policy is None:
        return None
    try:
        policy = load_policy(config.policy)
        warn_of(policy)
    except PolicyError as exc:
        raise ConfigError(f"[policy]: {exc}") from exc
    repeats = config.logging.repeat_interval_s
    trail = AuditTrail.open(config.audit, environ=environ, repeat_interval_s=repeats) if config.audit.enabled else None
    limits = config.limits
    schemas = SchemaCache(
        max_pattern_ms=limits.max_pattern_ms,
        max_compile_ms=limits.max_schema_compile_ms,
        max_compiles_waiting=limits.max_schema_compiles_waiting,
        max_code_bytes=limits.max_schema_code_bytes,
    )
    governor = Governor(policy, trail, schemas, source=config.policy)
    governor.repeat_interval_s = repeats
    governor.limits.bound(
        limits.cancelled_call_hold_s, limits.max_budget_reservations, limits.max_budget_reservations_per_caller
    )
    governor.clients_authenticated = config.auth_configured  # turning [auth] on or off needs a restart
    governor.bound_approvals(limits.max_pending_approvals, limits.max_pending_approvals_per_caller)
    governor.confirmations.bound_used(limits.max_used_confirmations, limits.max_used_confirmations_per_caller)
    # Late bound: the composition root sets governor.limit_hit after this.
    governor.confirmations.limit_hit = lambda limit: governor.limit_hit(limit)  # noqa: PLW0108
    return governor
