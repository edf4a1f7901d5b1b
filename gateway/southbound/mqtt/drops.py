"""MQTT messages the gateway did not act on: counted per broker, per slot and in the metrics.

A message is dropped, never fatal: the connection and every other slot carry on. Reasons:

- malformed: the payload is not one JSON-RPC message (or a status/presence that is not a register
  frame / `notifications/server/online`, or names another slot than its topic);
- wrong_topic: a topic the gateway subscribed to by wildcard but cannot use (a slot level that is no
  slot name: reserved, over-long, with control, format or bidirectional characters, `.` or `..`; a
  presence topic without a server-name or with one so long that the server's RPC topic would not fit
  in an MQTT topic, an RPC topic of another client);
- oversize: larger than the broker's max_payload_bytes (read whole first: the broker's own
  max_packet_size bounds that; with announce_max_packet_size the broker itself drops, uncounted, what
  exceeds max_payload_bytes plus headroom);
- unregistered: traffic on a slot or server instance that has not announced itself (no status or
  presence seen), e.g. a board publishing `up` before its status;
- refused: an announcement the gateway could not bridge into a slot (the slot is held by another
  provider, reserved, not a slot name (an MCP server-name whose slot is `..` or holds invisible
  characters), undeclared, the broker refused the subscription, or max_instances devices are
  already known); counted once per announcement, however often the gateway tries again;
- retained: a retained message on a topic that carries live traffic only (a board's `up`, an MCP server's
  RPC or capability topic): the broker's stored copy, replayed at every subscription, so it is never taken
  as the device speaking now;
- backlog: received while max_backlog messages were waiting for the event loop (dropped in paho's
  thread, unread).
"""

from __future__ import annotations

import logging

from prometheus_client import Counter, Gauge

from gateway.telemetry.metrics import Metrics

log = logging.getLogger("gateway.mqtt")

REASONS = ("malformed", "wrong_topic", "oversize", "unregistered", "refused", "retained", "backlog")
RETAINED_DETAIL = (
    "a retained message on a topic of live traffic is the broker's stored copy, replayed at every subscription, "
    "not the device speaking now; publish it without the retain flag, and clear the stored copy (an empty "
    "retained message on the topic)"
)
MAX_TRACKED_SLOTS = 1024
"""Per-slot counts are kept for this many names; past that, only the broker's totals count (a noisy
publisher inventing slot names cannot grow the gateway's memory)."""
MAX_WARNED = 64
"""(reason, slot) pairs whose first drop is warned of; past them once per reason, so that a publisher
cycling through slot names cannot flood the log."""


class MqttMetrics:
    """The MQTT series, registered once per gateway on its own registry."""

    def __init__(self, metrics: Metrics) -> None:
        r = metrics.registry
        self.connected = Gauge("mcpgw_mqtt_connected", "1 while the broker connection is up", ["broker"], registry=r)
        self.connects = Counter("mcpgw_mqtt_connects", "Broker connections accepted", ["broker"], registry=r)
        self.losses = Counter(
            "mcpgw_mqtt_connection_losses", "Broker connections that ended (any reason)", ["broker"], registry=r
        )
        self.messages = Counter(
            "mcpgw_mqtt_messages", "MQTT messages by direction (in, out)", ["broker", "direction"], registry=r
        )
        self.anonymous = Gauge(
            "mcpgw_mqtt_anonymous_accepted",
            "1 when the broker accepted a client without credentials, 0 when it refused one (check_anonymous)",
            ["broker"],
            registry=r,
        )
        self.publish_refused = Counter(
            "mcpgw_mqtt_publish_refusals",
            "The gateway's publishes the broker refused (MQTT 5 PUBACK reason >= 0x80, e.g. its ACL)",
            ["broker"],
            registry=r,
        )
        self.dropped = Counter(
            "mcpgw_mqtt_dropped_messages",
            "MQTT messages dropped: malformed, wrong_topic, oversize, unregistered, refused, retained, backlog",
            ["broker", "reason"],
            registry=r,
        )


class DropCounter:
    """One broker's dropped messages: totals, per slot (bounded), metric, and a warning per reason and slot."""

    def __init__(self, broker: str, metrics: MqttMetrics) -> None:
        self.broker = broker
        self.metrics = metrics
        self.totals: dict[str, int] = dict.fromkeys(REASONS, 0)
        self.per_slot: dict[str, dict[str, int]] = {}
        self.last: dict[str, str] = {}
        """The latest example of each reason (topic and what was wrong), for broker_diagnose."""
        self._warned: set[tuple[str, str | None]] = set()
        """(reason, slot) pairs warned of: a board's drop is news even when another board's of the same
        reason was warned of (each board is its own misconfiguration, as each serial port is)."""

    def count(
        self, reason: str, topic: str, detail: str, slot: str | None = None, times: int = 1, *, warn: bool = True
    ) -> None:
        """Count a drop; `warn=False` when the caller warns of it itself (the first of a reason is not logged)."""
        self.totals[reason] = self.totals.get(reason, 0) + times
        self.metrics.dropped.labels(self.broker, reason).inc(times)
        example = f"{topic[:160]}: {detail}"
        self.last[reason] = example
        if slot is not None:
            counts = self.per_slot.get(slot)
            if counts is None and len(self.per_slot) < MAX_TRACKED_SLOTS:
                counts = self.per_slot[slot] = {}
            if counts is not None:
                counts[reason] = counts.get(reason, 0) + times
        # Once per reason and slot: a misconfigured board repeats itself; the counters carry the rest.
        # Past MAX_WARNED pairs, once per reason (the set grows by at most len(REASONS) more).
        key = (reason, slot if len(self._warned) < MAX_WARNED else "*")
        if warn and key not in self._warned:
            self._warned.add(key)
            extra = {"slot": slot} if slot is not None else None  # the journal's SLOT= field
            log.warning("MQTT broker %s: dropped a message (%s) on %s", self.broker, reason, example, extra=extra)

    def of_slot(self, slot: str) -> dict[str, int]:
        return dict(self.per_slot.get(slot, {}))
