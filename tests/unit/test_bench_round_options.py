"""The pump benchmarks' round options: a value given is kept (0 included), a value out of range is a
named parser error, and only an absent one takes the default."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from bench import big_answer, c_board, mqtt, pump_paths, serial

PARSERS: dict[str, Callable[[Sequence[str]], Any]] = {
    "pump_paths": pump_paths.parse_options,
    "mqtt": mqtt.parse_options,
    "serial": serial.parse_options,
    "c_board": lambda argv: c_board.parse_options(argv)[0],
}


@pytest.mark.parametrize("bench", PARSERS)
def test_a_warmup_of_zero_stays_zero_and_given_rounds_are_kept(bench: str) -> None:
    # `args.warmup or 30` turned an asked-for 0 into the default 30.
    options = PARSERS[bench](["--rounds", "2", "--calls", "7", "--warmup", "0"])
    assert (options.rounds, options.calls, options.warmup) == (2, 7, 0)


@pytest.mark.parametrize("bench", PARSERS)
def test_given_values_win_over_the_quick_ones(bench: str) -> None:
    options = PARSERS[bench](["--quick", "--rounds", "4", "--calls", "9", "--warmup", "1"])
    assert (options.rounds, options.calls, options.warmup) == (4, 9, 1)


@pytest.mark.parametrize("bench", PARSERS)
@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--rounds", "0"], "--rounds must be at least 1, not 0"),
        (["--calls", "-5"], "--calls must be at least 1, not -5"),
        (["--calls", "0"], "--calls must be at least 1, not 0"),
        (["--warmup", "-1"], "--warmup must not be negative, not -1"),
    ],
)
def test_a_value_out_of_range_is_a_named_error(
    bench: str, argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        PARSERS[bench](argv)
    assert exited.value.code == 2
    assert named in capsys.readouterr().err


def test_the_defaults_of_each_bench() -> None:
    full = pump_paths.parse_options([])
    assert (full.rounds, full.calls, full.warmup) == (5, 400, 30)
    short = pump_paths.parse_options(["--quick"])
    assert (short.rounds, short.calls, short.warmup) == (1, 20, 3)
    options, binary = c_board.parse_options([])
    assert (options.rounds, options.calls, options.warmup, binary) == (3, 500, 30, None)
    quick, _ = c_board.parse_options(["--quick"])
    assert (quick.rounds, quick.calls, quick.warmup) == (1, 20, 3)
    framing = serial.parse_options([])
    assert (framing.repeats, framing.min_time) == (7, 0.05)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--repeats", "0"], "--repeats must be at least 1, not 0"),
        (["--min-time", "0"], "--min-time must be over 0 and at most 60 s, not 0.0"),
        (["--min-time", "inf"], "--min-time must be over 0 and at most 60 s, not inf"),
    ],
)
def test_serial_framing_options_out_of_range_are_named_errors(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # --repeats 0 became the default 7; --min-time inf never ended a timing loop.
    with pytest.raises(SystemExit) as exited:
        serial.parse_options(argv)
    assert exited.value.code == 2
    assert named in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--reads", "0"], "--reads must be at least 1, not 0"),
        (["--mib", "0"], "--mib must be over 0 and at most 256, not 0.0"),
        (["--mib", "0.0001"], "is under 256 bytes"),
    ],
)
def test_big_answer_options_out_of_range_are_named_errors(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Checked before any process starts: --reads 0 ended in min() of nothing after the whole stack ran.
    with pytest.raises(SystemExit) as exited:
        big_answer.main(argv)
    assert exited.value.code == 2
    assert named in capsys.readouterr().err
