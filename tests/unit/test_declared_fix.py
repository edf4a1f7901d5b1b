"""Declared authorization held tight (gateway/policy/declarations/, claims.py, rules/): no group escapes a
deny past a bound, a declaration is live only on the slot it was sent on, a refusal stays small, limits
follow the declared path, and "*" grants callers, not a provider's own work."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gateway.config.declarations import DeclarationsConfig
from gateway.core import errors
from gateway.core.policy_interface import ProviderOrigin
from gateway.core.principal import Principal
from gateway.policy.claims import MAX_CLAIM_CHARS, MAX_GROUPS, client_from_claims, groups_from_claims
from gateway.policy.declarations.authority import ProviderAuthority
from gateway.policy.declarations.validation import DeclareContext, check_declaration
from gateway.policy.rules import Policy, PolicyError, subjects_of
from gateway.policy.rules.checking import check_policy
from gateway.policy.rules.subjects import subject_error
from tests.unit.test_provider_declarations import Clock, Source

DECLARE = "broker/authorization/declare"
AUTHORIZE = "broker/authorize"
DECLARATION: dict[str, Any] = {
    "version": "1",
    "domain": "scada",
    "namespace": {"resource": "/plant/scada"},
    "capabilities": ["scada.read", "scada.write"],
    "resources": [
        {"resource": "uns://v3", "resourcePath": "/plant/scada/v3", "limits": {"minValue": 0, "maxValue": 100}},
    ],
}
POLICY: dict[str, Any] = {
    "roles": {"writer": {"capabilities": ["scada.write", "scada.read"]}, "reader": {"capabilities": ["scada.read"]}},
    "assign": [
        {"principal": "token:op", "role": "writer", "resources": ["/plant/**"]},
        {"principal": "*", "role": "reader", "resources": ["/plant/scada/public/**"]},
        {"principal": "provider:scada-main", "role": "writer", "resources": ["/plant/scada/own/**"]},
    ],
    "deny": [
        {"principal": "group:contractors", "capabilities": ["scada.write"], "resources": ["/plant/**"]},
        {"principal": "*", "capabilities": ["scada.write"], "resources": ["/plant/scada/own/locked"]},
    ],
    "resources": {"scada": "/plant/scada", "scadab": "/plant/other"},
}
TOKEN_OP = Principal("op", "token")
LISTED = 20
"""Problems a refusal lists (validation.LISTED), each at most 300 characters (ERROR_CHARS)."""
ERROR_CHARS = 300


def authority(clock: Clock | None = None) -> ProviderAuthority:
    return ProviderAuthority(Source(Policy(check_policy(POLICY))), DeclarationsConfig(), clock or Clock())


def origin(
    slot: str = "scada", identity: str | None = "scada-main", link: object = "link-1", transport: str = "websocket"
) -> ProviderOrigin:
    return ProviderOrigin(slot, identity, transport, link)


async def ask(
    gate: ProviderAuthority, ref: str | None, *checks: tuple[str, str, str], at: ProviderOrigin | None = None
) -> list[dict[str, Any]]:
    principal = {"type": "caller-ref", "ref": ref} if ref else {"type": "provider"}
    params = {
        "principal": principal,
        "checks": [{"capability": c, "resource": r, "resourcePath": p} for c, r, p in checks],
    }
    answer = await gate.provider_request(at or origin(), AUTHORIZE, params)
    decisions: list[dict[str, Any]] = answer["decisions"]
    return decisions


async def refusal(gate: ProviderAuthority, params: Any, at: ProviderOrigin | None = None) -> errors.RpcError:
    with pytest.raises(errors.RpcError) as refused:
        await gate.provider_request(at or origin(), DECLARE, params)
    return refused.value


# -- 1. groups past a bound refuse the token; a deny never names a subject past it -------------


def test_a_groups_claim_past_its_bounds_is_refused_not_cut() -> None:
    many = ["staff"] + [f"g{i}" for i in range(279)] + ["contractors"] + [f"h{i}" for i in range(19)]
    with pytest.raises(ValueError, match=f"lists 300 groups; at most {MAX_GROUPS}"):
        groups_from_claims({"groups": many})
    long_name = "ou=contractors," + "x" * 250 + ",dc=plant"
    with pytest.raises(ValueError, match=f"group name longer than {MAX_CLAIM_CHARS}"):
        groups_from_claims({"groups": ["staff", long_name]})
    with pytest.raises(ValueError, match="client"):
        client_from_claims({"azp": "c" * (MAX_CLAIM_CHARS + 1)})
    # The same reading for `policy explain` given claims: refused too, never a smaller set of subjects.
    with pytest.raises(ValueError):
        subjects_of(Principal("alice", "oauth"), {"groups": many})
    # At the bounds, every group is read whole.
    edge = [f"{i:03d}" + "y" * (MAX_CLAIM_CHARS - 3) for i in range(MAX_GROUPS)]
    assert groups_from_claims({"groups": edge}) == frozenset(edge)
    assert client_from_claims({"azp": "c" * MAX_CLAIM_CHARS}) == "c" * MAX_CLAIM_CHARS


def test_a_rule_naming_a_subject_no_caller_can_be_is_refused() -> None:
    long_group = "group:" + "x" * (MAX_CLAIM_CHARS + 1)
    problem = subject_error(long_group)
    assert problem is not None and f"longer than {MAX_CLAIM_CHARS} characters" in problem
    assert subject_error("group:" + "x" * MAX_CLAIM_CHARS) is None
    with pytest.raises(PolicyError) as refused:
        check_policy(
            {
                "roles": {"r": {"capabilities": ["scada.write"]}},
                "deny": [{"principal": long_group, "capabilities": ["scada.write"], "resources": ["/plant/**"]}],
            }
        )
    assert refused.value.errors[0].startswith("deny[0].principal:")
    assert f"longer than {MAX_CLAIM_CHARS} characters" in refused.value.errors[0]


# -- 2. a declaration is live only on the slot it was sent on ----------------------------------


async def test_declaring_from_another_slot_ends_the_first_slots_live_declaration() -> None:
    gate = authority()
    first, second = origin(link="link-a"), origin("scadab", link="link-b")
    await gate.provider_request(first, DECLARE, DECLARATION)
    moved = {**DECLARATION, "namespace": {"resource": "/plant/other"}, "resources": []}
    await gate.provider_request(second, DECLARE, moved)
    with pytest.raises(errors.RpcError) as stale:
        await ask(gate, None, ("scada.read", "r", "/plant/other/secret-valve"), at=first)
    assert stale.value.code == -32003
    assert gate.caller_reference(first, TOKEN_OP, None) is None
    assert gate.registry.live_slots("scada-main") == ["scadab"]
    [own] = await ask(gate, None, ("scada.read", "r", "/plant/other/x"), at=second)
    assert own["reason"] == "no-matching-grant"  # answered under the live declaration, on its slot


# -- 3. a refusal is bounded, in the answer and in the log -------------------------------------


async def test_a_refusal_lists_at_most_its_bound_and_is_logged_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    gate = authority(clock)
    params: dict[str, Any] = {f"k{i:05x}" + "z" * 400: 0 for i in range(5000)}
    params.update({"version": "1", "domain": "zz", "namespace": {"resource": "/plant/scada"}, "capabilities": ["zz.a"]})
    caplog.set_level(logging.WARNING, "gateway.policy.declarations")
    refused = await refusal(gate, params)
    listed = refused.data["errors"]
    assert refused.message.startswith("Declaration refused: 5000 problem(s).")
    assert len(listed) == LISTED + 1 and listed[-1] == f"and {5000 - LISTED} more"
    assert all(len(problem) <= ERROR_CHARS for problem in listed)
    for _ in range(3):
        await refusal(gate, params)
    lines = [record.getMessage() for record in caplog.records if "refused" in record.getMessage()]
    assert len(lines) == 1 and len(lines[0]) < (LISTED + 1) * (ERROR_CHARS + 2) + 300
    clock.now += 61
    await refusal(gate, params)
    lines = [record.getMessage() for record in caplog.records if "refused" in record.getMessage()]
    assert len(lines) == 2 and "(3 more refused from this slot since the last line)" in lines[1]


# -- 4. declared limits follow the path -------------------------------------------------------


async def test_a_declared_path_under_another_identifier_is_an_undeclared_resource() -> None:
    gate = authority()
    await gate.provider_request(origin(), DECLARE, DECLARATION)
    reference = gate.caller_reference(origin(), TOKEN_OP, None)
    assert reference is not None
    decisions = await ask(
        gate,
        reference.ref,
        ("scada.write", "uns://v3", "/plant/scada/v3"),
        ("scada.write", "uns://alias", "/plant/scada/v3"),
        ("scada.write", "uns://other", "/plant/scada/other"),
    )
    summary = [(d["effect"], d["reason"], d.get("obligations")) for d in decisions]
    assert summary == [
        ("allow-with-constraints", "role-grant", {"constraints": {"minValue": 0, "maxValue": 100}}),
        ("deny", "undeclared-resource", None),
        ("allow", "role-grant", None),
    ]


def test_a_path_is_declared_once() -> None:
    twice = {
        **DECLARATION,
        "resources": [
            {"resource": "a", "resourcePath": "/plant/scada/v3", "limits": {"maxValue": 10}},
            {"resource": "b", "resourcePath": "/plant/scada/v3/"},
        ],
    }
    problems = check_declaration(twice, DeclareContext("scada-main", "scada", "/plant/scada", lambda _: None, True))
    assert problems == ['resources[1].resourcePath "/plant/scada/v3" is already the path of resource "a"']


# -- 5.-7. refusals say what is true and what fits ----------------------------------------------


async def test_a_refused_redeclaration_says_what_is_live_on_this_connection() -> None:
    gate = authority()
    await gate.provider_request(origin(), DECLARE, DECLARATION)
    bad = {**DECLARATION, "colour": "red"}
    live = await refusal(gate, bad)
    assert "the declaration live on this connection stays in force" in live.message
    gate.provider_gone(origin())
    after = origin(link="link-2")  # the reconnect: the identity still holds its declaration
    reconnected = await refusal(gate, bad, after)
    assert "no declaration is live on this connection" in reconnected.message
    assert "stays in force" not in reconnected.message
    with pytest.raises(errors.RpcError) as none:
        await ask(gate, None, ("scada.read", "r", "/plant/scada/public/x"), at=after)
    assert none.value.code == -32003


@pytest.mark.parametrize(
    ("transport", "said", "not_said"),
    [
        ("mqtt", "comes in over MQTT", 'mode = "identities") may declare'),
        ("mqtt-mcp", "comes in over MQTT", 'mode = "identities") may declare'),
        ("loopback", "inside the gateway's own process", "comes in over MQTT"),
        ("websocket", "no identity of its own", "MQTT"),
    ],
)
async def test_a_provider_without_an_identity_is_told_what_fits_its_transport(
    transport: str, said: str, not_said: str
) -> None:
    refused = await refusal(authority(), DECLARATION, origin(identity=None, transport=transport))
    [problem] = refused.data["errors"]
    assert said in problem and not_said not in problem


def test_a_domain_past_its_length_says_so() -> None:
    long = {**DECLARATION, "domain": "a" * 64, "capabilities": ["a" * 64 + ".x"]}
    problems = check_declaration(long, DeclareContext("scada-main", "scada", "/plant/scada", lambda _: None, True))
    assert isinstance(problems, list)
    assert "domain is 64 characters long; a domain has at most 63 characters" in problems
    ok = check_declaration(
        {**DECLARATION, "domain": "a" * 63, "capabilities": ["a" * 63 + ".x"]},
        DeclareContext("scada-main", "scada", "/plant/scada", lambda _: None, True),
    )
    assert not isinstance(ok, list)


# -- 8. "*" grants callers, not a provider's own work ------------------------------------------


async def test_any_caller_is_not_the_provider_itself() -> None:
    gate = authority()
    await gate.provider_request(origin(), DECLARE, DECLARATION)
    [own_public, own_grant, own_locked] = await ask(
        gate,
        None,
        ("scada.read", "r", "/plant/scada/public/x"),
        ("scada.write", "r", "/plant/scada/own/x"),
        ("scada.write", "r", "/plant/scada/own/locked"),
    )
    assert (own_public["effect"], own_public["reason"]) == ("deny", "no-matching-grant")
    assert (own_grant["effect"], own_grant["policies"]) == ("allow", ["assign[2]"])
    # A deny of "*" still takes away from the provider: a deny can only narrow.
    assert (own_locked["effect"], own_locked["reason"]) == ("deny", "explicit-deny")
    reference = gate.caller_reference(origin(), Principal("guest", "token"), None)
    assert reference is not None
    [caller] = await ask(gate, reference.ref, ("scada.read", "r", "/plant/scada/public/x"))
    assert (caller["effect"], caller["policies"]) == ("allow", ["assign[1]"])
