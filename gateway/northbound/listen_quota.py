"""Who holds the open stateless-era `subscriptions/listen` streams: limits.max_subscriptions for all
callers together and limits.max_subscriptions_per_principal for each one.

A caller is counted as its other stateless-era bounds count it (gateway/policy/caller_pending.py): the
authenticated principal, or the anonymous caller per peer address. A stream over either bound is
refused with JSON-RPC -32000 on HTTP 200, naming the bound (`data.reason`, `data.setting`), and counted
in mcpgw_limit_hits_total; callers with no stream hold no entry.
"""

from __future__ import annotations

from typing import Any

from gateway.core import jsonrpc
from gateway.core.gateway import Gateway
from gateway.core.jsonrpc import JsonObject
from gateway.policy.caller_pending import CallerKey, describe

REASON = "subscription_limit"
"""data.reason of both refusals."""


class ListenQuota:
    """The open listen streams: in all, and per caller."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        limits = gateway.config.limits
        self.max_total = limits.max_subscriptions
        self.max_per_caller = limits.subscriptions_per_principal
        self.per_caller: dict[CallerKey, int] = {}

    def enter(self, caller: CallerKey, request_id: Any) -> JsonObject | None:
        """Count one more stream of `caller`; the error answer instead when a bound is reached (then
        nothing is counted and `leave` must not be called)."""
        held = self.per_caller.get(caller, 0)
        if self.gateway.open_subscriptions >= self.max_total:
            return self._refuse(
                request_id,
                "max_subscriptions",
                self.max_total,
                f"Too many subscriptions/listen streams open on this gateway (limit {self.max_total}, "
                "limits.max_subscriptions); close streams you no longer read, or raise limits.max_subscriptions",
            )
        if held >= self.max_per_caller:
            return self._refuse(
                request_id,
                "max_subscriptions_per_principal",
                self.max_per_caller,
                f"Too many subscriptions/listen streams for {describe(caller)} (limit {self.max_per_caller}, "
                "limits.max_subscriptions_per_principal); close streams you no longer read, "
                "or raise limits.max_subscriptions_per_principal",
                {"caller": describe(caller)},
            )
        self.per_caller[caller] = held + 1
        self.gateway.open_subscriptions += 1
        return None

    def leave(self, caller: CallerKey) -> None:
        self.gateway.open_subscriptions -= 1
        held = self.per_caller[caller] - 1
        if held:
            self.per_caller[caller] = held
        else:
            del self.per_caller[caller]

    def _refuse(
        self, request_id: Any, limit: str, value: int, message: str, extra: JsonObject | None = None
    ) -> JsonObject:
        self.gateway.metrics.limit_hit(limit)
        data: JsonObject = {"reason": REASON, "limit": value, "setting": f"limits.{limit}", **(extra or {})}
        return jsonrpc.error_response(request_id, jsonrpc.UNAVAILABLE, message, data)
