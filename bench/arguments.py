"""Per-call cost of checking a tools/call's arguments (gateway/policy/arguments.py), against what the
gateway pays for every call anyway and against the `jsonschema` library, side by side in one run.

    python -m bench.arguments            # 15 rounds of 10,000 calls per case, about 10 s
    python -m bench.arguments --quick    # smoke run: 1 round of 500 calls (figures not meaningful)

The call: pump-1's set_speed (its inputSchema from device/schemas/pump-1.json) with one operator
limit, speed_rpm from 300 to 2000. The baseline is `orjson.loads` of that call's request body: the
gateway parses every body, so that is the cost the check is compared with. Each round times every
case back to back, in process, with the garbage collector off; a figure is the median of the rounds,
a ratio the median of the rounds' own ratios to the baseline (drift between rounds cancels out).

`jsonschema` is not a dependency of the gateway: its rows are measured when it is installed (the
venv has it through the `mcp` SDK) and skipped otherwise.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any

import fastjsonschema
import orjson

from bench.report import markdown_table, median, round_ratios, spread
from gateway.policy.arguments import ArgumentLimit, ArgumentRefused, check_arguments
from gateway.policy.schemas import SchemaCache, compile_schema

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "device" / "schemas" / "pump-1.json"
BODY = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"set_speed","arguments":{"speed_rpm":1500}}}'
LIMIT = ArgumentLimit("speed_rpm", 300, 2000, None, "refuse", "policy limits[0]")
CLAMP = ArgumentLimit("speed_rpm", 300, 2000, None, "clamp", "policy limits[0]")
RESOURCE = "/site1/line2/pump-1"
BASELINE = "orjson.loads of the tools/call body (the gateway parses it anyway)"
SLOW = 100
"""The slow cases (a compile, jsonschema.validate) run 1/SLOW as many calls."""

Case = Callable[[int], float]
"""Runs n calls, returns the seconds they took."""


@dataclass(frozen=True)
class Options:
    rounds: int
    calls: int


def parse_options(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m bench.arguments", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, help="rounds, median taken (default 15; quick 1)")
    parser.add_argument("--calls", type=int, help=f"calls per case and round (default 10000; quick 500; >= {SLOW})")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round of 500 calls")
    args = parser.parse_args(argv)
    options = Options(
        rounds=args.rounds or (1 if args.quick else 15), calls=args.calls or (500 if args.quick else 10000)
    )
    if options.rounds < 1 or options.calls < SLOW:
        parser.error(f"--rounds must be at least 1 and --calls at least {SLOW}")
    return options


def timed(call: Callable[[], Any]) -> Case:
    def run(n: int) -> float:
        started = time.perf_counter()
        for _ in repeat(None, n):
            call()
        return time.perf_counter() - started

    return run


def refused(call: Callable[[], Any]) -> Callable[[], None]:
    def run() -> None:
        try:
            call()
        except ArgumentRefused:
            pass
        else:
            raise AssertionError("the call was expected to be refused")

    return run


def cases() -> tuple[dict[str, tuple[Case, int]], str]:
    """label -> (the case, its calls divisor), and a note on what was left out."""
    tool = next(tool for tool in orjson.loads(SCHEMA_FILE.read_bytes()) if tool["name"] == "set_speed")
    schema = tool["inputSchema"]
    cache = SchemaCache()
    within, above, wrong = {"speed_rpm": 1500}, {"speed_rpm": 2500}, {"speed_rpm": 5000}
    validator = cache.validator(tool)
    assert validator is not None
    # The same schema in 64 dicts of their own, cycled through a cache that holds 16 of them: every call
    # finds a schema object it does not hold, and finds the compiled one by its content key.
    copies = [{"name": "set_speed", "inputSchema": orjson.loads(orjson.dumps(schema))} for _ in range(64)]
    churned = SchemaCache(max_entries=16)
    turn = iter(range(1 << 62))
    found: dict[str, tuple[Case, int]] = {
        BASELINE: (timed(lambda: orjson.loads(BODY)), 1),
        "check_arguments: schema + 1 limit, within": (
            timed(lambda: check_arguments(tool, within, [LIMIT], cache, resource=RESOURCE)),
            1,
        ),
        "check_arguments: schema + 1 limit, clamped (new dict)": (
            timed(lambda: check_arguments(tool, above, [CLAMP], cache, resource=RESOURCE)),
            1,
        ),
        "check_arguments: refused by the limit (message built)": (
            timed(refused(lambda: check_arguments(tool, above, [LIMIT], cache, resource=RESOURCE))),
            1,
        ),
        "check_arguments: refused by the schema (message built)": (
            timed(refused(lambda: check_arguments(tool, wrong, [LIMIT], cache, resource=RESOURCE))),
            1,
        ),
        "check_arguments: schema dict new to the cache (content key)": (
            timed(lambda: check_arguments(copies[next(turn) % 64], within, [LIMIT], churned, resource=RESOURCE)),
            1,
        ),
        "fastjsonschema validator alone (compiled once)": (timed(lambda: validator(within)), 1),
        "compile set_speed's schema (once per distinct schema)": (timed(lambda: compile_schema(schema)), SLOW),
    }
    try:
        jsonschema: Any = importlib.import_module("jsonschema")  # no type information; not a dependency
    except ImportError:
        return found, "jsonschema is not installed: its rows are skipped."
    prebuilt = jsonschema.Draft202012Validator(schema)
    found["jsonschema: prebuilt Draft202012Validator.validate"] = (timed(lambda: prebuilt.validate(within)), 1)
    found["jsonschema.validate() (checks the schema too, every call)"] = (
        timed(lambda: jsonschema.validate(within, schema)),
        SLOW,
    )
    return found, ""


def measure(options: Options) -> tuple[dict[str, list[float]], str]:
    """label -> nanoseconds per call, one figure per round."""
    found, note = cases()
    figures: dict[str, list[float]] = {label: [] for label in found}
    for case, divisor in found.values():  # warm-up: caches filled, code paths taken once
        case(max(1, options.calls // divisor // 10))
    for _ in range(options.rounds):
        gc.collect()
        gc.disable()
        try:
            for label, (case, divisor) in found.items():
                n = max(1, options.calls // divisor)
                figures[label].append(case(n) / n * 1e9)
        finally:
            gc.enable()
    return figures, note


def render(figures: dict[str, list[float]]) -> str:
    baseline = figures[BASELINE]
    lines = []
    for label, values in figures.items():
        ratios = round_ratios(values, baseline)
        ratio = "1.00x" if label == BASELINE else f"{median(ratios):.2f}x"
        lines.append([label, f"{median(values):,.0f}", ratio, "" if label == BASELINE else spread(ratios)])
    return markdown_table(["case (pump-1 set_speed)", "per call (ns)", "vs orjson.loads", "ratio range"], lines)


def main(options: Options) -> None:
    print(
        f"Argument checks, per call: {options.rounds} round(s) of {options.calls:,} calls per case "
        f"({options.calls // SLOW:,} for the slow ones), fastjsonschema {fastjsonschema.VERSION}.\n"
    )
    figures, note = measure(options)
    print(render(figures))
    if note:
        print(f"\n{note}")


if __name__ == "__main__":
    main(parse_options())
