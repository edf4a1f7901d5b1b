"""The hardware-in-the-loop suite (docs/hil.md): the same pump-1 checks against every `--target`.

`--target` is repeatable; none given means `sim`. Each check is generated once per target that has
the capabilities the check's `needs` marker names, never skipped; the report header lists the checks
each target leaves out.
"""

from __future__ import annotations

import ast
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest

from tests.hil.rig import ATTACH_TIMEOUT_S, GATEWAY_CYCLE_S, Rig, bench_token
from tests.hil.targets import (
    BENCH_DEADMAN_S,
    CAPABILITIES,
    DEFAULT_SLOT,
    Target,
    missing_checks,
    parse_deadman,
    parse_target,
)

HERE = Path(__file__).parent
CHECK_ALLOWANCE_S = 30.0
"""A check's timeout: a gateway cycle and an attach wait for its set-up, one more of each for every gateway
restart (the `restart_gateway` checks restart it once), four dead-man times and this."""
PROBE_TIMEOUT_S = 5.0
"""How long --gateway-url gets to answer /healthz before the run starts."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hil", "hardware-in-the-loop suite (tests/hil, docs/hil.md)")
    group.addoption(
        "--target",
        action="append",
        default=[],
        help="sim (default), micropython, c-host, serial:/dev/ttyX or ws:SLOT; repeatable",
    )
    group.addoption(
        "--gateway-url",
        default="http://127.0.0.1:3000",
        help="the running gateway of ws:SLOT targets (token: $MCP_GATEWAY_TOKEN)",
    )
    group.addoption(
        "--deadman-s",
        default=str(BENCH_DEADMAN_S),
        help="the dead-man time a real board (serial:, ws:) is configured with; default 90",
    )
    group.addoption("--slot", default=DEFAULT_SLOT, help="the slot of a board on a serial: target; default pump-1")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs(*capabilities): the target capabilities a hil check needs")
    config.addinivalue_line(
        "markers", "board_deadman(seconds): the dead-man at least, for a board the suite boots (fresh_boot)"
    )
    targets_of(config)  # a wrong --target or --deadman-s is a usage error before anything runs


def pytest_sessionstart(session: pytest.Session) -> None:
    """A serial port that is not there, or a --gateway-url that is no mcp-gateway, fails the run once, at
    the start, instead of each check after its 60 s attach wait."""
    targets = targets_of(session.config)
    for target in targets:
        if target.kind == "serial" and not Path(target.location).exists():
            raise pytest.UsageError(f"--target {target.spec}: {target.location} does not exist (no such serial port)")
    if any(target.kind == "ws" for target in targets):
        url = str(session.config.getoption("--gateway-url")).rstrip("/")
        problem = gateway_problem(url)
        if problem is not None:
            raise pytest.UsageError(f"--gateway-url {url}: {problem}")


def gateway_problem(url: str) -> str | None:
    """Why `url` is not a running mcp-gateway (its /healthz answers {"status": "alive", ...}), or None."""
    try:
        answer = httpx2.get(f"{url}/healthz", timeout=PROBE_TIMEOUT_S)
    except httpx2.HTTPError as exc:
        return f"nothing answers there ({type(exc).__name__}: {exc}): check the URL and that the gateway runs"
    try:
        alive = answer.status_code == 200 and answer.json().get("status") == "alive"
    except (ValueError, AttributeError):
        alive = False
    if not alive:
        return f"answers, but is not an mcp-gateway: its /healthz gave HTTP {answer.status_code} {answer.text[:80]!r}"
    return None


def deadman_of(target: Target, check: pytest.Item) -> float:
    """The board's dead-man for one check: the target's, or the check's `board_deadman` when longer and the
    suite boots the board (a real board keeps the one it is configured with)."""
    marker = check.get_closest_marker("board_deadman")
    if marker is None or "fresh_boot" not in target.capabilities:
        return target.deadman_s
    return max(target.deadman_s, float(marker.args[0]))


def budget_s(target: Target, item: pytest.Item) -> float:
    """A check's pytest-timeout: every wait the rig may make, so a board that never attaches ends in the
    rig's "not attached" message, not in a timeout."""
    restarts = 1 if "restart_gateway" in needs_of(getattr(item, "function", None)) else 0
    waits = (1 + restarts) * (GATEWAY_CYCLE_S + ATTACH_TIMEOUT_S)
    return waits + 4 * deadman_of(target, item) + CHECK_ALLOWANCE_S


def targets_of(config: pytest.Config) -> list[Target]:
    specs = config.getoption("--target", default=None) or ["sim"]
    bench_deadman = parse_deadman(str(config.getoption("--deadman-s", default=str(BENCH_DEADMAN_S))))
    targets = [parse_target(spec, bench_deadman) for spec in specs]
    names = [target.spec for target in targets]
    if len(set(names)) != len(names):
        raise pytest.UsageError(f"--target names a target twice: {', '.join(names)}")
    return targets


def needs_of(definition: object) -> frozenset[str]:
    needs: set[str] = set()
    for mark in getattr(definition, "pytestmark", []):
        if mark.name == "needs":
            needs.update(mark.args)
    unknown = needs - set(CAPABILITIES)
    assert not unknown, f"unknown capabilities {sorted(unknown)}: the known ones are {sorted(CAPABILITIES)}"
    return frozenset(needs)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "target" not in metafunc.fixturenames:
        return
    needs = needs_of(metafunc.function)
    chosen: list[Target | None] = [target for target in targets_of(metafunc.config) if needs <= target.capabilities]
    # pytest would mark a check with no target at all as skipped: it gets a placeholder instead,
    # deselected below, so the check is left out (and the header says why), never skipped.
    metafunc.parametrize("target", chosen or [None], ids=[t.spec if t else "no-target" for t in chosen or [None]])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept, left_out = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or "target" not in callspec.params or not item.path.is_relative_to(HERE):
            kept.append(item)
            continue
        target = callspec.params["target"]
        if target is None:
            left_out.append(item)
            continue
        kept.append(item)
        item.add_marker(pytest.mark.timeout(budget_s(target, item)))
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


def pytest_report_header(config: pytest.Config, start_path: Path) -> list[str]:
    checks: dict[str, frozenset[str]] = {}
    for path in sorted(HERE.glob("test_pump1_*.py")):
        for name, needs in checks_in(path).items():
            checks[name] = needs
    lines = []
    for target in targets_of(config):
        left_out = missing_checks(target, checks)
        capabilities = ", ".join(sorted(target.capabilities)) or "none"
        lines.append(f"hil target {target.spec}: dead-man {target.deadman_s:g} s; capabilities: {capabilities}")
        lines.append(f"  checks that do not apply: {'; '.join(left_out) if left_out else 'none'}")
    return lines


def checks_in(path: Path) -> dict[str, frozenset[str]]:
    """Each check of a test module with the capabilities its `needs` marker names, read from the source
    (the header is written before collection)."""
    checks: dict[str, frozenset[str]] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef) and node.name.startswith("test_"):
            needs: set[str] = set()
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call) and ast.unparse(decorator.func) == "pytest.mark.needs":
                    needs.update(str(arg.value) for arg in decorator.args if isinstance(arg, ast.Constant))
            checks[node.name] = frozenset(needs)
    return checks


@pytest.fixture
async def rig(target: Target, request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Rig]:
    """The target ready for one check: a gateway and a freshly booted board (sim, micropython, c-host),
    the suite's gateway and the board on the serial port, or the running gateway's slot (ws)."""
    if target.kind == "ws":
        slot, gateway_url, token = target.location, str(request.config.getoption("--gateway-url")), bench_token()
    else:
        slot, gateway_url, token = str(request.config.getoption("--slot")), "", ""
        if target.kind in ("sim", "micropython", "c-host"):
            slot = DEFAULT_SLOT
    rig = Rig(target, slot, tmp_path, gateway_url.rstrip("/"), token, deadman_of(target, request.node))
    try:
        await rig.start()
        if "fresh_boot" not in target.capabilities:
            await bring_to_rest(rig)
        yield rig
    finally:
        await rig.stop()


async def bring_to_rest(rig: Rig) -> None:
    """A board the suite did not boot: stopped, standing still, no fault latched, before each check."""
    from tests.hil.checks import poll, status_of

    async with rig.client() as client:
        await status_of(client, "stop")
        await poll(client, lambda status: status["speed_rpm"] == 0, timeout=2900 / 600 + 5)
        if (await status_of(client))["fault"] is not None:
            await status_of(client, "reset_fault")
