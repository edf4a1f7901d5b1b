"""Run the official MCP conformance suite against two fixtures alone and through the gateway.

    python -m tests.conformance.run            # what CI runs (scripts/test runs it after pytest)
    python -m tests.conformance.run --keep out # keep each run's checks.json under out/
    python -m tests.conformance.run --legs ordinary,ordinary-stdio   # some legs only (a baseline always runs)

Two suite versions, one per protocol era: @modelcontextprotocol/conformance 0.1.16 (its active
suite, the session era) and 0.2.x with `--requirements 2026-07-28` (the stateless era). Two fixtures:

- `ordinary` (tests/conformance/ordinary_server.py): a server written with the SDK's ordinary API,
  knowing nothing of the gateway. Alone over the SDK's own Streamable HTTP (leg `ordinary`), then
  behind every way in with the gateway's defaults: WebSocket `/provider/<slot>` (`ordinary-ws`),
  WebSocket `/providers` (`ordinary-mux`), a stdio upstream (`ordinary-stdio`), and a remote
  upstream (`ordinary-remote`). It speaks 2026-07-28, so the gateway speaks 2026-07-28 to it on
  every way in.
- `conformance` (tests/conformance/fixture_server.py): a fixture that asks its client mid-call in the
  session era and reads the gateway's per-call capabilities, behind links pinned to the session era
  (`era = "session"`, a remote `transport = "streamable-http"`, the legacy `sse` transport), so the
  gateway's session-era relay and `input_required` translation stay under the suite too. Alone:
  leg `baseline`; behind the gateway: `conformance-ws`, `conformance-stdio`, `conformance-remote`,
  `conformance-sse`.

Every gateway leg gets a gateway of its own. Each of its checks is compared with the same check of its
fixture alone: one that comes out worse (SUCCESS < INFO < SKIPPED < WARNING < FAILURE = MISSING) is a
deviation. Deviations fail the run unless listed in the fixture's expected-failures list (only
scenarios the suite does not score; a scenario entry excuses only the checks that fail on the
baseline too, a `scenario:check` entry that check) or in pending-gateway-features.txt (gateway
features not implemented yet, reported loudly). A listed entry that no longer fails fails the run
too, so no list can rot.

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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CI = ROOT / ".ci"
NODE_BIN = CI / "node" / "node_modules" / ".bin"
EXPECTED_FAILURES = HERE / "expected-failures.txt"
PENDING = HERE / "pending-gateway-features.txt"
PENDING_LABEL = "NOT YET IMPLEMENTED"

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


@dataclass(frozen=True)
class Fixture:
    name: str
    module: str  # python -m <module> --http PORT | --sse PORT | --stdio | --publish URL --slot SLOT
    expected: Path  # its expected-failures list


CONFORMANCE = Fixture("conformance", "tests.conformance.fixture_server", EXPECTED_FAILURES)
ORDINARY = Fixture("ordinary", "tests.conformance.ordinary_server", HERE / "expected-failures-ordinary.txt")


@dataclass(frozen=True)
class Leg:
    """One way the suite reaches a fixture: alone, or through a gateway of its own."""

    name: str
    fixture: Fixture
    way: str  # baseline | ws | mux | stdio | remote | remote-session | remote-sse
    era: str = "auto"  # the provider era the gateway speaks to the fixture (config `era`)


LEGS = (
    Leg("baseline", CONFORMANCE, "baseline"),
    Leg("conformance-ws", CONFORMANCE, "ws", era="session"),
    Leg("conformance-stdio", CONFORMANCE, "stdio", era="session"),
    Leg("conformance-remote", CONFORMANCE, "remote-session"),
    Leg("conformance-sse", CONFORMANCE, "remote-sse"),
    Leg("ordinary", ORDINARY, "baseline"),
    Leg("ordinary-ws", ORDINARY, "ws"),
    Leg("ordinary-mux", ORDINARY, "mux"),
    Leg("ordinary-stdio", ORDINARY, "stdio"),
    Leg("ordinary-remote", ORDINARY, "remote"),
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


def judge(
    run: Run,
    baseline: Run | None,
    expected: list[Entry],
    pending: list[Entry],
    verdict: Verdict,
    fixture: Fixture = CONFORMANCE,
) -> None:
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
                line += f" [{fixture.expected.name} lists {listed}, but excuses only what fails on the baseline too]"
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
    """Per scenario, the suite's own pass/fail counts on every leg of one fixture side by side."""
    fixture_of = {leg.name: leg.fixture for leg in LEGS}
    lines: list[str] = []
    for suite in SUITES:
        for fixture in (ORDINARY, CONFORMANCE):
            legs = [run for run in runs if run.suite is suite and fixture_of.get(run.leg) is fixture]
            if not legs:
                continue
            lines.append(f"conformance {suite.label}, {fixture.name} fixture: " + " | ".join(run.leg for run in legs))
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
        print(f"\nExpected failures (the fixtures' lists, not scored by the suite): {len(expected)} check(s)")
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


def toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def gateway_config(leg: Leg, port: int, upstream_port: int | None) -> str:
    """The gateway's configuration for one leg: the fixture's slot, reached the leg's way."""
    python = sys.executable
    lines = [f"port = {port}", "", "[logging]", 'level = "warning"', ""]
    if leg.way in ("ws", "mux"):
        lines += [f"[slots.declared.{toml_string(leg.name)}]", f"era = {toml_string(leg.era)}", ""]
    elif leg.way == "stdio":
        command = [python, "-m", leg.fixture.module, "--stdio"]
        lines += [
            "[[upstreams.stdio]]",
            f"name = {toml_string(leg.name)}",
            f"command = [{', '.join(toml_string(part) for part in command)}]",
            f"era = {toml_string(leg.era)}",
            "startup_timeout_s = 30",
            "",
        ]
    else:
        transport = {"remote": "auto", "remote-session": "streamable-http"}.get(leg.way, "sse")
        path = "sse" if transport == "sse" else "mcp"
        lines += [
            "[[upstreams.remote]]",
            f"name = {toml_string(leg.name)}",
            f'url = "http://127.0.0.1:{upstream_port}/{path}"',
            f"transport = {toml_string(transport)}",
            "",
        ]
    return "\n".join(lines)


@contextlib.contextmanager
def running_leg(leg: Leg, results: Path) -> Iterator[tuple[str, list[subprocess.Popen[bytes]], list[Path]]]:
    """The leg's processes, running: (the URL the suite tests, the processes, their logs)."""
    python = sys.executable
    fixture = [python, "-m", leg.fixture.module]
    with contextlib.ExitStack() as stack:
        procs: list[subprocess.Popen[bytes]] = []
        logs: list[Path] = []

        def start(command: list[str], name: str) -> None:
            log = results / f"{leg.name}-{name}.log"
            procs.append(stack.enter_context(process(command, log)))
            logs.append(log)

        if leg.way == "baseline":
            port = free_port()
            start([*fixture, "--http", str(port)], "fixture")
            yield f"http://localhost:{port}/mcp", procs, logs
            return
        upstream_port = None
        if leg.way.startswith("remote"):
            upstream_port = free_port()
            mode = ["--sse", str(upstream_port)] if leg.way == "remote-sse" else ["--http", str(upstream_port)]
            start([*fixture, *mode], "fixture")
        port = free_port()
        config = results / f"{leg.name}-gateway.toml"
        config.write_text(gateway_config(leg, port, upstream_port))
        start([python, "-m", "gateway.cli", "run", "--config", str(config)], "gateway")
        if leg.way in ("ws", "mux"):
            publish = [*fixture, "--publish", f"ws://127.0.0.1:{port}", "--slot", leg.name]
            start([*publish, "--multiplexed"] if leg.way == "mux" else publish, "publisher")
        yield f"http://localhost:{port}/{leg.name}/mcp", procs, logs


def chosen_legs(names: str | None) -> list[Leg]:
    """The legs to run: all, or the named ones with the baseline of each fixture they use."""
    if names is None:
        return list(LEGS)
    wanted = {name.strip() for name in names.split(",") if name.strip()}
    unknown = wanted - {leg.name for leg in LEGS}
    if unknown:
        raise Unrunnable(f"no such leg: {', '.join(sorted(unknown))} (legs: {', '.join(leg.name for leg in LEGS)})")
    fixtures = {leg.fixture for leg in LEGS if leg.name in wanted}
    return [leg for leg in LEGS if leg.name in wanted or (leg.way == "baseline" and leg.fixture in fixtures)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance.run", description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep logs and checks.json files in DIR")
    parser.add_argument("--legs", metavar="NAMES", help="comma-separated legs to run (default: all)")
    args = parser.parse_args(argv)
    try:
        env = node_env()
        pending = read_list(PENDING)
        unscored = set().union(*(not_scored(suite, env) for suite in SUITES))
        expected_by_fixture: dict[str, list[Entry]] = {}
        for fixture in (CONFORMANCE, ORDINARY):
            expected = read_list(fixture.expected)
            refused = [str(entry) for entry in expected if entry.scenario not in unscored]
            if refused:
                raise Unrunnable(
                    f"{fixture.expected.name} may list only scenarios the suite does not score; not so: {refused}"
                )
            expected_by_fixture[fixture.name] = expected
        legs = chosen_legs(args.legs)
        results = args.keep or Path(tempfile.mkdtemp(prefix="conformance-"))
        results.mkdir(parents=True, exist_ok=True)
        runs: list[Run] = []
        verdicts: dict[tuple[str, str], Verdict] = {}
        baselines: dict[tuple[str, str], Run] = {}
        for leg in legs:
            with running_leg(leg, results) as (url, procs, logs):  # processes stop as the block ends
                wait_for_fixture(url, procs, logs)
                for suite in SUITES:
                    run = run_suite(suite, leg.name, url, env, results)
                    baseline = None if leg.way == "baseline" else baselines[(leg.fixture.name, suite.version)]
                    if baseline is None:
                        baselines[(leg.fixture.name, suite.version)] = run
                    verdict = Verdict()
                    judge(run, baseline, expected_by_fixture[leg.fixture.name], pending, verdict, leg.fixture)
                    runs.append(run)
                    verdicts[(suite.version, leg.name)] = verdict
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
