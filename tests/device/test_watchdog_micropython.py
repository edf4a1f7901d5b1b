"""The hardware watchdog and the dial, under the real MicroPython (96 KB heap).

A dial that looks the gateway's name up (with the motor at rest, see test_dial_lookup.py) calls a
blocking getaddrinfo: while it runs, no task runs, so the control tick cannot feed the watchdog.
Every dial therefore starts with a feed, which gives the lookup the whole watchdog_s
(docs/device-micropython.md, "Limits"). The board's
`machine.WDT` is a stand-in here that counts feeds; the rest is the app's own boot composition.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.device.harness import DEVICE_DIR, SCHEMA_FILE, run_snippet

SCRIPT = """
import gc, sys
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
def unload(name):
    del sys.modules[name]
    parent, _, child = name.rpartition(".")
    delattr(sys.modules[parent], child)
# main.py's boot, so that the heap suffices as it does for the board: the config read and its module
# gone (no name left that holds it), then build(), which imports the app's modules itself, and
# pump1.build gone too. asyncio and json come after the boot: imported ahead of the compiles they
# leave about 4 KB less room for them.
from pump1 import config
settings = config.load(sys.argv[1])
unload("pump1.config")
del config
gc.collect()
from pump1 import build
hardware, controller, provider, watchdog = build.build(settings)
unload("pump1.build")
del build, settings
import asyncio, json
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


@pytest.fixture(params=[40, 64, 96], ids=lambda chars: f"{chars}_chars")
def checkout_at(request: pytest.FixtureRequest) -> Iterator[Path]:
    """device/micropython and the schema copied to a folder whose path has `request.param` characters."""
    folder = Path(tempfile.mkdtemp(prefix="wdt-", dir="/tmp" if Path("/tmp").is_dir() else None))
    root = folder / ("x" * (request.param - len(str(folder)) - 1))
    try:
        shutil.copytree(DEVICE_DIR, root / "device" / "micropython", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(SCHEMA_FILE, root / SCHEMA_FILE.name)
        yield root
    finally:
        shutil.rmtree(folder)


async def test_the_boot_suffices_from_paths_of_any_length(micropython: str, checkout_at: Path) -> None:
    # Every path (the modules' `__file__`, the config and schema paths) stays on the heap and moves
    # what comes after it: the boot above has to suffice wherever pytest's folder and the checkout
    # are, as main.py's does (the heap gate, test_heap_headroom.py, holds that one to 8 KB spare).
    config = checkout_at / "config.json"
    settings = {"gateway_url": "ws://gateway.local:3000", "schema_path": str(checkout_at / SCHEMA_FILE.name)}
    script = checkout_at / "watchdog.py"
    await asyncio.to_thread(config.write_bytes, orjson.dumps(settings))
    await asyncio.to_thread(script.write_text, SCRIPT.replace("sys.argv[1]", repr(str(config))))
    device_dir = checkout_at / "device" / "micropython"
    records = {r.get("stage"): r for r in await run_snippet(micropython, script, device_dir=device_dir)}
    assert records["before_dial"]["feeds"] == 1
