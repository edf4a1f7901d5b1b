"""The board's own input handling (device/micropython/mcpdevice/dispatcher.py and the pump-1 tools),
run under CPython as the simulator runs it: one frame in, at most one frame out.

What must hold for any frame the gateway (or anyone on the board's link) sends: the dispatcher never
raises; it answers every request with one JSON-RPC response carrying the request's id (null when the
frame has no usable id) and stays silent on notifications and responses; every answer fits the
board's frame cap; no tool handler fails inside the device on odd arguments (the tools check their
arguments and answer isError with what to do); and a frame too large to read gets a named error.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sim import firmware
from sim.pump import PumpSettings, SimulatedPump
from tests.fuzz import strategies as fz
from tests.fuzz.budget import fuzz_settings, tally

FRAME_MAX = firmware.BOARD_FRAME_MAX
REGISTRY = firmware.load_registry(firmware.schema_file(), FRAME_MAX)
TOOLS = tuple(REGISTRY.names)
HEAD_BYTES = 96  # what the board's transport keeps of an oversize frame (mcpdevice.websocket.HEAD_BYTES)

arguments = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "speed_rpm": st.one_of(
                st.sampled_from((300, 2900, 1450, 299, 2901, 0, -1, 1450.5, 1e308, "1450", True, None, 10**30)),
                fz.json_values,
            ),
            "extra": fz.json_values,
        },
    ),
    fz.json_values,
)
device_requests = st.fixed_dictionaries(
    {"jsonrpc": st.one_of(st.just("2.0"), fz.json_values), "id": fz.ids},
    optional={
        "method": st.one_of(
            st.sampled_from(("tools/call", "tools/list", "initialize", "ping")),
            fz.strings,
            st.integers(min_value=3960, max_value=4040).map(lambda size: "m" * size),
        ),
        "params": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "name": st.one_of(st.sampled_from(TOOLS), fz.json_values),
                    "arguments": arguments,
                    "cursor": st.one_of(st.sampled_from(("1", "2", "²")), fz.json_values),
                    "protocolVersion": st.one_of(st.sampled_from(fz.VERSIONS), fz.json_values),
                },
            ),
            fz.json_values,
        ),
    },
)
cursors = st.sampled_from(("1", "2", "3", "4", "9", "0", "²", "\u0661", "\U0001d7d9", " 1", "+1", "01", ""))
"""tools/list cursors: the board's own page numbers, and digits of other scripts (int() refuses some)."""
listings = st.fixed_dictionaries(
    {
        "jsonrpc": st.just("2.0"),
        "id": fz.ids,
        "method": st.just("tools/list"),
        "params": st.fixed_dictionaries({"cursor": cursors}),
    },
)
calls = st.fixed_dictionaries(
    {
        "jsonrpc": st.just("2.0"),
        "id": fz.ids,
        "method": st.just("tools/call"),
        "params": st.fixed_dictionaries(
            {
                "name": st.one_of(
                    st.sampled_from(TOOLS),
                    fz.json_values,
                    st.integers(min_value=3860, max_value=4030).map(lambda size: "t" * size),
                )
            },
            optional={"arguments": arguments},
        ),
    },
)
device_frames = st.one_of(
    fz.frames, device_requests.map(fz.dumps), listings.map(fz.dumps), calls.map(fz.dumps), calls.map(fz.dumps)
)


class ToolFailures(logging.Handler):
    """The simulated board logs `tool_failed` when a tool handler raised inside the device."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.failures: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if " tool_failed " in f" {message} ":
            self.failures.append(message)


def request_id(frame: bytes) -> tuple[bool, Any]:
    """(is a request the board must answer, the id it must echo) as the board's JSON reader sees it."""
    try:
        message = json.loads(frame)
    except Exception:
        return True, None
    if not isinstance(message, dict):
        return True, None
    method = message.get("method")
    if method is None and ("result" in message or "error" in message):
        return False, None
    if "id" not in message and isinstance(method, str):
        return False, None
    value = message.get("id")
    return True, value if type(value) in (str, int) else None


ID_ROOM = 32
"""The id length the board plans its answers for (mcpdevice.dispatcher._ID_ROOM; the gateway's look
like brk-1234): an answer to a request with such an id must fit the frame cap, whatever else it quotes."""


def nested_too_deep_for_python(frame: bytes) -> bool:
    try:
        json.loads(frame)
    except RecursionError:
        return True
    except Exception:
        return False
    return False


def check_answer(answer: bytes, expected_id: Any, *, id_optional: bool = False, any_id: bool = False) -> dict[str, Any]:
    """`id_optional`: the board may not have found the id (an oversize frame, read only in part);
    `any_id`: the test cannot tell which id the frame carries."""
    if len(json.dumps(expected_id)) <= ID_ROOM:
        assert len(answer) <= FRAME_MAX, f"answer of {len(answer)} bytes exceeds the board's frame cap {FRAME_MAX}"
    reply = json.loads(answer)
    assert reply["jsonrpc"] == "2.0"
    assert ("result" in reply) != ("error" in reply)
    if any_id:
        assert reply["id"] is None or type(reply["id"]) in (str, int), reply
    elif not (id_optional and reply["id"] is None):
        assert reply["id"] == expected_id and type(reply["id"]) is type(expected_id)
    if "error" in reply:
        assert isinstance(reply["error"]["code"], int) and isinstance(reply["error"]["message"], str)
    return reply  # type: ignore[no-any-return]


@fuzz_settings(400)
@given(frames=st.lists(device_frames, min_size=1, max_size=4))
def test_the_board_answers_every_frame_and_never_fails(frames: list[bytes]) -> None:
    tally("device.dispatcher.handle", len(frames))
    pump = SimulatedPump("pump-1", REGISTRY, PumpSettings())
    failures = ToolFailures()
    logger = logging.getLogger("sim")
    logger.addHandler(failures)
    level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        for frame in frames:
            if len(frame) > FRAME_MAX:
                refusal = pump.oversize(len(frame), frame[:HEAD_BYTES])
                # The board reads only the frame's head and answers with the first "id" it finds there,
                # which in an envelope or a nested object need not be the request's own: the answer's
                # shape is checked, and its id is the request's, the head's first, or null.
                reply = check_answer(refusal, None, id_optional=True, any_id=True)
                if not nested_too_deep_for_python(frame):
                    first = re.search(rb'"id"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+)[\s,}]', frame[:HEAD_BYTES])
                    allowed = [None, request_id(frame)[1], json.loads(first.group(1)) if first else None]
                    assert reply["id"] in allowed, (reply["id"], allowed)
                continue
            answer = pump.handle(frame)
            must_answer, expected_id = request_id(frame)
            if not must_answer:
                assert answer is None
                continue
            assert answer is not None
            check_answer(answer, expected_id)
    finally:
        logger.removeHandler(failures)
        logger.setLevel(level)
    assert not failures.failures, failures.failures[0]


heads = st.one_of(
    device_requests.map(lambda message: fz.dumps(message)[:HEAD_BYTES]),
    st.binary(max_size=HEAD_BYTES),
    fz.frames.map(lambda frame: frame[:HEAD_BYTES]),
)


@fuzz_settings(300)
@given(size=st.integers(min_value=FRAME_MAX + 1, max_value=2**31), head=heads)
def test_an_oversize_frame_gets_a_named_error_with_its_id_when_readable(size: int, head: bytes) -> None:
    tally("device.dispatcher.oversize")
    pump = SimulatedPump("pump-1", REGISTRY, PumpSettings())
    reply = json.loads(pump.oversize(size, head))
    assert reply["error"]["code"] == -32600 and str(size) in reply["error"]["message"]
    assert reply["id"] is None or type(reply["id"]) in (str, int)
    if type(reply["id"]) is int:
        # The id as the request wrote it, whole: not the first digits of 1.5, 1e3 or a number cut off.
        assert re.search(rb'"id"\s*:\s*' + str(reply["id"]).encode() + rb"[\s,}]", head), head
