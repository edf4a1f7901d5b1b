"""The bounds on the resource URIs clients subscribe to in one slot (docs/security-limits.md).

The gateway keeps one upstream subscription per URI for all of a slot's clients; a 2026-07-28 provider
is asked for all of them in one `subscriptions/listen` request, which it acknowledges by echoing the
list. So what clients subscribe to must not make that request, or its echo, too large for the provider
link (limits.max_frame_bytes closes a WebSocket link with 1009 and every caller of the slot would lose
it, again at each reconnect): a subscription that would break one of these bounds is refused, with
JSON-RPC -32000 naming the bound (`data.reason` "subscription_limit", `data.setting`), counted in
mcpgw_limit_hits_total, and nothing is subscribed.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Protocol

import orjson

from gateway.core import errors, jsonrpc

REASON = "subscription_limit"


class SubscriptionLimits(Protocol):
    @property
    def max_frame_bytes(self) -> int: ...

    @property
    def max_subscription_uri_bytes(self) -> int: ...

    @property
    def max_subscribed_uris_per_slot(self) -> int: ...


class LimitCounter(Protocol):
    def limit_hit(self, limit: str, times: int = 1) -> None: ...


def listen_budget(max_frame_bytes: int) -> int:
    """Bytes the encoded URI list of one slot may take: half of max_frame_bytes, which leaves the rest
    of the listen request and of the provider's echo of it (envelope, ids, the other kinds asked for)
    ample room within one frame."""
    return max_frame_bytes // 2


def encoded_list_bytes(uris: Iterable[str]) -> int:
    """Size of `uris` as a JSON array, as the listen request carries it."""
    total = 2  # the brackets
    count = 0
    for uri in uris:
        total += len(orjson.dumps(uri))
        count += 1
    return total + max(count - 1, 0)  # the commas


def refusal(slot: str, limit: str, value: int, message: str) -> errors.RpcError:
    data = {"slot": slot, "reason": REASON, "limit": value, "setting": f"limits.{limit}"}
    return errors.RpcError(jsonrpc.UNAVAILABLE, message, data)


def check_new(
    limits: SubscriptionLimits, slot: str, subscribed: Collection[str], new_uris: Collection[str]
) -> tuple[str, errors.RpcError] | None:
    """Whether the slot, already subscribed to `subscribed`, may subscribe to `new_uris` as well: None,
    or the bound's key with the error that refuses them."""
    added = [uri for uri in dict.fromkeys(new_uris) if uri not in subscribed]
    if not added:
        return None
    for uri in added:
        size = len(uri.encode("utf-8", "surrogatepass"))
        if size > limits.max_subscription_uri_bytes:
            bound = limits.max_subscription_uri_bytes
            return "max_subscription_uri_bytes", refusal(
                slot,
                "max_subscription_uri_bytes",
                bound,
                f"Resource URI of {size} bytes; the gateway subscribes to URIs of at most {bound} bytes "
                f"(limits.max_subscription_uri_bytes): subscribe to a shorter URI",
            )
    count = len(subscribed) + len(added)
    if count > limits.max_subscribed_uris_per_slot:
        bound = limits.max_subscribed_uris_per_slot
        requested = len(dict.fromkeys(new_uris))
        if requested > bound:
            # The request alone is over the bound: unsubscribing elsewhere would not make it fit.
            return "max_subscribed_uris_per_slot", refusal(
                slot,
                "max_subscribed_uris_per_slot",
                bound,
                f"The request asks for {requested} resource URIs, at most {bound} per slot "
                f"(limits.max_subscribed_uris_per_slot): ask for fewer URIs",
            )
        return "max_subscribed_uris_per_slot", refusal(
            slot,
            "max_subscribed_uris_per_slot",
            bound,
            f'Slot "{slot}" already has {len(subscribed)} subscribed resource URIs, at most {bound} '
            f"(limits.max_subscribed_uris_per_slot): unsubscribe from URIs no longer needed",
        )
    budget = listen_budget(limits.max_frame_bytes)
    size = encoded_list_bytes([*subscribed, *added])
    if size > budget:
        return "max_frame_bytes", refusal(
            slot,
            "max_frame_bytes",
            limits.max_frame_bytes,
            f'The resource URIs subscribed in slot "{slot}" would take {size} bytes, over half of '
            f"limits.max_frame_bytes ({budget} of {limits.max_frame_bytes}), which the provider's listen "
            "request and its echo must fit in: unsubscribe from URIs no longer needed, or raise limits.max_frame_bytes",
        )
    return None


def admit(
    limits: SubscriptionLimits, metrics: LimitCounter, slot: str, subscribed: Collection[str], uris: Collection[str]
) -> None:
    """Raise the refusal when subscribing `uris` in the slot breaks a bound (counting the hit)."""
    refused = check_new(limits, slot, subscribed, uris)
    if refused is not None:
        limit, error = refused
        metrics.limit_hit(limit)
        raise error
