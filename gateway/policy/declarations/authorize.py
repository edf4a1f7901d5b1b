"""`broker/authorize`: the request read strictly (a malformed one is refused whole, -32602), and each
check decided: the declared capability on the declared resource path, by [policy], with the declared
limits intersected with the operator's [[declared_limits]]."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gateway.policy.declarations.limits import ResourceLimits, intersect
from gateway.policy.declarations.validation import Declaration
from gateway.policy.declarations.wire import (
    CORRELATION_ID,
    EMPTY_LIMITS,
    REF,
    TRACE_ID,
    UNDECLARED_CAPABILITY,
    UNDECLARED_RESOURCE,
    invalid,
    provider_path,
    within,
)
from gateway.policy.rules.compiled import Rules
from gateway.policy.rules.declared import OperatorLimit, decide_declared

REQUEST_KEYS = ("principal", "correlationId", "traceId", "checks")
CHECK_KEYS = ("capability", "resource", "resourcePath", "attributes")
Effect = Literal["allow", "deny", "allow-with-constraints"]


@dataclass(frozen=True)
class Check:
    capability: str
    resource: str
    """The provider's own identifier, recorded; only `resource_path` is evaluated."""
    resource_path: object
    attributes: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class AuthorizeRequest:
    ref: str | None
    """The caller reference; None when the provider asks for its own work (`{"type": "provider"}`)."""
    correlation_id: str | None
    trace_id: str | None
    checks: tuple[Check, ...]


def parse_authorize(params: object, max_checks: int) -> AuthorizeRequest:
    """The request, or RpcError -32602 saying what is wrong with it."""
    if not isinstance(params, Mapping):
        raise invalid("params must be an object")
    for key in params:
        if key not in REQUEST_KEYS and key != "_meta":
            raise invalid(f'unknown key "{key}" (keys: {", ".join(REQUEST_KEYS)})')
    ref = _principal(params.get("principal"))
    correlation = params.get("correlationId")
    trace = params.get("traceId")
    checks = params.get("checks")
    if not isinstance(checks, list) or not checks:
        raise invalid("checks must be a non-empty array")
    if len(checks) > max_checks:
        raise invalid(f"checks: at most {max_checks} per request; split the batch", {"limit": max_checks})
    return AuthorizeRequest(
        ref,
        correlation if ref is None and isinstance(correlation, str) and CORRELATION_ID.fullmatch(correlation) else None,
        trace if ref is None and isinstance(trace, str) and TRACE_ID.fullmatch(trace) and set(trace) != {"0"} else None,
        tuple(_check(index, raw) for index, raw in enumerate(checks)),
    )


def _principal(value: object) -> str | None:
    if not isinstance(value, Mapping):
        raise invalid('principal must be {"type": "caller-ref", "ref": "..."} or {"type": "provider"}')
    kind = value.get("type")
    if kind == "caller-ref":
        if any(key not in ("type", "ref") for key in value):
            raise invalid(
                'principal of type "caller-ref" carries only "ref": an identity is never accepted here, the gateway '
                "resolves the reference to the caller it authenticated"
            )
        ref = value.get("ref")
        if not isinstance(ref, str) or not REF.fullmatch(ref):
            raise invalid("principal.ref is not a caller reference issued by this gateway")
        return ref
    if kind == "provider":
        if any(key != "type" for key in value):
            raise invalid('principal of type "provider" carries nothing else')
        return None
    raise invalid('principal.type must be "caller-ref" or "provider"')


def _check(index: int, raw: object) -> Check:
    if not isinstance(raw, Mapping):
        raise invalid(f"checks[{index}] must be an object")
    for key in raw:
        if key not in CHECK_KEYS:
            raise invalid(f'checks[{index}]: unknown key "{key}" (keys: {", ".join(CHECK_KEYS)})')
    capability, resource, attributes = raw.get("capability"), raw.get("resource"), raw.get("attributes")
    if not isinstance(capability, str) or not capability:
        raise invalid(f"checks[{index}].capability must be a non-empty string")
    if not isinstance(resource, str) or not resource:
        raise invalid(f"checks[{index}].resource must be a non-empty string")
    if attributes is not None and not isinstance(attributes, Mapping):
        raise invalid(f"checks[{index}].attributes must be an object")
    return Check(capability, resource, raw.get("resourcePath"), attributes)


@dataclass(frozen=True)
class Outcome:
    effect: Effect
    reason: str
    """mcp-broker's reason code: role-grant, explicit-deny, no-matching-grant, undeclared-capability, ..."""
    rules: tuple[str, ...] = ()
    path: str | None = None
    """The resource path evaluated (None: the check named none that is valid)."""
    constraints: ResourceLimits | None = None


def decide_check(
    check: Check,
    declaration: Declaration,
    rules: Rules,
    operator: Sequence[OperatorLimit],
    subjects: frozenset[str],
    max_length: int,
) -> Outcome:
    """One check: the capability must be declared, the path inside the namespace (the resource's own path
    when the resource is declared, and the identifier declared for the path when the path is), the policy
    must grant it, and the limits must leave something."""
    if check.capability not in declaration.capabilities:
        return Outcome("deny", UNDECLARED_CAPABILITY)
    path = provider_path(check.resource_path, "resourcePath", max_length)
    if not isinstance(path, str) or not within(declaration.namespace, path):
        return Outcome("deny", UNDECLARED_RESOURCE, path=path if isinstance(path, str) else None)
    named = declaration.resources.get(check.resource)
    if named is not None and named.path != path:
        # The same resource under another path would escape the limits declared for it.
        return Outcome("deny", UNDECLARED_RESOURCE, path=path)
    declared = declaration.paths.get(path)
    if declared is not None and declared.resource != check.resource:
        # The declared path under another identifier would escape them too: the limits follow the path.
        return Outcome("deny", UNDECLARED_RESOURCE, path=path)
    verdict = decide_declared(rules, subjects, check.capability, path)
    if not verdict.allowed:
        return Outcome("deny", verdict.reason, verdict.rules, path)
    applying = [limit for limit in operator if limit.applies(check.capability, path)]
    parts = [limit.limits for limit in applying]
    if declared is not None and declared.limits is not None:
        parts.insert(0, declared.limits)
    limits, empty = intersect(parts)
    policies = verdict.rules + tuple(limit.id for limit in applying)
    if empty:
        return Outcome("deny", EMPTY_LIMITS, policies, path, limits)
    if limits is None:
        return Outcome("allow", verdict.reason, policies, path)
    return Outcome("allow-with-constraints", verdict.reason, policies, path, limits)


def decision_wire(decision_id: str, outcome: Outcome) -> dict[str, Any]:
    """One entry of the answer's `decisions`: `allowed` is true only for an unconditional allow, so a
    provider reading only it refuses a constrained allow rather than overstepping its constraints."""
    answer: dict[str, Any] = {
        "decisionId": decision_id,
        "effect": outcome.effect,
        "allowed": outcome.effect == "allow",
        "reason": outcome.reason,
    }
    if outcome.rules:
        answer["policies"] = list(outcome.rules)
    if outcome.effect == "allow-with-constraints" and outcome.constraints is not None:
        answer["obligations"] = {"constraints": outcome.constraints.wire()}
    return answer
