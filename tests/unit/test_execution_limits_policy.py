"""[[execution_limits]] in a policy: the syntax, and every mistake listed at once with its location."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.config import ConfigError, load_config
from gateway.policy.rules import PolicyError, load_policy
from gateway.policy.rules.capabilities import SPELLINGS
from gateway.policy.rules.checking import check_policy
from gateway.policy.rules.subjects import subject_error

CAPABILITIES = ", ".join(SPELLINGS)
"""As the checker lists them (like subject_error's words), so a new capability or subject kind does not
break the expected messages."""

EXAMPLE = """
[[execution_limits]]
id = "speed-changes-per-agent"
match = { capability = "tool:set_speed", resource = "/site1/**" }
group_by = ["subject"]
calls = { max = 20, window_ms = 3600000 }

[[execution_limits]]
id = "one-start-per-pump"
match = { capability = "tool:start" }
group_by = ["provider"]
concurrency = 1

[[execution_limits]]
id = "lan-operations"
match = { provider = "scanner-*", capability = "network.active" }
budget = { unit = "network-operation", max = 300, window_ms = 60000 }
max_keys = 64
"""


def errors_of(*rules: Any) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        check_policy({"execution_limits": list(rules)})
    return caught.value.errors


def test_the_examples_load_from_a_policy_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(EXAMPLE)
    speed, start, lan = load_policy(path).document.execution_limits
    assert (speed.id, speed.match.capability, speed.match.resource, speed.group_by) == (
        "speed-changes-per-agent",
        "tool:set_speed",
        "/site1/**",
        ["subject"],
    )
    assert speed.calls is not None and (speed.calls.max, speed.calls.window_ms) == (20, 3_600_000)
    assert (start.concurrency, start.group_by, start.rate, start.max_keys) == (1, ["provider"], None, None)
    assert lan.budget is not None and (lan.budget.unit, lan.max_keys) == ("network-operation", 64)


def test_inline_execution_limits_are_checked_by_load_config(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('[[policy.execution_limits]]\nid = "x"\nconcurrency = 0\n')
    with pytest.raises(ConfigError) as caught:
        load_config(config, environ={})
    assert "policy.execution_limits[0].concurrency: 0: at least 1 call in flight" in str(caught.value)


def test_every_mistake_is_listed_at_once() -> None:
    assert errors_of(
        {"id": "fine", "concurrency": 1},
        {
            "id": "fine",
            "match": {"subject": "agent-1", "capability": "tool.contrl", "resource": "site1/**", "provider": "a\nb"},
            "group_by": ["subject", "agent", "subject"],
            "rate": {"max": 0, "window_ms": 0},
            "calls": {"max": 20, "window_ms": 86_400_001},
            "budget": {"unit": "Ops", "max": 1, "window_ms": 1000},
            "max_keys": 0,
        },
        {"id": "nothing"},
        {"id": "bad id!", "concurrency": "2", "groupBy": ["subject"]},
        {"id": "typo", "match": {"subjects": "token:a"}, "calls": {"max": 1, "window": 1000}},
    ) == [
        'execution_limits[1].id: "fine" is the id of execution_limits[0] too; ids are unique',
        "execution_limits[1].rate.max: 0: at least 1",
        "execution_limits[1].rate.window_ms: 0: from 1 to 86400000 (one day)",
        "execution_limits[1].calls.window_ms: 86400001: from 1 to 86400000 (one day)",
        'execution_limits[1].budget.unit: "Ops": a lowercase name such as "network-operation" '
        '(a-z, 0-9, ".", "_", "-")',
        "execution_limits[1].max_keys: 0: from 1 to 1000000",
        'execution_limits[1].group_by[1]: unknown "agent" (group_by takes subject, provider, capability, resource)',
        'execution_limits[1].group_by[2]: "subject" is listed twice',
        f"execution_limits[1].match.subject: {subject_error('agent-1')}",
        "execution_limits[1].match.provider: 'a\\nb' holds control characters",
        'execution_limits[1].match.capability: unknown capability "tool.contrl" (capabilities: '
        + CAPABILITIES
        + '); did you mean "tool.control"?',
        'execution_limits[1].match.resource: pattern "site1/**" must start with "/", e.g. "/site1/line2/pump-1"',
        "execution_limits[2]: sets no limit: give rate, calls, concurrency or budget",
        "execution_limits[3].concurrency: input should be a valid integer",
        "execution_limits[3].groupBy: unknown key "
        "(keys: id, match, group_by, rate, calls, concurrency, budget, max_keys)",
        'execution_limits[3].id: "bad id!": letters, digits, ".", "_" and "-" only, at most 128',
        "execution_limits[4].match.subjects: unknown key (keys: subject, provider, capability, resource)",
        "execution_limits[4].calls.window_ms: missing (required)",
        "execution_limits[4].calls.window: unknown key (keys: max, window_ms)",
    ]


def test_a_rule_may_match_a_capability_a_provider_declares() -> None:
    rule = {"id": "lan", "match": {"capability": "network.active"}, "budget": {"unit": "op", "max": 1, "window_ms": 1}}
    assert check_policy({"execution_limits": [rule]}).execution_limits[0].match.capability == "network.active"


def test_an_unknown_top_level_key_lists_execution_limits_among_the_keys() -> None:
    with pytest.raises(PolicyError) as caught:
        check_policy({"execution_limit": []})
    assert "execution_limits" in caught.value.errors[0]
