"""Warnings for WebSocket providers refused a slot, at most one per slot and reason per interval.

A board refused at the door (its slot held by a live provider, a slot limit, a managed slot) retries
on its back-off, and a misconfigured one may retry faster: every refusal is counted in
mcpgw_provider_refusals_total, and the log says the first one at once and then at most one per
`logging.repeat_interval_s` for the same slot and reason (for a peer that proved no identity, the same
peer address and reason: it names any slot it likes), with how many came in between. (The serial
lines, MQTT and remote upstreams warn once per slot in their own modules.)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("gateway.southbound.websocket")

KEYS_KEPT = 256
"""(slot, reason) pairs remembered; past this the oldest is forgotten (and may warn again early)."""

UNNAMED = {"bad_name"}
"""Refusals whose slot name is not logged: it is the invalid text itself (its refusal names the fault)."""

UNTOLD = {"shutdown"}
"""Refusals that are no news: a gateway shutting down refuses everyone."""

UNPROVEN = {"missing_secret", "unknown_secret", "registry_unreadable", "revoked"}
"""Refusals of a peer that proved no identity: the slot name it asked for is its own to vary at each try,
so these are counted by the peer's address (without its port) and reason instead."""


@dataclass
class _Quiet:
    since: float
    refused: int = 0


class RefusalLog:
    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self._quiet: dict[tuple[str, str], _Quiet] = {}

    def refused(self, slot: str, kind: str, reason: str, transport: str, remote: str) -> None:
        """A provider was refused `slot` for `kind` (its SlotRefused.kind), with the text it was sent."""
        if kind in UNTOLD:
            return
        shown = "(invalid name)" if kind in UNNAMED else slot
        key, now = (remote.rpartition(":")[0] or remote, kind) if kind in UNPROVEN else (shown, kind), self.clock()
        quiet = self._quiet.get(key)
        if quiet is not None and now - quiet.since < self.interval_s:
            quiet.refused += 1
            return
        meanwhile = quiet.refused if quiet is not None else 0
        self._quiet.pop(key, None)
        self._quiet[key] = _Quiet(now)
        if len(self._quiet) > KEYS_KEPT:
            del self._quiet[next(iter(self._quiet))]
        more = f" ({meanwhile} more refused since the last warning)" if meanwhile else ""
        log.warning(
            "provider refused for slot %s over %s from %s: %s%s",
            shown,
            transport,
            remote,
            reason,
            more,
            extra={"slot": shown, "refusal": kind},
        )
