"""broker_diagnose's judgement, as a pure function of a snapshot (no gateway, no sockets)."""

from __future__ import annotations

from dataclasses import replace

from gateway.core.broker.diagnose import diagnose, worst
from gateway.core.broker.problems import STANDING, GatewayView, Problem, SlotView, StandingProblems

URL = "http://127.0.0.1:3000"


def view(*slots: SlotView, **overrides: object) -> GatewayView:
    base = GatewayView(
        url=URL,
        host="127.0.0.1",
        is_loopback=True,
        insecure_lan=False,
        allowed_origins=("http://localhost:*",),
        aggregate_members=("pump-1",),
        slots=slots,
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


def ready(name: str = "pump-1", **overrides: object) -> SlotView:
    slot = SlotView(name=name, connected=True, state="ready", transport="websocket", connects=1)
    return replace(slot, **overrides)  # type: ignore[arg-type]


def ids(problems: list[Problem]) -> list[str]:
    return [problem.id for problem in problems]


def only(problems: list[Problem], problem_id: str) -> Problem:
    found = [problem for problem in problems if problem.id == problem_id]
    assert len(found) == 1, ids(problems)
    return found[0]


def test_a_healthy_gateway_has_no_problems() -> None:
    problems = diagnose(view(ready()))
    assert problems == []
    assert worst(problems) == "ok"


def test_a_fresh_gateway_explains_what_to_do_first() -> None:
    problems = diagnose(view(allowed_origins=(), aggregate_members=()))
    assert ids(problems) == ["aggregate.empty", "providers.none", "security.no_origins_configured"]
    assert {problem.severity for problem in problems} == {"info"}
    assert worst(problems) == "info"
    assert "ws://127.0.0.1:3000/provider/<slot>" in only(problems, "providers.none").fix
    assert "ws://127.0.0.1:3000/providers" in only(problems, "providers.none").fix
    assert '"aggregate":true' in only(problems, "aggregate.empty").fix


def test_declared_slot_without_provider_is_an_error_with_its_provider_url() -> None:
    problems = diagnose(view(ready(), SlotView(name="pump 9", declared=True)))
    problem = only(problems, "slot.disconnected")
    assert problem.severity == "error"
    assert problem.slot == "pump 9"
    assert "no provider has connected since the gateway started" in problem.evidence
    assert "ws://127.0.0.1:3000/provider/pump%209" in problem.fix
    assert worst(problems) == "error"


def test_undeclared_slot_that_lost_its_provider_is_a_warning_with_the_reason() -> None:
    lost = SlotView(
        name="pump-2",
        connects=3,
        last_disconnect_ago_s=42,
        last_disconnect_reason="provider closed the connection (close code 1001)",
    )
    problem = only(diagnose(view(ready(), lost)), "slot.disconnected")
    assert problem.severity == "warning"
    assert "42s ago" in problem.evidence
    assert "close code 1001" in problem.evidence
    assert "3 connection(s)" in problem.evidence


def test_a_name_clients_asked_for_but_no_provider_used() -> None:
    problem = only(diagnose(view(ready(), SlotView(name="pmup-1"))), "slot.never_connected")
    assert problem.severity == "warning"
    assert "spelling" in problem.fix


def test_failed_initialize_is_reported_instead_of_a_plain_disconnect() -> None:
    failed = SlotView(
        name="pump-1",
        declared=True,
        connects=1,
        last_error="initialize failed: boom",
        last_disconnect_reason="Provider must answer initialize and tools/list: boom",
        last_disconnect_ago_s=1,
    )
    problems = diagnose(view(failed, initialize_timeout_ms=2500), "pump-1")
    assert ids(problems) == ["provider.initialize_failed"]
    assert "initialize failed: boom" in problems[0].evidence
    assert "2500 ms" in problems[0].fix


def test_heartbeat_misses_name_the_interval() -> None:
    slot = ready(counters={"heartbeat_misses": 2})
    problem = only(diagnose(view(slot, heartbeat_interval_s=7.5)), "provider.heartbeat_misses")
    assert problem.severity == "warning"
    assert "2 missed heartbeat(s) at an interval of 7.5s" in problem.evidence
    assert "heartbeat_interval_s" in problem.fix


def test_unparsable_messages_and_batches() -> None:
    problems = diagnose(view(ready(counters={"unparsable": 3, "protocol_violations": 1})))
    assert "3 unparsable" in only(problems, "provider.unparsable_messages").evidence
    violations = only(problems, "provider.protocol_violations")
    assert violations.evidence.startswith("1 protocol violation(s) since start: JSON-RPC batches (not read), tools")
    assert "inputSchema object" in violations.fix


def test_unmatched_responses_hint_at_the_id_type() -> None:
    string_ids = only(diagnose(view(ready(counters={"unmatched_responses": 4}))), "provider.unmatched_responses")
    assert "id style brk" in string_ids.evidence
    assert 'id_style = "numeric"' in string_ids.fix
    assert "[slots.declared.pump-1]" in string_ids.fix
    numeric = only(
        diagnose(view(ready(id_style="numeric", counters={"unmatched_responses": 1}))),
        "provider.unmatched_responses",
    )
    assert "integer ids" in numeric.fix


def test_deadlines_name_the_slot_timeout() -> None:
    slot = ready(counters={"deadlines": 2}, request_timeout_ms=1500)
    problem = only(diagnose(view(slot)), "provider.deadlines")
    assert "2 request(s)" in problem.evidence
    assert "1500 ms" in problem.evidence
    assert "tool_timeouts_ms" in problem.fix


def test_pending_near_and_at_the_bound() -> None:
    assert diagnose(view(ready(pending=7, max_pending=10))) == []
    near = only(diagnose(view(ready(pending=8, max_pending=10))), "provider.pending_high")
    assert near.severity == "warning"
    full = only(diagnose(view(ready(pending=10, max_pending=10))), "provider.pending_high")
    assert full.severity == "error"
    assert "refused" in full.evidence


def test_sessions_and_subscriptions_near_their_caps() -> None:
    problems = diagnose(view(ready(), sessions=9, max_sessions=10, subscriptions=10, max_subscriptions=10))
    assert only(problems, "sessions.near_cap").severity == "warning"
    assert only(problems, "subscriptions.near_cap").severity == "error"
    assert "9 of at most 10" in only(problems, "sessions.near_cap").evidence


def test_insecure_lan_only_off_loopback() -> None:
    lan = view(ready(), host="0.0.0.0", is_loopback=False, insecure_lan=True, public_url="http://gw.plant.lan:3000")
    problem = only(diagnose(lan), "security.insecure_lan")
    assert problem.severity == "warning"
    assert "0.0.0.0" in problem.evidence
    assert "config.public_url_missing" not in ids(diagnose(lan))
    # insecure_lan = true while bound to loopback changes nothing, so it is not a finding.
    assert diagnose(view(ready(), insecure_lan=True)) == []


def test_lan_bind_without_public_url_says_guides_show_loopback() -> None:
    lan = view(ready(), host="0.0.0.0", is_loopback=False, insecure_lan=True)
    assert only(diagnose(lan), "config.public_url_missing").severity == "info"


def test_filter_by_slot_and_an_unknown_name() -> None:
    gateway = view(ready(counters={"unparsable": 1}), SlotView(name="pump-2", declared=True), insecure_lan=True)
    assert ids(diagnose(gateway, "pump-1")) == ["provider.unparsable_messages"]
    assert ids(diagnose(gateway, "pump-2")) == ["slot.disconnected"]
    unknown = diagnose(gateway, "ghost")
    assert ids(unknown) == ["slot.unknown"]
    assert unknown[0].slot == "ghost"
    assert "known slots: pump-1, pump-2" in unknown[0].evidence
    assert "forgotten after limits.vacant_slot_ttl_s" in unknown[0].evidence  # a board gone a while ago


def test_problems_are_sorted_worst_first_and_serialise_without_an_empty_slot() -> None:
    problems = diagnose(view(ready(counters={"deadlines": 1}), SlotView(name="a", declared=True), allowed_origins=()))
    assert [problem.severity for problem in problems] == ["error", "warning", "info"]
    info = problems[-1].to_json()
    assert "slot" not in info
    assert list(info) == ["id", "severity", "summary", "evidence", "fix"]
    assert problems[0].to_json()["slot"] == "a"


# -- serial ports -----------------------------------------------------------------------------


def serial_port(path: str = "/dev/ttyUSB0", **overrides: object) -> dict[str, object]:
    """One entry of broker_info serial.ports, as gateway/southbound/serial/ports.py reports it."""
    port: dict[str, object] = {
        "path": path,
        "source": "config",
        "config_key": "serial.ports[0]",
        "state": "open",
        "open_for_s": 600.0,
        "baud": 115200,
        "frame_cap": 8192,
        "slots_allowed": ["pump-*"],
        "slots": ["pump-1"],
        "opens": 1,
        "failures": 0,
        "failures_in_a_row": 0,
        "last_error": None,
        "next_retry_in_s": None,
        "frames_in": 1000,
        "dropped": {"text": 0, "cobs": 0, "crc": 0, "oversize": 0, "unregistered": 0, "refused": 0, "backlog": 0},
        "register_requests": 1,
    }
    port.update(overrides)
    return port


def serial_view(*ports: dict[str, object]) -> GatewayView:
    return view(ready(transport="serial"), serial={"ports": list(ports), "hotplug": {"enabled": False}})


def dropped(**counts: int) -> dict[str, int]:
    return {"text": 0, "cobs": 0, "crc": 0, "oversize": 0, "unregistered": 0, "refused": 0, "backlog": 0, **counts}


def test_a_healthy_serial_port_is_no_problem() -> None:
    assert diagnose(serial_view(serial_port())) == []
    # A few damaged frames among many are no finding; neither is a port just opened without its board yet.
    assert diagnose(serial_view(serial_port(dropped=dropped(crc=2, text=5)))) == []
    assert diagnose(serial_view(serial_port(slots=[], open_for_s=3.0, frames_in=0))) == []


def test_a_serial_port_that_keeps_failing_to_open_is_an_error_naming_the_cause() -> None:
    missing = serial_port(
        state="backoff",
        open_for_s=None,
        slots=[],
        opens=0,
        failures=4,
        failures_in_a_row=4,
        last_error="cannot open: No such file or directory (ENOENT)",
        next_retry_in_s=3.2,
    )
    problem = only(diagnose(serial_view(missing)), "serial.port_unavailable")
    assert problem.severity == "error"
    assert problem.summary.startswith("Serial port /dev/ttyUSB0 cannot be opened")
    assert (
        "cannot open: No such file or directory (ENOENT); 4 failed attempts in a row, next in 3.2s" in problem.evidence
    )
    assert "ls -l /dev/serial/by-id/" in problem.fix
    denied = {**missing, "last_error": "cannot open: Permission denied (EACCES)"}
    assert "dialout" in only(diagnose(serial_view(denied)), "serial.port_unavailable").fix
    busy = {**missing, "last_error": "cannot open: Resource temporarily unavailable (EAGAIN)"}
    assert "Another program holds the port" in only(diagnose(serial_view(busy)), "serial.port_unavailable").fix
    # One or two failures are a board still being plugged in or booting: no finding yet.
    assert diagnose(serial_view({**missing, "failures_in_a_row": 2})) == []


def test_a_serial_port_losing_frames_to_line_damage_is_a_warning_with_the_share() -> None:
    noisy = serial_port(frames_in=190, dropped=dropped(cobs=4, crc=6))
    problem = only(diagnose(serial_view(noisy)), "serial.frames_damaged")
    assert problem.severity == "warning"
    assert "10 damaged frames (cobs 4, crc 6) against 190 valid ones" in problem.evidence
    assert "(5.0%), at 115200 baud" in problem.evidence
    assert "same baud rate" in problem.fix and "lower baud rate" in problem.fix
    # Nothing valid at all (a baud mismatch): an error, and no second finding about the missing board.
    mismatch = serial_port(frames_in=0, slots=[], dropped=dropped(cobs=40, crc=3))
    problems = diagnose(serial_view(mismatch))
    assert ids(problems) == ["serial.frames_damaged"]
    assert problems[0].severity == "error"
    assert problems[0].summary == "Serial port /dev/ttyUSB0 receives nothing but damaged frames"


def test_oversize_frames_name_the_bound_to_raise() -> None:
    problem = only(diagnose(serial_view(serial_port(dropped=dropped(oversize=2)))), "serial.frames_oversize")
    assert "2 messages over frame_cap 8192 bytes" in problem.evidence
    assert 'mcpgw_limit_hits_total{limit="serial.ports[0].frame_cap"}' in problem.evidence
    assert problem.fix.startswith("Raise serial.ports[0].frame_cap")


def test_an_open_port_without_a_registered_board_says_what_the_line_shows() -> None:
    silent = serial_port(slots=[], open_for_s=45.0, frames_in=0, register_requests=1)
    problem = only(diagnose(serial_view(silent)), "serial.no_board")
    assert problem.severity == "warning"
    assert problem.evidence.startswith("open for 45s; 0 valid frames in, 1 broker/register sent")
    assert problem.fix.startswith("Nothing arrives")
    talking = {**silent, "frames_in": 12, "dropped": dropped(unregistered=12), "register_requests": 9}
    assert "never registers" in only(diagnose(serial_view(talking)), "serial.no_board").fix
    refused = {**silent, "frames_in": 3, "dropped": dropped(refused=3)}
    assert "outside the port's slots (pump-*)" in only(diagnose(serial_view(refused)), "serial.no_board").fix
    printing = {**silent, "dropped": dropped(text=7)}
    assert "Only text arrives" in only(diagnose(serial_view(printing)), "serial.no_board").fix
    hot_plugged = {**silent, "source": "hotplug", "config_key": "serial.hotplug"}
    assert only(diagnose(serial_view(hot_plugged)), "serial.no_board").severity == "info"


def test_a_serial_slot_without_its_board_names_the_port_not_a_websocket_url() -> None:
    lost = SlotView(
        name="pump-2",
        connects=1,
        last_disconnect_reason="serial port /dev/ttyACM0 closed: the device went away (end of file)",
        way_in="serial",
        provider_url="/dev/ttyACM0",
    )
    problem = only(diagnose(view(ready(), lost)), "slot.disconnected")
    assert problem.fix.startswith("Check the board on serial port /dev/ttyACM0: its power and cable")
    assert 'register frame naming "pump-2"' in problem.fix
    assert "ws://" not in problem.fix
    declared = replace(lost, declared=True)
    problem = only(diagnose(view(ready(), declared)), "slot.disconnected")
    assert problem.severity == "error"
    assert "serial port /dev/ttyACM0" in problem.fix and "ws://" not in problem.fix


def mqtt_broker(**limits: object) -> dict[str, object]:
    """One MQTT broker's status as gateway.southbound.mqtt.brokers reports it: connected, MQTT 5, 1 MiB payloads."""
    base: dict[str, object] = {
        "max_payload_bytes": 1_048_576,
        "max_packet_bytes": 1_048_576 + 16_384,
        "announce_max_packet_size": False,
        "broker_max_packet_size": 1_049_600,
    }
    return {"broker": "mqtt://127.0.0.1:1884", "connected": True, "limits": {**base, **limits}, "dropped": {}}


def test_an_mqtt_broker_that_would_send_far_larger_packets_than_the_gateway_takes_is_a_warning() -> None:
    # The appliance's mosquitto (max_packet_size 1049600) is within max_payload_bytes + 16 KiB: no finding.
    assert "mqtt.broker_packet_size" not in ids(diagnose(view(ready(), mqtt=(mqtt_broker(),))))
    unlimited = only(
        diagnose(view(ready(), mqtt=(mqtt_broker(broker_max_packet_size="unlimited"),))), "mqtt.broker_packet_size"
    )
    assert unlimited.severity == "warning"
    assert "accepts packets of any size" in unlimited.summary
    assert "no Maximum Packet Size" in unlimited.evidence
    assert "max_packet_size 1049600" in unlimited.fix and "announce_max_packet_size = true" in unlimited.fix
    larger = only(
        diagnose(view(ready(), mqtt=(mqtt_broker(broker_max_packet_size=10_000_000),))), "mqtt.broker_packet_size"
    )
    assert "up to 10000000 bytes" in larger.summary
    # Told by the gateway (announce_max_packet_size), or unknown (MQTT 3.1.1, not connected): no finding.
    for quiet in (
        mqtt_broker(broker_max_packet_size="unlimited", announce_max_packet_size=True),
        mqtt_broker(broker_max_packet_size=None),
        {**mqtt_broker(broker_max_packet_size="unlimited"), "connected": False},
    ):
        assert "mqtt.broker_packet_size" not in ids(diagnose(view(ready(), mqtt=(quiet,))))


def test_standing_problems_are_listed_gateway_wide_until_withdrawn_and_bounded() -> None:
    found = Problem("state.unlocked", "warning", "the state directory /s is not locked", "EROFS", "remount")
    STANDING.report("state.unlocked:test", found)
    try:
        assert only(diagnose(view(ready())), "state.unlocked") == found
        assert "state.unlocked" not in ids(diagnose(view(ready()), "pump-1"))
    finally:
        STANDING.withdraw("state.unlocked:test")
    assert "state.unlocked" not in ids(diagnose(view(ready())))
    board = StandingProblems(max_problems=2)
    for number in range(3):
        board.report(f"key-{number}", replace(found, summary=str(number)))
    board.report("key-0", replace(found, summary="again"))  # a kept one is replaced past the bound too
    assert [problem.summary for problem in board.current()] == ["again", "1"]
