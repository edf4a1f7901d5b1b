"""MCP over MQTT (the EMQX specification pinned in mqtt_topics): the gateway as MCP client of each server.

Discovery: the gateway subscribes to `$mcp-server/presence/+/<filter>` for each server-name filter
(the broker's MCP-SERVER-NAME-FILTERS from the CONNACK when it suggests some, else the configured
ones). A retained `notifications/server/online` names one server instance (server-id, server-name).

Bridging: each server-name becomes one slot (`slot_naming`); of several instances of one
server-name one serves the slot, the next takes over when it goes. An instance is its slot and
server-id: the broker's ACL confines a credential to server-names (slots) but leaves the server-id
level free, so a presence under another slot never displaces an instance, whatever its server-id or
the order the presences arrive in (retained ones after each subscription); one server-id under two
slots is warned of (`_warn_shared`). For the serving instance the
gateway subscribes to its RPC topic (No Local) and its capability topic, then attaches a link: the
core's `initialize` goes to the server's control topic, everything after it to the RPC topic, every
PUBLISH with the MCP-COMPONENT-TYPE and MCP-MQTT-CLIENT-ID user properties.

Leaving: an empty presence (the server's will, or its clean shutdown) or `notifications/disconnected`
on the RPC topic detaches the slot at once; when the core lets a server go (a missed heartbeat,
shutdown) the gateway says `notifications/disconnected` on the RPC topic and unsubscribes.

Coming back: while an instance's presence stands and its slot is not served (the core let it go, or
refused it because another provider holds the slot), the slot is bridged again, to the next instance
of it first: with back-off, and at once when the slot frees (mqtt_reattach.py). An instance known only
from a retained presence that fails its handshake unheard is parked: tried again on a slower back-off
of its own (`PARKED_FIRST_S`, doubling, up to logging.repeat_interval_s), its RPC topic kept subscribed
so that any message from it there ends the parking at once.

The specification's mcp-client-id is the MQTT client id, so one connection serving every server
cannot take a new one per `initialize`, and a failed ping ends that server's session on its RPC
topic instead of the whole connection (docs/protocol.md, Departures).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass

import orjson

from gateway.core import jsonrpc
from gateway.core.eras import SESSION_ERA
from gateway.core.jsonrpc import JsonObject
from gateway.core.link import LinkInfo
from gateway.core.names import SlotNameError, check_slot_name
from gateway.core.slots import SlotRefused
from gateway.southbound.mqtt import topics as mqtt_topics
from gateway.southbound.mqtt.client import NotConnected, PacketTooLarge
from gateway.southbound.mqtt.connack import ConnackLimits
from gateway.southbound.mqtt.drops import RETAINED_DETAIL
from gateway.southbound.mqtt.link import BrokerContext, MqttLink
from gateway.southbound.mqtt.reattach import RETRIED_REFUSALS, Reattach
from gateway.southbound.mqtt.topics import ServerAddress

DISCONNECTED = jsonrpc.dumps(jsonrpc.notification(mqtt_topics.METHOD_DISCONNECTED))
SHARED_NAMED = 8
"""Other slots of a shared server-id named in a warning and in provider_status (the count says the rest)."""
SHOWN_CHARS = 120
"""A server-id or server-name in a log line is cut to this many characters (MQTT allows 65,535 bytes)."""
PARKED_FIRST_S = 10.0
"""First ceiling of a parked instance's back-off (a wait of half of it to all of it), doubled per failure up
to logging.repeat_interval_s: a live server slow to start comes back, a dead one's stored presence costs
one handshake per interval (the retry in a 3 s window would be a tight loop at reconnect_initial_s)."""

log = logging.getLogger("gateway.mqtt")

InstanceKey = tuple[str, str]
"""(slot, server-id): one server instance. Within a slot the server-id identifies it (a new server-name
under the same slot replaces the old one); across slots it does not (see the module's docstring)."""


def slot_for(server_name: str, rule: str) -> str:
    """The slot a server-name is bridged into: its last level, or the whole name with '/' as '-'."""
    if rule == "dashed":
        return server_name.replace("/", "-")
    return server_name.rsplit("/", 1)[-1]


@dataclass
class Instance:
    address: ServerAddress
    slot: str
    """slot_for(address.server_name), fixed when the presence arrives (a new name is a new Instance)."""
    description: str = ""

    @property
    def key(self) -> InstanceKey:
        return (self.slot, self.address.server_id)


@dataclass
class _Quiet:
    """When a slot's shared server-id was last warned of, and how many presences came since."""

    since: float
    more: int = 0


class McpLink(MqttLink):
    def __init__(self, broker: BrokerContext, slot: str, instance: Instance) -> None:
        address = instance.address
        self.address = address
        self.instance = instance
        client_id = broker.client.client_id
        self.client_id = client_id
        self.rpc = mqtt_topics.rpc_topic(client_id, address.server_id, address.server_name)
        self.control = mqtt_topics.server_control_topic(address.server_id, address.server_name)
        self.capability = mqtt_topics.server_capability_topic(address.server_id, address.server_name)
        self.initialized = False
        self.users = (
            (mqtt_topics.PROP_COMPONENT_TYPE, mqtt_topics.COMPONENT_CLIENT),
            (mqtt_topics.PROP_MQTT_CLIENT_ID, client_id),
        )
        # The pinned EMQX revision (mqtt_topics.SPEC_REVISION) opens a session with initialize on the
        # control topic and defines no server/discover: the session era, no probe. The RPC topic outlives
        # the session: every session on one connection shares its client id, and a configured client_id
        # keeps it across reconnects and restarts.
        info = LinkInfo(
            transport="mqtt-mcp",
            remote=f"{broker.label} {address.server_name} ({address.server_id})",
            era=SESSION_ERA,
            medium_outlives_session=True,
        )
        super().__init__(broker, slot, info)
        self.released = False
        self.profile: McpProfile | None = None

    async def send(self, data: bytes) -> None:
        topic = self.rpc
        if not self.initialized and _is_initialize(data):
            topic = self.control  # the handshake opens on the server's control topic
        self.publish(topic, data, self.users)

    async def close(self, code: int, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self.close_reason = reason
        # De-initialize: the server forgets this client session and the gateway its topics.
        with contextlib.suppress(ConnectionError, PacketTooLarge):
            self.broker.client.publish(self.rpc, DISCONNECTED, user_properties=self.users)
        profile = self.profile
        if profile is not None:
            profile.link_closed(self)

    def status_extra(self) -> dict[str, object]:
        return {
            **self.common_status(),
            "profile": "mcp",
            "spec": f"{mqtt_topics.SPEC_NAME} {mqtt_topics.SPEC_REVISION}",
            "server_id": self.address.server_id,
            "server_name": self.address.server_name,
            "description": self.instance.description or None,
            "server_id_also_in": self.profile.shared_with(self.instance) if self.profile is not None else [],
            "topics": {"control": self.control, "rpc": self.rpc, "capability": self.capability},
        }


def _is_initialize(data: bytes) -> bool:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return isinstance(value, dict) and value.get("method") == "initialize" and "id" in value


def _shown(text: str) -> str:
    """A name from the wire in a log line: quoted (control characters escaped) and cut short."""
    return repr(text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…")


def _unindex(index: dict[str, dict[str, Instance]], outer: str, inner: str) -> None:
    entries = index.get(outer)
    if entries is not None:
        entries.pop(inner, None)
        if not entries:
            del index[outer]


class McpProfile:
    """Every MCP over MQTT server instance one broker announces."""

    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self.rule = broker.config.slot_naming
        self.instances: dict[InstanceKey, Instance] = {}
        """Every announced instance by slot and server-id (at most max_instances)."""
        self.of_slot: dict[str, dict[str, Instance]] = {}
        """The same instances by slot, then server-id, in the order they are tried (`_add`, `_remove`)."""
        self.of_server: dict[str, dict[str, Instance]] = {}
        """The same instances by server-id, then slot: more than one slot is a shared server-id."""
        self.by_server: dict[ServerAddress, McpLink] = {}
        """The bridged links by the address their topics carry (one per slot: `by_slot`)."""
        self.by_slot: dict[str, McpLink] = {}
        self.shared_warned: dict[str, _Quiet] = {}
        """Slots whose shared server-id was warned of (at most one warning per slot per repeat interval)."""
        self.server_filters: list[str] = list(broker.config.server_filter)
        self.retained: set[InstanceKey] = set()
        """Instances whose presence came retained (the broker's stored copy, not a publication since the
        gateway subscribed) and that were not heard from since."""
        self.parked: set[InstanceKey] = set()
        """Instances of a retained presence whose handshake failed with nothing heard from them: left out of
        the normal back-off and tried on `parked_retry`'s until heard from (`_stale`)."""
        self.parked_topics: dict[InstanceKey, str] = {}
        """The RPC topic kept subscribed for each parked instance (a late answer there is a sign of life)."""
        self.parked_retry = Reattach(
            broker.gateway.registry,
            PARKED_FIRST_S,
            max(PARKED_FIRST_S, broker.gateway.config.logging.repeat_interval_s),
            self._retry_parked,
        )
        self._parked_running = False
        self.stale_warned: dict[InstanceKey, None] = {}
        """Instances whose unanswered retained presence was warned of, until heard from again (at most
        max_instances, oldest first out): one warning per server, however often the broker restarts."""
        self.reattach = Reattach(
            broker.gateway.registry, broker.config.reconnect_initial_s, broker.config.reconnect_max_s, self._retry
        )

    def filters(self, limits: ConnackLimits) -> list[tuple[str, bool]]:
        # The broker's suggestion is binding (the specification's MUST); else the configured filters.
        self.server_filters = limits.suggested_server_filters() or list(self.broker.config.server_filter)
        return [(mqtt_topics.server_presence_filter(name_filter), False) for name_filter in self.server_filters]

    @staticmethod
    def owns(topic: str) -> bool:
        return topic.startswith((mqtt_topics.SERVER_ROOT + "/", mqtt_topics.RPC_ROOT + "/"))

    def will(self, client_id: str) -> tuple[str, bytes]:
        """The gateway's will: `notifications/disconnected` on its presence topic (servers end its sessions)."""
        return mqtt_topics.client_presence_topic(client_id), DISCONNECTED

    def broker_lost(self, reason: str) -> None:
        links = list(self.by_server.values())
        self.by_server.clear()
        self.by_slot.clear()
        self.instances.clear()  # the retained presences arrive again after the next subscription
        self.of_slot.clear()
        self.of_server.clear()
        self.reattach.clear()
        self.retained.clear()  # the stored presences arrive again, and each is tried once more
        self.parked.clear()
        self.parked_topics.clear()  # a clean start: the broker dropped the subscriptions
        self.parked_retry.clear()
        for link in links:
            link.released = True
            link.lost(f"MQTT broker {self.broker.label} {reason}")

    def slot_of(self, topic: str) -> str | None:
        address = mqtt_topics.parse_server_presence(topic) or mqtt_topics.parse_server_capability(topic)
        if address is None:
            rpc = mqtt_topics.parse_rpc(topic)
            address = rpc.server if rpc is not None else None
        return slot_for(address.server_name, self.rule) if address is not None else None

    def answering_link(self, topic: str) -> McpLink | None:
        """The link of the bridged server instance that answers on `topic` (its RPC topic), else None."""
        rpc = mqtt_topics.parse_rpc(topic)
        if rpc is None or rpc.client_id != self.broker.client.client_id:
            return None
        link = self.by_server.get(rpc.server)
        return link if link is not None and link.session is not None else None

    def handle(self, topic: str, payload: bytes, *, retained: bool = False) -> None:
        """One message on an MCP over MQTT topic; `retained`: the broker delivered its stored copy (the
        MQTT retain flag), which says what a server published before, not that it is there now."""
        drops = self.broker.drops
        if topic.startswith(mqtt_topics.RPC_ROOT + "/"):
            rpc = mqtt_topics.parse_rpc(topic)
            if rpc is None or rpc.client_id != self.broker.client.client_id:
                drops.count("wrong_topic", topic, "not an RPC topic of this gateway's client id")
                return
            if retained:
                drops.count("retained", topic, RETAINED_DETAIL, slot_for(rpc.server.server_name, self.rule))
                return
            self._rpc(topic, rpc.server, payload)
            return
        presence = mqtt_topics.parse_server_presence(topic)
        if presence is not None:
            self._presence(topic, presence, payload, retained)
            return
        capability = mqtt_topics.parse_server_capability(topic)
        if capability is not None:
            if retained:
                drops.count("retained", topic, RETAINED_DETAIL, slot_for(capability.server_name, self.rule))
                return
            link = self.by_server.get(capability)
            if link is None or link.session is None:
                drops.count("unregistered", topic, "no bridged server instance publishes here")
                return
            link.deliver(topic, jsonrpc.parse(payload, link.session.settings.max_json_depth))
            return
        drops.count("wrong_topic", topic, "not a presence, capability or RPC topic with a server-id and server-name")

    # -- presence ---------------------------------------------------------------------------------

    def _presence(self, topic: str, address: ServerAddress, payload: bytes, retained: bool = False) -> None:
        drops = self.broker.drops
        slot = slot_for(address.server_name, self.rule)
        if not mqtt_topics.valid_client_id(address.server_id) or not mqtt_topics.valid_server_name(address.server_name):
            drops.count("wrong_topic", topic, "server-id or server-name holds '+', '#' or an empty level", slot)
            return
        too_long = self._topics_too_long(address)
        if too_long:
            drops.count("wrong_topic", topic, f"server-id and server-name too long: {too_long}", slot)
            return
        key = (slot, address.server_id)
        if not payload:
            self.retained.discard(key)
            self._unpark(key)
            known = self.instances.get(key)
            if known is not None and known.address == address:
                self._remove(key)
                self._forget_if_gone(slot)
            link = self.by_server.get(address)
            if link is not None:
                self.release(link)
                link.lost(
                    f"MCP server {address.server_name} ({address.server_id}) went offline: its presence was "
                    "emptied (its will, or a clean shutdown)"
                )
                self._activate_next(link.slot)
            return
        presence = jsonrpc.parse(payload, self.broker.gateway.config.limits.max_json_depth)
        body = None if presence.limit else presence.body  # nested too deep: its head alone is no presence
        if not isinstance(body, dict) or body.get("method") != mqtt_topics.METHOD_SERVER_ONLINE or "id" in body:
            drops.count("malformed", topic, f"a presence must be {mqtt_topics.METHOD_SERVER_ONLINE}", slot)
            return
        params = body.get("params")
        description = params.get("description") if isinstance(params, dict) else None
        max_instances = self.broker.config.max_instances
        if key not in self.instances and len(self.instances) >= max_instances:
            self.broker.limit_hit("max_instances")
            drops.count("refused", topic, f"more than {max_instances} server instances on this broker", slot)
            return
        instance = Instance(address, slot, description if isinstance(description, str) else "")
        new = key not in self.instances
        self._add(instance)
        if retained:
            self.retained.add(key)
        else:
            self._heard(key)
        if new and len(self.of_server[address.server_id]) > 1:
            self._warn_shared(instance)
        self.reattach.now(slot)
        current = self.by_slot.get(slot)
        if current is not None and current.address.server_id == address.server_id:
            # The same instance announced itself again (under this slot: the server-id alone says so only
            # within a slot): it reconnected and its client sessions are gone.
            self.release(current)
            current.lost(f"MCP server {address.server_name} ({address.server_id}) announced itself again")
        if slot not in self.by_slot:
            self._activate(topic, slot, instance)

    def _topics_too_long(self, address: ServerAddress) -> str | None:
        """Why the gateway could not subscribe to this server's topics, or None. A presence topic near
        MQTT's limit makes an RPC topic (with the gateway's client id) that is over it (paho refuses
        the SUBSCRIBE); shorter ones can still make a SUBSCRIBE over the broker's Maximum Packet Size
        (CONNACK), and a broker disconnects a client that sends one: every slot of the broker would
        go, and come back to the same retained presence."""
        client_id = self.broker.client.client_id
        filters = [
            mqtt_topics.rpc_topic(client_id, address.server_id, address.server_name),
            mqtt_topics.server_capability_topic(address.server_id, address.server_name),
        ]
        if not all(mqtt_topics.fits_topic(topic_filter) for topic_filter in filters):
            return f"its RPC topic would exceed {mqtt_topics.MAX_TOPIC_BYTES} bytes"
        maximum = self.broker.client.limits.maximum_packet_size
        if maximum is not None and mqtt_topics.subscribe_packet_bytes(filters) > maximum:
            return f"subscribing to its topics would exceed the broker's Maximum Packet Size ({maximum} bytes)"
        return None

    def _add(self, instance: Instance) -> None:
        """Record an announced instance. Announced again (its server-name may differ above the slot's
        level) it keeps its turn in its slot; the instances of other slots are left alone."""
        server_id = instance.address.server_id
        self.instances[instance.key] = instance
        self.of_slot.setdefault(instance.slot, {})[server_id] = instance
        self.of_server.setdefault(server_id, {})[instance.slot] = instance

    def _remove(self, key: InstanceKey) -> Instance | None:
        instance = self.instances.pop(key, None)
        if instance is not None:
            slot, server_id = key
            _unindex(self.of_slot, slot, server_id)
            _unindex(self.of_server, server_id, slot)
        return instance

    def shared_with(self, instance: Instance) -> list[str]:
        """The other slots an instance of this server-id is announced under (at most SHARED_NAMED)."""
        same_id = self.of_server.get(instance.address.server_id, {})
        return sorted(slot for slot in same_id if slot != instance.slot)[:SHARED_NAMED]

    def _warn_shared(self, instance: Instance) -> None:
        """A server-id announced under a slot while an instance of it stands under another. Both are kept
        apart (neither replaces the other): the broker's ACL leaves the server-id free, so either can be
        a credential reusing another server's id, or a server that took a new name without emptying its
        old presence. One warning per slot per logging.repeat_interval_s; the presences between are counted."""
        slot, now = instance.slot, time.monotonic()
        quiet = self.shared_warned.get(slot)
        if quiet is not None and now - quiet.since < self.broker.gateway.config.logging.repeat_interval_s:
            quiet.more += 1
            return
        self.shared_warned.pop(slot, None)
        self.shared_warned[slot] = _Quiet(now)
        if len(self.shared_warned) > self.broker.config.max_instances:
            del self.shared_warned[next(iter(self.shared_warned))]
        address = instance.address
        others = [self.of_server[address.server_id][other] for other in self.shared_with(instance)]
        named = ", ".join(f"{_shown(other.address.server_name)} (slot {_shown(other.slot)})" for other in others)
        more = f" ({quiet.more} more since the last warning)" if quiet is not None and quiet.more else ""
        log.warning(
            "MQTT broker %s: MCP server-id %s announced as %s (slot %s) while it stands as %s too: each slot "
            "keeps its own instance, neither replaces the other. A server that took a new name empties its "
            "old presence (an empty retained message on $mcp-server/presence/<server-id>/<old server-name>); "
            "else a credential announces another server's id (docs/mqtt-broker.md)%s",
            self.broker.label,
            _shown(address.server_id),
            _shown(address.server_name),
            _shown(slot),
            named,
            more,
            extra={"slot": slot},
        )

    def _announced(self, slot: str) -> bool:
        return slot in self.of_slot

    def _forget_if_gone(self, slot: str) -> None:
        """No instance of `slot` is announced any more: stop trying to bridge it."""
        if not self._announced(slot):
            self.reattach.forget(slot)

    def _activate_next(self, slot: str) -> None:
        if slot in self.by_slot:
            return
        for instance in self.of_slot.get(slot, {}).values():
            if instance.key in self.parked:
                continue
            address = instance.address
            self._activate(mqtt_topics.server_presence_topic(address.server_id, address.server_name), slot, instance)
            return

    def _retry(self, slot: str) -> None:
        """Bridge a slot some instance still announces and this profile does not serve."""
        if not self.broker.is_halted():
            self._activate_next(slot)

    def link_closed(self, link: McpLink) -> None:
        """The core let go of `link` (missed heartbeat, failed initialize, takeover): release it and, while
        an instance of its slot is announced, bridge it again later, the next instance first."""
        key = (link.slot, link.address.server_id)
        stale = (
            not self.broker.is_halted()
            and self._announced(link.slot)
            and key in self.retained
            and not link.was_ready()
            and not link.released
        )
        self.release(link, keep_rpc=stale)
        if self.broker.is_halted() or not self._announced(link.slot):
            return
        if stale:
            self._stale(link)
        instance = self._remove(key)
        if instance is not None:
            self._add(instance)  # to the end: another instance of the slot goes first
        if all(other.key in self.parked for other in self.of_slot.get(link.slot, {}).values()):
            self.reattach.forget(link.slot)  # nothing to try until a server announces itself anew
            return
        self.reattach.later(link.slot, link.close_reason, was_ready=link.was_ready())

    def _heard(self, key: InstanceKey) -> None:
        """The server instance `key` published something since the gateway subscribed: it is there."""
        self.retained.discard(key)
        self._unpark(key)
        self.stale_warned.pop(key, None)

    def _unpark(self, key: InstanceKey, *, retrying: bool = False) -> None:
        """`key` is no longer parked: drop its kept RPC subscription and, when none of its slot is parked
        any more, the slot's slow back-off (kept while `retrying`: failing again waits longer)."""
        self.parked.discard(key)
        topic = self.parked_topics.pop(key, None)
        if topic is not None:
            with contextlib.suppress(ConnectionError):
                self.broker.client.unsubscribe([topic])
        slot = key[0]
        if not retrying and not any(other.key in self.parked for other in self.of_slot.get(slot, {}).values()):
            self.parked_retry.forget(slot)

    def _retry_parked(self, slot: str) -> None:
        """The slow back-off of a slot whose announced instances are all parked: bridge the first again (it
        stays retained: failing unheard parks it again, with a longer wait)."""
        if self.broker.is_halted():
            return
        parked = [instance for instance in self.of_slot.get(slot, {}).values() if instance.key in self.parked]
        if not parked:
            self.parked_retry.forget(slot)
            return
        if slot in self.by_slot:  # another instance serves it: ask again later
            self.parked_retry.later(slot, "another instance of the slot is bridged")
            return
        instance = parked[0]
        self._unpark(instance.key, retrying=True)
        address = instance.address
        self._activate(mqtt_topics.server_presence_topic(address.server_id, address.server_name), slot, instance)

    def _stale(self, link: McpLink) -> None:
        """`link`, bridged for a retained presence, failed its handshake and nothing came from the server:
        the presence may be the broker's stored copy of a server that is gone (no will emptied it), or the
        server is slow to start; the evidence cannot tell. Parked: tried again on the slow back-off, at
        once when it speaks on its RPC topic or announces itself anew; its slot's leave reason says why,
        and the leave does not count as the slot flapping (the plain profile's rule for a status)."""
        key = (link.slot, link.address.server_id)
        self.parked.add(key)
        address = link.address
        ceiling = self.parked_retry.max_s
        reason = (
            f"a retained presence of MCP server {_shown(address.server_name)} ({_shown(address.server_id)}) went "
            "unanswered: the server did not answer initialize and has published nothing since the gateway "
            "subscribed (a server gone without a last will, or one slow to start); waiting for it to announce "
            "itself again or to speak on its RPC topic, and trying it again with a slower back-off, "
            f"{PARKED_FIRST_S:g} s doubling to {ceiling:g} s (logging.repeat_interval_s): docs/mqtt-broker.md"
        )
        self.parked_retry.later(link.slot, reason)
        if not self._parked_running:
            self._parked_running = True
            self.broker.spawn(self.parked_retry.run())
        self.broker.gateway.registry.left_with_broker(link.slot, link.info, reason)
        if key in self.stale_warned:
            return
        self.stale_warned[key] = None
        while len(self.stale_warned) > self.broker.config.max_instances:
            del self.stale_warned[next(iter(self.stale_warned))]
        log.warning("MQTT broker %s: slot %s: %s", self.broker.label, link.slot, reason, extra={"slot": link.slot})

    def _activate(self, topic: str, slot: str, instance: Instance) -> None:
        try:
            check_slot_name(slot)
        except SlotNameError as exc:
            self.broker.drops.count("refused", topic, f"slot {slot!r}: {exc}", slot)
            return
        link = McpLink(self.broker, slot, instance)
        link.profile = self
        self.by_server[instance.address] = link
        self.by_slot[slot] = link
        self.broker.spawn(self._bridge(link))

    async def _bridge(self, link: McpLink) -> None:
        client = self.broker.client
        try:
            # Before the initialize request (the specification's order): the RPC topic with No Local.
            codes = await client.subscribe([(link.rpc, True), (link.capability, False)])
        except NotConnected:
            return  # broker_lost answers for it
        if any(code >= 0x80 for code in codes):
            self.release(link)
            link.closed = True
            self._refused(
                link,
                f"the broker refused the subscription to {link.rpc} or {link.capability} (reason codes {codes}); "
                "check the broker's ACL for the gateway's user",
            )
            return
        if link.closed:
            return
        try:
            session = await self.broker.gateway.registry.attach(link.slot, link, aggregate=self.broker.config.aggregate)
        except SlotRefused as exc:
            self.release(link)
            link.closed = True
            if exc.kind in RETRIED_REFUSALS and self._announced(link.slot) and not self.broker.is_halted():
                self.reattach.later(link.slot, exc.reason, held=exc.kind == "held")
            self._refused(link, exc.reason)
            return
        link.session = session
        self.reattach.attached(link.slot)
        self.broker.slot_seen(link.slot, link.info.remote)
        if link.is_closed():  # the server went offline while the slot was being attached
            session.link_lost(link.close_reason)

    def _refused(self, link: McpLink, reason: str) -> None:
        """Count a refusal once per announcement of the slot (attempts again for it are not messages)."""
        if self.reattach.first_refusal(link.slot, announced=self._announced(link.slot)):
            self.broker.drops.count("refused", link.rpc, reason, link.slot)

    def release(self, link: McpLink, *, keep_rpc: bool = False) -> None:
        """Forget `link` (it no longer serves its slot) and unsubscribe its topics; `keep_rpc`: its instance
        is being parked, and a message on its RPC topic would end that (`parked_topics`)."""
        if link.released:
            return
        link.released = True
        if self.by_server.get(link.address) is link:
            del self.by_server[link.address]
        if self.by_slot.get(link.slot) is link:
            del self.by_slot[link.slot]
        if keep_rpc:
            self.parked_topics[(link.slot, link.address.server_id)] = link.rpc
            self.broker.client.unsubscribe([link.capability])
        else:
            self.broker.client.unsubscribe([link.rpc, link.capability])

    # -- RPC --------------------------------------------------------------------------------------

    def _rpc(self, topic: str, address: ServerAddress, payload: bytes) -> None:
        link = self.by_server.get(address)
        if link is None or link.session is None:
            self._heard_unbridged(address, payload)
            self.broker.drops.count("unregistered", topic, "no bridged server instance answers on this topic")
            return
        message = jsonrpc.parse(payload, link.session.settings.max_json_depth)
        if message.kind is jsonrpc.Kind.NOTIFICATION and message.method == mqtt_topics.METHOD_DISCONNECTED:
            # The server ended this client session; the specification: consider it offline.
            self.retained.discard((link.slot, address.server_id))
            self._remove((link.slot, address.server_id))
            self._forget_if_gone(link.slot)
            self.release(link)
            link.lost(f"MCP server {address.server_name} ({address.server_id}) sent notifications/disconnected")
            self._activate_next(link.slot)
            return
        if message.kind is jsonrpc.Kind.RESPONSE:
            link.initialized = True
        self._heard((link.slot, address.server_id))
        link.deliver(topic, message)

    def _heard_unbridged(self, address: ServerAddress, payload: bytes) -> None:
        """A message from an announced instance on its RPC topic while no session of it runs (a late answer
        to a handshake that timed out, or one in flight): the server is there. A parked one is bridged at
        once when its slot is free; `notifications/disconnected` says it is offline (the link's rule)."""
        key = (slot_for(address.server_name, self.rule), address.server_id)
        instance = self.instances.get(key)
        if instance is None or instance.address != address:
            return
        was_parked = key in self.parked
        self._heard(key)
        message = jsonrpc.parse(payload, self.broker.gateway.config.limits.max_json_depth)
        slot = instance.slot
        if message.kind is jsonrpc.Kind.NOTIFICATION and message.method == mqtt_topics.METHOD_DISCONNECTED:
            if address not in self.by_server:
                self._remove(key)
                self._forget_if_gone(slot)
            return
        if was_parked and slot not in self.by_slot and not self.broker.is_halted():
            self.reattach.now(slot, new_announcement=False)
            self._activate(mqtt_topics.server_presence_topic(address.server_id, address.server_name), slot, instance)

    def status(self) -> JsonObject:
        return {
            "server_filters": list(self.server_filters),
            "instances": len(self.instances),
            "shared_server_ids": sum(1 for slots in self.of_server.values() if len(slots) > 1),
            "bridged": sorted(self.by_slot),
            "reattaching": self.reattach.status(),
            "parked": self.parked_retry.status(),
        }
