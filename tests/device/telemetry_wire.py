"""mcp-broker's `broker/telemetry` wire as a receiving side checks it (its versioned envelope: signal
"logs" with `events`, "metrics" with `metrics` points), for the board's and the simulator's
notifications; and the trace context tests put on their calls.

Each notification becomes one record for the tests to read: an event as itself, a sample as
{"name": "pump.sample", "points": {metric: value}, "attributes": ..., "time": ns}.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any

Message = dict[str, Any]

METHOD = "broker/telemetry"
TRACE_ID = re.compile(r"[0-9a-f]{32}")
SPAN_ID = re.compile(r"[0-9a-f]{16}")
UNIX_NANO = re.compile(r"0|[1-9][0-9]{0,18}")
SEVERITIES = {"trace", "debug", "info", "warn", "error", "fatal"}
MAX_ATTRIBUTES = 64
DAY_NS = 86_400 * 10**9

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
SAMPLE_METRICS = {  # pump-1's sample: a gauge per number of its status object
    "pump.speed_rpm",
    "pump.setpoint_rpm",
    "pump.flow_lpm",
    "pump.pressure_bar",
    "pump.motor_temp_c",
    "pump.run_hours",
    "pump.uptime_s",
}


def traced(params: Message, traceparent: str = TRACEPARENT) -> Message:
    """Request params carrying a W3C trace context in `_meta`, as mcp-broker routes requests."""
    return {**params, "_meta": {"traceparent": traceparent}}


def _hex_id(value: Any, pattern: re.Pattern[str]) -> bool:
    return isinstance(value, str) and pattern.fullmatch(value) is not None and value.strip("0") != ""


def _attributes(value: Any) -> bool:
    if not isinstance(value, dict) or len(value) > MAX_ATTRIBUTES:
        return False
    for key, item in value.items():
        if not 0 < len(key) <= 128:
            return False
        if isinstance(item, str):
            if len(item) > 4096:
                return False
        elif isinstance(item, bool):
            pass
        elif isinstance(item, int | float):
            if not math.isfinite(item):
                return False
        else:
            return False  # null, objects and arrays are not attribute values
    return True


def _board_time(value: Any) -> int:
    """Unix nanoseconds as a decimal string, from a clock that is today's (board and test share it)."""
    assert isinstance(value, str) and UNIX_NANO.fullmatch(value), value
    assert abs(int(value) - time.time_ns()) < DAY_NS, value
    return int(value)


def record_of(message: Message) -> Message:
    """The record of one valid notification; an AssertionError says what a receiver would refuse."""
    assert set(message) == {"jsonrpc", "method", "params"}, message  # a notification: no id
    assert message["jsonrpc"] == "2.0" and message["method"] == METHOD, message
    params = message["params"]
    assert isinstance(params, dict) and params.get("version") == 1, params
    if params.get("signal") == "logs":
        assert set(params) == {"version", "signal", "events"}, params
        events = params["events"]
        assert isinstance(events, list) and len(events) == 1, params  # the board sends one at a time
        event = events[0]
        assert set(event) <= {"name", "severity", "body", "timeUnixNano", "attributes", "traceId", "spanId"}, event
        assert isinstance(event["name"], str) and 0 < len(event["name"]) <= 256, event
        assert event.get("severity", "info") in SEVERITIES, event
        assert "body" not in event or isinstance(event["body"], str), event
        assert _attributes(event.get("attributes", {})), event
        assert ("traceId" in event) == ("spanId" in event), event
        assert "traceId" not in event or (_hex_id(event["traceId"], TRACE_ID) and _hex_id(event["spanId"], SPAN_ID))
        return {**event, "time": _board_time(event["timeUnixNano"])}
    assert params.get("signal") == "metrics", params
    assert set(params) == {"version", "signal", "metrics"}, params
    points = params["metrics"]
    assert isinstance(points, list) and points, params
    values: dict[str, Any] = {}
    shared = None
    stamps = set()
    for point in points:
        assert set(point) <= {"name", "kind", "value", "timeUnixNano", "attributes"}, point
        assert point.get("kind", "gauge") == "gauge", point
        assert isinstance(point["value"], int | float) and not isinstance(point["value"], bool), point
        assert math.isfinite(point["value"]), point
        assert _attributes(point.get("attributes", {})), point
        assert point["name"] not in values, points
        values[point["name"]] = point["value"]
        stamps.add(_board_time(point["timeUnixNano"]))
        assert shared is None or point["attributes"] == shared, points  # one sample, one set of attributes
        shared = point["attributes"]
    assert len(stamps) == 1, points  # one sample, one moment
    return {"name": "pump.sample", "points": values, "attributes": shared, "time": stamps.pop()}


def state_changes(records: list[Message]) -> list[tuple[str, str]]:
    """(previous_state, state) of each pump.state_change event, in order."""
    return [
        (record["attributes"]["previous_state"], record["attributes"]["state"])
        for record in records
        if record["name"] == "pump.state_change"
    ]


def named(records: list[Message], name: str, state: str | None = None) -> list[Message]:
    return [r for r in records if r["name"] == name and (state is None or r["attributes"].get("state") == state)]
