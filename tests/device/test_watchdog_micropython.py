"""The hardware watchdog and the dial, under the real MicroPython (96 KB heap).

A dial that looks the gateway's name up (with the motor at rest, see test_dial_lookup.py) calls a
blocking getaddrinfo: while it runs, no task runs, so the control tick cannot feed the watchdog.
Every dial therefore starts with a feed, which gives the lookup the whole watchdog_s
(docs/device-micropython.md, "Limits"). The board's
`machine.WDT` is a stand-in here that counts feeds; the rest is the app's own boot composition.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.device.harness import SCHEMA_FILE, run_snippet

SCRIPT = """
import asyncio, gc, json, sys
feeds = []
class WDT:
    def __init__(self, timeout):
        self.timeout = timeout
    def feed(self):
        feeds.append(self.timeout)
class machine:
    pass
machine.WDT = WDT
sys.modules["machine"] = machine
# main.py's order, so that 96 KB suffice: the config (unloaded), then build(), which imports the
# app's modules itself.
from pump1 import config
settings = config.load(sys.argv[1])
del sys.modules["pump1.config"]
gc.collect()
from pump1 import build
hardware, controller, provider, watchdog = build.build(settings)
print(json.dumps({"stage": "built", "timeout_ms": watchdog.timeout, "feeds": len(feeds)}))
asyncio.run(provider.before_connect())
print(json.dumps({"stage": "before_dial", "feeds": len(feeds)}))
"""


async def test_every_dial_starts_with_a_fed_watchdog(micropython: str, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_bytes(orjson.dumps({"gateway_url": "ws://gateway.local:3000", "schema_path": str(SCHEMA_FILE)}))
    script = tmp_path / "watchdog.py"
    script.write_text(SCRIPT.replace("sys.argv[1]", repr(str(config))))
    records = {record.get("stage"): record for record in await run_snippet(micropython, script)}
    assert records["built"] == {"stage": "built", "timeout_ms": 10_000, "feeds": 0}  # watchdog_s 10 by default
    assert records["before_dial"]["feeds"] == 1
