"""Whether a broker lets anyone in: a throw-away client without credentials tries to connect, then to
read and write a topic where requests reach a board.

The broker's ACL is the security boundary for MQTT boards: anyone it lets publish on a board's topics
can drive that board, and the gateway cannot tell such a message from its own. The gateway cannot read
the broker's configuration; after each connection of its own it measures what it can without false
alarms (`check`, in a worker thread: paho's calls block):

1. A client with no username and password (client id `mcp-gateway-check-<random>`, the same host, port,
   TLS and MQTT version as the gateway's connection) connects. A successful CONNACK: the broker accepts
   anonymous clients. A refusing one (mosquitto: `Not authorized`): it does not. No connection or no
   CONNACK within the timeout: unknown.
2. Accepted: that client subscribes to a throw-away topic of each enabled profile where requests reach
   a device (plain: `<prefix>/mcp-gateway-check-<random>/down`; MCP over MQTT:
   `$mcp-rpc/<its id>/<its id>/mcp-gateway-check`), publishes one QoS 1 message on each, and waits
   for them to come back. Back: nothing kept an anonymous client from writing and reading board
   topics. Not back: something did (an ACL: mosquitto grants a denied subscription, then drops the
   denied message). No device or gateway listens on these topics.

Not measured: whether one board's credential can use another board's topics (the gateway holds no
board's credential, and its own is meant to reach every board's topics), nor an anonymous client an
ACL lets write board topics but not read them (it counts as kept off).
"""

from __future__ import annotations

import contextlib
import secrets
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from gateway.config import MqttBrokerConfig
from gateway.config.mqtt_tls import TlsFilesError, client_context
from gateway.core.timestamps import iso
from gateway.southbound.mqtt import paho_select
from gateway.southbound.mqtt import topics as mqtt_topics

CHECK_CLIENT_PREFIX = "mcp-gateway-check-"
CONNECT_TIMEOUT_S = 5.0
"""At most this long for the anonymous client's connection and CONNACK (less when connect_timeout_s is)."""
ECHO_WAIT_S = 1.0
"""How long the check waits for its own messages to come back after publishing them."""
PAYLOAD = b"mcp-gateway: may a client without credentials use this topic? (ignore)"


@dataclass(frozen=True)
class AnonymousCheck:
    """What one check found."""

    accepted: bool | None
    """Whether the broker accepted a client without credentials (None: could not tell)."""
    board_topics_open: bool | None
    """Whether that client's messages on board topics came back to it (None: accepted is not True, or
    the check could not subscribe)."""
    evidence: str
    topics: tuple[str, ...]
    checked_at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "board_topics_open": self.board_topics_open,
            "evidence": self.evidence,
            "topics": list(self.topics),
            "checked_at": iso(self.checked_at),
        }


def check_topics(config: MqttBrokerConfig, client_id: str) -> list[str]:
    """A throw-away topic per enabled profile where requests reach a device; nobody listens on them."""
    topics = []
    if "plain" in config.profiles:
        topics.append(mqtt_topics.plain_topic(config.topic_prefix, client_id, "down"))
    if "mcp" in config.profiles:
        topics.append(mqtt_topics.rpc_topic(client_id, client_id, "mcp-gateway-check"))
    return topics


def _reason(code: Any) -> str:
    return str(code.getName()) if isinstance(code, ReasonCode) else str(code)


def _failed(code: Any) -> bool:
    return bool(code.is_failure) if isinstance(code, ReasonCode) else int(code) >= 0x80


def check(config: MqttBrokerConfig, stop: threading.Event | None = None) -> AnonymousCheck:
    """Connect to the broker of `config` without credentials and try its board topics (blocking: run it
    in a worker thread). `stop` set ends it early, as unknown."""
    stop = stop or threading.Event()
    client_id = CHECK_CLIENT_PREFIX + secrets.token_hex(6)
    topics = check_topics(config, client_id)
    v5 = config.protocol == "5"
    timeout_s = min(config.connect_timeout_s, CONNECT_TIMEOUT_S)
    client = paho.Client(
        callback_api_version=CallbackAPIVersion.VERSION2,
        client_id=client_id,
        protocol=paho.MQTTv5 if v5 else paho.MQTTv311,
        clean_session=None if v5 else True,
        reconnect_on_failure=False,
    )
    client.connect_timeout = timeout_s
    if config.tls:
        try:
            client.tls_set_context(client_context(config.ca_file))  # no client certificate: anyone's view
        except TlsFilesError as exc:
            return AnonymousCheck(
                None, None, f"no client without credentials was tried: {exc}", tuple(topics), time.time()
            )
    heard: dict[str, Any] = {}
    echoed: set[str] = set()
    client.on_connect = lambda _c, _u, _f, code, _p: heard.setdefault("connack", code)
    client.on_subscribe = lambda _c, _u, _mid, codes, _p: heard.setdefault("suback", list(codes))
    client.on_message = lambda _c, _u, message: echoed.add(message.topic)
    where = f"{config.host}:{config.port}"

    def found(accepted: bool | None, evidence: str, board_topics_open: bool | None = None) -> AnonymousCheck:
        return AnonymousCheck(accepted, board_topics_open, evidence, tuple(topics), time.time())

    try:
        # A generous keepalive: the check sends no PINGREQ in its few seconds.
        paho_select.install()  # client.loop() below waits as the gateway's own connection does
        client.connect(config.host, config.port, keepalive=60)
    except (OSError, ssl.SSLError, ValueError) as exc:
        return found(None, f"a client without credentials could not connect to {where}: {exc}")
    try:
        if not _run(client, lambda: "connack" in heard, timeout_s, stop):
            return found(None, f"a client without credentials got no CONNACK from {where} within {timeout_s:g}s")
        connack = heard["connack"]
        if _failed(connack):
            return found(False, f"the broker refused a client without credentials: {_reason(connack)}")
        accepted = f"the broker accepted a client without credentials (client id {client_id}, CONNACK Success)"
        if not topics:
            return found(True, accepted)
        if v5:
            client.subscribe([(topic, SubscribeOptions(qos=mqtt_topics.QOS)) for topic in topics])
        else:
            client.subscribe([(topic, mqtt_topics.QOS) for topic in topics])
        if not _run(client, lambda: "suback" in heard, timeout_s, stop) or all(map(_failed, heard["suback"])):
            return found(True, f"{accepted}; whether it may use board topics is unknown: its SUBSCRIBE failed")
        for topic in topics:
            info = client.publish(topic, PAYLOAD, qos=mqtt_topics.QOS)
            if info.rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
                return found(True, f"{accepted}; whether it may use board topics is unknown: its PUBLISH failed")
        _run(client, lambda: echoed.issuperset(topics), ECHO_WAIT_S, stop)
        if stop.is_set():
            return found(True, accepted)
        opened = [topic for topic in topics if topic in echoed]
        if opened:
            return found(
                True,
                f"{accepted}, and let it publish and subscribe where requests reach a board: its messages on "
                f"{', '.join(opened)} came back to it",
                True,
            )
        return found(
            True,
            f"{accepted}; its messages on {', '.join(topics)} did not come back within {ECHO_WAIT_S:g}s "
            "(an ACL keeps it off board topics)",
            False,
        )
    finally:
        with contextlib.suppress(OSError, ValueError):
            client.disconnect()
            client.loop(0.05)
        # Whatever disconnect left open (the socket of a broker that never answered) is closed here.
        sock = client.socket()
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()


def _run(client: paho.Client, done: Callable[[], bool], timeout_s: float, stop: threading.Event) -> bool:
    """Drive the client's network loop until `done()`, the timeout, a lost connection or `stop`."""
    deadline = time.monotonic() + timeout_s
    while not done():
        left = deadline - time.monotonic()
        if left <= 0 or stop.is_set():
            return False
        if client.loop(min(left, 0.05)) != MQTTErrorCode.MQTT_ERR_SUCCESS:
            return done()
    return True
