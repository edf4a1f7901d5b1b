"""The swap of `device install`: the new files renamed into place in one program that is never cut.

The board: tests/field/test_device_install_board_answers.py's `PtyBoard`, whose `slow_swap` takes a
set time per rename and raises KeyboardInterrupt in the running program when a Ctrl-C arrives, as
MicroPython does, and whose `no_replace` refuses to rename over a file. A board first gets version
0.1.0; the install under test brings 0.2.0, so that every file on the board is either old or new.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest

from gateway.provision import board as board_module
from tests.conftest import wait_for
from tests.field.test_device_install import bumped_source, run_cli, state_dir
from tests.field.test_device_install_board_answers import REPO, PtyBoard, adopted, install, one_line, pty_board

__all__ = ["pty_board", "state_dir"]  # fixtures, used by name


async def installed(board: PtyBoard, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path]:
    """The board holding 0.1.0; the sources of 0.1.0 and of 0.2.0."""
    old = bumped_source(tmp_path / "old", "0.1.0")
    code, _, err = await run_cli(capsys, *install(board, old))
    assert (code, err) == (0, ""), err
    return old, bumped_source(tmp_path / "new", "0.2.0")


def holds(board: PtyBoard, source: Path) -> bool:
    """The board holds every module of `source`, and no file of a swap half done."""
    files = board.files()
    if [path for path in files if path.endswith((".new", ".old"))]:
        return False
    modules = [path for path in source.rglob("*.py") if path.parent.name in ("pump1", "mcpdevice")]
    return all(files.get(path.relative_to(source).as_posix()) == path.read_bytes() for path in modules)


async def test_a_swap_slower_than_the_ordinary_bound_runs_to_its_end(
    pty_board: PtyBoard, state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, new = await installed(pty_board, tmp_path, capsys)
    # 30 renames of 0.4 s: 12 s, past the 10 s every other step of the install has.
    pty_board.set_mode("slow_swap", "0.4")
    code, _, err = await run_cli(capsys, *install(pty_board, new))
    assert (code, err) == (0, ""), err
    assert "ctrl-c-running" not in pty_board.events
    assert holds(pty_board, new)


async def test_a_swap_past_its_own_bound_is_said_and_never_interrupted(
    pty_board: PtyBoard,
    state_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, new = await installed(pty_board, tmp_path, capsys)
    resets = pty_board.events.count("reset")
    monkeypatch.setattr(board_module, "SWAP_TIMEOUT_S", 1.0, raising=False)
    pty_board.set_mode("slow_swap", "0.15")  # 4.5 s
    code, _, err = await run_cli(capsys, *install(pty_board, new))
    assert code == 1
    one_line(err)
    assert err == (
        f"mcp-gateway: the board on {pty_board.port} did not finish renaming the new files into place within 1 s "
        f"(the board on {pty_board.port} did not answer in time), and was not interrupted: a swap cut short would "
        "leave a mix of old and new files; the board may hold a mix of old and new files (the swap to the new files "
        "had begun); the board was reset once the swap ended and runs the code it holds. Run the same install "
        "again: it starts over\n"
    )
    # No Ctrl-C reached the swap: it ran to its end, then the board was reset.
    assert "ctrl-c-running" not in pty_board.events
    # The board's event lines are read by a task of their own: the reset's may come after the CLI returned.
    await wait_for(lambda: pty_board.events.count("reset") > resets, 10, "the board's reset event")
    assert pty_board.events.count("reset") == resets + 1
    assert holds(pty_board, new)
    assert adopted() == ["unix-pump-7"]  # the first install's adoption; this one adopted nothing new


async def test_an_install_stopped_during_the_swap_lets_it_end_and_says_so(
    pty_board: PtyBoard, state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, new = await installed(pty_board, tmp_path, capsys)
    pty_board.set_mode("slow_swap", "0.1")  # 3 s
    swaps = pty_board.events.count("swap")
    running = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", *install(pty_board, new),
        cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await wait_for(lambda: pty_board.events.count("swap") > swaps, 30, "the swap to begin")
        running.send_signal(signal.SIGTERM)
        _, err_bytes = await asyncio.wait_for(running.communicate(), 30)
    finally:
        if running.returncode is None:
            running.kill()
            await running.wait()
    err = err_bytes.decode()
    assert running.returncode == 143, err
    assert err == (
        f"mcp-gateway: the install on {pty_board.port} was stopped by SIGTERM during the swap: the board may hold a "
        "mix of old and new files (the swap to the new files had begun); the registry was not changed; the board "
        "was reset once the swap ended and runs the code it holds. Run the same install again: it starts over "
        "[interrupted]\n"
    )
    assert "ctrl-c-running" not in pty_board.events
    assert holds(pty_board, new)


async def test_a_filesystem_that_does_not_rename_over_a_file_gets_the_new_files(
    pty_board: PtyBoard, state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, new = await installed(pty_board, tmp_path, capsys)
    (pty_board.root / "pump1" / "tools.py.old").write_bytes(b"# left by a swap cut short\n")
    pty_board.set_mode("no_replace")
    code, _, err = await run_cli(capsys, *install(pty_board, new))
    assert (code, err) == (0, ""), err
    assert holds(pty_board, new)
    assert (pty_board.root / "config.json").exists()
