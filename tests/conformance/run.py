"""Run the official MCP conformance suite against the fixture alone and through the gateway.

    python -m tests.conformance.run            # what CI runs (scripts/test runs it after pytest)
    python -m tests.conformance.run --keep out # keep each run's checks.json under out/

Two suite versions, one per protocol era: @modelcontextprotocol/conformance 0.1.16 (its active
suite, the session era) and 0.2.x with `--requirements 2026-07-28` (the stateless era). Each runs
against three legs:

- `baseline`: tests/conformance/fixture_server.py alone, over the SDK's own Streamable HTTP;
- `conformance-ws`: the same fixture published into a gateway over WebSocket (gateway.publish);
- `conformance-stdio`: the fixture as a stdio upstream of the gateway (`--stdio NAME=COMMAND`).

Every check of a gateway leg is compared with the baseline's: a check that comes out worse than on
the fixture alone (SUCCESS < INFO < SKIPPED < WARNING < FAILURE = MISSING) is a deviation. Deviations
fail the run unless listed in expected-failures.txt (only scenarios the suite does not score; a
scenario entry excuses only the checks that fail on the baseline too, a `scenario:check` entry that
check) or in pending-gateway-features.txt (gateway features not implemented yet, reported loudly). A
listed entry that no longer fails fails the run too, so neither list can rot.

Installs nothing: .ci/install-conformance puts node 22 and both suites under .ci/ (scripts/test
calls it). Exit status: 0 all as expected, 1 unexpected results, 2 the suite could not run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CI = ROOT / ".ci"
NODE_BIN = CI / "node" / "node_modules" / ".bin"
EXPECTED_FAILURES = HERE / "expected-failures.txt"
PENDING = HERE / "pending-gateway-features.txt"
PENDING_LABEL = "NOT YET IMPLEMENTED (issue 5)"

WS_SLOT = "conformance-ws"
STDIO_SLOT = "conformance-stdio"
# The stdio leg starts the gateway with the fixture as a stdio upstream (`--stdio NAME=COMMAND`).
STDIO_UPSTREAMS = True

SUITE_TIMEOUT_S = 300
STARTUP_TIMEOUT_S = 30
# How bad a check's status is; a gateway check worse than the baseline's is a deviation. INFO ranks
# below SUCCESS: the suite says INFO where an optional behaviour is absent ("SSE streaming is
# optional"), and a gateway that drops what the fixture alone does is not invisible.
SEVERITY = {"SUCCESS": 0, "INFO": 1, "SKIPPED": 2, "WARNING": 3, "FAILURE": 4, "MISSING": 4}
FAILED = SEVERITY["FAILURE"]  # and any status the suite may add that this table does not know


def severity(status: str) -> int:
    return SEVERITY.get(status, FAILED)


SUMMARY_LINE = re.compile(r"^[✓✗]\s+(?P<scenario>\S+): (?P<passed>\d+) passed, (?P<failed>\d+) failed")
TOTAL_LINE = re.compile(r"^Total: (?P<passed>\d+) passed, (?P<failed>\d+) failed")
RESULT_DIR = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d\d-\d\dT[\d-]+Z$")


@dataclass(frozen=True)
class Suite:
    version: str
    era: str
    prefix: Path  # where .ci/install-conformance put this version
    args: tuple[str, ...] = ()

    @property
    def binary(self) -> Path:
        return self.prefix / "node_modules" / ".bin" / "conformance"

    @property
    def label(self) -> str:
        return f"{self.version} ({self.era})"


SUITES = (
    Suite("0.1.16", "session era", CI / "conformance-0.1"),
    Suite("0.2.0-alpha.12", "stateless era", CI / "conformance-0.2", ("--requirements", "2026-07-28")),
)


@dataclass
class Run:
    """One suite against one leg: the suite's own summary and every check's status."""

    suite: Suite
    leg: str
    summary: dict[str, tuple[int, int]] = field(default_factory=dict)
    total: tuple[int, int] | None = None
    checks: dict[tuple[str, str], str] = field(default_factory=dict)
    messages: dict[tuple[str, str], str] = field(default_factory=dict)
    output: str = ""


@dataclass(frozen=True)
class Entry:
    scenario: str
    check: str | None
    reason: str

    def covers(self, scenario: str, check: str) -> bool:
        return self.scenario == scenario and self.check in (None, check)

    def __str__(self) -> str:
        return self.scenario if self.check is None else f"{self.scenario}:{self.check}"


class Unrunnable(Exception):
    """The suite cannot run here (nothing installed, a process that would not start)."""


# -- lists -------------------------------------------------------------------------------------


def read_list(path: Path) -> list[Entry]:
    entries: list[Entry] = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        text, _, reason = line.partition("#")
        text, reason = text.strip(), reason.strip()
        if not text:
            continue
        if not reason:
            raise Unrunnable(f"{path.name}:{number}: {text!r} needs a '# reason'")
        scenario, _, check = text.partition(":")
        entries.append(Entry(scenario, check or None, reason))
    return entries


def not_scored(suite: Suite, env: dict[str, str]) -> set[str]:
    """The server scenarios the suite runs for its revision without scoring them."""
    requirements = [arg for arg in suite.args if arg != "--requirements"]
    if not requirements:
        return set()
    listing = subprocess.run(
        [str(suite.binary), "list", "--server", "--requirements", requirements[0]],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    ).stdout
    section = listing.partition("never scored")[2]
    return set(re.findall(r"^\s+- (\S+) \[server\]", section, re.MULTILINE))


# -- processes ---------------------------------------------------------------------------------


@contextlib.contextmanager
def process(command: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stateless_tools(url: str) -> list[str] | None:
    """The tool names at an MCP endpoint, asked with one stateless-era request; None while it cannot answer."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/list",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        },
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/list",
    }
    request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError):
        return None
    for line in text.splitlines():  # JSON, or SSE whose data lines carry the answer
        candidate = line.removeprefix("data:").strip()
        try:
            answer = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        tools = answer.get("result", {}).get("tools") if isinstance(answer, dict) else None
        if isinstance(tools, list):
            return [tool.get("name") for tool in tools]
    return None


def wait_for_fixture(url: str, procs: list[subprocess.Popen[bytes]], logs: list[Path]) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if any(proc.poll() is not None for proc in procs):
            break
        tools = stateless_tools(url)
        if tools and "test_simple_text" in tools:
            return
        time.sleep(0.2)
    tails = "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-2000:]}" for log in logs)
    raise Unrunnable(f"the fixture did not answer at {url} within {STARTUP_TIMEOUT_S}s\n{tails}")


# -- running the suite -------------------------------------------------------------------------


def node_env() -> dict[str, str]:
    env = dict(os.environ)
    if NODE_BIN.is_dir():
        env["PATH"] = f"{NODE_BIN}{os.pathsep}{env.get('PATH', '')}"
    node = shutil.which("node", path=env["PATH"])
    if node is None:
        raise Unrunnable("node is not installed; run .ci/install-conformance (needs npm)")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    major = re.match(r"v(\d+)", version)
    if major is None or int(major.group(1)) < 22:
        raise Unrunnable(f"the conformance suite needs node 22 or newer, found {version or 'none'} at {node}")
    for suite in SUITES:
        if not suite.binary.exists():
            raise Unrunnable(f"conformance {suite.version} is not installed at {suite.prefix}")
    return env


def run_suite(suite: Suite, leg: str, url: str, env: dict[str, str], results: Path) -> Run:
    out_dir = results / f"{suite.version}-{leg}"
    command = [str(suite.binary), "server", "--url", url, *suite.args, "-o", str(out_dir)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=SUITE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise Unrunnable(f"conformance {suite.version} against {leg} ran over {SUITE_TIMEOUT_S}s") from exc
    run = Run(suite, leg, output=done.stdout + done.stderr)
    (results / f"{suite.version}-{leg}.log").write_text(run.output)
    for line in run.output.splitlines():
        if (match := SUMMARY_LINE.match(line.strip())) is not None:
            run.summary[match["scenario"]] = (int(match["passed"]), int(match["failed"]))
        elif (match := TOTAL_LINE.match(line.strip())) is not None:
            run.total = (int(match["passed"]), int(match["failed"]))
    if run.total is None:
        raise Unrunnable(f"conformance {suite.version} against {leg} printed no summary:\n{run.output[-3000:]}")
    for checks_file in sorted(out_dir.glob("*/checks.json")):
        match = RESULT_DIR.match(checks_file.parent.name)
        if match is None:
            continue
        for check in json.loads(checks_file.read_text()):
            key = (match["scenario"], str(check.get("id")))
            status = str(check.get("status"))
            # An id can repeat in a scenario (a loop); the worst occurrence speaks for it.
            if severity(status) >= severity(run.checks.get(key, "SUCCESS")):
                run.checks[key] = status
                run.messages[key] = str(check.get("errorMessage") or "")
    return run


# -- judging -----------------------------------------------------------------------------------


@dataclass
class Verdict:
    unexpected: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    expected: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)


def deviations(run: Run, baseline: Run | None) -> dict[tuple[str, str], str]:
    """Checks that failed, or (gateway legs) came out worse than the fixture alone."""
    found: dict[tuple[str, str], str] = {}
    for key, status in run.checks.items():
        if severity(status) >= FAILED:
            found[key] = status
    if baseline is not None:
        for key, base in baseline.checks.items():
            status = run.checks.get(key, "MISSING")
            if severity(status) > severity(base):
                found[key] = status
    return found


def excused_as_expected(entry: Entry, key: tuple[str, str], baseline: Run | None) -> bool:
    """Whether an expected-failures entry excuses this deviation.

    An entry naming one check excuses that check on every leg. An entry naming a whole scenario
    excuses, on a gateway leg, only the checks that fail on the baseline too: the fixture alone is
    the reference, so a check it passes and the gateway breaks is a failure even in a listed scenario.
    """
    if not entry.covers(*key):
        return False
    if entry.check is not None or baseline is None:
        return True
    base = baseline.checks.get(key)
    return base is not None and severity(base) >= FAILED


def judge(run: Run, baseline: Run | None, expected: list[Entry], pending: list[Entry], verdict: Verdict) -> None:
    where = f"{run.suite.version} {run.leg}"
    found = deviations(run, baseline)
    for key, status in sorted(found.items()):
        scenario, check = key
        line = f"{where}: {scenario}:{check} {status}"
        if baseline is not None:
            base = baseline.checks.get(key)
            line += f" (baseline {base})" if base is not None else " (not on the baseline)"
        message = run.messages.get(key, "")
        line += f" - {message[:160]}" if message else ""
        if any(excused_as_expected(entry, key, baseline) for entry in expected):
            verdict.expected.append(line)
        elif baseline is not None and any(entry.covers(*key) for entry in pending):
            verdict.pending.append(line)  # pending gateway features excuse nothing on the fixture alone
        else:
            listed = next((entry for entry in expected if entry.covers(*key)), None)
            if listed is not None:
                line += f" [{EXPECTED_FAILURES.name} lists {listed}, but excuses only what fails on the baseline too]"
            verdict.unexpected.append(line)
    lists = [(entry, "expected") for entry in expected]
    if baseline is not None:
        lists += [(entry, "pending") for entry in pending]
    ran = {scenario for scenario, _ in run.checks} | set(run.summary)
    for entry, kind in lists:
        if entry.scenario in ran and not any(entry.covers(*key) for key in found):
            verdict.stale.append(f"{where}: {entry} is listed as {kind} ({entry.reason}) but no longer fails")


# -- report ------------------------------------------------------------------------------------


def table(runs: list[Run], verdicts: dict[tuple[str, str], Verdict]) -> str:
    rows = [("suite", "leg", "scenarios", "checks passed", "checks failed", "pending", "expected", "verdict")]
    for run in runs:
        verdict = verdicts[(run.suite.version, run.leg)]
        assert run.total is not None
        bad = verdict.unexpected or verdict.stale
        rows.append(
            (
                run.suite.label,
                run.leg,
                str(len(run.summary)),
                str(run.total[0]),
                str(run.total[1]),
                str(len(verdict.pending)),
                str(len(verdict.expected)),
                "UNEXPECTED" if bad else "as expected",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in rows)


def scenario_lines(runs: list[Run]) -> str:
    """Per scenario, the suite's own pass/fail counts on every leg side by side."""
    lines: list[str] = []
    for suite in SUITES:
        legs = [run for run in runs if run.suite is suite]
        if not legs:
            continue
        lines.append(f"conformance {suite.label}: " + " | ".join(run.leg for run in legs))
        for scenario in legs[0].summary:
            cells = []
            for run in legs:
                passed, failed = run.summary.get(scenario, (0, 0))
                cells.append(f"{passed:>3} passed {failed:>2} failed")
            lines.append(f"  {scenario:<48} " + " | ".join(cells))
    return "\n".join(lines)


def report(runs: list[Run], verdicts: dict[tuple[str, str], Verdict]) -> bool:
    print(scenario_lines(runs))
    print()
    print(table(runs, verdicts))
    ok = True
    pending = [line for verdict in verdicts.values() for line in verdict.pending]
    if pending:
        print(f"\n!!! {PENDING_LABEL}: {len(pending)} gateway check(s) fail as listed in {PENDING.name}")
        for line in pending:
            print(f"!!! {PENDING_LABEL}: {line}")
    expected = [line for verdict in verdicts.values() for line in verdict.expected]
    if expected:
        print(f"\nExpected failures ({EXPECTED_FAILURES.name}, not scored by the suite): {len(expected)} check(s)")
    for title, key in (("UNEXPECTED FAILURES", "unexpected"), ("STALE LIST ENTRIES (remove them)", "stale")):
        lines = [line for verdict in verdicts.values() for line in getattr(verdict, key)]
        if lines:
            ok = False
            print(f"\n{title}:")
            for line in lines:
                print(f"  {line}")
    passed = sum(run.total[0] for run in runs if run.total is not None)
    unexpected = sum(len(verdict.unexpected) + len(verdict.stale) for verdict in verdicts.values())
    print(
        f"\nconformance: {passed} checks passed across {len(runs)} runs; {unexpected} unexpected result(s); "
        f"{len(pending)} known gateway gap(s), {len(expected)} unscored extension failure(s)"
    )
    return ok


# -- main --------------------------------------------------------------------------------------


def legs(results: Path) -> Generator[tuple[str, str, list[subprocess.Popen[bytes]], list[Path]], None, None]:
    """Yield (leg, url, processes, logs) for each leg, with its processes running."""
    python = sys.executable
    port = free_port()
    log = results / "fixture-http.log"
    with process([python, "-m", "tests.conformance.fixture_server", "--http", str(port)], log) as fixture:
        yield "baseline", f"http://localhost:{port}/mcp", [fixture], [log]
    port = free_port()
    gateway_cmd = [python, "-m", "gateway.cli", "run", "--port", str(port), "--log-level", "warning"]
    if STDIO_UPSTREAMS:
        stdio_cmd = f"{python} -m tests.conformance.fixture_server --stdio"
        gateway_cmd += ["--stdio", f"{STDIO_SLOT}={stdio_cmd}"]
    gateway_log, publisher_log = results / "gateway.log", results / "publisher.log"
    with process(gateway_cmd, gateway_log) as gateway:
        publish = [python, "-m", "tests.conformance.fixture_server", "--publish", f"ws://127.0.0.1:{port}"]
        with process([*publish, "--slot", WS_SLOT], publisher_log) as publisher:
            procs, logs = [gateway, publisher], [gateway_log, publisher_log]
            yield WS_SLOT, f"http://localhost:{port}/{WS_SLOT}/mcp", procs, logs
            if STDIO_UPSTREAMS:
                yield STDIO_SLOT, f"http://localhost:{port}/{STDIO_SLOT}/mcp", [gateway], [gateway_log]
    if not STDIO_UPSTREAMS:
        print(f"conformance: leg {STDIO_SLOT} not run: the gateway has no stdio upstreams yet (STDIO_UPSTREAMS)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance.run", description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep logs and checks.json files in DIR")
    args = parser.parse_args(argv)
    try:
        env = node_env()
        expected = read_list(EXPECTED_FAILURES)
        pending = read_list(PENDING)
        unscored = set().union(*(not_scored(suite, env) for suite in SUITES))
        refused = [str(entry) for entry in expected if entry.scenario not in unscored]
        if refused:
            raise Unrunnable(
                f"{EXPECTED_FAILURES.name} may list only scenarios the suite does not score; not so: {refused}"
            )
        results = args.keep or Path(tempfile.mkdtemp(prefix="conformance-"))
        results.mkdir(parents=True, exist_ok=True)
        runs: list[Run] = []
        verdicts: dict[tuple[str, str], Verdict] = {}
        baselines: dict[str, Run] = {}
        with contextlib.closing(legs(results)) as each_leg:  # closing stops the leg's processes at once
            for leg, url, procs, logs in each_leg:
                wait_for_fixture(url, procs, logs)
                for suite in SUITES:
                    run = run_suite(suite, leg, url, env, results)
                    if leg == "baseline":
                        baselines[suite.version] = run
                    verdict = Verdict()
                    judge(run, baselines[suite.version] if leg != "baseline" else None, expected, pending, verdict)
                    runs.append(run)
                    verdicts[(suite.version, leg)] = verdict
    except (Unrunnable, subprocess.CalledProcessError, OSError) as exc:
        print(f"conformance: could not run: {exc}", file=sys.stderr)
        return 2
    ok = report(runs, verdicts)
    if args.keep is None and ok:
        shutil.rmtree(results, ignore_errors=True)
    else:
        print(f"conformance: logs and checks.json kept in {results}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
