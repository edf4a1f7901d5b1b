"""The refusal of subscriptions over limits.max_subscribed_uris_per_slot names the right cause: the
request's own size, or the URIs the slot holds already."""

from __future__ import annotations

from gateway.config.limits import LimitsConfig
from gateway.core.errors import RpcError
from gateway.core.subscription_bounds import check_new

LIMITS = LimitsConfig(max_subscribed_uris_per_slot=256)


def refused_message(subscribed: list[str], asked: list[str]) -> str:
    refused = check_new(LIMITS, "rss", subscribed, asked)
    assert refused is not None
    limit, error = refused
    assert limit == "max_subscribed_uris_per_slot"
    assert isinstance(error, RpcError)
    assert error.data is not None and error.data["setting"] == "limits.max_subscribed_uris_per_slot"
    return error.message


def uris(count: int, prefix: str = "file:///r") -> list[str]:
    return [f"{prefix}{index}" for index in range(count)]


def test_a_request_over_the_bound_on_its_own_is_told_to_ask_for_fewer() -> None:
    assert refused_message([], uris(300)) == (
        "The request asks for 300 resource URIs, at most 256 per slot (limits.max_subscribed_uris_per_slot): "
        "ask for fewer URIs"
    )
    # Repeats of one URI count once.
    assert check_new(LIMITS, "rss", [], uris(200) * 2) is None


def test_a_request_that_fits_alone_is_refused_for_what_the_slot_holds() -> None:
    assert refused_message(uris(200, "file:///held"), uris(100)) == (
        'Slot "rss" already has 200 subscribed resource URIs, at most 256 (limits.max_subscribed_uris_per_slot): '
        "unsubscribe from URIs no longer needed"
    )
