"""[limits] at run time: the request rate buckets, the connection caps, the slot table's bounds, the
device registry's bound, the bounds of the calls waiting for approval and of the confirmations answered.

Those are read where they are enforced, so swapping them changes what the next request, connection or
slot meets. Every other bound of [limits] is built into a session, a stream, a parser or the listener at
start, and needs a restart (the refusal names it). Rate limiting turned on when it was off at start needs
one too: the entry was built without the check.
"""

from __future__ import annotations

from gateway.config import GatewayConfig, LimitsConfig
from gateway.core.broker.scrape import limit_values
from gateway.core.naming import RETIRED_PER_SLOT
from gateway.policy.rate_limit import BucketSpec, RateSnapshot
from gateway.reload.context import Context, Prepared
from gateway.reload.diff import change_text, changed_paths, owner, value_at
from gateway.reload.report import Refused

OWNS = (
    "limits.rate",
    "limits.connections.max_connections",
    "limits.connections.max_per_peer",
    "limits.connections.per_peer_exempt",
    "limits.connections.max_refusing",
    "limits.connections.fd_reserve",
    "limits.max_slots",
    "limits.max_slots_per_peer",
    "limits.vacant_slot_ttl_s",
    "limits.max_devices",
    "limits.max_pending_approvals",
    "limits.max_pending_approvals_per_caller",
    "limits.max_used_confirmations",
    "limits.max_used_confirmations_per_caller",
    "limits.cancelled_call_hold_s",
    "limits.max_budget_reservations",
    "limits.max_budget_reservations_per_caller",
)


class LimitsSwap(Prepared):
    def __init__(
        self, changes: list[str], context: Context, old: GatewayConfig, new: GatewayConfig, changed: list[str]
    ) -> None:
        super().__init__(changes)
        self.context = context
        self.old = old
        self.new = new
        self.changed = changed
        self.rate_before: RateSnapshot | None = None

    def swap(self) -> None:
        # Reconfiguring drops buckets over a lower max_buckets and cuts them down to a lower burst, which
        # reconfiguring back cannot undo: an undo puts these back as they are.
        self.rate_before = self.context.running.limiters.rate.snapshot()
        self._apply(self.new.limits)
        from gateway.devices.sightings import Sightings

        on_hello = self.context.running.gateway.registry.on_hello
        if "limits.max_devices" in self.changed and isinstance(on_hello, Sightings):
            on_hello.check_bound(self.new.limits.max_devices)  # a registry left over the new bound is named once

    def undo(self) -> None:
        self._apply(self.old.limits)
        if self.rate_before is not None:
            self.context.running.limiters.rate.restore(self.rate_before)

    def _apply(self, limits: LimitsConfig) -> None:
        running = self.context.running
        rate = limits.rate
        running.limiters.rate.reconfigure(
            BucketSpec(rate.per_principal.rate_per_s, rate.per_principal.burst),
            BucketSpec(rate.per_slot.rate_per_s, rate.per_slot.burst),
            rate.max_buckets,
        )
        running.limiters.connections.reconfigure(limits.connections)
        gateway = running.gateway
        gateway.aggregate.names.max_retired = RETIRED_PER_SLOT * limits.max_slots
        gateway.groups.names.max_retired = RETIRED_PER_SLOT * limits.max_slots
        if running.governor is not None:
            running.governor.limits.bound(
                limits.cancelled_call_hold_s, limits.max_budget_reservations, limits.max_budget_reservations_per_caller
            )
            running.governor.bound_approvals(limits.max_pending_approvals, limits.max_pending_approvals_per_caller)
            running.governor.confirmations.bound_used(
                limits.max_used_confirmations, limits.max_used_confirmations_per_caller
            )
        # max_slots, max_slots_per_peer, vacant_slot_ttl_s and max_devices (the device registry's sightings,
        # at each hello) are read from the configuration where enforced (Reloader._swap swaps it).
        for name, value in limit_values(limits).items():
            gateway.metrics.limit.labels(name).set(value)


def prepare(old: GatewayConfig, new: GatewayConfig, context: Context) -> Prepared | None:
    paths = [path for path in changed_paths(old.limits, new.limits, "limits.") if owner(path, OWNS) is not None]
    if not paths:
        return None
    rate = new.limits.rate
    if not context.rate_checked_at_entry and any(spec.rate_per_s > 0 for spec in (rate.per_principal, rate.per_slot)):
        raise Refused(
            "limits.rate: turning rate limiting on needs a restart (it was off at start, so the entry was built "
            "without the check)"
        )
    changes = [change_text(path, value_at(old, path), value_at(new, path)) for path in paths]
    return LimitsSwap(changes, context, old, new, paths)
