"""broker_diagnose's serial findings carry the port they are about, and a caller shown some ports
(broker_info) is shown whole the findings of exactly those ports: never another port's finding whose
summary happens to begin with a shown port's path."""

from __future__ import annotations

from gateway.core.broker.diagnose import diagnose
from gateway.core.broker.rights import WITHHELD_EVIDENCE, withheld
from tests.unit.test_diagnose import dropped, serial_port, serial_view

SHOWN = "/dev/serial/by-id/usb-lab"
OTHER = "/dev/serial/by-id/usb-lab second"
"""A configured path may hold a space: its findings' summaries begin with the shown port's path and a space."""


def every_serial_finding(path: str) -> list[dict[str, object]]:
    return [
        serial_port(path, state="backoff", failures_in_a_row=4, last_error="cannot open: (ENOENT)", slots=[]),
        serial_port(path, frames_in=0, slots=[], dropped=dropped(cobs=40)),
        serial_port(path, dropped=dropped(oversize=2)),
        serial_port(path, slots=[], frames_in=0),
        serial_port(path, state="held", given_back_in_s=60, max_hold_s=600),
    ]


def test_every_serial_finding_names_its_port() -> None:
    problems = diagnose(serial_view(*every_serial_finding(SHOWN)))
    assert {problem.id for problem in problems} == {
        "serial.port_unavailable",
        "serial.frames_damaged",
        "serial.frames_oversize",
        "serial.no_board",
        "serial.port_held",
    }
    assert {problem.port for problem in problems} == {SHOWN}
    assert all(problem.port is None for problem in diagnose(serial_view()) if not problem.id.startswith("serial."))


def test_a_caller_is_shown_whole_only_the_findings_of_its_own_ports() -> None:
    view = serial_view(*every_serial_finding(SHOWN), *every_serial_finding(OTHER))
    problems = diagnose(view)
    shown = withheld(problems, view, frozenset({SHOWN}))
    whole = [problem for problem in shown if problem.evidence != WITHHELD_EVIDENCE]
    assert {problem.port for problem in whole if problem.id.startswith("serial.")} == {SHOWN}
    assert all(OTHER not in problem.summary + problem.evidence + problem.fix for problem in shown)
    assert all("port" not in problem.to_json() for problem in shown)
