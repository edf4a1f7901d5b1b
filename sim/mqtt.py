"""One simulated pump's link through an MQTT broker, in either profile of docs/protocol-serial-mqtt.md
"MQTT ways in".

The pump's code is the board's (the dispatcher answers every request, its duplicate cache answers a
redelivered QoS 1 request without acting twice); only the transport differs from sim.link. The
connection is the gateway's own broker client (gateway.southbound.mqtt.client: paho in its thread,
events handed to the event loop, reconnects with back-off), one per pump, as each board has its own.

plain (MQTT 3.1.1, what umqtt.simple does on a board): client id = the device id; last will an empty
retained `<prefix>/<slot>/status`; on connect: subscribe `down`, publish the register frame (with
params.slot, aggregate, hello) retained on `status`; every request on `down` is answered on `up`,
where the pump's telemetry (broker/telemetry notifications) goes too. The mcp profile carries no
telemetry: the simulator turns it off there.

mcp (MQTT 5, the EMQX specification in gateway.southbound.mqtt.topics): client id = server-id = the
device id, server-name `<server_prefix>/<slot>` (or the broker's MCP-SERVER-NAME); last will an empty
retained presence; on connect: subscribe the control topic and publish `notifications/server/online`
retained on the presence topic. An `initialize` on the control topic names its client in the
MCP-MQTT-CLIENT-ID user property: the pump subscribes that client's RPC topic (No Local) and presence,
then answers on the RPC topic, where the rest of the session runs; the client's
`notifications/disconnected` (its presence, or the RPC topic) ends that session.

Control interface (as sim.link): drop(offline_s) cuts the connection without DISCONNECT (the broker
publishes the will: the gateway detaches the slot), reconnect() ends an offline period, restart() is
a reboot (cut, and connect again at once); stop() clears the retained announcement and disconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import orjson
from pydantic import ValidationError

from gateway import __version__
from gateway.config import MqttBrokerConfig
from gateway.config.base import masked_url
from gateway.config.mqtt_tls import TlsFilesError, TlsSettingNames, client_context
from gateway.southbound.mqtt import topics as mqtt_topics
from gateway.southbound.mqtt.client import BrokerClient, ConnectOptions, InboundMessage, NotConnected, Outbound
from gateway.southbound.mqtt.connack import ConnackLimits
from gateway.southbound.mqtt.tls import reword
from sim import FIRMWARE_NAME, firmware
from sim.pump import SimulatedPump

log = logging.getLogger("sim")
connection_log = logging.getLogger("sim.mqtt")
"""The pumps' broker connections: their own logger and wording, apart from the gateway's (gateway.mqtt)."""

HEAD_BYTES = 96
SIMULATOR_TLS_NAMES = TlsSettingNames(
    ca_file="--ca-file", cert_file="--mqtt-cert-file", key_file="--mqtt-key-file", key_password=None, where=""
)
"""The simulator's TLS options, as its errors, its log and last_down_reason name them."""
OPTIONS = {
    "url": "--mqtt",
    "username": "--mqtt-username",
    "password": "--mqtt-password-file",
    "ca_file": "--ca-file",
    "cert_file": "--mqtt-cert-file",
    "key_file": "--mqtt-key-file",
    "topic_prefix": "--topic-prefix",
}
"""The simulator's option for each [[mqtt.brokers]] setting it fills in."""
DEFAULT_SERVER_PREFIX = "sim/pumps"
LOSS_WARNING = "MQTT broker %s: %s"
"""How the connection (gateway.southbound.mqtt.client) warns of a lost connection."""
MqttProfile = Literal["plain", "mcp"]


@dataclass(frozen=True)
class MqttTarget:
    """Where and how the pumps publish: the broker URL, the profile and the broker credential."""

    url: str
    profile: MqttProfile = "plain"
    topic_prefix: str = mqtt_topics.DEFAULT_PREFIX
    server_prefix: str = DEFAULT_SERVER_PREFIX
    instance: str | None = None
    """MCP profile: a suffix of the server-id (<device id>-<instance>), for several instances of one pump."""
    username: str | None = None
    password_file: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    cert_file: str | None = None
    """A client certificate for a broker that requires one (with key_file; mqtts:// only)."""
    key_file: str | None = None

    def broker_settings(self) -> dict[str, Any]:
        """The [[mqtt.brokers]] settings of the connection (validated as the gateway's own are)."""
        return {
            "url": self.url,
            "username": self.username,
            "password": {"file": self.password_file} if self.password_file else None,
            "ca_file": self.ca_file,
            "cert_file": self.cert_file,
            "key_file": self.key_file,
            "profiles": [self.profile],
            "topic_prefix": self.topic_prefix,
        }


class MqttPumpLink:
    def __init__(
        self,
        pump: SimulatedPump,
        target: MqttTarget,
        hello: dict[str, Any],
        *,
        connect_timeout_s: float = 10.0,
        backoff_min_s: float = 1.0,
        backoff_max_s: float = 30.0,
    ) -> None:
        self.pump = pump
        self.target = target
        self.hello = hello
        self.plain = target.profile == "plain"
        self.server_id = f"{pump.device_id}-{target.instance}" if target.instance else pump.device_id
        self.server_name = f"{target.server_prefix}/{pump.slot}"
        config = broker_config(
            target,
            client_id=pump.device_id if self.plain else self.server_id,
            protocol="3.1.1" if self.plain else "5",
            connect_timeout_s=connect_timeout_s,
            reconnect_initial_s=backoff_min_s,
            reconnect_max_s=max(backoff_max_s, backoff_min_s),
        )
        self.client = BrokerClient(
            config,
            _Events(self),
            self._options,
            logger=_PumpConnectionLog(self._quiet_cut),
            who=f"simulated {pump.slot}",
            counters=None,
            tls_names=SIMULATOR_TLS_NAMES,
        )
        self.clients: set[str] = set()
        """MCP profile: the clients (gateways) with a session on this pump."""
        self._down_reason: str | None = None
        self._down_by_control = False
        self._cut_reason: str | None = None
        self._cut_link: int | None = None
        """The connection (its number, client.connects) that drop() or restart() cut: down from that
        moment, while paho's thread has yet to see the loss and clear client.connected."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._reporter: asyncio.Task[None] | None = None

    # -- topics ------------------------------------------------------------------------------------

    def _plain(self, kind: mqtt_topics.PlainKind) -> str:
        return mqtt_topics.plain_topic(self.target.topic_prefix, self.pump.slot, kind)

    @property
    def announce_topic(self) -> str:
        if self.plain:
            return self._plain("status")
        return mqtt_topics.server_presence_topic(self.server_id, self.server_name)

    @property
    def url(self) -> str:
        return f"{self.target.url} {self.announce_topic}"

    @property
    def users(self) -> tuple[tuple[str, str], ...]:
        if self.plain:
            return ()
        return (
            (mqtt_topics.PROP_COMPONENT_TYPE, mqtt_topics.COMPONENT_SERVER),
            (mqtt_topics.PROP_MQTT_CLIENT_ID, self.server_id),
        )

    def _options(self, client_id: str) -> ConnectOptions:
        will = Outbound(self.announce_topic, b"", retain=True, user_properties=self.users)
        if self.plain:
            return ConnectOptions(will=will)
        meta = orjson.dumps({"name": FIRMWARE_NAME, "version": __version__}).decode()
        return ConnectOptions(
            will=will,
            user_properties=(
                (mqtt_topics.PROP_COMPONENT_TYPE, mqtt_topics.COMPONENT_SERVER),
                (mqtt_topics.PROP_META, meta),
            ),
        )

    # -- what the simulator reads -----------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self.client.connected and self.client.connects != self._cut_link

    @property
    def links(self) -> int:
        return self.client.connects

    @property
    def last_down_reason(self) -> str | None:
        """Why the link went down last, or why it cannot come up (a refused CONNECT, a failed TLS handshake)."""
        if not self.client.connected and self.client.last_error and not self._down_by_control:
            return self.client.last_error  # the latest attempt's failure, newer than the loss
        return self._down_reason

    def offline_for_s(self) -> float | None:
        until = self.client.hold_until
        if until is None:
            return None
        left = until - time.monotonic()
        return round(left, 3) if left > 0 else None

    # -- lifecycle and the control interface -----------------------------------------------------

    def start(self) -> None:
        self.client.start()

    async def stop(self) -> None:
        # A clean shutdown clears the retained announcement itself (the will is for unclean ends).
        await self.client.stop([Outbound(self.announce_topic, b"", retain=True, user_properties=self.users)])
        self._stop_reporting()
        for task in list(self._tasks):
            task.cancel()

    def drop(self, offline_s: float | None = None) -> None:
        self._cut("link_drop from the control endpoint")
        self.client.cut(offline_s)

    def reconnect(self) -> None:
        if self.connected:
            return  # a connection that is up stays up; a redial asked for now would skip the next loss's back-off
        self.client.redial()

    def restart(self) -> None:
        self._cut("reboot from the control endpoint")
        self.client.cut()
        self.client.redial()

    def _cut(self, reason: str) -> None:
        # Only a connection that is up is cut: a reason kept while down would name the next real loss.
        if self.client.connected:
            self._cut_link = self.client.connects
            self._cut_reason = reason

    def _quiet_cut(self, record: logging.LogRecord) -> bool:
        """The connection's warning of a loss this link caused on purpose is left out: on_disconnected
        logs it at info, naming the pump and the control action."""
        return not (self._cut_reason is not None and record.levelno == logging.WARNING and record.msg == LOSS_WARNING)

    # -- what the connection tells (through _Events) ----------------------------------------------

    def on_connected(self, limits: ConnackLimits) -> None:
        if not self.plain:
            suggested = limits.user_property(mqtt_topics.PROP_SERVER_NAME)
            if suggested and mqtt_topics.valid_server_name(suggested):
                self.server_name = suggested  # the broker's suggestion is binding
        log.info("%s link up to %s (link %d)", self.pump.slot, self.url, self.client.connects)
        self.clients.clear()
        self._spawn(self._announce())

    async def _announce(self) -> None:
        try:
            if self.plain:
                await self.client.subscribe([(self._plain("down"), False)])
                frame = firmware.register_frame(self.hello, self.pump.slot)
            else:
                await self.client.subscribe(
                    [(mqtt_topics.server_control_topic(self.server_id, self.server_name), False)]
                )
                online = {
                    "jsonrpc": "2.0",
                    "method": mqtt_topics.METHOD_SERVER_ONLINE,
                    "params": {
                        "server_name": self.server_name,
                        "description": f"Simulated pump-1 {self.pump.slot}: a centrifugal pump with start, stop, "
                        "set_speed, get_status and reset_fault",
                        "meta": {"device_id": self.pump.device_id, "firmware": self.hello.get("firmware")},
                    },
                }
                frame = orjson.dumps(online)
            self.client.publish(self.announce_topic, frame, retain=True, user_properties=self.users)
        except NotConnected:
            return
        if self.plain:
            # The board's telemetry on its up topic, beside the answers (the mcp profile has no place for it).
            self._stop_reporting()
            self._reporter = self.pump.report(self._publish_telemetry)

    async def _publish_telemetry(self, frame: bytes) -> None:
        self.client.publish(self._plain("up"), frame, user_properties=self.users)  # NotConnected ends the task

    def _stop_reporting(self) -> None:
        if self._reporter is not None:
            self._reporter.cancel()
            self._reporter = None

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def on_disconnected(self, reason: str) -> None:
        self._stop_reporting()
        if self._cut_reason is not None:
            hold = self.offline_for_s()
            if hold:
                then = f"offline for {round(hold, 1):g} s, connecting again after"
            elif self._cut_reason.startswith("reboot"):
                then = "connecting again at once"
            else:
                then = "connecting again after the back-off"
            log.info("%s link down (%s); %s", self.pump.slot, self._cut_reason, then)
        self._down_reason = self._cut_reason or reason
        self._down_by_control = self._cut_reason is not None
        self._cut_reason = None
        self.clients.clear()

    def on_message(self, message: InboundMessage) -> None:
        self.pump.heard()
        if self.plain:
            if message.topic == self._plain("down"):
                self._answer(message.payload, self._plain("up"))
            return
        self._mcp_message(message)

    def _answer(self, payload: bytes, topic: str) -> None:
        pump = self.pump
        if len(payload) > pump.settings.frame_max_bytes:
            answer: bytes | None = pump.oversize(len(payload), payload[:HEAD_BYTES])
        else:
            answer = pump.handle(payload)
        if answer is not None:
            with contextlib.suppress(NotConnected):
                self.client.publish(topic, answer, user_properties=self.users)

    # -- MCP over MQTT, the server side ----------------------------------------------------------

    def _mcp_message(self, message: InboundMessage) -> None:
        topic = message.topic
        if topic == mqtt_topics.server_control_topic(self.server_id, self.server_name):
            client_id = next(
                (value for key, value in message.user_properties if key.upper() == mqtt_topics.PROP_MQTT_CLIENT_ID),
                None,
            )
            if client_id is None or not mqtt_topics.valid_client_id(client_id):
                log.warning(
                    "%s: initialize without a usable %s; ignored", self.pump.slot, mqtt_topics.PROP_MQTT_CLIENT_ID
                )
                return
            self._spawn(self._open_session(client_id, message.payload))
            return
        rpc = mqtt_topics.parse_rpc(topic)
        if rpc is not None and rpc.client_id in self.clients:
            if _is_disconnected(message.payload):
                self._close_session(rpc.client_id)
                return
            self._answer(message.payload, topic)
            return
        if topic.startswith(mqtt_topics.CLIENT_ROOT + "/" + mqtt_topics.PRESENCE + "/"):
            client_id = topic.rsplit("/", 1)[-1]
            if client_id in self.clients and _is_disconnected(message.payload):
                self._close_session(client_id)

    def _client_topics(self, client_id: str) -> list[str]:
        return [
            mqtt_topics.rpc_topic(client_id, self.server_id, self.server_name),
            mqtt_topics.client_capability_topic(client_id),
            mqtt_topics.client_presence_topic(client_id),
        ]

    async def _open_session(self, client_id: str, initialize: bytes) -> None:
        rpc, capability, presence = self._client_topics(client_id)
        try:
            # Subscribed before the answer (the specification's order), the RPC topic with No Local.
            await self.client.subscribe([(rpc, True), (capability, False), (presence, False)])
        except NotConnected:
            return
        self.clients.add(client_id)
        self._answer(initialize, rpc)

    def _close_session(self, client_id: str) -> None:
        self.clients.discard(client_id)
        self.client.unsubscribe(self._client_topics(client_id))


class _PumpConnectionLog(logging.Logger):
    """connection_log as one pump's connection writes to it: the same name, level and handlers (its
    records go to connection_log's), with the pump's filter. Not registered with logging, so the level
    is connection_log's at every call, not a cached copy."""

    def __init__(self, keep: Callable[[logging.LogRecord], bool]) -> None:
        super().__init__(connection_log.name)
        self.parent = connection_log
        self.addFilter(keep)

    def isEnabledFor(self, level: int) -> bool:
        return connection_log.isEnabledFor(level)


class _Events:
    """The connection's events, handed to the link (whose `connected` is the simulator's flag)."""

    def __init__(self, link: MqttPumpLink) -> None:
        self.link = link

    def connected(self, limits: ConnackLimits) -> None:
        self.link.on_connected(limits)

    def disconnected(self, reason: str) -> None:
        self.link.on_disconnected(reason)

    def message(self, message: InboundMessage) -> None:
        self.link.on_message(message)

    def publish_refused(self, topic: str, payload: bytes, text: str) -> None:
        """Warned of by the connection (sim.mqtt); an answer that never arrives is the gateway's deadline."""

    def backlog_dropped(self, count: int, topic: str) -> None:
        log.warning(
            "%s: %d message(s) dropped, the simulator fell behind (latest on %s)", self.link.pump.slot, count, topic
        )


def _is_disconnected(payload: bytes) -> bool:
    try:
        value = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return False
    return isinstance(value, dict) and value.get("method") == mqtt_topics.METHOD_DISCONNECTED and "id" not in value


def check_target(target: MqttTarget) -> None:
    """Raise ValueError naming the simulator's option that is wrong with `target` (the URL, the
    credential, the TLS files, the prefix), in one line that shows no password (a URL is masked)."""
    parsed = urlsplit(target.url)
    if parsed.username is not None or parsed.password is not None:
        raise ValueError(
            f"--mqtt {masked_url(target.url)}: no credentials in the URL; use --mqtt-username and --mqtt-password-file"
        )
    if target.password_file is not None and target.username is None:
        raise ValueError("--mqtt-password-file needs --mqtt-username")
    given = [
        option
        for option, path in (
            ("--ca-file", target.ca_file),
            ("--mqtt-cert-file", target.cert_file),
            ("--mqtt-key-file", target.key_file),
        )
        if path is not None
    ]
    if given and parsed.scheme != "mqtts":
        raise ValueError(
            f"{given[0]} needs an mqtts:// broker, and --mqtt {masked_url(target.url)} is mqtt:// (no TLS: the "
            "password would go in clear text)"
        )
    if target.key_file is not None and target.cert_file is None:
        raise ValueError("--mqtt-key-file needs --mqtt-cert-file (the client certificate it belongs to)")
    if parsed.scheme == "mqtts":
        try:
            client_context(target.ca_file, target.cert_file, target.key_file, names=SIMULATOR_TLS_NAMES)
        except TlsFilesError as exc:
            raise ValueError(str(exc)) from None
    broker_config(target)


def broker_config(target: MqttTarget, **settings: Any) -> MqttBrokerConfig:
    """The connection's [[mqtt.brokers]] settings, validated as the gateway's own are; ValueError naming
    the simulator's option, one line: never pydantic's dump, which quotes the input (the URL's password)."""
    try:
        return MqttBrokerConfig.model_validate({**target.broker_settings(), **settings})
    except ValidationError as exc:
        error = exc.errors()[0]
        text = str(error["msg"]).removeprefix("Value error, ")
        if error["loc"]:  # a setting's own value: the password file
            option = OPTIONS.get(str(error["loc"][0]), "--mqtt")
            raise ValueError(f"{option}: {text.removeprefix('secret: ')}") from None
        # The entry's checks: "mqtt broker '<masked URL>': <setting> <value>: <problem>" or "...: <problem>".
        text = reword(text.removeprefix(f"mqtt broker {masked_url(target.url)!r}: "), SIMULATOR_TLS_NAMES)
        setting, _, rest = text.partition(" ")
        if setting in OPTIONS:
            raise ValueError(f"{OPTIONS[setting]} {rest}") from None
        raise ValueError(f"--mqtt {masked_url(target.url)}: {text}") from None
