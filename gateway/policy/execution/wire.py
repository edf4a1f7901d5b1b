"""broker/budget/reserve and broker/budget/settle on the wire: a provider's JSON params checked and
answered from the budget ledger, or an RpcError (-32602 naming the malformed field, -32029 for a
refusal). The provider link calls these with the provider's own slot, which the link authenticated.

reserve params: {principal: {type: "caller-ref", ref}, capability, resource?, resourcePath?, unit,
quantity, idempotencyKey}; result: {reservationId, decisionId, quantity, expiresAt, replayed}. The
capability, unit and resourcePath must be among what the provider's live declaration lists (Declared).
settle params: {reservationId, used, result}; result: {settled: true, reservationId, replayed}.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from gateway.core import jsonrpc
from gateway.core.errors import RpcError
from gateway.policy.execution.ledger import SETTLE_RESULTS, BudgetLedger
from gateway.policy.execution.refusals import UNDECLARED_CAPABILITY, UNDECLARED_RESOURCE, UNDECLARED_UNIT, LimitRefusal
from gateway.policy.rules.execution_checks import UNIT
from gateway.policy.rules.paths import PatternError, check_path

CALLER_REF = "caller-ref"
IDEMPOTENCY_KEY = re.compile(r"[A-Za-z0-9._:-]{1,128}")
CAPABILITY = re.compile(r"[A-Za-z0-9._:-]{1,128}")
"""The shape of a reservation's capability ("network.active"); budget rules match it exactly."""
MAX_QUANTITY = 2**53 - 1
"""The largest whole number JSON carries exactly everywhere."""
MAX_TEXT = 1024
"""The longest caller reference or reservation id taken."""


class CallerOfRef(NamedTuple):
    """Who a caller reference stands for: its subjects, the slot its call went to, that slot's resource."""

    subjects: frozenset[str]
    slot: str
    resource: str
    correlation_id: str = ""
    """The forwarded call's correlationId, named in the ledger's log lines."""


class Declared(NamedTuple):
    """What the reserving provider's live declaration lists: a reservation stays inside it."""

    capabilities: frozenset[str]
    units: frozenset[str]
    namespace: str


ResolveCallerRef = Callable[[str], CallerOfRef | tuple[frozenset[str], str, str] | None]
"""A live caller reference -> its caller; None when the reference is unknown or expired."""


def reserve_budget(
    params: object,
    provider_slot: str,
    resolve: ResolveCallerRef,
    ledger: BudgetLedger,
    declared: Declared | None = None,
) -> dict[str, Any]:
    """Answer broker/budget/reserve from the provider on `provider_slot`, whose live declaration is
    `declared`: the grant, or RpcError."""
    body = _object(params)
    ref = _caller_ref(body.get("principal"))
    capability = _text(body, "capability", CAPABILITY, 'a capability name such as "network.active"')
    unit = _text(body, "unit", UNIT, 'a lowercase unit name such as "network-operation"')
    quantity = _whole(body, "quantity", minimum=1)
    key = _text(body, "idempotencyKey", IDEMPOTENCY_KEY, 'letters, digits, ".", "_", ":" and "-", at most 128')
    resolved = resolve(ref)
    caller = CallerOfRef(*resolved) if resolved is not None else None
    if caller is None or caller.slot != provider_slot:
        # The same answer for a reference of another slot: a provider cannot probe other slots' callers.
        raise _invalid("principal.ref", "is not a live caller reference of a call to this slot")
    _namespace(body.get("resource"), caller)
    given = body.get("resourcePath")
    path = _resource_path(given, caller)
    if declared is not None:
        undeclared = _undeclared(declared, capability, unit, path if given is not None else None)
        if undeclared is not None:
            raise refusal_error(ledger.refuse(undeclared, caller.subjects, provider_slot, capability, path))
    answer = ledger.reserve(
        subjects=frozenset(caller.subjects),
        slot=provider_slot,
        caller_ref=ref,
        capability=capability,
        resource_path=path,
        unit=unit,
        quantity=quantity,
        idempotency_key=key,
        correlation_id=caller.correlation_id,
    )
    if isinstance(answer, LimitRefusal):
        raise refusal_error(answer)
    return answer.to_json()


def _undeclared(declared: Declared, capability: str, unit: str, path: str | None) -> LimitRefusal | None:
    """Why a reservation is outside the provider's declaration (broker/authorize's reason names), or None.
    `path`: the resourcePath the provider gave (None: the slot's own resource path, its by default)."""
    if capability not in declared.capabilities:
        listed = ", ".join(sorted(declared.capabilities))
        text = f'Capability "{capability}" is not among this provider\'s declared capabilities ({listed})'
        return LimitRefusal(UNDECLARED_CAPABILITY, text)
    if unit not in declared.units:
        listed = ", ".join(sorted(declared.units)) or "none"
        return LimitRefusal(
            UNDECLARED_UNIT, f'Unit "{unit}" is not among this provider\'s declared budgetUnits ({listed})'
        )
    root = declared.namespace.rstrip("/")
    if path is not None and path != declared.namespace and not path.startswith(root + "/"):
        text = f'resourcePath "{path}" is outside this provider\'s declared namespace "{declared.namespace}"'
        return LimitRefusal(UNDECLARED_RESOURCE, text)
    return None


def settle_budget(params: object, provider_slot: str, ledger: BudgetLedger) -> dict[str, Any]:
    """Answer broker/budget/settle from the provider on `provider_slot`, or RpcError."""
    body = _object(params)
    reservation = body.get("reservationId")
    if not isinstance(reservation, str) or not 0 < len(reservation) <= MAX_TEXT:
        raise _invalid("reservationId", "must be the reservationId of a grant")
    used = _whole(body, "used", minimum=0)
    result = body.get("result")
    if result not in SETTLE_RESULTS:
        raise _invalid("result", f"must be one of {', '.join(SETTLE_RESULTS)}")
    answer = ledger.settle(reservation, provider_slot, used, str(result))
    if isinstance(answer, LimitRefusal):
        raise refusal_error(answer)
    return answer.to_json()


def refusal_error(refusal: LimitRefusal) -> RpcError:
    """-32029 with data {reason, ruleId, retryAfterMs, kind} as far as each applies."""
    return RpcError(jsonrpc.RATE_LIMITED, refusal.message(), refusal.data())


def _invalid(field: str, problem: str) -> RpcError:
    return RpcError(jsonrpc.INVALID_PARAMS, f"Invalid params: {field} {problem}", {"field": field})


def _object(params: object) -> Mapping[str, Any]:
    if not isinstance(params, Mapping):
        raise _invalid("params", "must be an object")
    return params


def _caller_ref(principal: object) -> str:
    if not isinstance(principal, Mapping):
        raise _invalid("principal", f'must be an object {{"type": "{CALLER_REF}", "ref": ...}}')
    if principal.get("type") != CALLER_REF:
        raise _invalid("principal.type", f'must be "{CALLER_REF}" (reservations are made for a caller)')
    ref = principal.get("ref")
    if not isinstance(ref, str) or not 0 < len(ref) <= MAX_TEXT:
        raise _invalid("principal.ref", "must be the caller reference the gateway sent with the call")
    return ref


def _text(body: Mapping[str, Any], field: str, shape: re.Pattern[str], words: str) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not shape.fullmatch(value):
        raise _invalid(field, f"must be {words}")
    return value


def _whole(body: Mapping[str, Any], field: str, *, minimum: int) -> int:
    value = body.get(field)
    # bool is an int to Python, never to the wire; 2.0 is taken as 2, as JSON does not tell them apart.
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_QUANTITY:
        raise _invalid(field, f"must be a whole number from {minimum} to {MAX_QUANTITY}")
    return value


def _namespace(resource: object, caller: CallerOfRef) -> None:
    """`resource`, when given, names the caller's slot or its resource path, nothing else."""
    if resource is not None and resource not in (caller.slot, caller.resource):
        raise _invalid("resource", f'must be the call\'s slot "{caller.slot}" or its resource "{caller.resource}"')


def _resource_path(path: object, caller: CallerOfRef) -> str:
    """The path budget rules match: the slot's resource (the default), or a path below it (never another part
    of the plant)."""
    if path is None:
        return caller.resource
    if not isinstance(path, str):
        raise _invalid("resourcePath", "must be a resource path string")
    try:
        check_path(path)
    except PatternError as exc:
        raise _invalid("resourcePath", f"is not a resource path: {exc}") from exc
    root = caller.resource.rstrip("/")
    if path != caller.resource and not path.startswith(root + "/"):
        raise _invalid("resourcePath", f'must be the slot\'s resource "{caller.resource}" or a path below it')
    return path
