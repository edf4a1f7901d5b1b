"""Providers' governance on mcp-broker's wire (gateway/policy/declarations/, gateway/core/provider_broker.py):
the declaration check, domain ownership, caller references, the intersection of limits, the authorize
cap, decisions and results, without a network."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.config.declarations import DeclarationsConfig
from gateway.core import errors
from gateway.core.link import LinkInfo
from gateway.core.policy_interface import ProviderOrigin
from gateway.core.principal import Principal
from gateway.core.provider_broker import CALLER_META_KEY, ProviderBroker, strip_caller
from gateway.policy.audit.trail import AuditTrail
from gateway.policy.declarations.authority import ProviderAuthority
from gateway.policy.declarations.authorize import parse_authorize
from gateway.policy.declarations.caller_refs import CallerRefs
from gateway.policy.declarations.limits import ResourceLimits, intersect
from gateway.policy.declarations.registry import DeclarationRegistry
from gateway.policy.declarations.validation import DeclareContext, check_declaration
from gateway.policy.execution.admission import ExecutionLimits
from gateway.policy.rules import Policy, PolicyError, subjects_of
from gateway.policy.rules.capabilities import capability_error
from gateway.policy.rules.checking import check_policy

DECLARATION: dict[str, Any] = {
    "version": "2",
    "domain": "scada",
    "namespace": {"resource": "/plant/scada"},
    "capabilities": ["scada.read", "scada.write"],
    "resources": [
        {"resource": "uns://v3", "resourcePath": "/plant/scada/v3", "limits": {"minValue": 0, "maxValue": 100}},
        {
            "resource": "uns://mode",
            "resourcePath": "/plant/scada/mode",
            "limits": {"allowedValues": ["auto", "manual"]},
        },
    ],
    "resultsRequired": ["scada.write"],
    "budgetUnits": ["write"],
}
POLICY: dict[str, Any] = {
    "roles": {"writer": {"capabilities": ["scada.write", "scada.read"]}, "reader": {"capabilities": ["scada.read"]}},
    "assign": [
        {"principal": "token:op", "role": "writer", "resources": ["/plant/**"]},
        {"principal": "token:guest", "role": "reader", "resources": ["/plant/**"]},
        {"principal": "provider:scada-main", "role": "reader", "resources": ["/plant/scada/**"]},
    ],
    "deny": [{"principal": "token:op", "capabilities": ["scada.write"], "resources": ["/plant/scada/locked"]}],
    "resources": {"scada": "/plant/scada"},
    "declared_limits": [
        {"resources": ["/plant/scada/v*"], "capability": "scada.write", "max": 80},
        {"resources": ["/plant/scada/mode"], "allowed": ["manual", "off"]},
    ],
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Source:
    """What the authority reads of the Governor."""

    policy: Policy
    trail: AuditTrail | None = None
    reloads: int = 0

    def subjects(self, principal: Principal) -> frozenset[str]:
        return subjects_of(principal)


def authority(clock: Clock | None = None, **bounds: Any) -> ProviderAuthority:
    return ProviderAuthority(Source(Policy(check_policy(POLICY))), DeclarationsConfig(**bounds), clock or Clock())


def origin(slot: str = "scada", identity: str | None = "scada-main", link: object = "link-1") -> ProviderOrigin:
    return ProviderOrigin(slot, identity, "websocket", link)


def context(
    identity: str | None = "scada-main", owner: str | None = None, slot_path: str = "/plant/scada"
) -> DeclareContext:
    return DeclareContext(identity, "scada", slot_path, lambda _: owner, True)


TOKEN_OP = Principal("op", "token")


# -- the declaration --------------------------------------------------------------------------


def test_a_good_declaration_is_accepted_with_its_resources_and_limits() -> None:
    declared = check_declaration(DECLARATION, context())
    assert not isinstance(declared, list)
    assert declared.capabilities == {"scada.read", "scada.write"}
    assert declared.resources["uns://v3"].limits == ResourceLimits(0, 100)
    assert declared.results_required == {"scada.write"}


def test_a_refused_declaration_lists_every_problem() -> None:
    bad = {
        "version": "",
        "domain": "Scada",
        "namespace": {"resource": "/plant/../x", "extra": 1},
        "capabilities": ["scada.write", "scada.write"],
        "resources": [
            {"resource": "a", "resourcePath": "/elsewhere/a"},
            {"resource": "b", "resourcePath": "/plant/scada/b", "limits": {"minValue": 5, "maxValue": 1}},
            {"resource": "c", "resourcePath": "/plant/scada/c", "limits": {"allowedValues": [[1]]}},
        ],
        "protects": ["pump-1"],
        "resultsRequired": ["scada.delete"],
        "assignments": [],
        "colour": "red",
    }
    problems = check_declaration(bad, context())
    assert isinstance(problems, list)
    assert problems == [
        '"assignments" is not accepted: a declaration describes resources and capabilities and grants no right; '
        "the gateway's operator assigns roles in [policy]",
        'unknown key "colour" (keys: version, domain, namespace, capabilities, resources, protects, '
        "resultsRequired, budgetUnits)",
        "version must be a non-empty string of at most 128 characters",
        'domain must be lowercase letters, digits and "-", starting with a letter (e.g. "scada")',
        'namespace: unknown key "extra"',
        'namespace.resource: resource path "/plant/../x" has a "." or ".." segment; write the path it means',
        'capability "scada.write" is listed twice',
        "resources[1].limits: minValue 5 is greater than maxValue 1",
        "resources[2].limits.allowedValues may hold only strings, finite numbers, booleans and null",
        "protects: this gateway has no protected slots; send no protects (or an empty list)",
        "resultsRequired: 'scada.delete' is not one of the declared capabilities",
    ]


@pytest.mark.parametrize(("identity", "words"), [(None, "no identity of its own"), ("shared", "shared secret")])
def test_a_provider_without_an_identity_of_its_own_cannot_declare(identity: str | None, words: str) -> None:
    problems = check_declaration(DECLARATION, context(identity))
    assert isinstance(problems, list) and len(problems) == 1 and words in problems[0]


def test_a_declaration_stays_inside_its_slot_and_its_domain() -> None:
    outside = {**DECLARATION, "namespace": {"resource": "/plant"}, "capabilities": ["scada.write", "hvac.set"]}
    problems = check_declaration(outside, context())
    assert isinstance(problems, list)
    assert problems[0].startswith('namespace.resource "/plant" is outside slot "scada"')
    assert 'capability "hvac.set" is outside the declared domain' in problems[1]
    reserved = check_declaration({**DECLARATION, "domain": "broker"}, context())
    assert (
        isinstance(reserved, list) and reserved[0] == 'domain "broker" is reserved for the gateway\'s own capabilities'
    )


def test_a_domain_has_one_owner_and_the_owner_may_move_it() -> None:
    problems = check_declaration(DECLARATION, context(owner="other"))
    assert problems == ['domain "scada" is already declared by provider "other"; a domain has one owner']
    registry = DeclarationRegistry(max_declarations=2)
    first = check_declaration(DECLARATION, context())
    assert not isinstance(first, list)
    registry.accept(first, "link-1")
    assert registry.owner_of("scada") == "scada-main"
    moved = check_declaration(
        {**DECLARATION, "domain": "hvac", "capabilities": ["hvac.set"], "resultsRequired": []}, context()
    )
    assert not isinstance(moved, list)
    registry.accept(moved, "link-1")
    assert registry.owners == {"hvac": "scada-main"}  # one declaration per identity, so one domain
    assert registry.live("scada", "link-2") is None  # another connection on the slot holds nothing
    assert not registry.unbind("scada", "link-2")
    assert registry.unbind("scada", "link-1") and registry.live("scada", "link-1") is None
    assert registry.owner_of("hvac") == "scada-main"  # ownership outlives the connection
    assert registry.has_room("scada-main") and registry.has_room("new")
    registry.declarations["b"] = moved
    assert not registry.has_room("new")


# -- limits -----------------------------------------------------------------------------------


def test_the_intersection_keeps_the_tightest_of_every_bound() -> None:
    limits, empty = intersect([ResourceLimits(0, 100), ResourceLimits(None, 80), ResourceLimits(10, None)])
    assert (limits, empty) == (ResourceLimits(10, 80), False)
    limits, empty = intersect(
        [ResourceLimits(allowed_values=("a", "b", 1)), ResourceLimits(allowed_values=("b", True))]
    )
    assert (limits, empty) == (ResourceLimits(allowed_values=("b",)), False)
    # A value in allowedValues must lie within the range too: with a range, only numbers in it stay.
    limits, empty = intersect([ResourceLimits(allowed_values=(1, 5, 9, "x")), ResourceLimits(2, 8)])
    assert limits == ResourceLimits(2, 8, (5,)) and not empty
    assert intersect([]) == (None, False)


@pytest.mark.parametrize(
    "parts",
    [
        [ResourceLimits(85, None), ResourceLimits(None, 80)],
        [ResourceLimits(allowed_values=("auto",)), ResourceLimits(allowed_values=("manual",))],
        [ResourceLimits(allowed_values=(True,)), ResourceLimits(allowed_values=(1,))],
        [ResourceLimits(allowed_values=("auto",)), ResourceLimits(0, 10)],
        [ResourceLimits(destinations=("device",)), ResourceLimits(destinations=("source",))],
    ],
)
def test_an_empty_intersection_is_reported(parts: list[ResourceLimits]) -> None:
    _, empty = intersect(parts)
    assert empty


# -- caller references ------------------------------------------------------------------------


def test_a_reference_resolves_only_for_its_slot_identity_and_connection_while_live() -> None:
    clock = Clock()
    refs = CallerRefs(max_refs=10, grace_s=2.0, clock=clock)
    ref = refs.issue("scada", "scada-main", "link-1", frozenset({"token:op"}), "corr_1", "ab" * 16)
    assert ref.startswith("cr_") and len(ref) > 30
    assert refs.resolve(ref, "scada", "scada-main", "link-1") is not None
    assert refs.resolve(ref, "other", "scada-main", "link-1") is None
    assert refs.resolve(ref, "scada", "intruder", "link-1") is None
    assert refs.resolve(ref, "scada", "scada-main", "link-2") is None
    refs.end(ref)
    clock.now += 1.9
    assert refs.resolve(ref, "scada", "scada-main", "link-1") is not None  # in its grace
    clock.now += 0.2
    assert refs.resolve(ref, "scada", "scada-main", "link-1") is None
    assert len(refs) == 0


def test_references_are_bounded_and_end_with_their_connection() -> None:
    refs = CallerRefs(max_refs=2, grace_s=5.0, clock=Clock())
    first, second, third = (refs.issue("s", "i", "link", frozenset(), "c", "t") for _ in range(3))
    assert len(refs) == 2 and refs.evicted == 1
    assert refs.resolve(first, "s", "i", "link") is None and refs.resolve(third, "s", "i", "link") is not None
    refs.drop_link("link")
    assert refs.resolve(second, "s", "i", "link") is None and len(refs) == 0


# -- broker/authorize -------------------------------------------------------------------------


def test_authorize_takes_at_most_its_cap_of_checks() -> None:
    check = {"capability": "scada.read", "resource": "r", "resourcePath": "/plant/scada/r"}
    assert len(parse_authorize({"principal": {"type": "provider"}, "checks": [check] * 256}, 256).checks) == 256
    with pytest.raises(errors.RpcError) as refused:
        parse_authorize({"principal": {"type": "provider"}, "checks": [check] * 257}, 256)
    assert refused.value.code == -32602
    assert refused.value.message == "checks: at most 256 per request; split the batch"


@pytest.mark.parametrize(
    ("params", "words"),
    [
        (
            {"principal": {"type": "caller-ref", "ref": "cr_abcdefghij", "subject": "user:x"}, "checks": []},
            "carries only",
        ),
        ({"principal": {"type": "user"}, "checks": []}, "principal.type must be"),
        ({"principal": {"type": "provider"}, "checks": []}, "checks must be a non-empty array"),
        ({"principal": {"type": "provider"}, "checks": [{"capability": "x"}]}, "checks[0].resource must be"),
        ({"principal": {"type": "caller-ref", "ref": "bearer xyz"}, "checks": [{}]}, "not a caller reference"),
    ],
)
def test_a_malformed_authorize_is_refused_whole(params: dict[str, Any], words: str) -> None:
    with pytest.raises(errors.RpcError) as refused:
        parse_authorize(params, 256)
    assert refused.value.code == -32602 and words in refused.value.message


async def declared(gate: ProviderAuthority, link: object = "link-1") -> None:
    answer = await gate.provider_request(origin(link=link), "broker/authorization/declare", DECLARATION)
    assert answer == {"accepted": True, "version": "2", "policyVersion": "0.1"}


async def ask(gate: ProviderAuthority, ref: str | None, *checks: tuple[str, str, str]) -> list[dict[str, Any]]:
    principal = {"type": "caller-ref", "ref": ref} if ref else {"type": "provider"}
    params = {
        "principal": principal,
        "checks": [{"capability": c, "resource": r, "resourcePath": p} for c, r, p in checks],
    }
    answer = await gate.provider_request(origin(), "broker/authorize", params)
    decisions: list[dict[str, Any]] = answer["decisions"]
    return decisions


async def test_each_check_is_decided_by_the_policy_and_both_sets_of_limits() -> None:
    gate = authority()
    with pytest.raises(errors.RpcError) as undeclared:
        await ask(gate, None, ("scada.read", "r", "/plant/scada/r"))
    assert undeclared.value.code == -32003
    await declared(gate)
    reference = gate.caller_reference(origin(), TOKEN_OP, {"traceparent": "00-" + "12" * 16 + "-" + "34" * 8 + "-01"})
    assert reference is not None and reference.meta["traceId"] == "12" * 16
    decisions = await ask(
        gate,
        reference.ref,
        ("scada.write", "uns://v3", "/plant/scada/v3"),  # 0..100 declared, ..80 by the operator
        ("scada.write", "uns://mode", "/plant/scada/mode"),  # auto|manual declared, manual|off by the operator
        ("scada.write", "uns://other", "/plant/scada/other"),  # nothing declared, no operator limit
        ("scada.write", "uns://locked", "/plant/scada/locked"),
        ("scada.delete", "uns://v3", "/plant/scada/v3"),
        ("scada.write", "uns://v3", "/plant/scada/elsewhere"),
        ("scada.write", "uns://x", "/plant/hvac/x"),
    )
    summary = [(d["effect"], d["allowed"], d["reason"], d.get("obligations")) for d in decisions]
    assert summary == [
        ("allow-with-constraints", False, "role-grant", {"constraints": {"minValue": 0, "maxValue": 80}}),
        ("allow-with-constraints", False, "role-grant", {"constraints": {"allowedValues": ["manual"]}}),
        ("allow", True, "role-grant", None),
        ("deny", False, "explicit-deny", None),
        ("deny", False, "undeclared-capability", None),
        ("deny", False, "undeclared-resource", None),
        ("deny", False, "undeclared-resource", None),
    ]
    assert decisions[0]["policies"] == ["assign[0]", "declared_limits[0]"]
    assert decisions[3]["policies"] == ["deny[0]"]
    assert len({d["decisionId"] for d in decisions}) == 7
    # The provider's own work is decided for provider:<identity>.
    own = await ask(gate, None, ("scada.read", "r", "/plant/scada/r"), ("scada.write", "r", "/plant/scada/r"))
    assert [d["effect"] for d in own] == ["allow", "deny"]


async def test_an_empty_intersection_is_a_deny() -> None:
    gate = authority()
    tight = {
        **DECLARATION,
        "resources": [{"resource": "v9", "resourcePath": "/plant/scada/v9", "limits": {"minValue": 85}}],
    }
    await gate.provider_request(origin(), "broker/authorization/declare", tight)
    reference = gate.caller_reference(origin(), TOKEN_OP, None)
    assert reference is not None
    [decision] = await ask(gate, reference.ref, ("scada.write", "v9", "/plant/scada/v9"))
    assert (decision["effect"], decision["allowed"], decision["reason"]) == ("deny", False, "empty-limits")
    assert "obligations" not in decision


async def test_references_are_handed_out_only_to_a_live_declaration() -> None:
    gate = authority()
    assert gate.caller_reference(origin(), TOKEN_OP, None) is None
    await declared(gate)
    assert gate.caller_reference(origin(link="link-2"), TOKEN_OP, None) is None
    reference = gate.caller_reference(origin(), TOKEN_OP, None)
    assert reference is not None and set(reference.meta) == {"ref", "correlationId", "traceId"}
    gate.provider_gone(origin())
    assert gate.caller_reference(origin(), TOKEN_OP, None) is None
    with pytest.raises(errors.RpcError) as gone:
        await ask(gate, reference.ref, ("scada.read", "r", "/plant/scada/r"))
    assert gone.value.code == -32003


async def test_results_are_matched_to_their_decision_and_overdue_ones_are_reported() -> None:
    clock = Clock()
    gate = authority(clock, result_timeout_s=60)
    await declared(gate)
    reference = gate.caller_reference(origin(), TOKEN_OP, None)
    assert reference is not None
    write, _read = await ask(
        gate,
        reference.ref,
        ("scada.write", "uns://v3", "/plant/scada/v3"),
        ("scada.read", "uns://v3", "/plant/scada/v3"),
    )
    clock.now += 61
    overdue = gate.status()["results"]["overdue"]
    assert [entry["decisionId"] for entry in overdue] == [write["decisionId"]]  # read is not in resultsRequired
    gate.provider_notification(
        origin(identity="intruder"), "broker/audit/result", {"decisionId": write["decisionId"], "result": "success"}
    )
    gate.provider_notification(origin(), "broker/audit/result", {"decisionId": write["decisionId"], "result": "maybe"})
    assert gate.status()["results"]["unmatched"] == 2
    gate.provider_notification(
        origin(), "broker/audit/result", {"decisionId": write["decisionId"], "result": "success"}
    )
    results = gate.status()["results"]
    assert (results["reported"], results["overdue"]) == (1, [])


async def test_every_decision_is_in_the_trail_with_its_result(tmp_path: Path) -> None:
    trail = AuditTrail(tmp_path / "audit.db")
    await trail.start()
    try:
        gate = ProviderAuthority(Source(Policy(check_policy(POLICY)), trail), DeclarationsConfig(), Clock())
        await declared(gate)
        reference = gate.caller_reference(origin(), TOKEN_OP, None)
        assert reference is not None
        [decision] = await ask(gate, reference.ref, ("scada.write", "uns://v3", "/plant/scada/v3"))
        gate.provider_notification(
            origin(),
            "broker/audit/result",
            {"decisionId": decision["decisionId"], "result": "failure", "errorCode": "E7"},
        )
    finally:
        await trail.close()
    [record] = trail.query()
    assert (record["transport"], record["capability"], record["resource"], record["effect"]) == (
        "broker/authorize",
        "scada.write",
        "/plant/scada/v3",
        "allow-with-constraints",
    )
    assert record["arguments"]["decisionId"] == decision["decisionId"]
    assert record["constraints"] == {"minValue": 0, "maxValue": 80}
    assert (record["status"], record["error"]) == ("failure", '{"errorCode":"E7"}')


# -- the policy keys --------------------------------------------------------------------------


def test_roles_may_name_declared_capabilities_and_declared_limits_are_checked() -> None:
    assert capability_error("scada.write") is None
    assert capability_error("mcp.tools.lst") is not None
    assert capability_error("broker.anything") is not None
    with pytest.raises(PolicyError) as refused:
        check_policy(
            {
                "declared_limits": [
                    {"resources": ["/x/**"], "capability": "tool.control", "min": 5, "max": 1},
                    {"resources": ["x"]},
                ]
            }
        )
    assert refused.value.errors == [
        'declared_limits[0].capability: "tool.control" is not a capability a provider declares: write '
        '<domain>.<name> (e.g. "scada.write"), outside the gateway\'s own mcp., tool. and broker. families',
        "declared_limits[0]: min 5 is above max 1",
        'declared_limits[1].resources[0]: pattern "x" must start with "/", e.g. "/site1/line2/pump-1"',
        "declared_limits[1]: sets no limit: give min, max or allowed",
    ]


# -- the core's side --------------------------------------------------------------------------


def test_the_caller_key_is_stripped_from_client_params() -> None:
    params = {"name": "t", "_meta": {CALLER_META_KEY: {"ref": "cr_forged"}, "progressToken": 1}}
    assert strip_caller(params) == {"name": "t", "_meta": {"progressToken": 1}}
    assert strip_caller({"_meta": {CALLER_META_KEY: {}}}) == {}
    untouched = {"name": "t"}
    assert strip_caller(untouched) is untouched


@dataclass
class Session:
    slot: str
    link: Any


@dataclass
class Link:
    info: LinkInfo


@pytest.mark.parametrize("transport", ["stdio", "remote-http", "remote-sse"])
def test_upstreams_get_method_not_found_for_broker_requests(transport: str) -> None:
    broker = ProviderBroker(authority(), max_pending=4)
    refused = broker.refusal(Session("s", Link(LinkInfo(transport))), "broker/authorize")
    assert refused is not None and refused.code == -32601 and "upstream server" in refused.message
    assert broker.refusal(Session("s", Link(LinkInfo("websocket"))), "broker/authorize") is None


def test_without_a_policy_broker_requests_get_method_not_found() -> None:
    refused = ProviderBroker(None, max_pending=4).refusal(Session("s", Link(LinkInfo("serial"))), "broker/authorize")
    assert refused is not None and refused.code == -32601 and "no [policy]" in refused.message


async def test_budget_reservations_go_to_the_ledger_for_the_caller_of_a_live_reference() -> None:
    budget = {
        "id": "writes",
        "match": {"provider": "scada"},
        "group_by": ["subject"],
        "budget": {"unit": "write", "max": 2, "window_ms": 60_000},
    }
    limits = ExecutionLimits(check_policy({"execution_limits": [budget]}).execution_limits)
    gate = ProviderAuthority(Source(Policy(check_policy(POLICY))), DeclarationsConfig(), Clock(), limits.budget)
    reserve = {
        "capability": "scada.write",
        "resourcePath": "/plant/scada/v3",
        "unit": "write",
        "quantity": 2,
        "idempotencyKey": "k1",
    }
    with pytest.raises(errors.RpcError) as undeclared:
        await gate.provider_request(
            origin(), "broker/budget/reserve", {"principal": {"type": "caller-ref", "ref": "cr_x"}}
        )
    assert undeclared.value.code == -32003
    await declared(gate)
    reference = gate.caller_reference(origin(), TOKEN_OP, None)
    assert reference is not None
    principal = {"type": "caller-ref", "ref": reference.ref}
    grant = await gate.provider_request(origin(), "broker/budget/reserve", {**reserve, "principal": principal})
    assert grant["quantity"] == 2 and grant["replayed"] is False
    with pytest.raises(errors.RpcError) as elsewhere:  # another connection on the slot holds no declaration
        await gate.provider_request(origin(link="link-2"), "broker/budget/reserve", {**reserve, "principal": principal})
    assert elsewhere.value.code == -32003
    gate.provider_gone(origin())  # a settlement needs only the slot that reserved, after a reconnect too
    settled = await gate.provider_request(
        origin(link="link-2"),
        "broker/budget/settle",
        {"reservationId": grant["reservationId"], "used": 1, "result": "success"},
    )
    assert settled["settled"] is True
