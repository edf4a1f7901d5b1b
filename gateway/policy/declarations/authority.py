"""The gateway as the decision point of providers that declare their own authorization domain:
implements gateway.core.policy_interface.ProviderGovernance over the Governor's policy and audit trail
(docs/governance-providers.md).

It holds, in memory and bounded: the declarations (one per provider identity, one owner per domain),
the caller references handed out with forwarded requests, and the decisions waiting for their
`broker/audit/result`. Every decision is recorded in the audit trail before it is answered.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import orjson

from gateway.config.declarations import DeclarationsConfig
from gateway.core import errors, jsonrpc
from gateway.core.policy_interface import CallerReference, ProviderOrigin
from gateway.core.principal import Principal
from gateway.core.repeats import RepeatCounter
from gateway.policy.audit.errors import AuditUnavailable
from gateway.policy.audit.records import DecisionRecord, now_ms
from gateway.policy.audit.trail import AuditTrail
from gateway.policy.declarations.authorize import Check, Outcome, decide_check, decision_wire, parse_authorize
from gateway.policy.declarations.caller_refs import CallerRefs
from gateway.policy.declarations.registry import DeclarationRegistry
from gateway.policy.declarations.results import DecisionTracker, Tracked
from gateway.policy.declarations.validation import Declaration, DeclareContext, check_declaration, describe, listed
from gateway.policy.declarations.wire import (
    AUDIT_RESULT,
    AUDIT_UNAVAILABLE,
    AUTHORIZE,
    BUDGET_RESERVE,
    BUDGET_SETTLE,
    DECLARE,
    MAX_REPORT_TEXT,
    NO_DECLARATION,
    RESULTS,
    invalid,
    new_id,
)
from gateway.policy.execution.ledger import BudgetLedger
from gateway.policy.execution.wire import CallerOfRef, Declared, reserve_budget, settle_budget
from gateway.policy.governor import Governor, client_id_of
from gateway.policy.rules import Policy
from gateway.policy.rules.declared import OperatorLimit, compile_declared_limits
from gateway.telemetry.trace_context import trace_id_of

log = logging.getLogger("gateway.policy.declarations")

PROVIDER_SUBJECT = "provider:"
"""`{"type": "provider"}` asks as the provider itself: the subject `provider:<identity>`."""
MAX_WARNED_SLOTS = 1024
DEFAULT_REPEAT_INTERVAL_S = 60.0
"""logging.repeat_interval_s when the policy source carries none: a slot's refused declarations are
logged once per this, the ones between counted in the next line."""


class PolicySource(Protocol):
    """What is read of the Governor: the policy in force, its audit trail, its reloads, callers' subjects."""

    policy: Policy
    trail: AuditTrail | None
    reloads: int

    def subjects(self, principal: Principal) -> frozenset[str]: ...


class ProviderAuthority:
    def __init__(
        self,
        source: PolicySource,
        bounds: DeclarationsConfig,
        clock: Callable[[], float] = time.monotonic,
        ledger: BudgetLedger | None = None,
    ) -> None:
        self.source = source
        self.bounds = bounds
        self.ledger = ledger
        """The budget ledger of [[execution_limits]] (broker/budget/*); None: those methods are -32601."""
        self.registry = DeclarationRegistry(bounds.max_declarations)
        self.refs = CallerRefs(bounds.max_caller_refs, bounds.caller_ref_grace_s, clock)
        self.decisions = DecisionTracker(
            bounds.max_tracked_decisions, bounds.decision_retention_s, bounds.result_timeout_s, clock
        )
        self.checks_decided = 0
        self._operator: tuple[Policy | None, tuple[OperatorLimit, ...]] = (None, ())
        self._warned: set[str] = set()
        self._refusals_logged = RepeatCounter(DEFAULT_REPEAT_INTERVAL_S, clock, MAX_WARNED_SLOTS)
        """Per slot: its refused declarations logged once per logging.repeat_interval_s."""

    @property
    def policy_version(self) -> str:
        """Stamped on every answer: the policy's reloads, then the declarations accepted since start."""
        return f"{self.source.reloads}.{self.registry.accepted}"

    # -- ProviderGovernance ---------------------------------------------------------------------

    async def provider_request(
        self, origin: ProviderOrigin, method: str, params: dict[str, Any] | None
    ) -> dict[str, Any]:
        if method == DECLARE:
            return self.declare(origin, params)
        if method == AUTHORIZE:
            return await self.authorize(origin, params)
        if method in (BUDGET_RESERVE, BUDGET_SETTLE) and self.ledger is not None:
            return self.budget(origin, method, params)
        raise errors.RpcError(
            jsonrpc.METHOD_NOT_FOUND,
            f"Method not found: the gateway does not serve {method} to providers (docs/governance-providers.md)",
        )

    def provider_notification(self, origin: ProviderOrigin, method: str, params: dict[str, Any] | None) -> None:
        if method == AUDIT_RESULT:
            self.record_result(origin, params)

    def caller_reference(
        self, origin: ProviderOrigin, principal: Principal, meta: Mapping[str, Any] | None
    ) -> CallerReference | None:
        declaration = self.registry.live(origin.slot, origin.link)
        if declaration is None:
            return None
        trace = trace_id_of(meta) or secrets.token_hex(16)
        correlation = new_id("corr_", 9)
        subjects = self.source.subjects(principal)
        ref = self.refs.issue(origin.slot, declaration.identity, origin.link, subjects, correlation, trace)
        return CallerReference(ref, {"ref": ref, "correlationId": correlation, "traceId": trace})

    def caller_done(self, reference: CallerReference) -> None:
        self.refs.end(reference.ref)

    def provider_gone(self, origin: ProviderOrigin) -> None:
        self.registry.unbind(origin.slot, origin.link)
        self.refs.drop_link(origin.link)

    def status(self) -> dict[str, Any]:
        registry = self.registry
        return {
            "policyVersion": self.policy_version,
            "declarations": [
                {**describe(declaration), "live_on": registry.live_slots(identity)}
                for identity, declaration in sorted(registry.declarations.items())
            ],
            "domains": dict(sorted(registry.owners.items())),
            "accepted": registry.accepted,
            "refused": registry.refused,
            "checks_decided": self.checks_decided,
            "caller_refs": {"held": len(self.refs), "issued": self.refs.issued, "evicted": self.refs.evicted},
            "results": self.decisions.status(),
        }

    # -- broker/authorization/declare -----------------------------------------------------------

    def declare(self, origin: ProviderOrigin, params: dict[str, Any] | None) -> dict[str, Any]:
        registry = self.registry
        context = DeclareContext(
            identity=origin.identity,
            slot=origin.slot,
            slot_path=self.source.policy.resource_of(origin.slot),
            owner_of=registry.owner_of,
            room=registry.has_room(origin.identity),
            bounds=self.bounds,
            transport=origin.transport,
        )
        checked = check_declaration(params, context)
        if isinstance(checked, list):
            registry.refused += 1
            shown = listed(checked)
            self._log_refusal(origin, len(checked), shown)
            if registry.live(origin.slot, origin.link) is not None:
                after = "Nothing changed; the declaration live on this connection stays in force."
            else:
                # After a reconnect the identity may still hold one, but nothing is live on this link.
                after = (
                    "Nothing changed; no declaration is live on this connection, so broker/authorize is refused "
                    "until one is accepted."
                )
            raise invalid(f"Declaration refused: {len(checked)} problem(s). {after}", {"errors": shown})
        version = f"{self.source.reloads}.{registry.accepted + 1}"
        declaration = dataclasses.replace(checked, policy_version=version, accepted_ms=now_ms())
        registry.accept(declaration, origin.link)
        log.info(
            "declaration accepted from slot %s: identity %s, domain %s, %d capabilities, %d resources",
            origin.slot,
            declaration.identity,
            declaration.domain,
            len(declaration.capabilities),
            len(declaration.resources),
            extra={"slot": origin.slot},
        )
        return {"accepted": True, "version": declaration.version, "policyVersion": version}

    def _log_refusal(self, origin: ProviderOrigin, count: int, shown: list[str]) -> None:
        """One line per slot per logging.repeat_interval_s, with the listed problems only: a provider
        re-sending a bad declaration must not fill the log."""
        repeats = self._refusals_logged
        repeats.repeat_interval_s = float(getattr(self.source, "repeat_interval_s", DEFAULT_REPEAT_INTERVAL_S))
        admitted = repeats.admit(origin.slot)
        if admitted is None:
            return
        left_out = admitted[0]
        since = f" ({left_out} more refused from this slot since the last line)" if left_out else ""
        log.warning(
            "declaration from slot %s (identity %s) refused: %d problem(s): %s%s",
            origin.slot,
            origin.identity or "none",
            count,
            "; ".join(shown),
            since,
            extra={"slot": origin.slot},
        )

    # -- broker/authorize -----------------------------------------------------------------------

    async def authorize(self, origin: ProviderOrigin, params: dict[str, Any] | None) -> dict[str, Any]:
        declaration = self.registry.live(origin.slot, origin.link)
        if declaration is None:
            raise errors.RpcError(
                NO_DECLARATION,
                "No accepted authorization declaration for this provider on this slot: send "
                f"{DECLARE} first (on this connection).",
            )
        request = parse_authorize(params, self.bounds.authorize_max_checks)
        trace: str | None
        if request.ref is not None:
            caller = self.refs.resolve(request.ref, origin.slot, origin.identity, origin.link)
            if caller is None:
                raise invalid(
                    "principal.ref is unknown, expired, or was issued for another slot or provider. A reference is "
                    "valid only on the slot and connection it came with, while the request it came with is pending "
                    f"and for {self.bounds.caller_ref_grace_s:g} s after."
                )
            subjects, correlation, trace, behalf = caller.subjects, caller.correlation_id, caller.trace_id, "caller"
        else:
            subjects = frozenset({PROVIDER_SUBJECT + declaration.identity})
            correlation = request.correlation_id or new_id("corr_", 9)
            trace, behalf = request.trace_id, "provider"
        policy = self.source.policy
        operator = self._operator_limits(policy)
        length = self.bounds.max_identifier_length
        outcomes = [
            decide_check(check, declaration, policy.rules, operator, subjects, length) for check in request.checks
        ]
        ids = [new_id("dec_", 12) for _ in outcomes]
        records = [
            self._record(origin, declaration, check, outcome, decision_id, subjects, correlation, trace, behalf)
            for check, outcome, decision_id in zip(request.checks, outcomes, ids, strict=True)
        ]
        written = await self._write(records)
        answers = []
        for check, decided, decision_id, row in zip(request.checks, outcomes, ids, written, strict=True):
            outcome = decided
            if row is AUDIT_UNAVAILABLE and decided.effect != "deny":
                # Not recorded, so not allowed: the same rule as a governed tools/call.
                outcome = Outcome("deny", AUDIT_UNAVAILABLE, decided.rules, decided.path)
            awaited = outcome.effect != "deny" and check.capability in declaration.results_required
            self.decisions.track(
                Tracked(
                    decision_id,
                    row if isinstance(row, int) else None,
                    declaration.identity,
                    origin.slot,
                    check.capability,
                    outcome.path or "",
                    correlation,
                    awaited,
                    self.decisions.clock(),
                )
            )
            answers.append(decision_wire(decision_id, outcome))
        self.checks_decided += len(answers)
        return {"policyVersion": self.policy_version, "decisions": answers}

    def _operator_limits(self, policy: Policy) -> tuple[OperatorLimit, ...]:
        """[[declared_limits]] of `policy`, compiled once per policy (a reload brings a new one)."""
        compiled_for, limits = self._operator
        if compiled_for is not policy:
            limits = compile_declared_limits(policy.document)
            self._operator = (policy, limits)
        return limits

    @staticmethod
    def _record(
        origin: ProviderOrigin,
        declaration: Declaration,
        check: Check,
        outcome: Outcome,
        decision_id: str,
        subjects: frozenset[str],
        correlation: str,
        trace: str | None,
        behalf: str,
    ) -> DecisionRecord:
        path = check.resource_path
        details: dict[str, Any] = {
            "decisionId": decision_id,
            "resource": check.resource,
            "correlationId": correlation,
            "onBehalfOf": behalf,
            "provider": declaration.identity,
        }
        if check.attributes is not None:
            details["attributes"] = dict(check.attributes)  # secret-looking keys are masked when stored
        return DecisionRecord(
            principal=sorted(subjects),
            client_id=client_id_of(subjects),
            transport=AUTHORIZE,
            slot=origin.slot,
            resource=outcome.path or (path[:256] if isinstance(path, str) else ""),
            capability=check.capability,
            effect=outcome.effect,
            arguments=details,
            rules=outcome.rules,
            constraints=outcome.constraints.wire() if outcome.constraints is not None else None,
            reason=outcome.reason,
            trace_id=trace,
        )

    async def _write(self, records: list[DecisionRecord]) -> list[int | str | None]:
        """Each record's row in the trail (written together: one commit), AUDIT_UNAVAILABLE for one the
        trail could not take, None when [audit] is off."""
        trail = self.source.trail
        if trail is None:
            return [None] * len(records)
        written = await asyncio.gather(*(trail.decision(record) for record in records), return_exceptions=True)
        rows: list[int | str | None] = []
        for row in written:
            if isinstance(row, AuditUnavailable):
                rows.append(AUDIT_UNAVAILABLE)
            elif isinstance(row, BaseException):
                raise row
            else:
                rows.append(row)
        return rows

    # -- broker/budget/reserve, broker/budget/settle --------------------------------------------

    def budget(self, origin: ProviderOrigin, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        """Budget reservations (gateway/policy/execution/wire.py), for the caller of a reference this
        connection's live declaration was handed (resolved as broker/authorize resolves it), inside that
        declaration's capabilities, budgetUnits and namespace. A settlement
        needs only the slot that reserved, after a reconnect too."""
        assert self.ledger is not None
        if method == BUDGET_SETTLE:
            return settle_budget(params, origin.slot, self.ledger)
        declaration = self.registry.live(origin.slot, origin.link)
        if declaration is None:
            raise errors.RpcError(
                NO_DECLARATION,
                f"No accepted authorization declaration for this provider on this slot: send {DECLARE} first "
                "(on this connection).",
            )
        policy = self.source.policy

        def resolve(ref: str) -> CallerOfRef | None:
            caller = self.refs.resolve(ref, origin.slot, origin.identity, origin.link)
            if caller is None:
                return None
            return CallerOfRef(caller.subjects, caller.slot, policy.resource_of(caller.slot), caller.correlation_id)

        declared = Declared(declaration.capabilities, frozenset(declaration.budget_units), declaration.namespace)
        return reserve_budget(params, origin.slot, resolve, self.ledger, declared)

    # -- broker/audit/result --------------------------------------------------------------------

    def record_result(self, origin: ProviderOrigin, params: dict[str, Any] | None) -> None:
        """What the provider says happened after a decision, recorded next to it. A notification gets no
        answer: a malformed or unmatched report is counted, and logged once per slot."""
        problem = _report_problem(params)
        tracked = None
        if problem is None:
            assert params is not None
            tracked = self.decisions.take(params.get("decisionId"), origin.identity)
            if tracked is None:
                problem = "decisionId names no decision this gateway still holds for this provider"
        else:
            self.decisions.unmatched += 1
        if tracked is None:
            self._warn_once(origin.slot, problem or "unmatched")
            return
        assert params is not None
        trail = self.source.trail
        if trail is not None and tracked.record_id is not None:
            native = {key: params[key] for key in ("nativeStatus", "errorCode") if key in params}
            error = orjson.dumps(native).decode() if native else None
            trail.result(tracked.record_id, str(params["result"]), self.decisions.age_ms(tracked), error)

    def _warn_once(self, slot: str, problem: str) -> None:
        if slot in self._warned:
            return
        if len(self._warned) >= MAX_WARNED_SLOTS:
            self._warned.clear()
        self._warned.add(slot)
        log.warning(
            "%s from slot %s ignored: %s; further ones from this slot are counted, not logged",
            AUDIT_RESULT,
            slot,
            problem,
            extra={"slot": slot},
        )


def _report_problem(params: dict[str, Any] | None) -> str | None:
    if not isinstance(params, dict):
        return "params must be an object"
    for key in params:
        if key not in ("decisionId", "result", "nativeStatus", "errorCode", "_meta"):
            return f'unknown key "{key}"'
    if not isinstance(params.get("decisionId"), str):
        return "decisionId must be the string the gateway returned"
    if params.get("result") not in RESULTS:
        return f"result must be one of {', '.join(RESULTS)}"
    for key in ("nativeStatus", "errorCode"):
        value = params.get(key)
        if value is not None and (not isinstance(value, str) or not 0 < len(value) <= MAX_REPORT_TEXT):
            return f"{key} must be a non-empty string of at most {MAX_REPORT_TEXT} characters"
    return None


def provider_authority(governor: Governor | None, bounds: DeclarationsConfig) -> ProviderAuthority | None:
    """The authority over providers' declarations of a governed gateway (None without [policy]); the
    Governor shows its state in status() (broker_diagnose)."""
    if governor is None:
        return None
    authority = ProviderAuthority(governor, bounds, ledger=governor.limits.budget)
    governor.providers = authority
    return authority
