"""The hardware-in-the-loop suite's targets: what `--target` names, and what each one can do.

A check that needs a capability a target lacks is not generated for that target (CI forbids skips);
`pytest_report_header` lists which checks each target leaves out, and why.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

CI_DEADMAN_S = 2.0
"""The dead-man of the boards the suite starts itself: short, so the dead-man check stays quick."""
CI_HEARTBEAT_S = 0.5
"""The suite's gateway pings every provider this often: well inside CI_DEADMAN_S, so a quiet but
healthy link never trips the dead-man ("a shorter dead-man trips on a quiet link", docs/pump-1.md)."""
BENCH_DEADMAN_S = 90.0
"""A real board's dead-man unless `--deadman-s` says otherwise: pump-1's default."""
DEFAULT_SLOT = "pump-1"
SELF_STARTED = ("sim", "micropython", "c-host")

CAPABILITIES = {
    "restart_gateway": "the suite runs the gateway, so it can stop it past the dead-man and start it again",
    "inject_faults": "faults are injected only through the simulator's control endpoint",
    "fresh_boot": "the suite boots the board for each check, so its state after boot is known",
    "ungoverned": "the suite's gateway has no [policy]: an out-of-range speed, or a start without one, "
    "reaches the board",
}


@dataclass(frozen=True)
class Target:
    """One `--target`: its kind, where the board is, and what the suite can do with it."""

    spec: str
    kind: str
    """sim, micropython, c-host, serial or ws."""
    location: str = ""
    """The serial port (serial) or the slot (ws)."""
    deadman_s: float = CI_DEADMAN_S
    capabilities: frozenset[str] = frozenset()

    @property
    def owns_gateway(self) -> bool:
        return self.kind != "ws"


def parse_target(spec: str, bench_deadman_s: float) -> Target:
    """A `--target` value as a Target; anything else is a usage error that names the forms."""
    if spec == "sim":
        return Target(spec, "sim", capabilities=frozenset(CAPABILITIES))
    if spec in ("micropython", "c-host"):
        return Target(spec, spec, capabilities=frozenset(CAPABILITIES) - {"inject_faults"})
    kind, _, location = spec.partition(":")
    if kind == "serial" and location.startswith("/"):
        # The suite's gateway opens the port, but the board was running before: its state is unknown.
        return Target(spec, "serial", location, bench_deadman_s, frozenset({"restart_gateway", "ungoverned"}))
    if kind == "ws" and location and not location.startswith("_") and "/" not in location:
        return Target(spec, "ws", location, bench_deadman_s, frozenset())
    raise pytest.UsageError(
        f"--target {spec!r} is not a target: use sim, micropython, c-host, serial:/dev/ttyX (a board on a serial "
        "port) or ws:SLOT (a board attached to the gateway --gateway-url names)"
    )


def parse_deadman(text: str) -> float:
    """`--deadman-s`: seconds, above 0 and at most a day (a board's own bound)."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= 86_400:
        raise pytest.UsageError(f"--deadman-s {text!r} must be a number of seconds above 0 and at most 86400")
    return seconds


def missing_checks(target: Target, needs_by_check: dict[str, frozenset[str]]) -> list[str]:
    """The checks a target leaves out, each with the capability it lacks."""
    left_out = []
    for check, needs in sorted(needs_by_check.items()):
        lacking = sorted(needs - target.capabilities)
        if lacking:
            left_out.append(f"{check} (needs {', '.join(lacking)})")
    return left_out
