#!/usr/bin/env python3
"""The C pump against the MicroPython firmware, answer for answer, byte for byte.

    compare_with_micropython.py PUMP1_DUMP [-v]

Runs the same scripted sessions (frames, ticks of a virtual clock, injected conditions, the link
events: every session starts with a new link, as a board's first connection) through
the MicroPython dispatcher, tools and controller on the simulated hardware (the code the simulator
runs, under CPython) and through the compiled C pump (pump1-dump --script), and compares every
answer. Exit 0: all equal; 1: the first difference is printed. Needs only the standard library.
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "device", "micropython"))

import pump1  # noqa: E402
from mcpdevice import dispatcher, schema_index  # noqa: E402
from pump1 import controller, hardware_sim, tools  # noqa: E402

SCHEMA = os.path.join(REPO, "device", "schemas", "pump-1.json")


def run_micropython(steps, frame_max, deadman_s, dry_run_s):
    now = [0]
    hardware = hardware_sim.SimulatedHardware()
    pump = controller.PumpController(
        hardware, deadman_s=deadman_s, default_setpoint_rpm=1450, dry_run_s=dry_run_s, clock=lambda: now[0]
    )
    registry = schema_index.load(SCHEMA, dispatcher.tool_budget(frame_max))
    server_info = {"name": pump1.SERVER_NAME, "version": pump1.FIRMWARE_VERSION}
    rpc = dispatcher.Dispatcher(
        registry, tools.handlers(pump), server_info, instructions=pump1.INSTRUCTIONS, frame_max=frame_max
    )
    answers = []
    for step in steps:
        kind = step[0]
        if kind == "tick":
            now[0] = step[1]
            pump.tick()
        elif kind == "heard":
            pump.heard()
        elif kind == "new_link":
            rpc.new_link()
        elif kind == "inject":
            hardware.physics.inject(step[1])
        elif kind == "clear":
            hardware.physics.clear(step[1])
        elif kind == "frame":
            pump.heard()
            answer = dispatcher.assemble(rpc.handle(step[1]))
            answers.append(b"" if answer is None else answer)
        elif kind == "oversize":
            pump.heard()
            answers.append(rpc.oversize(step[1], step[2]))
    return answers


def run_c(dump, steps, frame_max, deadman_s, dry_run_s):
    lines = []
    for step in steps:
        kind = step[0]
        if kind == "tick":
            lines.append(f"tick {step[1]}")
        elif kind in ("inject", "clear"):
            lines.append("{} {}".format(*step))
        elif kind in ("heard", "new_link"):
            lines.append(kind)
        elif kind == "frame":
            lines.append("frame " + step[1].hex())
        elif kind == "oversize":
            lines.append(f"oversize {step[1]} {step[2].hex()}")
    command = [
        dump,
        "--script",
        "--frame-max",
        str(frame_max),
        "--deadman",
        str(deadman_s),
        "--dry-run",
        str(dry_run_s),
    ]
    out = subprocess.run(command, input="\n".join(lines) + "\n", capture_output=True, text=True, check=True).stdout
    return [line.encode() for line in out.split("\n")[:-1]]


def call(request_id, name, arguments=None, raw=None):
    params = {"name": name}
    if arguments is not None:
        params["arguments"] = arguments
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    return ("frame", raw if raw is not None else json.dumps(message).encode())


def raw_call(request_id, arguments_text):
    text = '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"start","arguments":%s}}'
    return ("frame", (text % (request_id, arguments_text)).encode())


def request(request_id, method, params=None):
    message = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return ("frame", json.dumps(message).encode())


ODD_FRAMES = [
    b"",
    b" ",
    b"{",
    b"[]",
    b"[1]",
    b"1",
    b'"x"',
    b"null",
    b"{}",
    b'{"id":1}',
    b'{"jsonrpc":"2.0","id":1}',
    b'{"jsonrpc":"1.0","id":1,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":null,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":true,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":-0,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":1e2,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":"abc\\u00e9\\ud83d\\ude00\\ud800x","method":"ping"}',
    '{"jsonrpc":"2.0","id":"r\u00e9\U0001f600","method":"ping"}'.encode(),
    b'{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}',
    b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
    b'{"jsonrpc":"2.0","method":"x"}',
    b'{"method":"notifications/cancelled"}',
    b'{"method":5}',
    b'{"result":{},"id":3}',
    b'{"error":{"code":1,"message":"no"},"id":null}',
    b'{"method":null,"result":1}',
    b'{"jsonrpc":"2.0","id":1,"method":"ping","params":[]}',
    b'{"jsonrpc":"2.0","id":1,"method":"ping","params":null}',
    b'{"jsonrpc":"2.0","id":1,"method":"ping","params":"x"}',
    b'{"jsonrpc":"2.0","id":1,"id":"two","method":"ping"}',
    b'\xef\xbb\xbf{"jsonrpc":"2.0","id":1,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":1,"method":"ping"} x',
    b'  {"jsonrpc" : "2.0" , "id" : 7 , "method" : "ping" }  \n',
    b'{"jsonrpc":"2.0","id":1,"method":"ping","x":NaN}',
    b'{"jsonrpc":"2.0","id":1,"method":"p\xffing"}',
    b'{"jsonrpc":"2.0","id":1,"method":"p\x01"}',
    b'{"jsonrpc":"2.0","id":1,"method":"ping","x":' + b"[" * 14 + b"]" * 14 + b"}",
    b'{"jsonrpc":"2.0","id":1,"method":"ping","x":01}',
    b'{"jsonrpc":"2.0","id":1,"method":"ping","x":1.}',
    b'{"jsonrpc":"2.0","id":1,"method":"ping","x":"\\x"}',
    b'{"jsonrpc":"2.0","id":1,"method":"ping","x":"\\u12"}',
    b'{"jsonrpc":"2.0","id":1,"method":"ping",}',
    b'{"jsonrpc":"2.0","id":1,"method":"ping"',
    b'{"jsonrpc":"2.0","id":"a","method":"m\\u00e9n\\u00fc\\u0000\\n\\"\\/"}',
    b'{"jsonrpc":"2.0","id":2,"method":""}',
    '{"jsonrpc":"2.0","id":2,"method":"caf\u00e9 \U0001f600"}'.encode(),
    b'{"jsonrpc":"2.\\u0030","id":1,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":1,"method":"pin\\u0067"}',
    b'{"jsonrpc":"2.0","id":1,"method":"resources/list"}',
]

CURSORS = [
    "1",
    "4",
    "0",
    "5",
    "01",
    1,
    None,
    "x",
    "",
    "-1",
    "1.0",
    {"a": [1, 2.5, "\u00e9", None, True]},
    "99999999999999999999",
    "\u0661",
]

NAMES = [None, 5, "nope", "", {"b": 1, "a": 2}, [1.0, -0.0, 1e-7, 1e22, 1.5e16, 123456789.125, 0.0001, 0.00001]]

SPEEDS = [
    "null",
    '"1200"',
    "true",
    "false",
    "[]",
    "{}",
    '{"x":1}',
    "1200.5",
    "1200.0",
    "1.2e3",
    "12E2",
    "1e400",
    "-1e400",
    "NaN",
    "-Infinity",
    "Infinity",
    "100",
    "5000",
    "5000.0",
    "1e20",
    "1.5e20",
    "-0",
    "-0.0",
    "299.99999999999999999",
    "2900.0000000000001",
    "300",
    "2900",
    "2901",
    "299",
    "1e-7",
    "0.1",
    "-12.75",
    "123456789012345678901234567890",
    "3e-400",
    "1450.25e1",
    '"\\u00e9"',
]


def rpc_session():
    steps = [("tick", 0)]
    steps += [("frame", frame) for frame in ODD_FRAMES]
    for version in ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", "2026-07-28", 5, None]:
        steps.append(request(1, "initialize", {"protocolVersion": version, "capabilities": {}}))
    steps.append(request(1, "initialize"))
    steps.append(request("p", "ping", {}))
    steps.append(request(2, "tools/list"))
    steps += [request(3, "tools/list", {"cursor": cursor}) for cursor in CURSORS]
    steps.append(("frame", b'{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"cursor":"\\u0032"}}'))
    steps += [call(4, name) for name in NAMES]
    steps.append(("frame", b'{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{}}'))
    steps.append(
        ("frame", b'{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":{"b":1,"a":2,"b":[3,1e5]}}}')
    )
    for arguments in ([], "x", None, {}, 0):
        steps.append(
            (
                "frame",
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": 5,
                        "method": "tools/call",
                        "params": {"name": "get_status", "arguments": arguments},
                    }
                ).encode(),
            )
        )
    for number, speed in enumerate(SPEEDS):
        steps.append(raw_call(100 + number, f'{{"speed_rpm":{speed}}}'))
        steps.append(("tick", 100 * (number + 1)))
    steps.append(raw_call(200, '{"speed_rpm":1200,"speed_rpm":5000}'))
    steps.append(raw_call(201, '{"speed_rpm":1200,"other\\u00e9":1}'))
    for name in ("get_status", "stop", "reset_fault", "set_speed"):
        steps.append(call(300, name, {"x": 1, "y": 2}))
    steps.append(call(301, "set_speed", {}))
    steps.append(call(302, "set_speed", {"speed_rpm": None}))
    steps.append(call(303, "set_speed", {"speed_rpm": 1000}))
    steps.append(call(304, "stop"))
    steps.append(("tick", 20000))
    steps.append(call(305, "get_status"))
    steps.append(call(306, "set_speed", {"speed_rpm": 1000}))
    return steps


def duplicate_session():
    steps = [("tick", 0)]
    start = call("brk-1", "start", {"speed_rpm": 1200})
    steps += [start, ("tick", 500), start, call("brk-1", "get_status"), start]
    for number in range(2, 8):
        steps.append(call(f"brk-{number}", "get_status"))
        steps.append(("tick", 500 + 100 * number))
    steps.append(start)  # evicted after four more calls: acts again
    steps.append(call(9, "stop"))
    steps.append(call(9, "stop"))
    steps.append(request(10, "initialize", {"protocolVersion": "2025-06-18"}))
    steps.append(call(9, "stop"))  # the cache outlives initialize: answered from it
    steps.append(("new_link",))
    steps.append(call(9, "stop"))  # a new WebSocket emptied it: acts again
    steps.append(call(11, "nope"))
    steps.append(call(11, "nope"))
    return steps


INITIALIZE = request(1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}})


def new_link_session():
    """A gateway's second initialize on the same link (MQTT after a missed heartbeat), then a new
    WebSocket: a repeated call is answered from the cache after the first, acted on after the second."""
    start = call("brk-7", "start", {"speed_rpm": 1200})
    status = call("brk-8", "get_status")
    steps = [("tick", 0), INITIALIZE, start, ("tick", 1000), call("brk-9", "stop"), ("tick", 5000)]
    steps += [INITIALIZE, start, ("tick", 6000), status]  # the redelivery: cached, the pump stays stopped
    steps += [("new_link",), INITIALIZE, start, ("tick", 7000), status]  # a new session's request: acted on
    return steps


def check_new_link(answers):
    """What new_link_session must show, on both sides alike: the answers in their order."""
    first_start, repeat, stopped_status, fresh_start, running_status = (
        json.loads(answers[index]) for index in (1, 4, 5, 7, 8)
    )
    problems = []
    if repeat != first_start:
        problems.append("the start repeated after initialize was not answered from the cache")
    if stopped_status["result"]["structuredContent"]["state"] != "stopped":
        problems.append(f"the start repeated after initialize acted: {stopped_status}")
    if fresh_start == first_start:  # its uptime differs when it acts
        problems.append("the start after a new link was answered from the cache")
    if running_status["result"]["structuredContent"]["state"] not in ("starting", "running"):
        problems.append(f"the start after a new link did not act: {running_status}")
    return problems


def run_session():
    """Ramps, steady running, set_speed, stop, and the status while the motor warms up."""
    steps = [("tick", 0), call(1, "start")]
    now = 0
    for second in range(1, 400):
        for _ in range(10):
            now += 100
            steps.append(("tick", now))
        if second % 7 == 0 or second < 12:
            steps.append(call(second, "get_status"))
        if second == 30:
            steps.append(call("s", "set_speed", {"speed_rpm": 2900}))
        if second == 200:
            steps.append(call("s2", "set_speed", {"speed_rpm": 333}))
        if second == 300:
            steps.append(call("stop", "stop"))
        if second == 310:
            steps.append(call("again", "start", {"speed_rpm": 2345}))
        if second == 312:
            steps.append(call("stop2", "stop"))
        if second == 313:
            steps.append(call("start3", "start"))
    return steps


def fault_session():
    """Dead-man, overtemp, sensor failure and dry run, with their refusals and resets."""
    steps = [("tick", 0), call(1, "start", {"speed_rpm": 2900})]
    now = 0

    def advance(seconds, step_ms=100, status_every=None, name="s"):
        nonlocal now
        for index in range(int(seconds * 1000 / step_ms)):
            now += step_ms
            steps.append(("tick", now))
            if status_every and index % status_every == 0:
                steps.append(call(name, "get_status"))

    advance(95, 250)  # no message from the gateway: link_lost after 90 s
    steps += [call(2, "get_status"), call(3, "start"), call(4, "set_speed", {"speed_rpm": 1000})]
    advance(6)
    steps += [call(5, "reset_fault"), call(6, "start", {"speed_rpm": 2000})]
    steps.append(("inject", "overtemp"))
    advance(120, 500, status_every=20, name="hot")
    steps += [call(7, "reset_fault"), ("clear", "overtemp")]
    advance(200, 1000, status_every=30, name="cool")
    steps += [call(8, "reset_fault"), call(9, "start")]
    advance(4)
    steps.append(("inject", "sensor_failure"))
    advance(1)
    steps += [call(10, "get_status"), call(11, "reset_fault"), ("clear", "sensor_failure")]
    advance(1)
    steps += [call(12, "reset_fault"), call(13, "start", {"speed_rpm": 1500})]
    advance(5)
    steps.append(("inject", "dry_run"))
    advance(6, 100, status_every=10, name="dry")
    steps += [call(14, "reset_fault"), call(15, "stop")]
    advance(5)
    steps += [("clear", "dry_run"), call(16, "reset_fault"), call(17, "get_status")]
    steps.append(("heard",))
    return steps


def small_frame_session():
    """frame_max 3300, the least pump-1's largest tool allows: long messages cut, answers too large refused."""
    steps = [("tick", 0), request(1, "tools/list")]
    steps += [request(1, "tools/list", {"cursor": str(n)}) for n in range(1, 5)]
    steps.append(request("x" * 300, "tools/list", {"cursor": "4"}))
    steps.append(request(2, "m" * 3500))
    steps.append(request(3, "\u00e9" * 3300))
    steps.append(request(4, "\U0001f600" * 600))
    steps.append(request(5, "\u0001" * 700 + "abc"))
    steps.append(request(6, "ab\ncd" * 700))
    steps.append(request("\u00e9" * 500, "ab\ncd" * 700))
    steps.append(request(7, "tools/list", {"cursor": "z" * 3500}))
    steps.append(call(8, "q" * 3500))
    steps.append(call(9, "get_status", {"\u00e9" * 600: 1}))
    steps.append(call(10, "start", {"speed_rpm": "x" * 3300}))
    steps.append(call(11, "get_status", {"y" * 3500: 1}))
    steps.append(call(11, "get_status", {"y" * 3500: 1}))
    steps.append(call(12, "start"))
    now = 0
    for _ in range(950):
        now += 100
        steps.append(("tick", now))
    steps.append(call(13, "get_status"))
    steps.append(call(14, "start", {"speed_rpm": "\u00e9" * 700}))
    steps.append(call(14, "start", {"speed_rpm": "\u00e9" * 700}))
    return steps


def oversize_session():
    steps = [("tick", 0)]
    heads = [
        b'{"jsonrpc":"2.0","id":"brk-7","method":"tools/call"',
        b'{"id": 42, "method"',
        b'{"id":42',
        b'{"id":4.5,',
        b'{"id" :\t-3}',
        b'{"id":"a\\"b"',
        b'{"id":"open',
        b'{"method":"x"',
        b"",
        b'{"id":true,',
        b'{"id":-,',
        b'{"id":00,',
        b'{"id" x',
        b'{"x":{"id":5,',
        b'{"id":\x0b7,',
        '{"id":"\u00e9",'.encode(),
    ]
    for number, head in enumerate(heads):
        steps.append(("oversize", 5000 + number, head))
    return steps


SESSIONS = [
    ("rpc", rpc_session, 4096, 90, 5),
    ("duplicates", duplicate_session, 4096, 90, 5),
    ("new link", new_link_session, 4096, 90, 5),
    ("run", run_session, 4096, 900, 5),
    ("faults", fault_session, 4096, 90, 5),
    ("small frames", small_frame_session, 3300, 90, 5),
    ("oversize", oversize_session, 4096, 90, 5),
    ("short dead-man", run_session, 4096, 2.5, 0.5),
]


def main(dump, verbose):
    failed = False
    for name, make, frame_max, deadman_s, dry_run_s in SESSIONS:
        steps = [("new_link",), *make()]
        expected = run_micropython(steps, frame_max, deadman_s, dry_run_s)
        got = run_c(dump, steps, frame_max, deadman_s, dry_run_s)
        frames = [step for step in steps if step[0] in ("frame", "oversize")]
        if len(got) != len(expected):
            print(f"{name}: {len(got)} answers from C, {len(expected)} from MicroPython")
            failed = True
            continue
        differing = [index for index in range(len(got)) if got[index] != expected[index]]
        print(f"{name}: {len(got)} answers, {len(differing)} differ")
        for index in differing[: (20 if verbose else 1)]:
            print(f"  request:     {frames[index][-1][:300]!r}")
            print("  MicroPython: {}".format(expected[index][:600].decode(errors="replace")))
            print("  C:           {}".format(got[index][:600].decode(errors="replace")))
        failed = failed or bool(differing)
        for problem in check_new_link(expected) if make is new_link_session else []:
            print(f"  {problem}")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], "-v" in sys.argv[2:]))
