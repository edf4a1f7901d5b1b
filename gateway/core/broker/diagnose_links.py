"""Problems of the device links the gateway holds itself: MQTT brokers, serial ports, the mDNS
advertisement.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.broker.problems import GatewayView, Problem


def mqtt_problems(view: GatewayView) -> list[Problem]:
    """A broker the gateway cannot reach, one that refuses its publishes, one that would send it far larger
    packets than it takes, one that lets clients in without credentials, and messages it received but could
    not use."""
    problems: list[Problem] = []
    for broker in view.mqtt:
        label = str(broker.get("broker"))
        if not broker.get("connected"):
            problems.append(
                Problem(
                    "mqtt.broker_unreachable",
                    "error",
                    f"MQTT broker {label} is not connected: its boards and servers are detached",
                    f"{broker.get('last_error') or 'not connected yet'}; "
                    f"{broker.get('attempts', 0)} connection attempts since the gateway started, "
                    f"next in {broker.get('next_attempt_in_s')}s",
                    MQTT_TLS_FIX if broker.get("last_error_kind") == "tls" else MQTT_UNREACHABLE_FIX,
                )
            )
        elif broker.get("subscribe_error"):
            problems.append(
                Problem(
                    "mqtt.subscription_refused",
                    "error",
                    f"MQTT broker {label} refused some of the gateway's subscriptions",
                    str(broker.get("subscribe_error")),
                    "Give the gateway's broker user read access to its topics in the broker's ACL file "
                    "(docs/mqtt-broker.md).",
                )
            )
        for problem in (
            _mqtt_publish_refused_problem(label, broker),
            _mqtt_packet_size_problem(label, broker),
            _mqtt_anonymous_problem(label, broker),
        ):
            if problem is not None:
                problems.append(problem)
        dropped = {reason: count for reason, count in (broker.get("dropped") or {}).items() if count}
        if dropped:
            examples = broker.get("dropped_examples") or {}
            counts = ", ".join(f"{reason} {count}" for reason, count in sorted(dropped.items()))
            latest = "; ".join(f"{reason}: {examples[reason]}" for reason in sorted(dropped) if reason in examples)
            problems.append(
                Problem(
                    "mqtt.messages_dropped",
                    "warning",
                    f"MQTT broker {label}: messages were dropped",
                    f"{counts} since the gateway started; latest: {latest}",
                    "malformed: fix the device's payloads (one JSON-RPC message per MQTT message, status = the "
                    "register frame with params.slot); wrong_topic: check topic_prefix and the device's topic names; "
                    "oversize: raise max_payload_bytes or shrink the device's messages; unregistered: the device "
                    "must publish its status (or presence) first; refused: the slot is held, reserved or "
                    "undeclared (provider_status), or max_instances devices are known; backlog: the gateway fell "
                    "behind (max_backlog). See docs/protocol-serial-mqtt.md.",
                )
            )
    return problems


MQTT_UNREACHABLE_FIX = (
    "Check that the broker runs (systemctl status mosquitto), its address and port in [[mqtt.brokers]] url, and "
    "the gateway's username and password (a refusal names 'Not authorized'); see docs/mqtt-broker.md."
)
MQTT_TLS_FIX = (
    "The TLS connection failed: check ca_file of the [[mqtt.brokers]] entry (a readable PEM file with the CA that "
    "signed the broker's certificate), the broker's certificate (expiry, and a host name or address that matches "
    "the url), and, for a broker that requires client certificates, cert_file and key_file; see "
    "docs/mqtt-broker.md, TLS."
)


def _mqtt_publish_refused_problem(label: str, broker: Mapping[str, Any]) -> Problem | None:
    """The broker refused a publish of the gateway's (its ACL), and none to that topic was accepted since."""
    refusal = broker.get("last_publish_refusal")
    if not isinstance(refusal, Mapping):
        return None
    topic = refusal.get("topic")
    return Problem(
        "mqtt.publish_refused",
        "error",
        f"MQTT broker {label} refuses the gateway's publishes to {topic}: requests there fail",
        f"PUBACK {refusal.get('reason')} (reason {refusal.get('reason_code')}) at {refusal.get('at')}; "
        f"{broker.get('publish_refusals', 0)} refused publishes since the gateway started",
        "Let the gateway's broker user write the topics it sends requests on (<topic_prefix>/<slot>/down for "
        "boards, $mcp-server/... and $mcp-rpc/... for MCP servers) in the broker's ACL file, then reload the broker "
        "(docs/mqtt-broker.md).",
    )


MQTT_ANONYMOUS_FIX = (
    "The broker's ACL is the security boundary for MQTT boards: anyone it lets publish on a board's topics can "
    "drive that board. Use the appliance's mosquitto configuration, image/mosquitto/mcp-gateway.conf with its "
    "acl: allow_anonymous false, a password per board (its username is its slot) and an ACL that confines each "
    "board to its own topics; give the gateway its own username and password in [[mqtt.brokers]] "
    "(docs/mqtt-broker.md)."
)
"""What to do about a broker that accepts clients without credentials (broker_diagnose and the log)."""


def mqtt_anonymous_summary(board_topics_open: bool | None) -> str:
    """What a broker that accepted the gateway's client without credentials lets such a client do, as far
    as that check saw (gateway/southbound/mqtt/anonymous.py)."""
    if board_topics_open:
        return (
            "accepts clients without a username and password, and lets them publish where requests reach a "
            "board: anyone who can reach the broker can drive its boards"
        )
    if board_topics_open is False:
        return "accepts clients without a username and password (an ACL kept the check's client off board topics)"
    return "accepts clients without a username and password"


def _mqtt_anonymous_problem(label: str, broker: Mapping[str, Any]) -> Problem | None:
    """A broker that let the gateway's throw-away client in without credentials."""
    check = broker.get("anonymous_clients") or {}
    if check.get("accepted") is not True:
        return None
    return Problem(
        "mqtt.broker_anonymous",
        "warning",
        f"MQTT broker {label} {mqtt_anonymous_summary(check.get('board_topics_open'))}",
        f"{check.get('evidence')} (checked at {check.get('checked_at')})",
        MQTT_ANONYMOUS_FIX,
    )


def _mqtt_packet_size_problem(label: str, broker: Mapping[str, Any]) -> Problem | None:
    """An MQTT 5 broker that would send the gateway packets far over max_payload_bytes: the gateway's MQTT
    library reads each packet whole before the size check, so the broker's own limit is the bound."""
    limits = broker.get("limits") or {}
    announced = limits.get("broker_max_packet_size")  # None: unknown (not connected, MQTT 3.1.1)
    wanted = limits.get("max_packet_bytes")
    payload = limits.get("max_payload_bytes")
    if not broker.get("connected") or announced is None or limits.get("announce_max_packet_size"):
        return None
    if not isinstance(wanted, int) or not isinstance(payload, int):
        return None
    if isinstance(announced, int) and announced <= wanted:
        return None
    accepts = f"up to {announced} bytes" if isinstance(announced, int) else "of any size"
    return Problem(
        "mqtt.broker_packet_size",
        "warning",
        f"MQTT broker {label} accepts packets {accepts}: a board could make the gateway read that much",
        f"the broker's CONNACK announces "
        f"{f'a Maximum Packet Size of {announced} bytes' if isinstance(announced, int) else 'no Maximum Packet Size'}"
        f"; max_payload_bytes is {payload}, so the gateway drops such a message, but only after reading it whole",
        f"Set max_packet_size {payload + 1024} in mosquitto.conf (at most {wanted}: max_payload_bytes + 16 KiB), as "
        "image/mosquitto/mcp-gateway.conf does, and restart the broker. A broker that drops oversize messages "
        "without stalling (EMQX; not mosquitto 2.0.11) can be told the limit by the gateway instead: "
        "announce_max_packet_size = true in its [[mqtt.brokers]] entry (docs/mqtt-broker.md).",
    )


SERIAL_FAILURES_NOTABLE = 3
"""Failed opens of a serial port in a row from which it counts as unavailable (not a board still booting)."""
SERIAL_DAMAGE_SHARE = 0.01
"""Share of a port's frames lost to line damage (cobs, crc) from which it is worth a look ..."""
SERIAL_DAMAGE_FLOOR = 3
"""... once at least this many were lost: one flipped bit is no finding."""
SERIAL_NO_BOARD_AFTER_S = 30.0
"""A port open this long without a registered board is a finding (a board registers when asked, at once)."""


def _serial_port_unavailable(port: Mapping[str, Any]) -> Problem | None:
    failures = int(port.get("failures_in_a_row") or 0)
    if port.get("state") not in ("backoff", "opening") or failures < SERIAL_FAILURES_NOTABLE:
        return None
    path = port.get("path")
    error = str(port.get("last_error") or "no error recorded")
    if "ENOENT" in error:
        cause = (
            "The path does not exist: check the cable and the name (ls -l /dev/serial/by-id/; a by-id name "
            "follows the adapter), or remove the [[serial.ports]] entry."
        )
    elif "EACCES" in error or "EPERM" in error:
        cause = "The gateway's user may not open the tty: add it to the group dialout and restart the gateway."
    elif "EAGAIN" in error or "EBUSY" in error:
        cause = "Another program holds the port (a second gateway, a terminal program, mpremote, esptool): stop it."
    else:
        cause = "See docs/device-serial.md#when-it-does-not-work for what last_error means."
    retry = port.get("next_retry_in_s")
    return Problem(
        "serial.port_unavailable",
        "error",
        f"Serial port {path} "
        + ("cannot be opened" if error.startswith("cannot open") else "keeps failing")
        + ": the slots of a board on it are detached",
        f"{error}; {failures} failed attempts in a row"
        + (f", next in {retry:g}s" if isinstance(retry, int | float) else "")
        + f" ({port.get('source')} port, {port.get('opens', 0)} opens since start)",
        f"{cause} The gateway keeps retrying with back-off up to serial.retry_max_s.",
        port=path,
    )


def _serial_line_damage(port: Mapping[str, Any]) -> Problem | None:
    dropped = port.get("dropped") or {}
    damaged = int(dropped.get("cobs") or 0) + int(dropped.get("crc") or 0)
    frames = int(port.get("frames_in") or 0)
    if damaged < SERIAL_DAMAGE_FLOOR or damaged < (frames + damaged) * SERIAL_DAMAGE_SHARE:
        return None
    share = damaged / (frames + damaged)
    return Problem(
        "serial.frames_damaged",
        "error" if frames == 0 else "warning",
        f"Serial port {port.get('path')} "
        + ("receives nothing but damaged frames" if frames == 0 else "loses frames to line damage"),
        f"{damaged} damaged frames (cobs {dropped.get('cobs', 0)}, crc {dropped.get('crc', 0)}) against {frames} "
        f"valid ones since the gateway started ({share:.1%}), at {port.get('baud')} baud",
        f"Both ends must use the same baud rate (this port: {port.get('baud')}; the board: its serial.baud), with "
        "TX crossed to RX, RX to TX and GND connected: a mismatch loses every frame. Frames lost now and then are "
        "noise: a shorter wire, a ground beside the signals, or a lower baud rate. A damaged frame never delivers "
        "a wrong message; it costs the call it carried (the caller gets a deadline error).",
        port=port.get("path"),
    )


def _serial_oversize(port: Mapping[str, Any]) -> Problem | None:
    oversize = int((port.get("dropped") or {}).get("oversize") or 0)
    if not oversize:
        return None
    key = f"{port.get('config_key') or 'serial.ports[<i>]'}.frame_cap"
    return Problem(
        "serial.frames_oversize",
        "warning",
        f"Serial port {port.get('path')} dropped messages larger than its frame cap",
        f"{oversize} messages over frame_cap {port.get('frame_cap')} bytes since the gateway started "
        f'(mcpgw_limit_hits_total{{limit="{key}"}})',
        f"Raise {key}, or lower the board's frame_max_bytes so that its pages and answers fit.",
        port=port.get("path"),
    )


def _serial_no_board(port: Mapping[str, Any]) -> Problem | None:
    open_for = port.get("open_for_s")
    if port.get("state") != "open" or port.get("slots") or not isinstance(open_for, int | float):
        return None
    if open_for < SERIAL_NO_BOARD_AFTER_S:
        return None
    dropped = port.get("dropped") or {}
    frames = int(port.get("frames_in") or 0)
    if dropped.get("refused"):
        patterns = ", ".join(str(pattern) for pattern in port.get("slots_allowed") or [])
        fix = (
            f"Its register frames were refused (the board got the reason as an error with id null, and the log "
            f"warned once): the slot name is outside the port's slots ({patterns}), or held, reserved or "
            "undeclared. Fix the port's slots or the board's slot name."
        )
    elif frames:
        fix = (
            "The board talks but never registers: it must send notifications/register with params.slot first, "
            "and again whenever the gateway sends broker/register."
        )
    elif dropped.get("text"):
        fix = (
            "Only text arrives: the board prints (a REPL, a boot log) instead of speaking frames. Its app must run "
            'with "transport": "serial" on the UART wired to this port (docs/device-serial.md#which-uart).'
        )
    else:
        fix = (
            "Nothing arrives: check that a board is wired and powered, that its app runs with "
            f'"transport": "serial", TX to RX, RX to TX, GND to GND, and {port.get("baud")} baud on both ends.'
        )
    return Problem(
        "serial.no_board",
        "warning" if port.get("source") == "config" else "info",
        f"Serial port {port.get('path')} is open but no board has registered on it",
        f"open for {open_for:.0f}s; {frames} valid frames in, {port.get('register_requests', 0)} broker/register "
        f"sent; dropped: unregistered {dropped.get('unregistered', 0)}, refused {dropped.get('refused', 0)}, "
        f"text {dropped.get('text', 0)}",
        fix,
        port=port.get("path"),
    )


def serial_problems(view: GatewayView) -> list[Problem]:
    """A port that cannot be opened, a line that damages frames, a port without a registered board."""
    problems: list[Problem] = []
    for port in view.serial.get("ports") or []:
        unavailable = _serial_port_unavailable(port)
        if unavailable is not None:
            problems.append(unavailable)
            continue
        damage = _serial_line_damage(port)
        found = [damage, _serial_oversize(port), None if damage is not None else _serial_no_board(port)]
        problems.extend(problem for problem in found if problem is not None)
    return problems


def mdns_problems(view: GatewayView) -> list[Problem]:
    """[mdns] is on but boards and clients cannot find the gateway by browsing."""
    state = view.mdns.get("state")
    reason = str(view.mdns.get("reason") or "")
    if state == "not_advertised":
        return [
            Problem(
                "mdns.not_advertised",
                "info",
                "mDNS is enabled but nothing is advertised: the gateway listens on loopback only",
                reason,
                'Bind to the network (host = "0.0.0.0", with [auth] and [providers.auth] configured) so boards '
                "and clients can reach and find the gateway, or turn mDNS off ([mdns] enabled = false, or run "
                "--no-mdns).",
            )
        ]
    if state == "failed":
        return [
            Problem(
                "mdns.failed",
                "warning",
                "The gateway cannot advertise itself with mDNS: browsing does not find it",
                f"{reason}; retried every refresh, the gateway itself serves normally",
                "Check that the network interface has an address and multicast on (ip link show: MULTICAST), that "
                "the firewall lets UDP port 5353 through, and the names in [mdns] interfaces. Boards and clients can "
                "always use the gateway's address directly; see docs/discovery.md.",
            )
        ]
    return []
