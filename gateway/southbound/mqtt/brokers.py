"""MQTT ways in: one connection per configured broker, carrying the profiles it enables
(docs/protocol-serial-mqtt.md, "MQTT ways in").

`MqttBroker` owns one broker: its connection (gateway/southbound/mqtt/client.py), the plain profile
(mqtt_plain.py: boards under `<prefix>/<slot>/...`) and MCP over MQTT (mqtt_mcp.py: servers found by
their presence), the counters of what it dropped, and what provider_status and broker_diagnose show.
Every message is routed on the event loop thread, in arrival order:

    [paho's thread: max_backlog waiting? (backlog)] -> the profile that owns the topic (else
        wrong_topic) -> size check (oversize) -> the slot's link

An oversize message is not parsed: when its first bytes (gateway/core/answer_head.py) show that it
answers a pending request, that request ends at once with -32603 naming the size and max_payload_bytes.

Its bounds (max_payload_bytes, max_backlog, max_instances) are exported as
mcpgw_limit{limit="mqtt.brokers[<i>].<key>"}, and each refusal counts in mcpgw_limit_hits_total with
the same label as well as in mcpgw_mqtt_dropped_messages_total. The broker's own Maximum Packet Size
(MQTT 5 CONNACK) is `mqtt.brokers[<i>].broker_max_packet_size` there: a request larger than it is
refused before it is published (the broker would disconnect the gateway), and counted.

After each connection a throw-away client without credentials checks whether the broker lets anyone
in (mqtt_anonymous.py; `check_anonymous`): a broker that accepts it is one warning in the log until a
check finds otherwise, `anonymous_clients` in broker_info, mcpgw_mqtt_anonymous_accepted, and the
finding mqtt.broker_anonymous. The broker's ACL is the security boundary for MQTT boards.

The slots a broker carried are remembered (`slots_seen`, at most max_instances), so that
provider_status names the broker and topic of a slot whose device left.

While the broker is away every slot it carried is detached (pending callers get
`Provider "<slot>" disconnected` at once, later ones `not connected`, both naming the broker's
connection loss; these leaves do not count toward a slot's flap warning); after the reconnect the
subscriptions are made again and the retained statuses and presences bring the slots back. A device
whose announcement stands but whose slot is not served is attached again by its profile
(mqtt_reattach.py), which hears of freed slots through the registry's membership listeners.

`MqttBrokers` is every configured broker; the composition root starts them once the listener is up
and stops them after the core has closed every link.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import logging
import socket
import threading
import time
from collections.abc import Coroutine
from typing import Any

from gateway.config import MqttBrokerConfig
from gateway.core.answer_head import HEAD_BYTES
from gateway.core.broker.diagnose_links import MQTT_ANONYMOUS_FIX, mqtt_anonymous_summary
from gateway.core.broker.scrape import mqtt_broker_key
from gateway.core.gateway import Gateway
from gateway.core.jsonrpc import JsonObject
from gateway.core.repeats import RepeatCounter
from gateway.core.timestamps import iso
from gateway.southbound.mqtt import anonymous as mqtt_anonymous
from gateway.southbound.mqtt import topics as mqtt_topics
from gateway.southbound.mqtt.client import (
    BrokerClient,
    ConnectOptions,
    InboundMessage,
    NoSuback,
    NotConnected,
    Outbound,
)
from gateway.southbound.mqtt.connack import ConnackLimits
from gateway.southbound.mqtt.drops import DropCounter, MqttMetrics
from gateway.southbound.mqtt.mcp import McpProfile
from gateway.southbound.mqtt.packet_size import MQTT_MAX_PACKET_BYTES, max_packet_bytes, outbound_limit
from gateway.southbound.mqtt.plain import PlainProfile

log = logging.getLogger("gateway.mqtt")


class MqttBroker:
    """One broker connection and the slots it carries."""

    def __init__(self, config: MqttBrokerConfig, gateway: Gateway, metrics: MqttMetrics, index: int = 0) -> None:
        self.config = config
        self.label = config.label
        self.limits_key = mqtt_broker_key(index)
        self.gateway = gateway
        self.metrics = metrics
        self.drops = DropCounter(self.label, metrics)
        self.plain = PlainProfile(self) if "plain" in config.profiles else None
        self.mcp = McpProfile(self) if "mcp" in config.profiles else None
        self.client = BrokerClient(config, self, self._connect_options)
        self.subscribed: list[str] = []
        self.subscribe_error = ""
        self.slots_seen: dict[str, tuple[float, str]] = {}
        """Slot -> (when last attached, Unix time; the link's broker and topic), oldest first, bounded."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._halted = False
        self.anonymous: mqtt_anonymous.AnonymousCheck | None = None
        """The latest conclusive anonymous-client check (or the first inconclusive one), None before any."""
        self._checking = False
        self._check_stop = threading.Event()
        self._anonymous_warned = False
        self._suback_warned = False
        """A SUBSCRIBE the broker did not answer was warned of, until one is answered."""
        self.same_broker_as: list[str] = []
        """Other entries that resolve to this broker's address and port (warned of at start)."""

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self.metrics.connected.labels(self.label).set(0)
        self.gateway.registry.membership_listeners.append(self._slots_changed)
        for profile in (self.plain, self.mcp):
            if profile is not None:
                self.spawn(profile.reattach.run())
        self.client.start()

    def halt(self) -> None:
        """No more slots from this broker (shutdown has begun)."""
        self._halted = True
        self._check_stop.set()
        with contextlib.suppress(ValueError):
            self.gateway.registry.membership_listeners.remove(self._slots_changed)
        for profile in (self.plain, self.mcp):
            if profile is not None:
                profile.reattach.clear()
        self.client.halt()

    def is_halted(self) -> bool:
        return self._halted

    def announces(self, slot: str) -> bool:
        """A status or presence for `slot` stands on this broker (so its slot is attached again when lost)."""
        return (self.plain is not None and slot in self.plain.announced) or (
            self.mcp is not None and slot in self.mcp.of_slot
        )

    def limit_hit(self, name: str, times: int = 1) -> None:
        self.gateway.metrics.limit_hit(f"{self.limits_key}.{name}", times)

    def slot_seen(self, slot: str, remote: str) -> None:
        self.slots_seen.pop(slot, None)
        self.slots_seen[slot] = (time.time(), remote)
        while len(self.slots_seen) > self.config.max_instances:
            del self.slots_seen[next(iter(self.slots_seen))]

    def _slots_changed(self, noticed_slot: str | None = None) -> None:
        # A provider attached or left somewhere: a slot refused as held may be free now.
        for profile in (self.plain, self.mcp):
            if profile is not None:
                profile.reattach.slots_changed()

    async def stop(self) -> None:
        self.halt()
        farewell: list[Outbound] = []
        if self.mcp is not None:
            # A clean goodbye on the gateway's presence topic; servers end its sessions (the will says
            # the same when the gateway dies without one).
            topic, payload = self.mcp.will(self.client.client_id)
            farewell.append(Outbound(topic, payload, user_properties=self._mcp_users(self.client.client_id)))
        await self.client.stop(farewell)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self.metrics.connected.labels(self.label).set(0)

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("MQTT broker %s: background work failed", self.label, exc_info=task.exception())

    @staticmethod
    def _mcp_users(client_id: str) -> tuple[tuple[str, str], ...]:
        return (
            (mqtt_topics.PROP_COMPONENT_TYPE, mqtt_topics.COMPONENT_CLIENT),
            (mqtt_topics.PROP_MQTT_CLIENT_ID, client_id),
        )

    def _connect_options(self, client_id: str) -> ConnectOptions:
        if self.mcp is None:
            return ConnectOptions()
        from gateway import __version__

        topic, payload = self.mcp.will(client_id)
        meta = f'{{"name":"mcp-gateway","version":"{__version__}"}}'
        return ConnectOptions(
            will=Outbound(topic, payload, retain=False, user_properties=self._mcp_users(client_id)),
            user_properties=(
                (mqtt_topics.PROP_COMPONENT_TYPE, mqtt_topics.COMPONENT_CLIENT),
                (mqtt_topics.PROP_META, meta),
            ),
        )

    # -- ClientEvents ---------------------------------------------------------------------------

    def connected(self, limits: ConnackLimits) -> None:
        self.metrics.connected.labels(self.label).set(1)
        self.metrics.connects.labels(self.label).inc()
        maximum, measured = outbound_limit(self.config, limits)
        if measured == "packet":
            # What the broker takes from us (MQTT 5), and so the most we publish.
            self.gateway.metrics.limit.labels(f"{self.limits_key}.broker_max_packet_size").set(maximum)
        filters: list[tuple[str, bool]] = []
        if self.plain is not None:
            filters += self.plain.filters()
        if self.mcp is not None:
            filters += self.mcp.filters(limits)
        self.spawn(self._subscribe(filters, limits.maximum_packet_size))
        if self.config.check_anonymous and not self._checking:
            self._checking = True
            self.spawn(self._check_anonymous())

    async def _check_anonymous(self) -> None:
        """Whether this broker lets clients in without credentials: warned once, until a check says no."""
        try:
            found = await asyncio.to_thread(mqtt_anonymous.check, self.config, self._check_stop)
        finally:
            self._checking = False
        if self._halted:
            return
        if found.accepted is None:
            log.debug("MQTT broker %s: anonymous-client check inconclusive: %s", self.label, found.evidence)
            if self.anonymous is None or self.anonymous.accepted is None:
                self.anonymous = found
            return
        self.anonymous = found
        self.metrics.anonymous.labels(self.label).set(1 if found.accepted else 0)
        if not found.accepted:
            self._anonymous_warned = False
            log.debug("MQTT broker %s: %s", self.label, found.evidence)
        elif not self._anonymous_warned:
            self._anonymous_warned = True
            log.warning(
                "MQTT broker %s %s. %s broker_diagnose (mqtt.broker_anonymous) shows the evidence.",
                self.label,
                mqtt_anonymous_summary(found.board_topics_open),
                MQTT_ANONYMOUS_FIX,
            )

    async def _subscribe(self, filters: list[tuple[str, bool]], maximum_packet_size: int | None) -> None:
        """Subscribe in as many SUBSCRIBE packets as the broker's Maximum Packet Size needs: one larger
        packet would make it disconnect the gateway, again at every reconnect."""
        batches, unfit = mqtt_topics.subscribe_batches([topic for topic, _ in filters], maximum_packet_size)
        subscribed: list[str] = []
        refused: list[str] = []
        try:
            for batch in batches:
                chosen = [filters[index] for index in batch]
                codes = await self.client.subscribe(chosen)
                for (topic, _), code in zip(chosen, codes, strict=False):
                    (refused if code >= 0x80 else subscribed).append(topic)
        except NoSuback as exc:
            # Connected but subscribed to nothing: no board would ever attach, so connect again (the
            # loss names why: last_error, broker_diagnose's mqtt.broker_unreachable meanwhile).
            if not self._suback_warned:  # a broker that never answers: one warning, not one per connection
                self._suback_warned = True
                log.warning("MQTT broker %s: %s: nothing subscribed; connecting again", self.label, exc)
            self.client.drop(str(exc))
            return
        except NotConnected:
            return
        self._suback_warned = False
        self.subscribed = subscribed
        problems = []
        if refused:
            problems.append(f"the broker refused the subscriptions {', '.join(refused)} (check its ACL)")
        if unfit:
            self.limit_hit("broker_max_packet_size", len(unfit))
            problems.append(
                f"the filters {', '.join(filters[index][0][:80] for index in unfit)} do not fit in a SUBSCRIBE "
                f"within the broker's Maximum Packet Size ({maximum_packet_size} bytes): not subscribed"
            )
        self.subscribe_error = "; ".join(problems)
        if problems:
            log.warning("MQTT broker %s: %s", self.label, self.subscribe_error)

    def disconnected(self, reason: str) -> None:
        self.metrics.connected.labels(self.label).set(0)
        self.metrics.losses.labels(self.label).inc()
        self.subscribed = []
        servers = list(self.mcp.by_server.values()) if self.mcp is not None else []
        for profile in (self.plain, self.mcp):
            if profile is not None:
                profile.broker_lost(reason)
        for server in servers:
            server.left_with_broker()  # the broker's outage, not the slot's flapping (the plain profile's own)

    def message(self, message: InboundMessage) -> None:
        self.metrics.messages.labels(self.label, "in").inc()
        if self._halted:
            return
        topic = message.topic
        profile: PlainProfile | McpProfile | None = None
        if self.mcp is not None and self.mcp.owns(topic):
            profile = self.mcp
        elif self.plain is not None and self.plain.owns(topic):
            profile = self.plain
        if profile is None:
            self.drops.count("wrong_topic", topic, "no enabled profile uses this topic")
            return
        size = len(message.payload)
        if size > self.config.max_payload_bytes:
            self.limit_hit("max_payload_bytes")
            self.drops.count(
                "oversize",
                topic,
                f"{size} bytes, max_payload_bytes is {self.config.max_payload_bytes}",
                profile.slot_of(topic),
            )
            link = profile.answering_link(topic)
            if link is not None:
                # Read no further than its first bytes: an answer's id there ends its caller's wait now.
                link.oversize(message.payload[:HEAD_BYTES], size)
            return
        profile.handle(topic, message.payload, retained=message.retain)

    def backlog_dropped(self, count: int, topic: str) -> None:
        self.metrics.messages.labels(self.label, "in").inc(count)
        self.limit_hit("max_backlog", count)
        slot = None
        for profile in (self.mcp, self.plain):
            if profile is not None and profile.owns(topic):
                slot = profile.slot_of(topic)
                break
        self.drops.count(
            "backlog",
            topic,
            f"{count} message(s) arrived while max_backlog ({self.config.max_backlog}) were waiting for the gateway",
            slot,
            times=count,
        )

    def publish_refused(self, topic: str, payload: bytes, text: str) -> None:
        """The broker's ACL refused one of the gateway's publishes (warned of and counted by the client):
        the caller of the request it carried hears of it now."""
        self.metrics.publish_refused.labels(self.label).inc()
        if self.plain is not None:
            for plain_link in list(self.plain.links.values()):
                if plain_link.topics["down"] == topic:
                    plain_link.publish_refused(topic, payload, text)
        if self.mcp is not None:
            for mcp_link in list(self.mcp.by_slot.values()):
                if topic in (mcp_link.rpc, mcp_link.control):
                    mcp_link.publish_refused(topic, payload, text)

    # -- status ---------------------------------------------------------------------------------

    def status(self) -> JsonObject:
        max_outbound, measured = self.client.outbound_limit()
        status: JsonObject = {
            "broker": self.label,
            "profiles": list(self.config.profiles),
            **self.client.status(),
            "subscriptions": list(self.subscribed),
            "subscribe_error": self.subscribe_error or None,
            "same_broker_as": list(self.same_broker_as),
            "anonymous_clients": self.anonymous.to_json() if self.anonymous is not None else None,
            "limits": {
                "max_payload_bytes": self.config.max_payload_bytes,
                # max_payload_bytes + headroom: announced in CONNECT (MQTT 5) with announce_max_packet_size,
                # and the most the broker's own max_packet_size should let the gateway read.
                "max_packet_bytes": max_packet_bytes(self.config.max_payload_bytes),
                "announce_max_packet_size": self.config.announce_max_packet_size,
                "broker_max_packet_size": self._broker_max_packet_size(max_outbound, measured),
                "max_outbound": {"bytes": max_outbound, "of": measured},
                "max_backlog": self.config.max_backlog,
                "max_instances": self.config.max_instances,
            },
            "backlog": self.client.backlog,
            "dropped": dict(self.drops.totals),
            "dropped_examples": dict(self.drops.last),
            "slots_seen": {slot: {"at": iso(at), "remote": remote} for slot, (at, remote) in self.slots_seen.items()},
        }
        if self.plain is not None:
            status["plain"] = {
                "topic_prefix": self.plain.prefix,
                "boards": sorted(self.plain.links),
                "announced": len(self.plain.announced),
                "reattaching": self.plain.reattach.status(),
            }
        if self.mcp is not None:
            status["mcp"] = {
                "spec": f"{mqtt_topics.SPEC_NAME} {mqtt_topics.SPEC_REVISION} ({mqtt_topics.SPEC_SOURCE})",
                **self.mcp.status(),
            }
        return status

    def _broker_max_packet_size(self, max_outbound: int, measured: str) -> int | str | None:
        """The CONNACK's Maximum Packet Size (the outbound limit when it is measured on the packet);
        "unlimited" when an MQTT 5 broker announced none (or MQTT's own limit); None when unknown (not
        connected yet, or MQTT 3.1.1, whose CONNACK carries no properties)."""
        if measured != "packet" or not self.client.connects:
            return None
        return "unlimited" if max_outbound >= MQTT_MAX_PACKET_BYTES else max_outbound


LOOPBACK = "loopback (127.0.0.1, ::1)"
"""Every loopback address counts as one: a broker on loopback is reached by each of them (localhost)."""


async def _addresses(config: MqttBrokerConfig) -> set[tuple[str, int]]:
    """The addresses and port `config`'s host resolves to (every loopback address as LOOPBACK); empty
    when it does not resolve within connect_timeout_s (its connection attempts say why)."""
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(config.host, config.port, type=socket.SOCK_STREAM), config.connect_timeout_s
        )
    except (OSError, TimeoutError, UnicodeError):
        return set()
    found: set[tuple[str, int]] = set()
    for *_, sockaddr in infos:
        try:
            address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        except ValueError:
            continue
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        found.add((LOOPBACK if address.is_loopback else str(address), config.port))
    return found


PROVIDER_LOGGER = "gateway.provider"
"""The provider session's logger (gateway/core/provider_session.py): it warns of each failed initialize."""
FAILED_TO_INITIALIZE = "failed to initialize"
MAX_SLOTS_TRACKED = 4096


class RetriedInitializeLines(logging.Filter):
    """A device whose status or presence stands is attached again after every failed initialize, with
    back-off, for as long as the announcement stands: a board that died without a last will would log a
    warning per attempt (about 2,900 a day). For a slot an MQTT broker still announces, the first such
    line passes, then one per logging.repeat_interval_s saying how many were left out (gateway.logs'
    repeat rule, on the provider session's logger)."""

    def __init__(self, brokers: list[MqttBroker], repeat_interval_s: float) -> None:
        super().__init__()
        self.brokers = brokers
        self.repeats = RepeatCounter(repeat_interval_s, time.monotonic, MAX_SLOTS_TRACKED)

    def filter(self, record: logging.LogRecord) -> bool:
        slot = getattr(record, "slot", None)
        if FAILED_TO_INITIALIZE not in str(record.msg) or not isinstance(slot, str):
            return True
        if not any(broker.announces(slot) for broker in self.brokers):
            return True
        admitted = self.repeats.admit(slot)
        if admitted is None:
            return False
        left_out = admitted[0]
        if left_out:
            record.msg = f"{record.getMessage()} ({left_out} more like it since the last line)"
        else:
            record.msg = (
                f"{record.getMessage()}; tried again with back-off while its MQTT announcement stands (a stored "
                "copy nobody answers on a slower one, up to logging.repeat_interval_s apart; a warning of its own "
                "says so; broker_info mqtt[].plain.reattaching, mqtt[].mcp.reattaching and mqtt[].mcp.parked list "
                "the slots tried again), this line once per logging.repeat_interval_s"
            )
        record.args = None
        record.repeats_left_out = left_out
        return True


class MqttBrokers:
    """Every [[mqtt.brokers]] entry of the configuration."""

    def __init__(self, gateway: Gateway) -> None:
        brokers = gateway.config.mqtt.brokers
        self.metrics = MqttMetrics(gateway.metrics) if brokers else None
        self.brokers = (
            [MqttBroker(config, gateway, self.metrics, index) for index, config in enumerate(brokers)]
            if self.metrics
            else []
        )
        self.retried_lines = RetriedInitializeLines(self.brokers, gateway.config.logging.repeat_interval_s)
        self._checking: asyncio.Task[None] | None = None
        if self.brokers:
            gateway.mqtt_status = self.status

    def start(self) -> None:
        if self.brokers:
            logging.getLogger(PROVIDER_LOGGER).addFilter(self.retried_lines)
        for broker in self.brokers:
            broker.start()
        if len(self.brokers) > 1:
            self._checking = asyncio.get_running_loop().create_task(self._warn_same_broker())

    async def _warn_same_broker(self) -> None:
        """The configuration refuses a broker listed twice by the same URL; two names of one broker
        (`127.0.0.1` and `localhost`) pass it, and each entry then opens its own connection, so every
        board both carry is attached twice and contested. Warned at start, naming both entries; both
        connections stay (a name may resolve elsewhere later)."""
        found = [await _addresses(broker.config) for broker in self.brokers]
        for first, second in itertools.combinations(range(len(self.brokers)), 2):
            common = found[first] & found[second]
            if not common:
                continue
            one, other = self.brokers[first], self.brokers[second]
            one.same_broker_as.append(other.label)
            other.same_broker_as.append(one.label)
            address, port = sorted(common)[0]
            log.warning(
                "MQTT brokers %s (mqtt.brokers[%d]) and %s (mqtt.brokers[%d]) are one broker: both reach %s port %d. "
                "Each entry opens its own connection, so every board both carry is attached by both and contested; "
                "list each broker once (docs/configuration.md, [[mqtt.brokers]])",
                one.label,
                first,
                other.label,
                second,
                address,
                port,
            )

    def halt(self) -> None:
        for broker in self.brokers:
            broker.halt()

    async def stop(self) -> None:
        if self._checking is not None:
            self._checking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checking
        with contextlib.suppress(Exception):
            await asyncio.gather(*(broker.stop() for broker in self.brokers))
        logging.getLogger(PROVIDER_LOGGER).removeFilter(self.retried_lines)

    def status(self) -> list[JsonObject]:
        return [broker.status() for broker in self.brokers]
