"""The gateway's name is looked up only while the motor stands still (docs/device-micropython.md, "Limits").

A lookup blocks the whole board (MicroPython's getaddrinfo returns with the answer or the resolver's
timeout, seconds later), and while it blocks the control tick checks no fault. `Dial.address`, the
transports' resolve hook, keeps the address of the last lookup and dials it again while the motor
turns. The policy runs under the real MicroPython and under CPython with a counting stand-in for
`getaddrinfo`; the app runs on the Unix port against a scripted gateway reached by name.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.device.conftest import DeviceFactory
from tests.device.harness import FakeGateway, run_snippet

SCRIPT = """
import json, socket
from pump1 import app

lookups = []
answers = {"gw.local": "192.168.1.20"}

class Resolver:
    SOCK_STREAM = socket.SOCK_STREAM
    def getaddrinfo(self, host, port, *rest):
        lookups.append(host)
        if answers.get(host) is None:
            raise OSError(-2)
        return [(2, 1, 0, "", (answers[host], port))]

events = []
turning = [True]
dial = app.Dial(lambda event, **fields: events.append([event, fields]), at_rest=lambda: not turning[0])

def step(label, host):
    try:
        got = dial.address(host, 3000)
    except OSError as exc:
        got = "OSError"
    print(json.dumps({"label": label, "address": got, "lookups": len(lookups),
                      "event": events[-1][0] if events else None}))

# The real resolver first: the Unix port answers with raw sockaddr bytes, CPython with a tuple.
step("real", "localhost")
app.socket = Resolver()
step("ipv4 literal", "10.0.0.7")
step("ipv6 literal", "fe80::1")
step("first dial while turning", "gw.local")
answers["gw.local"] = "192.168.1.99"
step("redial while turning", "gw.local")
turning[0] = False
step("redial at rest", "gw.local")
answers["gw.local"] = None
step("resolver down", "gw.local")
step("never found", "other.local")
"""


@pytest.mark.parametrize("runtime", ["micropython", "cpython"])
async def test_a_dial_looks_the_name_up_only_at_rest(runtime: str, micropython: str, tmp_path: Path) -> None:
    script = tmp_path / "dial_lookup.py"
    script.write_text(SCRIPT)
    records = {r["label"]: r for r in await run_snippet(micropython if runtime == "micropython" else None, script)}
    assert records["real"]["address"] in ("127.0.0.1", "::1")
    assert records["real"]["event"] == "lookup"
    assert records["ipv4 literal"] == {"label": "ipv4 literal", "address": "10.0.0.7", "lookups": 0, "event": "lookup"}
    assert records["ipv6 literal"]["address"] == "fe80::1"
    assert records["ipv6 literal"]["lookups"] == 0
    # No address kept yet: the first dial must look up, turning or not.
    assert records["first dial while turning"] == {
        "label": "first dial while turning",
        "address": "192.168.1.20",
        "lookups": 1,
        "event": "lookup",
    }
    # The motor turns: the kept address, no lookup, although the name now points elsewhere.
    assert records["redial while turning"]["address"] == "192.168.1.20"
    assert records["redial while turning"]["lookups"] == 1
    assert records["redial while turning"]["event"] == "lookup_skipped"
    assert records["redial at rest"]["address"] == "192.168.1.99"
    assert records["redial at rest"]["lookups"] == 2
    # A resolver that fails leaves the last address to dial; with none kept the dial fails.
    assert records["resolver down"]["address"] == "192.168.1.99"
    assert records["resolver down"]["event"] == "lookup_failed"
    assert records["never found"]["address"] == "OSError"


async def test_the_board_redials_a_turning_pump_without_a_lookup(
    devices: DeviceFactory, fake_gateway: FakeGateway
) -> None:
    device = await devices(f"ws://localhost:{fake_gateway.port}", link_timeout_s=30)
    link = await fake_gateway.accept()
    await device.wait_event("lookup", host="localhost")
    await link.handshake()
    started = await link.call("start", {"speed_rpm": 1200})
    assert started.get("isError") is not True, started

    await link.ws.close(code=1001, message=b"gateway restarting")
    link = await fake_gateway.accept()
    skipped = await device.wait_event("lookup_skipped", host="localhost")
    assert skipped["address"] == "127.0.0.1"
    assert len(device.named("lookup")) == 1
    await link.handshake()
    assert (await link.call("get_status"))["structuredContent"]["state"] in ("starting", "running")

    # Stopped and ramped down to 0: the next dial looks the name up again.
    await link.call("stop")
    for _ in range(300):
        status = (await link.call("get_status"))["structuredContent"]
        if status["state"] == "stopped":
            break
        await asyncio.sleep(0.05)
    assert status["state"] == "stopped", status
    await link.ws.close(code=1001, message=b"gateway restarting")
    await fake_gateway.accept()
    await device.wait_event("lookup", count=2, host="localhost")
    assert len(device.named("lookup_skipped")) == 1
