"""The plain MQTT profile: boards under `<prefix>/<slot>/{status,down,up}`, one slot each
(docs/protocol-serial-mqtt.md, "Plain profile").

A board announces itself with its register frame as a retained message on `status` (its last will
is an empty retained `status`), listens on `down` and answers on `up`, QoS 1. The gateway:

- attaches the slot when a status arrives; a status for a live slot from the same device (its hello's
  device_id) is the board reconnecting: the session takes it as a new register frame (aggregate,
  hello; a new schema hash re-lists its tools) and calls in flight go on; one the board published
  before its slot finished the handshake also makes the link publish the unanswered handshake requests
  again, same ids (`handshake_again`: the board (re)started, or was not listening yet). A status naming another
  device is a newcomer claiming a held slot: the core's takeover decision admits or refuses it as it
  does a WebSocket newcomer (docs/protocol.md, "Liveness and takeover"), and the holder keeps the slot
  (and its link here) until the core lets it go. Both boards read the slot's down topic and act on
  its requests: the refusal there carries the newcomer's device id (data.device_id), the holder's
  provider_status shows it (contested_by), and it is warned of at most once per slot per
  logging.repeat_interval_s;
- detaches it at once when the status is emptied (the board's will, or a clean shutdown): pending
  callers get `Provider "<slot>" disconnected`;
- when the board's adopted identity is revoked (`withdraw`, from `_broker`'s broker_providers_recheck):
  publishes an empty retained status for it, so its register frame is gone from the broker, and
  detaches the slot at once, as when its will arrives; a board announcing with a revoked device id
  (the broker admits it until mosquitto is reloaded) is not attached, and its status is emptied again;
- checks liveness with JSON-RPC ping over down/up (the core's heartbeat); a board that misses one is
  detached;
- while a board's status stands and its slot is not served (dropped by the core, or refused because
  another provider holds it), attaches it again: with back-off, at once when the slot frees, and at
  once when the board is heard from on `up` (mqtt_reattach.py). The board need not announce itself
  again; an empty status ends the attempts. A status delivered retained (the broker's stored copy)
  whose board has not been heard from since and whose handshake failed is the exception: no attempts
  until the board publishes a status or speaks on `up` (`_stale`: one warning per board). A retained
  message on `up` is the broker's stored copy, replayed at every subscription: dropped and counted
  (`retained`), never taken as the board speaking;
- detaches every slot of a broker whose connection is lost; the retained statuses bring them back
  once the gateway has reconnected and subscribed again. A broker stopped in an orderly way (mosquitto
  on SIGTERM) publishes its boards' wills just before it closes the gateway's connection: a slot whose
  status was emptied within WILLS_BEFORE_CLOSE_S before the loss is relabelled as left with the broker
  (its leave reason names the broker's loss), and neither kind of leave counts toward the slot's flap
  warning (gateway/core/slot_flaps.py).
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
from gateway.core.link import LinkInfo, MessageRefused
from gateway.core.slots import SlotRefused
from gateway.southbound import envelope
from gateway.southbound.mqtt import topics as mqtt_topics
from gateway.southbound.mqtt.client import PacketTooLarge
from gateway.southbound.mqtt.drops import RETAINED_DETAIL
from gateway.southbound.mqtt.link import BrokerContext, MqttLink
from gateway.southbound.mqtt.reattach import RETRIED_REFUSALS, Reattach

log = logging.getLogger("gateway.mqtt")

WILLS_BEFORE_CLOSE_S = 2.0
"""How long before the loss of a broker's connection an emptied status counts as the broker's closing
(mosquitto publishes the wills of every board just before it closes the gateway's connection) rather
than the board going offline. A board that really goes offline is detached at once all the same; only
its leave reason and the flap warning's count change when its broker is lost within this time after."""
MAX_WARNED_RESERVED = 64
"""Reserved slot names whose refused status is warned of, each once; past them the drop counters alone
say it, so that a board cycling through names cannot flood the log."""
LEFT_WITH_BROKER = "(the board's last will came as the broker closed)"
HANDSHAKE_REMEMBERED = 8
"""Requests a link keeps from before its session is ready, to publish again when the board announces
itself anew meanwhile; the handshake has one or two requests out at a time (initialize, a tools/list page)."""


def _device_id(hello: object) -> object:
    return hello.get("device_id") if isinstance(hello, dict) else None


@dataclass
class _Quiet:
    """When a slot's contest was last warned of, and how many refusals came since."""

    since: float
    refused: int = 0


class PlainLink(MqttLink):
    def __init__(self, broker: BrokerContext, slot: str, prefix: str, profile: PlainProfile) -> None:
        self.topics = {kind: mqtt_topics.plain_topic(prefix, slot, kind) for kind in ("status", "down", "up")}
        # The plain profile carries boards of the device profile: session era, no probe (docs/protocol.md,
        # "The gateway owns the provider session"). The slot's topics outlive the session: a board may
        # still answer a request of the slot's previous session there.
        info = LinkInfo(
            transport="mqtt", remote=f"{broker.label} {prefix}/{slot}", era=SESSION_ERA, medium_outlives_session=True
        )
        super().__init__(broker, slot, info)
        self.profile = profile
        self.handshake: dict[jsonrpc.JsonId, bytes] = {}
        """Requests sent before the session was ready, by id (the newest HANDSHAKE_REMEMBERED)."""
        self.sent_again: dict[jsonrpc.JsonId, None] = {}
        """Ids `handshake_again` published twice: a second answer to one is expected, not unmatched."""

    async def send(self, data: bytes) -> None:
        self.publish(self.topics["down"], data)
        session = self.session
        if session is None or not session.ready:
            self._remember(data)

    def _remember(self, data: bytes) -> None:
        try:
            body = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        request_id = body.get("id") if isinstance(body, dict) and "method" in body else None
        if isinstance(request_id, str | int):
            self.handshake[request_id] = data
            while len(self.handshake) > HANDSHAKE_REMEMBERED:
                del self.handshake[next(iter(self.handshake))]

    def handshake_again(self) -> int:
        """The board published its status again before answering the handshake: it (re)started, or was
        not listening yet when the requests went out (a broker that keeps retained messages over a
        restart hands the gateway a board's old status before the board is back), so they are lost.
        Publish the ones still unanswered again, under their own ids, so that callers waiting for the
        slot go on; how many."""
        session = self.session
        if session is None or session.ready or session.state == "closed":
            return 0
        again = [(request_id, data) for request_id, data in self.handshake.items() if request_id in session.pending]
        for request_id, data in again:
            with contextlib.suppress(ConnectionError, MessageRefused):
                self.publish(self.topics["down"], data)
            self.sent_again[request_id] = None
            while len(self.sent_again) > HANDSHAKE_REMEMBERED:
                del self.sent_again[next(iter(self.sent_again))]
        return len(again)

    def deliver(self, topic: str, message: jsonrpc.Message) -> None:
        if self.sent_again and message.kind is jsonrpc.Kind.RESPONSE and self._second_answer(message.body):
            return
        super().deliver(topic, message)

    def _second_answer(self, body: JsonObject) -> bool:
        """A board that got both copies of a request `handshake_again` sent answers both: the later
        answer is expected, so it is not counted as unmatched."""
        request_id = body.get("id")
        session = self.session
        if not isinstance(request_id, str | int) or request_id not in self.sent_again or session is None:
            return False
        if request_id in session.pending:
            return False  # the first answer: delivered
        del self.sent_again[request_id]
        session.mark_alive()
        return True

    async def close(self, code: int, reason: str) -> None:
        # The core let go of the slot (a missed heartbeat, a takeover, shutdown). The board stays on the
        # broker; nothing on the wire tells it, as a closed WebSocket would, so nothing is sent.
        if not self.closed:
            self.closed = True
            self.close_reason = reason
            self.profile.link_closed(self)

    def serving(self) -> bool:
        """The core gave this link the slot and has not let it go."""
        session = self.session
        return not self.closed and session is not None and session.state != "closed"

    def status_extra(self) -> dict[str, object]:
        extra: dict[str, object] = {**self.common_status(), "profile": "plain", "topics": dict(self.topics)}
        standing = self.profile.announced.get(self.slot)
        own = self.session.hello if self.session is not None else None
        if standing is not None and _device_id(standing.hello) != _device_id(own):
            # Another board's status is the retained one: it was refused (or is being decided), and it
            # reads this slot's down topic too.
            extra["contested_by"] = {"device_id": _device_id(standing.hello)}
        return extra


class PlainProfile:
    """Every plain-profile board of one broker."""

    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self.prefix = broker.config.topic_prefix
        self.links: dict[str, PlainLink] = {}
        """The link serving each slot, or being attached to it."""
        self.claims: dict[str, PlainLink] = {}
        """Links of another device's status for a slot whose link in `links` serves it: the core decides."""
        self.contests: dict[str, _Quiet] = {}
        """Slots whose refused newcomer was warned of (at most one warning per slot per repeat interval)."""
        self.emptied: dict[str, tuple[float, PlainLink]] = {}
        """Slots detached by an emptied status within WILLS_BEFORE_CLOSE_S, when, and the link that served them."""
        self.announced: dict[str, envelope.Registration] = {}
        """The standing (non-empty) status of each board (at most max_instances), so that a board whose
        slot is not served is attached again."""
        self.reserved_warned: set[str] = set()
        """Reserved slot names whose refused status was warned of (at most MAX_WARNED_RESERVED)."""
        self.retained: set[str] = set()
        """Announced slots whose status came as a retained message (the broker's stored copy, not a
        publication since the gateway subscribed) and whose board has not been heard from since."""
        self.stale_warned: dict[str, None] = {}
        """Slots whose unanswered retained status was warned of, until the board is heard from again
        (at most max_instances, oldest first out): one warning per board, however often the broker restarts."""
        self.reattach = Reattach(
            broker.gateway.registry, broker.config.reconnect_initial_s, broker.config.reconnect_max_s, self._retry
        )

    def filters(self) -> list[tuple[str, bool]]:
        return [
            (mqtt_topics.plain_filter(self.prefix, "status"), False),
            (mqtt_topics.plain_filter(self.prefix, "up"), False),
        ]

    def owns(self, topic: str) -> bool:
        return topic.startswith(self.prefix + "/")

    def broker_lost(self, reason: str) -> None:
        links, self.links = self.links, {}
        claims, self.claims = self.claims, {}
        self.announced.clear()  # the retained statuses arrive again after the next subscription
        self.retained.clear()
        self.reattach.clear()
        lost = f"MQTT broker {self.broker.label} {reason}"
        for link in [*claims.values(), *links.values()]:
            link.lost(lost)
            link.left_with_broker()
        emptied, self.emptied = self.emptied, {}
        now = time.monotonic()
        for at, link in emptied.values():
            if now - at <= WILLS_BEFORE_CLOSE_S:
                link.left_with_broker(f"{lost} {LEFT_WITH_BROKER}")

    def slot_of(self, topic: str) -> str | None:
        address = mqtt_topics.parse_plain(self.prefix, topic)
        return address.slot if address is not None else None

    def answering_link(self, topic: str) -> PlainLink | None:
        """The link serving the board that answers on `topic` (its up topic), else None."""
        address = mqtt_topics.parse_plain(self.prefix, topic)
        if address is None or address.kind != "up":
            return None
        link = self.links.get(address.slot)
        return link if link is not None and link.serving() else None

    def handle(self, topic: str, payload: bytes, *, retained: bool = False) -> None:
        """One message on a plain-profile topic; `retained`: the broker delivered its stored copy (the
        MQTT retain flag), so it says what a board published before, not that the board is there now."""
        address = mqtt_topics.parse_plain(self.prefix, topic)
        if address is None:
            reserved = mqtt_topics.reserved_status_slot(self.prefix, topic) if payload else None
            if reserved is not None:
                self._refuse_reserved(topic, reserved, payload)
                return
            self.broker.drops.count("wrong_topic", topic, mqtt_topics.plain_topic_problem(self.prefix, topic))
            return
        if address.kind == "status":
            self._status(topic, address.slot, payload, retained)
        elif address.kind == "up":
            self._up(topic, address.slot, payload, retained)
        else:
            self.broker.drops.count("wrong_topic", topic, "the gateway does not read down topics", address.slot)

    def _status(self, topic: str, slot: str, payload: bytes, retained: bool) -> None:
        if not payload:
            served = self.links.get(slot)
            self._offline(slot, "device went offline: its status was emptied (its last will, or a clean shutdown)")
            if served is not None:
                self._emptied(slot, served)
            return
        message = jsonrpc.parse(payload, self.broker.gateway.config.limits.max_json_depth)
        registration = envelope.registration(message.body)
        if registration is None:
            what = message.problem if message.limit else "a status must be the register frame (notifications/register)"
            self.broker.drops.count("malformed", topic, what, slot)
            return
        if registration.slot != slot:
            self.broker.drops.count(
                "malformed", topic, f"params.slot {registration.slot!r} does not match the topic's slot", slot
            )
            return
        if self._revoked(registration.hello):
            # The broker admits the board until mosquitto is reloaded; the gateway does not serve it meanwhile,
            # and empties the status again so that no register frame of it stays retained.
            self.broker.drops.count("refused", topic, "the device's identity was revoked (devices revoke)", slot)
            self._withdraw_status(slot)
            self._offline(slot, "device identity revoked (mcp-gateway devices revoke)")
            return
        max_instances = self.broker.config.max_instances
        if slot not in self.announced and len(self.announced) >= max_instances:
            self.broker.limit_hit("max_instances")
            self.broker.drops.count("refused", topic, f"more than {max_instances} devices on this broker", slot)
            return
        self.announced[slot] = registration
        if retained:
            self.retained.add(slot)
        else:
            self.heard(slot)
        self.reattach.now(slot)
        old = self.links.get(slot)
        if old is not None and old.serving() and old.session is not None:
            if _device_id(old.session.hello) == _device_id(registration.hello):
                old.deliver(topic, message)  # the board reconnected: same session, updated registration
                if not retained:
                    old.handshake_again()  # before its initialize was answered: the board (re)started
                return
            # Another device claims a held slot: the core's takeover decision, as for any newcomer (WIRE
            # §2.3). The holder's link stays in `links` meanwhile, so that its answer to the probe reaches it.
            self._claim(slot, registration)
            return
        if old is not None:
            del self.links[slot]
            old.lost("a new status replaced the device's registration")
        self._attach(slot, registration)

    def _refuse_reserved(self, topic: str, slot: str, payload: bytes) -> None:
        """A status for a slot name reserved for the gateway: refused as the core refuses such a name on
        every way in, answered on the board's down topic (it reads no close reason), warned once per name."""
        reason = mqtt_topics.slot_level_problem(slot) or f'Provider "{slot}" is reserved'
        warn = slot not in self.reserved_warned and len(self.reserved_warned) < MAX_WARNED_RESERVED
        if warn:
            self.reserved_warned.add(slot)
            log.warning(
                "MQTT broker %s: refused the status on %s: %s; rename the board's slot (its topics)",
                self.broker.label,
                topic[:160],
                reason,
                extra={"slot": slot},
            )
        self.broker.drops.count("refused", topic, reason, slot, warn=False)
        registration = envelope.registration(
            jsonrpc.parse(payload, self.broker.gateway.config.limits.max_json_depth).body
        )
        device_id = _device_id(registration.hello) if registration is not None else None
        data = {"device_id": device_id} if device_id is not None else None
        refusal = jsonrpc.dumps(jsonrpc.error_response(None, jsonrpc.UNAVAILABLE, reason, data))
        with contextlib.suppress(ConnectionError, PacketTooLarge):
            self.broker.client.publish(mqtt_topics.plain_topic(self.prefix, slot, "down"), refusal)

    def _emptied(self, slot: str, link: PlainLink) -> None:
        """Remember that `link` was detached by an emptied status now: should the broker's connection be
        lost within WILLS_BEFORE_CLOSE_S, the will was the broker's closing (`broker_lost`)."""
        now = time.monotonic()
        self.emptied.pop(slot, None)
        self.emptied[slot] = (now, link)  # oldest first: what aged out, or is past max_instances, goes
        while self.emptied and (
            next(iter(self.emptied.values()))[0] < now - WILLS_BEFORE_CLOSE_S
            or len(self.emptied) > self.broker.config.max_instances
        ):
            del self.emptied[next(iter(self.emptied))]

    def _offline(self, slot: str, reason: str) -> bool:
        """The board on `slot` is gone: no attempts again, its link detached now (True when it had one)."""
        self.announced.pop(slot, None)
        self.retained.discard(slot)
        self.reattach.forget(slot)
        claim = self.claims.pop(slot, None)
        if claim is not None:
            claim.lost(reason)
        link = self.links.pop(slot, None)
        if link is not None:
            link.lost(reason)
        return link is not None

    def withdraw(self, slot: str, device_id: str, reason: str) -> JsonObject | None:
        """Device `device_id`'s identity was revoked: empty its retained status on this broker (a fresh
        subscriber, the gateway after a restart, gets no register frame) and detach its slot now, as when
        its will arrives. What was done, or None when this broker carries no status or link of that board
        on `slot` (a status and a link whose hellos name another device are another board's, and are left
        alone). On a contested slot the standing status may be a refused board's while the link is the
        revoked holder's: the holder goes all the same."""
        registration = self.announced.get(slot)
        link = self.links.get(slot)
        hellos: list[object] = []
        if registration is not None:
            hellos.append(registration.hello)
        if link is not None:
            hellos.append(link.session.hello if link.session is not None else None)
        if all(_device_id(hello) not in (device_id, None) for hello in hellos):
            return None  # also when there is neither a status nor a link
        topic = mqtt_topics.plain_topic(self.prefix, slot, "status")
        done: JsonObject = {"broker": self.broker.label, "status_topic": topic}
        problem = self._withdraw_status(slot)
        done["retained_status"] = "cleared" if problem is None else f"not cleared: {problem}"
        done["detached"] = self._offline(slot, reason)
        return done

    def _withdraw_status(self, slot: str) -> str | None:
        """Publish an empty retained status for `slot`; None when sent, else why not."""
        try:
            self.broker.client.publish(mqtt_topics.plain_topic(self.prefix, slot, "status"), b"", retain=True)
        except (ConnectionError, PacketTooLarge) as exc:
            return str(exc)
        return None

    def _revoked(self, hello: object) -> bool:
        device_id = _device_id(hello)
        check = self.broker.gateway.device_revoked
        return isinstance(device_id, str) and check is not None and check(device_id)

    def _attach(self, slot: str, registration: envelope.Registration) -> None:
        link = PlainLink(self.broker, slot, self.prefix, self)
        self.links[slot] = link
        self.broker.spawn(self._attach_link(link, registration))

    def _claim(self, slot: str, registration: envelope.Registration) -> None:
        """Ask the core for `slot`, which another device's link serves, on behalf of `registration`."""
        superseded = self.claims.pop(slot, None)
        if superseded is not None:
            superseded.lost("a new status replaced the device's registration")
        link = PlainLink(self.broker, slot, self.prefix, self)
        self.claims[slot] = link
        self.broker.spawn(self._attach_link(link, registration))

    def _retry(self, slot: str) -> None:
        """Attach a board whose status stands and whose slot this profile does not serve."""
        registration = self.announced.get(slot)
        if registration is None or slot in self.links or self.broker.is_halted():
            return
        self._attach(slot, registration)

    def link_closed(self, link: PlainLink) -> None:
        """The core let go of `link` (missed heartbeat, failed initialize, takeover): try again while the
        board's status stands."""
        if self.links.get(link.slot) is link:
            del self.links[link.slot]
        if link.slot in self.claims:
            return  # taken over: the claim that the core admitted gets the slot
        if link.slot not in self.announced or self.broker.is_halted():
            return
        if link.slot in self.retained and not link.was_ready():
            self._stale(link)
            return
        self.reattach.later(link.slot, link.close_reason, was_ready=link.was_ready())

    def heard(self, slot: str) -> None:
        """The board on `slot` published something since the gateway subscribed: it is there."""
        self.retained.discard(slot)
        self.stale_warned.pop(slot, None)

    def _stale(self, link: PlainLink) -> None:
        """`link`, attached for a retained status, failed its handshake and nothing came from the board:
        the status is the broker's stored copy of a board that is gone (it went while the broker was down,
        so no will emptied it; a broker with persistence keeps it over the restart). No attempts again
        until the board publishes a status or answers on `up`; the slot is vacant meanwhile, its leave
        reason says why, and the leave is not counted as the slot flapping (the broker's restart left it)."""
        slot = link.slot
        self.reattach.forget(slot)
        registration = self.announced.get(slot)
        device_id = _device_id(registration.hello) if registration is not None else None
        reason = (
            f"a retained status of device {device_id!r} the broker stored (before a restart of the broker or "
            f"the gateway, or of a board gone without a last will): the board does not answer; waiting for it to "
            f"publish a new status; a broker with persistence keeps such statuses: docs/mqtt-broker.md"
        )
        self.broker.gateway.registry.left_with_broker(slot, link.info, reason)
        if slot in self.stale_warned:
            return
        self.stale_warned[slot] = None
        while len(self.stale_warned) > self.broker.config.max_instances:
            del self.stale_warned[next(iter(self.stale_warned))]
        log.warning("MQTT broker %s: slot %s: %s", self.broker.label, slot, reason, extra={"slot": slot})

    async def _attach_link(self, link: PlainLink, registration: envelope.Registration) -> None:
        try:
            session = await self.broker.gateway.registry.attach(
                link.slot, link, aggregate=registration.aggregate, hello=registration.hello
            )
        except SlotRefused as exc:
            if self.links.get(link.slot) is link:
                del self.links[link.slot]
            if self.claims.get(link.slot) is link:
                del self.claims[link.slot]
            link.closed = True
            standing = self.announced.get(link.slot) is registration
            if standing and exc.kind in RETRIED_REFUSALS:
                self.reattach.later(link.slot, exc.reason, held=exc.kind == "held")
            if not self.reattach.first_refusal(link.slot, announced=standing):
                return  # an attempt again for the same status: told and counted already
            holder = self.links.get(link.slot)
            contested = exc.kind == "held" and holder is not None and holder.serving()
            self.broker.drops.count("refused", link.topics["status"], exc.reason, link.slot, warn=not contested)
            if contested and holder is not None and holder.session is not None:
                self._warn_contest(link, _device_id(holder.session.hello), _device_id(registration.hello))
            # The board cannot see a close reason; an error with id null on its down topic is the nearest.
            # Every board reading that topic gets it: data.device_id says whose status was refused.
            device_id = _device_id(registration.hello)
            data = {"device_id": device_id} if device_id is not None else None
            refusal = jsonrpc.dumps(jsonrpc.error_response(None, exc.code, exc.reason, data))
            with contextlib.suppress(ConnectionError, PacketTooLarge):
                self.broker.client.publish(link.topics["down"], refusal)
            return
        if self.claims.get(link.slot) is link:
            del self.claims[link.slot]
            if not link.is_closed():
                self.links[link.slot] = link  # admitted: the core let the holder go
        link.session = session
        self.reattach.attached(link.slot)
        self.broker.slot_seen(link.slot, link.info.remote)
        if link.is_closed():  # the board went offline while the slot was being attached
            session.link_lost(link.close_reason)
            if link.with_broker:
                link.left_with_broker()

    def _warn_contest(self, link: PlainLink, holder_id: object, newcomer_id: object) -> None:
        """One warning per slot per logging.repeat_interval_s for a status refused because another MQTT
        device holds the slot, with how many were refused in between."""
        slot, now = link.slot, time.monotonic()
        quiet = self.contests.get(slot)
        if quiet is not None and now - quiet.since < self.broker.gateway.config.logging.repeat_interval_s:
            quiet.refused += 1
            return
        self.contests.pop(slot, None)
        self.contests[slot] = _Quiet(now)
        if len(self.contests) > self.broker.config.max_instances:
            del self.contests[next(iter(self.contests))]
        more = f" ({quiet.refused} more refused since the last warning)" if quiet is not None and quiet.refused else ""
        log.warning(
            "MQTT broker %s: refused the status of device %r for slot %s: device %r holds it (takeover = %s). "
            "Both boards read %s and act on every request: power one off or give it its own slot, then "
            "restart the other so that it announces itself again%s",
            self.broker.label,
            newcomer_id,
            slot,
            holder_id,
            self.broker.gateway.registry.takeover_policy(slot),
            link.topics["down"],
            more,
            extra={"slot": slot, "refusal": "held"},
        )

    def _up(self, topic: str, slot: str, payload: bytes, retained: bool = False) -> None:
        if retained:
            # The broker's stored copy, replayed at every subscription: it says nothing about the board now.
            self.broker.drops.count("retained", topic, RETAINED_DETAIL, slot)
            return
        self.heard(slot)
        link = self.links.get(slot)
        if link is None or link.closed:
            registration = self.announced.get(slot)
            if registration is None:
                self.broker.drops.count("unregistered", topic, "no status from this board; publish status first", slot)
                return
            # Heard from again after the core let it go (a missed heartbeat): its status still
            # stands, so it gets the slot back with a new session now. This message belonged to the old one.
            self.links.pop(slot, None)
            self.reattach.now(slot, new_announcement=False)
            self._attach(slot, registration)
            return
        if link.session is None:
            self.broker.drops.count("unregistered", topic, "the slot is still being attached", slot)
            return
        link.deliver(topic, jsonrpc.parse(payload, link.session.settings.max_json_depth))
