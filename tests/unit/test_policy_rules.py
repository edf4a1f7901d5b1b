"""The policy (gateway/policy/rules/): path patterns, checking with every mistake listed, and decisions."""

from __future__ import annotations

import fnmatch
import itertools
import random
from pathlib import Path
from typing import Any

import pytest

from gateway.config import ConfigError, PolicyConfig, load_config
from gateway.core.principal import ANONYMOUS, Principal
from gateway.policy.arguments import ArgumentLimit
from gateway.policy.rules import Ask, Policy, PolicyError, load_policy, subjects_of
from gateway.policy.rules import engine as engine_module
from gateway.policy.rules.checking import check_policy
from gateway.policy.rules.model import SECTIONS
from gateway.policy.rules.paths import PatternError, check_path, compile_pattern, segment

OBSERVER = ["mcp.tools.list", "mcp.tools.call", "mcp.resources.read", "mcp.prompts.read", "tool.observe"]

POLICY = """
[roles.observer]
capabilities = ["mcp.tools.list", "mcp.tools.call", "mcp.resources.read", "mcp.prompts.read", "tool.observe"]
[roles.operator]
inherits = ["observer"]
capabilities = ["tool.control"]
[roles.starter]
capabilities = ["mcp.tools.call", "tool:start"]

[[assign]]
principal = "token:agent-1"
role = "observer"
resources = ["/site1/**"]

[[assign]]
principal = "group:operators"
role = "operator"
resources = ["/site1/line2/pump-*"]

[[assign]]
principal = "token:agent-1"
role = "starter"
resources = ["/site1/line2/*"]

[[deny]]
principal = "token:agent-1"
capabilities = ["tool:stop"]
resources = ["/site1/line2/pump-3"]

[[deny]]
principal = "group:operators"
capabilities = ["tool.control"]
resources = ["/site1/line2/pump-9"]

[[limits]]
resources = ["/site1/line2/pump-1"]
tool = "set_speed"
argument = "speed_rpm"
min = 300
max = 2000
action = "clamp"

[[limits]]
resources = ["/site1/**"]
tool = "set_mode"
argument = "mode"
allowed = ["low", "high"]

[[limits]]
resources = ["/site2/**"]
tool = "set_speed"
argument = "speed_rpm"
max = 10

[resources]
"pump-1" = "/site1/line2/pump-1"

[[resource_patterns]]
slots = "pump-*"
path = "/site1/line2/{slot}"

[[resource_patterns]]
slots = "*"
path = "/site2/{slot}"
"""

AGENT = frozenset({"token:agent-1"})
ALICE = frozenset({"user:alice", "group:operators", "client:console"})


@pytest.fixture
def policy(tmp_path: Path) -> Policy:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY, encoding="utf-8")
    return load_policy(path)


def call(subjects: frozenset[str], slot: str, tool: str, read_only: bool | None = None) -> Ask:
    return Ask(subjects, slot, "tools/call", tool, read_only)


def errors_of(data: dict[str, Any]) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        check_policy(data)
    return caught.value.errors


def minimal(**extra: Any) -> dict[str, Any]:
    """A valid policy (one role, one assignment) with `extra` sections added or replaced."""
    return {
        "roles": {"observer": {"capabilities": OBSERVER}},
        "assign": [{"principal": "*", "role": "observer", "resources": ["/**"]}],
        **extra,
    }


# --- path patterns ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "matching", "not_matching"),
    [
        (
            "/site1/line2/pump-1",
            ["/site1/line2/pump-1"],
            ["/site1/line2/pump-10", "/site1/line2", "/site1/line2/pump-1/x"],
        ),
        ("/site1/*/pump-1", ["/site1/line2/pump-1", "/site1/x/pump-1"], ["/site1/a/b/pump-1", "/site1/pump-1"]),
        (
            "/site1/line2/pump-*",
            ["/site1/line2/pump-3", "/site1/line2/pump-"],
            ["/site1/line2/valve-3", "/site1/line2/pump-3/x"],
        ),
        ("/site1/**", ["/site1", "/site1/line2", "/site1/line2/pump-1"], ["/site10", "/site2/line2", "/"]),
        ("/**", ["/", "/a", "/a/b/c", "/_system/broker"], []),
        ("/", ["/"], ["/a"]),
        ("/a.b/(x)+", ["/a.b/(x)+"], ["/aXb/(x)+", "/a.b/xx"]),
    ],
)
def test_patterns_match_exact_one_segment_and_subtree(
    pattern: str, matching: list[str], not_matching: list[str]
) -> None:
    compiled = compile_pattern(pattern)
    assert [path for path in matching if compiled.matches(path)] == matching
    assert [path for path in not_matching if compiled.matches(path)] == []


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        ("site1/**", 'must start with "/"'),
        ("/site1//pump", "empty segment"),
        ("/site1/", "empty segment"),
        ("/site1/**/pump-1", '"**" stands alone as the last segment'),
        ("/site1/pump-**", '"**" stands alone as the last segment'),
        ("/site1/../x", '"." or ".." segment'),
        ("/site1/\x00", "control characters"),
    ],
)
def test_bad_patterns_are_refused_with_the_reason(pattern: str, words: str) -> None:
    with pytest.raises(PatternError) as caught:
        compile_pattern(pattern)
    assert words in str(caught.value)


def test_a_resource_path_is_exact_and_outside_the_system_tree() -> None:
    assert check_path("/site1/line2/pump-1") == "/site1/line2/pump-1"
    with pytest.raises(PatternError, match='holds "\\*"'):
        check_path("/site1/*")
    with pytest.raises(PatternError, match="reserved for the gateway"):
        check_path("/_system/broker")


def test_a_slash_in_a_slot_name_cannot_add_a_path_level() -> None:
    assert segment("a/b") == "a%2Fb"
    assert segment("a%2Fb") == "a%252Fb"  # distinct from the escaped "a/b"
    assert not compile_pattern("/a/**").matches("/" + segment("a/b"))


# --- checking: every mistake at once -----------------------------------------------------------------


def test_every_mistake_is_listed_at_once_in_the_files_order() -> None:
    data = {
        "roles": {
            "observer": {"capabilities": ["mcp.tools.list", "tool.observ"]},
            "operator": {"inherits": ["observer", "admin"], "capabilities": ["tool.control"], "color": "red"},
        },
        "assign": [
            {"principal": "token:a", "role": "observer", "resources": ["/**"]},
            {"principal": "agent-1", "role": "observer", "resources": ["site1/**"]},
            {"principal": "token:b", "role": "operater", "resources": ["/a/**/b"]},
        ],
        "deny": [{"principal": "*", "capabilities": [], "resources": ["/x"]}],
        "limits": [
            {"resources": ["/x"], "tool": "t", "argument": "a", "min": 5, "max": 1},
            {"resources": ["/x"], "tool": "t", "argument": "b", "action": "clamp"},
            {"resources": ["/x"], "tool": "t", "argument": "c", "max": "9"},
        ],
        "resources": {"p": "/_system/x"},
        "resource_patterns": [{"slots": "p*", "path": "/s/{name}"}],
        "asign": [],
    }
    assert errors_of(data) == [
        f"asign: unknown key (keys: {', '.join(SECTIONS)})",
        'roles.observer.capabilities[1]: unknown capability "tool.observ" (capabilities: mcp.tools.list, '
        "mcp.tools.call, mcp.resources.read, mcp.prompts.read, mcp.completion.use, tool.observe, tool.control, "
        'broker.audit.read, tool:<name>); did you mean "tool.observe"?',
        "roles.operator.color: unknown key (keys: inherits, capabilities)",
        'roles.operator.inherits[1]: unknown role "admin" (roles: observer, operator)',
        'assign[1].principal: "agent-1" is not a subject (write one of token:<name>, user:<name>, group:<name>, '
        "client:<name>, service:<name>, provider:<name>, anonymous, or * for any caller)",
        'assign[1].resources[0]: pattern "site1/**" must start with "/", e.g. "/site1/line2/pump-1"',
        'assign[2].role: unknown role "operater" (roles: observer, operator)',
        'assign[2].resources[0]: pattern "/a/**/b": "**" stands alone as the last segment ("/site1/**")',
        "deny[0].capabilities: needs at least one entry",
        "limits[0]: min 5 is above max 1",
        'limits[1]: action "clamp" needs min or max to clamp to',
        "limits[2].max: input should be a valid number",
        'resources.p: resource path "/_system/x" is under /_system, which is reserved for the gateway\'s slots',
        'resource_patterns[0].path: "/s/{name}": the only placeholder is {slot}',
    ]


def test_a_bad_key_in_an_entry_hides_nothing_else_wrong_in_it() -> None:
    errors = errors_of(
        minimal(assign=[{"principal": "token:a", "role": "nobody", "resources": ["/x//y"], "resource": "/x"}])
    )
    assert errors == [
        "assign[0].resource: unknown key (keys: principal, role, resources)",
        'assign[0].role: unknown role "nobody" (roles: observer)',
        'assign[0].resources[0]: pattern "/x//y" has an empty segment ("//" or a trailing "/")',
    ]


def test_a_bound_that_is_no_number_is_not_compared_again() -> None:
    # One mistake, one message: "max" in quotes is not also "sets no limit" or "min above max".
    errors = errors_of(minimal(limits=[{"resources": ["/x"], "tool": "t", "argument": "a", "min": 5, "max": "1"}]))
    assert errors == ["limits[0].max: input should be a valid number"]


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        ({}, "limits[0]: sets no limit: give min, max or allowed"),
        ({"min": True}, "limits[0].min: input should be a valid number"),
        ({"max": float("inf")}, "limits[0].max: input should be a finite number"),  # no limit at all
        ({"min": float("nan")}, "limits[0].min: input should be a finite number"),  # compares false with all
        ({"allowed": []}, "limits[0].allowed: needs at least one entry"),
        ({"allowed": ["a"], "action": "clamp", "max": 3}, 'limits[0]: action "clamp" cannot go with allowed'),
        ({"max": 3, "action": "cap"}, "limits[0].action: input should be 'refuse' or 'clamp'"),
        ({"max": 3, "argument": ""}, "limits[0].argument: must not be empty"),
    ],
)
def test_limit_mistakes(limit: dict[str, Any], expected: str) -> None:
    entry = {"resources": ["/x"], "tool": "t", "argument": "a", **limit}
    errors = errors_of(minimal(limits=[entry]))
    assert len(errors) == 1
    assert errors[0].startswith(expected)


def test_missing_keys_and_wrong_shapes_are_named() -> None:
    errors = errors_of({"roles": {"r": "tool.observe"}, "assign": [{"role": "r"}], "deny": {"principal": "*"}})
    assert errors == [
        "roles.r: should be a table",
        "assign[0].principal: missing (required)",
        "assign[0].resources: missing (required)",
        "deny: an array of tables, [[deny]]",
    ]


@pytest.mark.parametrize(
    ("roles", "cycles"),
    [
        ({"a": ["a"]}, ["roles.a.inherits: inheritance cycle a -> a"]),
        ({"a": ["b"], "b": ["a"]}, ["roles.a.inherits: inheritance cycle a -> b -> a"]),
        (
            {"x": ["c"], "c": ["b"], "b": ["a"], "a": ["c"], "d": ["d", "a"]},
            ["roles.a.inherits: inheritance cycle a -> c -> b -> a", "roles.d.inherits: inheritance cycle d -> d"],
        ),
        ({"a": ["b", "c"], "b": ["c"], "c": []}, []),
    ],
)
def test_inheritance_cycles_are_each_reported_once(roles: dict[str, list[str]], cycles: list[str]) -> None:
    data = {"roles": {name: {"inherits": parents} for name, parents in roles.items()}}
    if cycles:
        assert sorted(errors_of(data)) == sorted(cycles)
    else:
        check_policy(data)


def test_inline_errors_are_located_under_policy_and_listed_by_load_config(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        '[policy.roles.observer]\ncapabilities = ["mcp.tools.lst"]\n'
        '[[policy.assign]]\nprincipal = "token:a"\nrole = "operater"\nresources = ["/x"]\n',
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as caught:
        load_config(config, environ={})
    assert str(caught.value).splitlines() == [
        f"config file {config}: setting 'policy': 2 errors:",
        '  policy.roles.observer.capabilities[0]: unknown capability "mcp.tools.lst" (capabilities: mcp.tools.list, '
        "mcp.tools.call, mcp.resources.read, mcp.prompts.read, mcp.completion.use, tool.observe, tool.control, "
        'broker.audit.read, tool:<name>); did you mean "mcp.tools.list"?',
        '  policy.assign[0].role: unknown role "operater" (roles: observer)',
    ]


def test_load_config_reads_and_checks_the_named_policy_file(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    config = tmp_path / "gateway.toml"
    config.write_text(f'[policy]\nfile = "{policy}"\n', encoding="utf-8")
    loaded = load_config(config, environ={})
    assert loaded.policy is not None and loaded.policy.file == str(policy)
    assert load_policy(loaded.policy).resource_of("pump-1") == "/site1/line2/pump-1"

    policy.write_text('[[assign]]\nprincipal = "token:a"\nrole = "ghost"\nresources = ["/x"]\n', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(config, environ={})
    assert str(caught.value) == (
        f"config file {config}: setting 'policy.file': policy file {policy}: "
        'assign[0].role: unknown role "ghost" (roles: none defined)'
    )
    missing = tmp_path / "nowhere.toml"
    with pytest.raises(
        ConfigError,
        match=f"environment variable MCP_GATEWAY_POLICY__FILE: setting 'policy.file': policy file {missing}: not found",
    ):
        load_config(environ={"MCP_GATEWAY_POLICY__FILE": str(missing)})


def test_policy_config_is_a_file_or_inline_keys_never_both(tmp_path: Path) -> None:
    assert PolicyConfig(file="p.toml").inline() == {}
    assert PolicyConfig.model_validate({"roles": {}}).inline() == {"roles": {}}
    with pytest.raises(ValueError, match=r"either file = \"p.toml\" or the policy's keys inline \(assign\), not both"):
        PolicyConfig.model_validate({"file": "p.toml", "assign": []})
    config = tmp_path / "gateway.toml"
    config.write_text("[policy]\nfil = 'p.toml'\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"unknown setting 'policy\.fil'"):
        load_config(config, environ={})
    assert load_config(environ={}).policy is None


def test_a_policy_file_that_cannot_be_read_names_itself(tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("[roles\n", encoding="utf-8")
    with pytest.raises(PolicyError, match=f"policy file {broken}: invalid TOML"):
        load_policy(broken)
    with pytest.raises(PolicyError, match=f"policy file {tmp_path}: not readable"):
        load_policy(tmp_path)


# --- decisions -----------------------------------------------------------------------------------------


def test_the_reason_of_a_deny_says_who_what_where_which_rule_and_what_to_ask_for(policy: Policy) -> None:
    decision = policy.decide(call(AGENT, "pump-3", "stop"))
    assert not decision.allowed
    assert decision.reason == (
        'Forbidden: token:agent-1 may not call tool "stop" on /site1/line2/pump-3 (deny[0]); '
        "ask the operator for tool:stop or tool.control there"
    )
    assert (decision.rules, decision.resource, decision.capability) == (
        ("deny[0]",),
        "/site1/line2/pump-3",
        "tool:stop",
    )


def test_denies_win_over_every_grant(policy: Policy) -> None:
    # agent-1 holds tool:start on line2 (assign[2]); operators hold tool.control on pumps (assign[1]).
    both = AGENT | {"group:operators"}
    assert policy.decide(call(both, "pump-3", "start")).allowed
    assert not policy.decide(call(both, "pump-3", "stop")).allowed  # deny[0], although operator grants control
    assert policy.decide(call(both, "pump-3", "open")).allowed  # the deny names one tool only
    denied = policy.decide(call(ALICE, "pump-9", "start"))  # deny[1]: tool.control, the class of "start"
    assert (denied.allowed, denied.rules) == (False, ("deny[1]",))
    assert policy.decide(call(ALICE, "pump-9", "read", read_only=True)).allowed  # observe tools are not denied


def test_a_deny_of_a_tool_class_covers_a_tool_granted_by_name() -> None:
    policy = Policy(
        check_policy(
            {
                "roles": {"r": {"capabilities": ["mcp.tools.call", "tool:start"]}},
                "assign": [{"principal": "token:a", "role": "r", "resources": ["/**"]}],
                "deny": [{"principal": "*", "capabilities": ["tool.control"], "resources": ["/p"]}],
            }
        )
    )
    assert policy.decide(call(frozenset({"token:a"}), "q", "start")).allowed
    refused = policy.decide(call(frozenset({"token:a"}), "p", "start"))
    assert (refused.allowed, refused.rules, refused.capability) == (False, ("deny[0]",), "tool.control")


def test_without_a_grant_the_default_refuses_and_says_what_is_missing(policy: Policy) -> None:
    refused = policy.decide(call(AGENT, "pump-1", "set_speed"))
    assert refused.reason == (
        'Forbidden: token:agent-1 may not call tool "set_speed" on /site1/line2/pump-1 '
        "(no role of theirs there grants tool:set_speed or tool.control); "
        "ask the operator for tool:set_speed or tool.control there"
    )
    assert (refused.rules, refused.capability) == (("default",), "tool.control")
    stranger = policy.decide(call(frozenset({"token:other"}), "pump-1", "read", read_only=True))
    assert "(no role of theirs there grants mcp.tools.call); ask the operator for mcp.tools.call and" in (
        stranger.reason
    )
    assert stranger.capability == "mcp.tools.call"


def test_inherited_capabilities_are_held(policy: Policy) -> None:
    allowed = policy.decide(call(ALICE, "pump-1", "read", read_only=True))  # tool.observe comes from observer
    assert (allowed.allowed, allowed.rules, allowed.capability) == (True, ("assign[1]",), "tool.observe")
    assert policy.decide(Ask(ALICE, "pump-1", "resources/read")).allowed
    assert not policy.decide(Ask(ALICE, "pump-1", "completion/complete")).allowed  # no role grants it


def test_the_rules_of_an_allowed_call_name_both_grants(policy: Policy) -> None:
    allowed = policy.decide(call(AGENT, "pump-4", "start"))
    # mcp.tools.call first granted by assign[0] (observer), tool:start by assign[2] (starter)
    assert (allowed.allowed, allowed.rules, allowed.capability) == (True, ("assign[0]", "assign[2]"), "tool:start")
    assert allowed.reason == 'token:agent-1 may call tool "start" on /site1/line2/pump-4 (assign[0], assign[2])'


@pytest.mark.parametrize(
    ("read_only", "observer_may"),
    [(True, True), (False, False), (None, False)],  # unknown annotations: a control tool
)
def test_tool_classes_follow_the_read_only_hint(policy: Policy, read_only: bool | None, observer_may: bool) -> None:
    decision = policy.decide(call(AGENT, "pump-1", "anything", read_only))
    assert decision.allowed is observer_may
    assert decision.capability == ("tool.observe" if read_only else "tool.control")


def test_the_star_principal_is_any_caller_the_anonymous_one_included() -> None:
    policy = Policy(check_policy(minimal()))
    for subjects in (frozenset({"anonymous"}), AGENT, frozenset()):
        assert policy.decide(call(subjects, "x", "read", read_only=True)).allowed
    assert not policy.decide(call(frozenset({"anonymous"}), "x", "write")).allowed


def test_methods_map_to_capabilities_and_the_rest_are_decided_by_kind() -> None:
    policy = Policy(
        check_policy(
            {
                "roles": {"r": {"capabilities": ["mcp.prompts.read"]}},
                "assign": [{"principal": "*", "role": "r", "resources": ["/**"]}],
            }
        )
    )
    nobody = frozenset({"anonymous"})
    expected = {
        "tools/list": (False, "mcp.tools.list"),
        "resources/list": (False, "mcp.resources.read"),
        "resources/templates/list": (False, "mcp.resources.read"),
        "resources/subscribe": (False, "mcp.resources.read"),
        "prompts/get": (True, "mcp.prompts.read"),
        "prompts/list": (True, "mcp.prompts.read"),
        "completion/complete": (False, "mcp.completion.use"),
        "initialize": (True, ""),
        "ping": (True, ""),
        "notifications/initialized": (True, ""),
        "server/discover": (True, ""),
        "logging/setLevel": (True, "mcp.prompts.read"),  # any MCP capability held on the slot
        "tools/search": (False, ""),  # no capability decides it: not relayed under a policy
        "vendor/reboot": (False, ""),
    }
    found = {}
    for method in expected:
        decision = policy.decide(Ask(nobody, "x", method))
        found[method] = (decision.allowed, decision.capability)
    assert found == expected
    assert policy.decide(Ask(nobody, "x", "ping")).rules == ("always",)
    assert (
        "relays only the methods of MCP's governed families" in policy.decide(Ask(nobody, "x", "vendor/reboot")).reason
    )
    no_rights = Policy(check_policy({"roles": {"r": {"capabilities": ["mcp.tools.list"]}}}))
    level = no_rights.decide(Ask(nobody, "x", "logging/setLevel"))
    assert not level.allowed and "may not set the log level on /x" in level.reason
    listing = policy.decide(Ask(nobody, "x", "tools/list"))
    assert listing.reason == (
        "Forbidden: anonymous may not list tools on /x (no role of theirs there grants mcp.tools.list); "
        "ask the operator for mcp.tools.list there"
    )


def test_groups_and_clients_of_an_access_token_are_subjects() -> None:
    oauth = Principal("alice", "oauth", frozenset({"mcp"}))
    claims = {"groups": ["operators", 7, "", "night-shift"], "azp": "console"}
    assert subjects_of(oauth, claims) == {"user:alice", "group:operators", "group:night-shift", "client:console"}
    assert subjects_of(oauth, {"client_id": "cli", "groups": "operators"}) == {"user:alice", "client:cli"}
    assert subjects_of(oauth) == {"user:alice"}
    assert subjects_of(Principal("agent-1", "token")) == {"token:agent-1"}
    assert subjects_of(Principal("bridge", "hmac")) == {"service:bridge"}
    assert subjects_of(ANONYMOUS) == {"anonymous"}
    # a token's own claims never add groups: only an OAuth access token carries them
    assert subjects_of(Principal("agent-1", "token"), claims) == {"token:agent-1"}


def test_a_group_assignment_applies_to_its_members_only(policy: Policy) -> None:
    member = subjects_of(Principal("alice", "oauth"), {"groups": ["operators"]})
    outsider = subjects_of(Principal("bob", "oauth"), {"groups": ["visitors"]})
    assert policy.decide(call(member, "pump-2", "start")).allowed
    assert not policy.decide(call(outsider, "pump-2", "start")).allowed
    assert not policy.decide(call(member, "valve-1", "start")).allowed  # /site2/valve-1: outside the grant


def test_slots_map_to_resources_exact_broker_patterns_then_default() -> None:
    policy = Policy(
        check_policy(
            {
                "resources": {"pump-1": "/plant/special", "_broker": "/plant/broker"},
                "resource_patterns": [
                    {"slots": "pump-*", "path": "/site1/line2/{slot}"},
                    {"slots": "pump-1*", "path": "/never"},
                    {"slots": "*", "path": "/other/{slot}/x"},
                ],
            }
        )
    )
    assert policy.resource_of("pump-1") == "/plant/special"  # exact first
    assert policy.resource_of("_broker") == "/plant/broker"  # an exact mapping may move the broker
    assert policy.resource_of("pump-12") == "/site1/line2/pump-12"  # first matching pattern
    assert policy.resource_of("valve") == "/other/valve/x"
    assert policy.resource_of("a/b") == "/other/a%2Fb/x"
    bare = Policy(check_policy({"resource_patterns": [{"slots": "*", "path": "/all/{slot}"}]}))
    assert bare.resource_of("_broker") == "/_system/broker"  # no pattern moves the broker
    assert bare.resource_of("x") == "/all/x"
    assert Policy(check_policy({})).resource_of("pump-1") == "/pump-1"
    assert Policy(check_policy({})).resource_of("x/y") == "/x%2Fy"


def test_limits_for_a_call_are_those_of_its_tool_at_its_resource(policy: Policy) -> None:
    clamp = ArgumentLimit("speed_rpm", 300.0, 2000.0, None, "clamp", "policy limits[0]", "limits[0]")
    mode = ArgumentLimit("mode", None, None, ("low", "high"), "refuse", "policy limits[1]", "limits[1]")
    assert policy.decide(call(ALICE, "pump-1", "set_speed")).limits == (clamp,)
    assert policy.decide(call(ALICE, "pump-1", "set_mode")).limits == (mode,)
    assert policy.decide(call(ALICE, "pump-2", "set_speed")).limits == ()  # limits[0] names pump-1 only
    assert policy.decide(call(ALICE, "valve", "set_speed")).limits == (
        ArgumentLimit("speed_rpm", None, 10.0, None, "refuse", "policy limits[2]", "limits[2]"),
    )
    assert policy.decide(Ask(ALICE, "pump-1", "tools/list")).limits == ()


def test_a_decision_asked_again_is_the_same_object(policy: Policy) -> None:
    first = policy.decide(call(AGENT, "pump-3", "stop"))
    assert policy.decide(call(AGENT, "pump-3", "stop")) is first
    assert policy.decide(call(AGENT, "pump-3", "stop", read_only=True)) is not first


def test_may_see_tool_agrees_with_decide_everywhere(policy: Policy) -> None:
    callers = [AGENT, ALICE, AGENT | ALICE, frozenset({"anonymous"}), frozenset()]
    slots = ["pump-1", "pump-3", "pump-9", "valve", "_broker"]
    tools = ["stop", "start", "set_speed", "read"]
    checked = 0
    for subjects, slot, tool, read_only in itertools.product(callers, slots, tools, (True, False, None)):
        expected = policy.decide(call(subjects, slot, tool, read_only)).allowed
        assert policy.may_see_tool(subjects, slot, tool, read_only) is expected, (subjects, slot, tool, read_only)
        checked += expected
    assert 0 < checked < len(callers) * len(slots) * len(tools) * 3  # both answers were exercised


def test_the_caches_stay_bounded(policy: Policy, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_module, "MAX_CACHED", 8)
    for number in range(50):
        assert policy.decide(call(frozenset({f"token:t{number}"}), f"slot-{number}", "x")).allowed is False
    assert len(policy._places) <= 8
    assert len(policy._grants) <= 8
    assert len(policy._decisions) <= 8
    assert policy.resource_of("pump-1") == "/site1/line2/pump-1"  # still right after starting again


def test_a_reason_names_the_caller_by_its_own_identity_not_a_group(policy: Policy) -> None:
    reason = policy.decide(call(ALICE, "pump-9", "stop")).reason
    assert reason.startswith('Forbidden: user:alice may not call tool "stop"')


def test_explain_lists_the_decision_the_resource_every_rule_and_the_limits(policy: Policy) -> None:
    lines = policy.explain(call(AGENT | {"group:operators"}, "pump-1", "set_speed"))
    assert lines == [
        'allowed: token:agent-1 may call tool "set_speed" on /site1/line2/pump-1 (assign[0], assign[1])',
        "caller: group:operators, token:agent-1",
        'resource: /site1/line2/pump-1 (slot "pump-1", by resources."pump-1")',
        "capability: mcp.tools.call, and tool:set_speed or tool.control (a control tool)",
        "rules:",
        "  assign[0] token:agent-1 as observer on /site1/**: applies, grants mcp.tools.call",
        "  assign[1] group:operators as operator on /site1/line2/pump-*: applies, grants mcp.tools.call, tool.control",
        "  assign[2] token:agent-1 as starter on /site1/line2/*: applies, grants mcp.tools.call",
        "  deny[0] token:agent-1 tool:stop on /site1/line2/pump-3: not this resource",
        "  deny[1] group:operators tool.control on /site1/line2/pump-9: not this resource",
        'limits on "set_speed":',
        "  limits[0] on /site1/line2/pump-1: applies; speed_rpm min 300, max 2000 (clamp)",
        "  limits[2] on /site2/**: not this resource; speed_rpm max 10 (refuse)",
    ]


def test_explain_says_which_rule_does_not_apply_and_why(policy: Policy) -> None:
    lines = policy.explain(call(AGENT, "pump-3", "stop"))
    assert lines[0].startswith('denied: Forbidden: token:agent-1 may not call tool "stop"')
    assert "  assign[1] group:operators as operator on /site1/line2/pump-*: not this caller" in lines
    assert "  deny[0] token:agent-1 tool:stop on /site1/line2/pump-3: applies, denies tool:stop" in lines
    assert lines[-1] == 'limits on "stop": none'
    ping = policy.explain(Ask(AGENT, "valve", "ping"))
    assert ping == [
        "allowed: ping is always allowed",
        "caller: token:agent-1",
        'resource: /site2/valve (slot "valve", by resource_patterns[1])',
        "capability: none (ping is always allowed)",
    ]
    vendor = policy.explain(Ask(AGENT, "valve", "vendor/reboot"))
    assert vendor[0].startswith("denied: Forbidden: vendor/reboot is not relayed on /site2/valve")
    assert vendor[-1].startswith("capability: none grants it (under a [policy] the gateway relays only")
    level = policy.explain(Ask(AGENT, "valve", "logging/setLevel"))
    assert level[-1] == (
        "capability: any of mcp.tools.list, mcp.tools.call, mcp.resources.read, mcp.prompts.read, "
        "mcp.completion.use (the slot's log level is shared)"
    )


def test_a_pattern_with_many_stars_in_a_segment_matches_like_fnmatch_without_backtracking() -> None:
    """Stars take the first occurrence of the chunk after them (atomic groups): a long slot name
    against "*-*-*-…x" no longer backtracks polynomially (8 stars took 43 s), and what matches is
    what fnmatch matches within a segment."""
    many = compile_pattern("/" + "*-" * 12 + "x")
    assert not many.matches("/" + "-" * 64)  # returns at once; before, this took hours
    assert many.matches("/" + "-" * 64 + "x")
    chooser = random.Random(7)
    for _ in range(3000):
        glob = "".join(chooser.choice("ab-*") for _ in range(chooser.randint(1, 7)))
        if "**" in glob:
            continue
        name = "".join(chooser.choice("ab-") for _ in range(chooser.randint(0, 9)))
        assert compile_pattern(f"/{glob}").matches(f"/{name}") == fnmatch.fnmatchcase(name, glob), (glob, name)


def test_a_tool_written_like_a_pattern_loads_with_a_warning() -> None:
    # Rules name one tool exactly: `self.audio_speaker.*` denies nothing of the speaker's tools, which a
    # maker would not guess; a provider may still list an odd name such as `dump[all]`, so it loads.
    document = check_policy(
        minimal(
            deny=[{"principal": "*", "capabilities": ["tool:self.audio_speaker.*"], "resources": ["/**"]}],
            limits=[{"resources": ["/**"], "tool": "self.audio_speaker.*", "argument": "volume", "max": 20}],
            execution_limits=[
                {"id": "speaker", "match": {"capability": "tool:self.audio_*"}, "calls": {"max": 5, "window_ms": 60000}}
            ],
        )
    )
    assert len(document.warnings) == 3, document.warnings
    assert document.warnings[0].startswith('deny[0].capabilities[0]: "tool:self.audio_speaker.*" looks like a pattern')
    assert document.warnings[1].startswith('limits[0].tool: "tool = self.audio_speaker.*" looks like a pattern')
    assert 'it applies only to a tool named "self.audio_speaker.*" as written' in document.warnings[0]
    assert document.warnings[2].startswith('execution_limits[0].match.capability: "tool:self.audio_*" looks like a')
    exact = {"principal": "*", "capabilities": ["tool:self.audio_speaker.set_volume"], "resources": ["/**"]}
    assert check_policy(minimal(deny=[exact])).warnings == ()
