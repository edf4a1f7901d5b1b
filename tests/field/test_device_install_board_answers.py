"""`device install` and `device update` against a board whose answers are not what MicroPython says.

The board: `PtyBoard`, a raw REPL behind a PTY whose programs CPython runs in a folder (its
filesystem), started as `python -m tests.field.test_device_install_board_answers CONTROL ROOT`. The
file CONTROL names how it misbehaves, read before every program, so that a test switches a board
that served an install to a fault:

- `probe_super`: the probe's first line is '²' (a digit to str.isdigit(), not to int());
- `stat_garbage`: the size check answers a line of noise;
- `cfg_enospc`: writing config.json.new fails with OSError ENOSPC, as on a full flash;
- `slow_swap <seconds>`: each rename of a `.new` file takes that long, and a Ctrl-C that arrives
  meanwhile raises KeyboardInterrupt in the running program, as on MicroPython;
- `no_replace`: `os.rename` refuses to rename over a file (a filesystem whose rename does not replace).

It says on stderr what a test checks: `event reset` (a soft reset), `event swap` (the swap program
begins), `event ctrl-c-running` (a Ctrl-C reached a running program).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import select
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gateway.devices.registry import DeviceRegistry, default_registry_path
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.field.pty_console import PtyConsole
from tests.field.test_device_install import bumped_source, run_cli, state_dir
from tests.support.servers import demo_server

__all__ = ["state_dir"]  # a fixture, used by name
REPO = Path(__file__).resolve().parents[2]
RAW_BANNER = b"raw REPL; CTRL-B to exit\r\n>"
UNREACHABLE = "ws://127.0.0.1:1"


# -- the board's side: run in its own process --------------------------------------------------------


class _Console:
    """The board's end of the line: stdin and stdout are the PTY's master side."""

    def __init__(self, control: Path) -> None:
        self.control = control
        self.pending = bytearray()
        self.running = False
        self.real_rename = os.rename

    def mode(self) -> list[str]:
        try:
            return self.control.read_text().split()
        except OSError:
            return []

    def event(self, name: str) -> None:
        sys.stderr.write(f"event {name}\n")
        sys.stderr.flush()

    def read(self) -> int | None:
        if self.pending:
            return self.pending.pop(0)
        data = os.read(0, 1)
        return data[0] if data else None

    def send(self, data: bytes) -> None:
        os.write(1, data)

    def interrupted(self) -> bool:
        """What arrived while a program runs: a Ctrl-C interrupts it; anything else waits its turn."""
        while select.select([0], [], [], 0)[0]:
            data = os.read(0, 256)
            if not data:
                break
            if b"\x03" in data:
                self.event("ctrl-c-running")
                self.pending += data[data.index(b"\x03") + 1 :]
                return True
            self.pending += data
        return False

    def rename(self, source: str, target: str) -> None:
        mode = self.mode()
        if mode[:1] == ["slow_swap"] and source.endswith(".new"):
            deadline = time.monotonic() + float(mode[1])
            while time.monotonic() < deadline:
                if self.interrupted():
                    raise KeyboardInterrupt
                time.sleep(0.02)
        if mode[:1] == ["no_replace"] and os.path.exists(target):
            raise OSError(errno.EEXIST, "EEXIST")
        self.real_rename(source, target)

    def run(self, source: str, namespace: dict[str, Any]) -> tuple[str, str]:
        mode = self.mode()[:1]
        if mode == ["probe_super"] and "sys.implementation" in source:
            return "\u00b2\nesp32\n\n", ""
        if mode == ["stat_garbage"] and "os.stat(p)[6]" in source:
            return "Traceback? no: [Errno 5] EIO\n", ""
        if mode == ["cfg_enospc"] and "config.json.new" in source and "a2b_base64" in source:
            return (
                "",
                'Traceback (most recent call last):\r\n  File "<stdin>", line 2\r\nOSError: [Errno 28] ENOSPC\r\n',
            )
        if "os.rename(p + '.new', p)" in source:
            self.event("swap")
        output = io.StringIO()
        error = ""
        try:
            with contextlib.redirect_stdout(output):
                exec(source, namespace)
        except BaseException as exc:  # a board's raw REPL reports every exception
            error = f"Traceback (most recent call last):\r\n{type(exc).__name__}: {exc}\r\n"
        return output.getvalue(), error

    def serve(self) -> None:
        os.rename = self.rename  # type: ignore[assignment]  # the board's filesystem, as its programs see it
        raw, code = False, bytearray()
        namespace: dict[str, Any] = {}
        self.event("ready")
        while (value := self.read()) is not None:
            if raw and value == 0x04 and not code:
                self.send(b"soft reboot\r\n" + RAW_BANNER)
            elif raw and value == 0x04:
                self.send(b"OK")
                output, error = self.run(bytes(code).decode(), namespace)
                self.send(output.encode() + b"\x04" + error.encode() + b"\x04>")
                code = bytearray()
            elif value == 0x01:
                raw, code = True, bytearray()
                self.send(b"\r\n" + RAW_BANNER)
            elif raw and value == 0x02:
                raw = False
                self.send(b"\r\nMicroPython (pty board)\r\n>>> ")
            elif value == 0x03:
                code = bytearray()
                if not raw:
                    self.send(b"\r\n>>> ")
            elif raw:
                code.append(value)
            elif value == 0x04:
                namespace = {}
                self.event("reset")
                self.send(b"MPY: soft reboot\r\n>>> ")


# -- the test's side ----------------------------------------------------------------------------------


class PtyBoard(PtyConsole):
    """A board on a PTY (the emulator above in its own process); `port` is the slave's name."""

    def __init__(self, root: Path) -> None:
        self.control = root.parent / f"{root.name}.mode"
        super().__init__(
            root,
            [sys.executable, "-m", "tests.field.test_device_install_board_answers", str(self.control), str(root)],
            cwd=REPO,
            what="the pty board",
        )

    def set_mode(self, *mode: str) -> None:
        self.control.write_text(" ".join(mode))

    async def start(self) -> None:
        self.set_mode("normal")
        await super().start()

    def on_other_line(self, line: str) -> None:
        print("board:", line, file=sys.stderr)

    def files(self) -> dict[str, bytes]:
        return {
            path.relative_to(self.root).as_posix(): path.read_bytes() for path in self.root.rglob("*") if path.is_file()
        }


@pytest.fixture
async def pty_board(tmp_path: Path) -> Any:
    made = PtyBoard(tmp_path / "board")
    await made.start()
    yield made
    await made.stop()


def install(board: PtyBoard, source: Path, *options: str) -> tuple[str, ...]:
    return (
        "device", "install", board.port, "--slot", "pump-7", "--gateway-url", UNREACHABLE, "--pace-ms", "0",
        "--no-compile", "--no-reset", "--source", str(source), *options,
    )  # fmt: skip


def adopted() -> list[str]:
    if not default_registry_path().exists():
        return []
    registry = DeviceRegistry(default_registry_path())
    try:
        return [row.device_id for row in registry.devices() if row.adopted]
    finally:
        registry.close()


def one_line(err: str) -> None:
    assert err.count("\n") == 1 and err.endswith("\n") and "Traceback (most recent" not in err, err


# -- answers that are not MicroPython's ---------------------------------------------------------------


async def test_a_probe_answer_that_is_no_number_stops_in_one_line_and_resets_the_board(
    pty_board: PtyBoard, state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pty_board.set_mode("probe_super")
    code, _, err = await run_cli(capsys, *install(pty_board, bumped_source(tmp_path, "0.1.0")))
    assert code == 1
    one_line(err)
    assert err == (
        "mcp-gateway: the board's answer to the probe is not MicroPython's (its first line, sys.implementation._mpy, "
        "is not a whole number): '²\\nesp32\\n\\n' (is MicroPython on it, and is the line clean?); nothing was "
        "written to the board; the board was reset and runs its previous code again\n"
    )
    await wait_for(lambda: "reset" in pty_board.events, 5, "the board's reset")
    assert pty_board.files() == {} and adopted() == []


async def test_a_size_check_answer_that_is_noise_stops_in_one_line_and_resets_the_board(
    pty_board: PtyBoard, state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pty_board.set_mode("stat_garbage")
    code, _, err = await run_cli(capsys, *install(pty_board, bumped_source(tmp_path, "0.1.0")))
    assert code == 1
    one_line(err)
    assert err.startswith(
        f"mcp-gateway: the board on {pty_board.port} answered the size check with 'Traceback? no: [Errno 5] EIO\\n', "
        "not the 30 sizes asked for, one a line (is the line clean?); the new files copied in part (*.new) stay on "
        "the board unused; its code is as it was; the board was reset and runs its previous code again\n"
    ), err
    await wait_for(lambda: "reset" in pty_board.events, 5, "the board's reset")
    assert all(path.endswith(".new") for path in pty_board.files()) and adopted() == []


async def test_an_update_whose_board_answers_noise_stops_in_one_line_and_resets_it(
    gateway_factory: GatewayFactory,
    publishers: Publishers,
    pty_board: PtyBoard,
    state_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    gateway = await gateway_factory()
    await publishers.start(gateway, "pump-1", demo_server("pump"))  # the slot the update asks about
    update = ("device", "update", "pump-1", "--port", pty_board.port, "--url", gateway.url, "--pace-ms", "0")
    source = str(bumped_source(tmp_path, "0.2.0"))
    for mode, starts in (
        ("probe_super", "mcp-gateway: the board's answer to the probe is not MicroPython's"),
        ("stat_garbage", f"mcp-gateway: the board on {pty_board.port} answered the size check with "),
    ):
        pty_board.set_mode(mode)
        before = pty_board.events.count("reset")
        code, _, err = await run_cli(capsys, *update, "--no-compile", "--source", source)
        assert code == 1
        one_line(err)
        assert err.startswith(starts), err
        assert err.endswith("; the board was reset and runs its previous code again\n"), err
        await wait_for(lambda: pty_board.events.count("reset") > before, 5, "the board's reset")  # noqa: B023


# -- file names ---------------------------------------------------------------------------------------


async def test_a_module_with_a_space_in_its_name_is_installed(
    pty_board: PtyBoard, state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = bumped_source(tmp_path, "0.1.0")
    (source / "pump1" / "extra tools.py").write_text("X = 1\n")
    code, out, err = await run_cli(capsys, *install(pty_board, source, "--dry-run"))
    assert (code, err) == (0, "") and "  pump1/extra tools.py (6 bytes)\n" in out, err
    code, out, err = await run_cli(capsys, *install(pty_board, source))
    assert (code, err) == (0, ""), err
    files = pty_board.files()
    assert files["pump1/extra tools.py"] == b"X = 1\n"
    assert not [path for path in files if path.endswith((".new", ".old"))]
    assert adopted() == ["unix-pump-7"]


@pytest.mark.parametrize("name", ["bad:name.py", "tab\there.py", "x" * 252 + ".py"])
async def test_a_module_name_the_board_cannot_hold_is_refused_before_the_board(
    pty_board: PtyBoard, state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    source = bumped_source(tmp_path, "0.1.0")
    (source / "pump1" / name).write_text("X = 1\n")
    for dry_run in (("--dry-run",), ()):
        code, _, err = await run_cli(capsys, *install(pty_board, source, *dry_run))
        assert code == 1
        one_line(err)
        assert err.startswith(f"mcp-gateway: {source / 'pump1' / name} "), err
        assert err.endswith(f": rename it, or move it out of {source}\n"), err
        assert "cannot" in err or "refuses" in err or "longer than 251 bytes" in err
    assert pty_board.events == ["ready"] and pty_board.files() == {} and adopted() == []


# -- config.json --------------------------------------------------------------------------------------


async def test_a_config_write_that_fails_says_the_board_holds_the_new_code(
    pty_board: PtyBoard, state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = bumped_source(tmp_path, "0.1.0")
    pty_board.set_mode("cfg_enospc")
    code, _, err = await run_cli(capsys, *install(pty_board, source))
    assert code == 1
    assert err == (
        f"mcp-gateway: the board on {pty_board.port} failed: OSError: [Errno 28] ENOSPC; the board holds the new code "
        "and its previous config.json; the board was reset and runs the code it holds now\n"
    )
    await wait_for(lambda: "reset" in pty_board.events, 5, "the board's reset")
    files = pty_board.files()
    assert files["pump1/__init__.py"] == (source / "pump1" / "__init__.py").read_bytes()
    assert "config.json" not in files and adopted() == []


if __name__ == "__main__":  # the board's process (PtyBoard.start)
    control = Path(sys.argv[1]).resolve()
    os.chdir(sys.argv[2])  # the board's filesystem
    _Console(control).serve()
