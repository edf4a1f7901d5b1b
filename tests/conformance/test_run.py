"""How the conformance runner judges a run: what fails CI, what is excused, what is a stale list entry.

The runner itself needs node and the suite (CI runs it); its judgement is plain Python and is pinned
down here on made-up results, so a change that would let a gateway failure through shows up in
pytest everywhere.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from gateway.config import GatewayConfig
from tests.conformance.run import (
    EXPECTED_FAILURES,
    LEGS,
    ORDINARY,
    PENDING,
    SUITES,
    Entry,
    Leg,
    Run,
    Unrunnable,
    Verdict,
    chosen_legs,
    gateway_config,
    judge,
    read_list,
)

SESSION = SUITES[0]


def run(leg: str, **checks: str) -> Run:
    """A run whose checks are given as scenario__check=STATUS."""
    result = Run(SESSION, leg)
    for key, status in checks.items():
        scenario, check = key.split("__")
        result.checks[(scenario, check)] = status
        result.summary[scenario] = (0, 0)
    return result


def verdict_of(
    gateway: Run, baseline: Run | None, expected: list[Entry] | None = None, pending: list[Entry] | None = None
) -> Verdict:
    verdict = Verdict()
    judge(gateway, baseline, expected or [], pending or [], verdict)
    return verdict


BASELINE = run("baseline", tools__list="SUCCESS", sampling__call="SUCCESS", streams__json="SUCCESS")


def test_a_gateway_failure_nobody_listed_is_unexpected() -> None:
    verdict = verdict_of(run("ws", tools__list="FAILURE", sampling__call="SUCCESS", streams__json="SUCCESS"), BASELINE)
    assert len(verdict.unexpected) == 1
    assert "tools:list FAILURE" in verdict.unexpected[0]


@pytest.mark.parametrize("status", ["WARNING", "SKIPPED", None])
def test_worse_than_the_fixture_alone_is_a_deviation_even_without_a_failure(status: str | None) -> None:
    checks = {"tools__list": "SUCCESS", "sampling__call": "SUCCESS"}
    if status is not None:
        checks["streams__json"] = status
    verdict = verdict_of(run("ws", **checks), BASELINE)
    assert len(verdict.unexpected) == 1
    assert f"streams:json {status or 'MISSING'}" in verdict.unexpected[0]


@pytest.mark.parametrize("status", ["INFO", "WARNING"])
def test_info_or_warning_where_the_fixture_passed_is_a_deviation(status: str) -> None:
    # How the session era's 40-vs-39 went unnoticed: the gateway answered JSON where the fixture alone
    # streams SSE, and the suite said INFO ("SSE streaming is optional") instead of SUCCESS.
    verdict = verdict_of(run("ws", tools__list="SUCCESS", sampling__call="SUCCESS", streams__json=status), BASELINE)
    assert len(verdict.unexpected) == 1
    assert f"streams:json {status}" in verdict.unexpected[0]
    assert "baseline SUCCESS" in verdict.unexpected[0]


def test_info_where_the_fixture_alone_says_info_too_is_no_deviation() -> None:
    baseline = run("baseline", tools__list="SUCCESS", streams__json="INFO")
    assert verdict_of(run("ws", tools__list="SUCCESS", streams__json="INFO"), baseline) == Verdict()
    assert verdict_of(run("ws", tools__list="SUCCESS", streams__json="SUCCESS"), baseline) == Verdict()


def test_a_pending_gateway_feature_is_excused_and_reported() -> None:
    pending = [Entry("sampling", None, "relay")]
    verdict = verdict_of(
        run("ws", tools__list="SUCCESS", sampling__call="FAILURE", streams__json="SUCCESS"), BASELINE, [], pending
    )
    assert not verdict.unexpected
    assert not verdict.stale
    assert len(verdict.pending) == 1


def test_a_pending_entry_that_passes_is_stale() -> None:
    pending = [Entry("sampling", "call", "relay")]
    verdict = verdict_of(
        run("ws", tools__list="SUCCESS", sampling__call="SUCCESS", streams__json="SUCCESS"), BASELINE, [], pending
    )
    assert len(verdict.stale) == 1
    assert "sampling:call is listed as pending" in verdict.stale[0]


def test_a_check_level_entry_excuses_only_that_check() -> None:
    pending = [Entry("sampling", "other", "relay")]
    verdict = verdict_of(
        run("ws", tools__list="SUCCESS", sampling__call="FAILURE", streams__json="SUCCESS"), BASELINE, [], pending
    )
    assert len(verdict.unexpected) == 1
    assert len(verdict.stale) == 1


def test_pending_gateway_features_never_excuse_the_fixture_alone() -> None:
    verdict = verdict_of(run("baseline", sampling__call="FAILURE"), None, [], [Entry("sampling", None, "relay")])
    assert len(verdict.unexpected) == 1
    assert not verdict.stale


def test_expected_failures_excuse_every_leg_and_go_stale_when_they_pass() -> None:
    expected = [Entry("tasks", None, "extension")]
    assert verdict_of(run("baseline", tasks__life="FAILURE"), None, expected).expected
    assert verdict_of(run("ws", tasks__life="FAILURE"), run("baseline", tasks__life="FAILURE"), expected).expected
    assert verdict_of(run("baseline", tasks__life="SUCCESS"), None, expected).stale


TASKS = [Entry("tasks", None, "extension")]
TASKS_BASELINE = run("baseline", tasks__life="FAILURE", tasks__caps="SUCCESS", tasks__hint="WARNING")


def test_a_listed_scenario_excuses_only_the_checks_that_fail_on_the_baseline_too() -> None:
    """The gateway breaking a check that passes for the fixture alone is a failure, listed scenario or not."""
    gateway = run("ws", tasks__life="FAILURE", tasks__caps="FAILURE", tasks__hint="WARNING")
    verdict = verdict_of(gateway, TASKS_BASELINE, TASKS)
    assert len(verdict.unexpected) == 1
    assert "tasks:caps FAILURE" in verdict.unexpected[0]
    assert "baseline SUCCESS" in verdict.unexpected[0]
    assert len(verdict.expected) == 1 and "tasks:life FAILURE" in verdict.expected[0]
    assert not verdict.stale


def test_a_check_failing_on_the_baseline_of_a_listed_scenario_is_expected() -> None:
    gateway = run("ws", tasks__life="FAILURE", tasks__caps="SUCCESS", tasks__hint="WARNING")
    verdict = verdict_of(gateway, TASKS_BASELINE, TASKS)
    assert not verdict.unexpected and not verdict.stale
    assert len(verdict.expected) == 1 and "tasks:life FAILURE" in verdict.expected[0]


@pytest.mark.parametrize(
    ("status", "why"), [("FAILURE", "baseline WARNING"), ("SKIPPED", "baseline SUCCESS"), ("INFO", "baseline SUCCESS")]
)
def test_worse_than_the_baseline_in_a_listed_scenario_is_unexpected(status: str, why: str) -> None:
    checks = {"tasks__life": "FAILURE", "tasks__caps": "SUCCESS", "tasks__hint": "WARNING"}
    checks["tasks__hint" if why == "baseline WARNING" else "tasks__caps"] = status
    verdict = verdict_of(run("ws", **checks), TASKS_BASELINE, TASKS)
    assert len(verdict.unexpected) == 1 and why in verdict.unexpected[0]


def test_a_check_only_the_gateway_leg_fails_in_a_listed_scenario_is_unexpected() -> None:
    gateway = run("ws", tasks__life="FAILURE", tasks__caps="SUCCESS", tasks__hint="WARNING", tasks__new="FAILURE")
    verdict = verdict_of(gateway, TASKS_BASELINE, TASKS)
    assert len(verdict.unexpected) == 1
    assert "tasks:new FAILURE" in verdict.unexpected[0] and "not on the baseline" in verdict.unexpected[0]


def test_a_check_listed_by_itself_is_excused_even_where_the_baseline_passes() -> None:
    gateway = run("ws", tasks__life="FAILURE", tasks__caps="FAILURE", tasks__hint="WARNING")
    verdict = verdict_of(gateway, TASKS_BASELINE, [Entry("tasks", "life", "x"), Entry("tasks", "caps", "y")])
    assert not verdict.unexpected and not verdict.stale
    assert len(verdict.expected) == 2


def test_an_entry_for_a_scenario_this_suite_did_not_run_is_not_stale() -> None:
    verdict = verdict_of(BASELINE, None, [Entry("tasks", None, "extension")])
    assert verdict == Verdict()


def test_every_list_entry_carries_a_reason(tmp_path: Path) -> None:
    listing = tmp_path / "list.txt"
    listing.write_text("# a comment\n\nscenario-a  # why\nscenario-b:check-1   # why not\n")
    assert read_list(listing) == [Entry("scenario-a", None, "why"), Entry("scenario-b", "check-1", "why not")]
    listing.write_text("scenario-c\n")
    with pytest.raises(Unrunnable, match="needs a '# reason'"):
        read_list(listing)


def test_the_shipped_lists_parse() -> None:
    expected = read_list(EXPECTED_FAILURES)
    assert expected and all(entry.scenario.startswith("tasks-") for entry in expected)
    ordinary = read_list(ORDINARY.expected)
    assert {entry.scenario for entry in ordinary} == {entry.scenario for entry in expected} | {"json-schema-2020-12"}
    assert read_list(PENDING) == []  # the gateway implements every feature the suite checks


@pytest.mark.parametrize("leg", [leg for leg in LEGS if leg.way != "baseline"], ids=lambda leg: leg.name)
def test_each_gateway_leg_gets_a_valid_configuration_reaching_its_fixture_its_way(leg: Leg) -> None:
    config = load_config_text(gateway_config(leg, 3999, 4001))
    assert config.port == 3999
    if leg.way in ("ws", "mux"):
        slot = config.slots.declared[leg.name]
        assert slot.era == leg.era
    elif leg.way == "stdio":
        (upstream,) = config.upstreams.stdio
        assert (upstream.name, upstream.era) == (leg.name, leg.era)
        assert upstream.command[-2:] == [leg.fixture.module, "--stdio"]
    else:
        (remote,) = config.upstreams.remote
        assert remote.name == leg.name
        expected = {"remote": "auto", "remote-session": "streamable-http", "remote-sse": "sse"}[leg.way]
        assert remote.transport == expected
        assert remote.url.endswith("/sse" if expected == "sse" else "/mcp")


def test_every_fixture_has_a_baseline_and_legs_can_be_chosen() -> None:
    assert {leg.fixture.name for leg in LEGS if leg.way == "baseline"} == {"conformance", "ordinary"}
    chosen = [leg.name for leg in chosen_legs("ordinary-stdio,conformance-sse")]
    assert chosen == ["baseline", "conformance-sse", "ordinary", "ordinary-stdio"]
    with pytest.raises(Unrunnable, match="no such leg"):
        chosen_legs("nowhere")


def load_config_text(text: str) -> GatewayConfig:
    return GatewayConfig.model_validate(tomllib.loads(text))
