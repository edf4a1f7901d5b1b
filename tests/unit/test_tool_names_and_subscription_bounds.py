"""The pure rules behind two provider-facing bounds: which tool names clients are shown
(gateway/core/tool_names.py) and what a slot's subscribed URIs may add up to (gateway/core/subscription_bounds.py)."""

from __future__ import annotations

import orjson
import pytest

from gateway.config.limits import LimitsConfig
from gateway.core.subscription_bounds import check_new, encoded_list_bytes
from gateway.core.tool_names import name_problem, shown


@pytest.mark.parametrize(
    "name",
    ["get_status", "pump.set-speed", "a" * 128, "naïve", "Pumpe Nr. 1", "温度"],
)
def test_names_a_client_shows_as_written_pass(name: str) -> None:
    assert name_problem(name) is None


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "it is empty"),
        ("a" * 129, "it is 129 characters long, over 128"),
        ("line\nbreak", "it holds a control character, U+000A"),
        ("del\x7f", "it holds a control character, U+007F"),
        ("status\u202e", "it holds the bidirectional control U+202E"),
        ("\u2066isolate", "it holds the bidirectional control U+2066"),
        ("zero\u200bwidth", "it holds a format character, U+200B"),
        ("soft\u00adhyphen", "it holds a format character, U+00AD"),
        ("line\u2028sep", "it holds a line separator, U+2028"),
    ],
)
def test_names_that_would_not_show_as_written_are_named(name: str, problem: str) -> None:
    assert name_problem(name) == problem


def test_a_long_name_is_quoted_by_its_start_and_length() -> None:
    assert shown("a\nb") == "'a\\nb'"
    assert shown("t" * 3000) == f"{'t' * 40!r}… (3000 characters)"


def test_the_encoded_size_is_what_the_listen_request_carries() -> None:
    uris = ["file:///a", 'file:///"quoted"', "file:///ü"]
    assert encoded_list_bytes(uris) == len(orjson.dumps(uris))
    assert encoded_list_bytes([]) == len(orjson.dumps([]))


def test_subscriptions_fit_in_half_the_frame_cap() -> None:
    limits = LimitsConfig(max_frame_bytes=4096)
    first = "file:///" + "y" * 1500
    assert check_new(limits, "dev-1", [], [first]) is None
    assert check_new(limits, "dev-1", [first], [first]) is None  # already subscribed: nothing added
    refused = check_new(limits, "dev-1", [first], ["file:///" + "z" * 1500])
    assert refused is not None
    limit, error = refused
    assert limit == "max_frame_bytes"
    assert error.data == {
        "slot": "dev-1",
        "reason": "subscription_limit",
        "limit": 4096,
        "setting": "limits.max_frame_bytes",
    }


def test_the_per_principal_listen_bound_defaults_to_a_quarter() -> None:
    assert LimitsConfig().max_subscriptions_per_principal == 64
    assert LimitsConfig(max_subscriptions=2).max_subscriptions_per_principal == 1
    assert LimitsConfig(max_subscriptions=2, max_subscriptions_per_principal=2).max_subscriptions_per_principal == 2
