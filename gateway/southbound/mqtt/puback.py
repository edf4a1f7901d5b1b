"""The broker's answers to a connection's own publishes (MQTT 5 PUBACK reason codes).

A broker whose ACL does not let the connection's user write a topic answers the QoS 1 PUBLISH with a
PUBACK reason of 0x80 or more (mosquitto: 135 Not authorized) and delivers nothing. Each such refusal
is counted (`publish_refusals` in broker_info, mcpgw_mqtt_publish_refusals_total), warned of once per
topic and reason until a publish to that topic is accepted again, kept as the latest refusal for
broker_diagnose (mqtt.publish_refused), and handed to the connection's owner with the message, so that
the caller of a request that was refused hears of it at once instead of waiting out its deadline.
MQTT 3.1.1 has no such reason codes: a broker drops a refused publish there without a word.

paho's thread sees every PUBACK; it hands one to the event loop only when it refuses, or when it
accepts a topic that was refused before (the common PUBACK costs no wake-up of the loop).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from paho.mqtt.reasoncodes import ReasonCode

MAX_WARNED_TOPICS = 1024
"""Topics whose refusal was warned of, remembered to warn once each; past this the memory starts over."""


def is_refusal(code: Any) -> bool:
    return isinstance(code, ReasonCode) and bool(code.is_failure)


@dataclass(frozen=True)
class Refusal:
    topic: str
    reason: str
    code: int
    at: float


class PublishAcks:
    """The refusals among one broker connection's publishes: counted, warned of, the latest kept."""

    def __init__(self, label: str, logger: logging.Logger, who: str = "the gateway", counted_in: str = "") -> None:
        self.label = label
        self.log = logger
        self.who = who
        """Whose publish it is, in the words of the warning and of the error ("the gateway")."""
        self.counted_in = counted_in
        """Where the repeats are counted, for the warning ("" names nothing)."""
        self.refusals = 0
        self.latest: Refusal | None = None
        """The latest refusal, cleared when a publish to its topic is accepted."""
        self.refused_topics: dict[str, str] = {}
        """Topic -> the reason warned of, until a publish to the topic is accepted (read by paho's thread)."""

    def text(self, refusal: Refusal) -> str:
        return (
            f"the MQTT broker {self.label} refused {self.who}'s publish to {refusal.topic}: {refusal.reason} "
            f"(reason {refusal.code}); check the broker's ACL for {self.who}'s user"
        )

    def accepted(self, topic: str) -> None:
        self.refused_topics.pop(topic, None)
        if self.latest is not None and self.latest.topic == topic:
            self.latest = None

    def refused(self, topic: str, code: ReasonCode) -> str:
        """Count and warn of one refusal; its text for the caller."""
        refusal = Refusal(topic, str(code.getName()), int(code.value), time.time())
        self.refusals += 1
        self.latest = refusal
        text = self.text(refusal)
        if self.refused_topics.get(topic) != refusal.reason:
            if len(self.refused_topics) >= MAX_WARNED_TOPICS:
                self.refused_topics.clear()
            self.refused_topics[topic] = refusal.reason
            counted = f" (further refusals are counted in {self.counted_in})" if self.counted_in else ""
            self.log.warning("%s%s", text[0].upper() + text[1:], counted)
        else:
            self.log.debug("%s", text)
        return text

    def status(self) -> dict[str, Any]:
        from gateway.core.timestamps import iso

        latest = self.latest
        return {
            "publish_refusals": self.refusals,
            "last_publish_refusal": {
                "topic": latest.topic,
                "reason": latest.reason,
                "reason_code": latest.code,
                "at": iso(latest.at),
            }
            if latest is not None
            else None,
        }
