"""Writing the application and its configuration to a board through its raw REPL.

Every file goes to `<path>.new` first, in base64 pieces (`binascii.a2b_base64`, a third more than the
bytes, where a bytes literal can take four times), its size is checked on the board, and only then
are the new files renamed over the old ones in one program, the swap, and the modules the new code no
longer has (`.py` or `.mpy` in its packages: a stale `.py` would shadow a new `.mpy`) removed. A copy
cut short leaves the board's running code as it was. The swap is never interrupted (its own bound,
SWAP_TIMEOUT_S, and no Ctrl-C while it runs): `os.rename` replaces the old file in one step on
MicroPython's littlefs and FAT; where a filesystem refuses to rename over a file, the old file stays as
`<path>.old` until the new one is in place.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.provision.bundle import PACKAGES, PROBE, BoardInfo, ProvisionError, parse_probe
from gateway.provision.raw_repl import BoardError, BoardGone, RawRepl

PIECE = 768  # bytes per a2b_base64 call: 1,024 characters of code
PIECES_PER_EXEC = 3
SECRET_KEYS = ("provider_token", "password")
MASK = "***"
SWAP_TIMEOUT_S = 60.0
"""How long the swap may take on the board (a rename on a slow flash takes a fraction of a second)."""


def probe(repl: RawRepl) -> BoardInfo:
    return parse_probe(repl.exec(PROBE))


def _quote(path: str) -> str:
    return repr(path)


def _write_code(path: str, content: bytes) -> list[str]:
    """The raw REPL programs that write `content` to `path` (mode wb, then ab), a few pieces each."""
    pieces = [content[start : start + PIECE] for start in range(0, len(content), PIECE)] or [b""]
    programs = []
    for index in range(0, len(pieces), PIECES_PER_EXEC):
        mode = "wb" if index == 0 else "ab"
        lines = ["from binascii import a2b_base64 as d", f"f = open({_quote(path)}, {mode!r})"]
        lines += [
            f"f.write(d({base64.b64encode(piece).decode()!r}))" for piece in pieces[index : index + PIECES_PER_EXEC]
        ]
        lines.append("f.close()")
        programs.append("\n".join(lines) + "\n")
    return programs


def _directories(paths: list[str]) -> list[str]:
    folders: set[str] = set()
    for path in paths:
        parts = path.split("/")[:-1]
        folders.update("/".join(parts[: depth + 1]) for depth in range(len(parts)))
    return sorted(folders, key=lambda folder: (folder.count("/"), folder))


def copy_files(repl: RawRepl, files: list[tuple[str, bytes]]) -> None:
    """Copy `files` to the board as `<path>.new` (paths relative to its root) and check their sizes."""
    folders = _directories([path for path, _ in files])
    if folders:
        repl.exec(
            f"import os\nfor p in {folders!r}:\n    try:\n        os.mkdir(p)\n    except OSError:\n        pass\n"
        )
    for path, content in files:
        for program in _write_code(path + ".new", content):
            repl.exec(program)
    news = [path + ".new" for path, _ in files]
    # One size a line, in the order sent: no file name in the answer, so any name reads back alike.
    found = _sizes(repl, repl.exec(f"import os\nfor p in {news!r}:\n    print(os.stat(p)[6])\n"), len(news))
    wrong = [path for (path, content), size in zip(files, found, strict=True) if size != len(content)]
    if wrong:
        raise ProvisionError(f"the board holds other sizes than were sent for {', '.join(wrong)}: copy again")


def _sizes(repl: RawRepl, answer: str, count: int) -> list[int]:
    """The sizes the board printed, one a line; BoardError when the answer is anything else."""
    lines = answer.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != count or not all(re.fullmatch(r"[0-9]{1,12}", line) for line in lines):
        raise BoardError(
            f"{repl.name} answered the size check with {answer[:200]!r}, not the {count} sizes asked for, one a line "
            "(is the line clean?)"
        )
    return [int(line) for line in lines]


def swap_files(repl: RawRepl, paths: list[str]) -> None:
    """Rename the copied `<path>.new` files into place, and remove the modules the new code does not have
    from the packages written now. One program, never interrupted: BoardError when it has not answered
    within SWAP_TIMEOUT_S (the board may then hold a mix of old and new files)."""
    keep = {
        package: sorted(path.split("/", 1)[1] for path in paths if path.startswith(package + "/"))
        for package in PACKAGES
    }
    # Only the packages written now lose the modules the new code does not have.
    keep = {package: names for package, names in keep.items() if names}
    program = (
        "import os\n"
        f"for p in {paths!r}:\n"
        "    try:\n        os.rename(p + '.new', p)\n"
        "    except OSError:\n"
        "        try:\n            os.remove(p + '.old')\n        except OSError:\n            pass\n"
        "        os.rename(p, p + '.old')\n"
        "        os.rename(p + '.new', p)\n"
        "        os.remove(p + '.old')\n"
        f"for d, keep in {sorted(keep.items())!r}:\n"
        "    for n in os.listdir(d):\n"
        "        if (n.endswith('.py') or n.endswith('.mpy') or n.endswith('.old')) and n not in keep:\n"
        "            os.remove(d + '/' + n)\n"
        "if hasattr(os, 'sync'):\n    os.sync()\n"
    )
    try:
        repl.exec(program, SWAP_TIMEOUT_S, whole=True)
    except BoardGone:
        raise
    except BoardError as exc:
        if not repl.whole_running:
            raise  # the swap answered with an error: it ended
        raise BoardError(
            f"{repl.name} did not finish renaming the new files into place within {SWAP_TIMEOUT_S:g} s ({exc}), "
            "and was not interrupted: a swap cut short would leave a mix of old and new files"
        ) from None


def write_files(repl: RawRepl, files: list[tuple[str, bytes]]) -> None:
    """Copy `files` to the board (paths relative to its root), check their sizes, then swap them in."""
    copy_files(repl, files)
    swap_files(repl, [path for path, _ in files])


def write_config(repl: RawRepl, config: Mapping[str, Any]) -> None:
    """config.json on the board (it holds the board's secret: never printed, never logged)."""
    write_files(repl, [("config.json", orjson.dumps(config, option=orjson.OPT_INDENT_2) + b"\n")])


def masked(config: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration as it may be shown: every secret replaced by ***."""
    shown: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            shown[key] = masked(value)
        elif key in SECRET_KEYS and value:
            shown[key] = MASK
        else:
            shown[key] = value
    return shown


def board_config(
    *,
    slot: str,
    transport: str,
    gateway_url: str | None,
    provider_token: str | None,
    wifi_ssid: str | None,
    wifi_password: str | None,
    watchdog_s: int,
    mqtt_broker: str | None = None,
    serial_uart: str | None = None,
    mqtt_port: int | None = None,
    mqtt_user: str | None = None,
    mqtt_password: str | None = None,
) -> dict[str, Any]:
    """The board's config.json (docs/device-micropython.md, "Configuration"): only keys it knows."""
    config: dict[str, Any] = {"transport": transport, "slot": slot}
    if gateway_url:
        config["gateway_url"] = gateway_url
    if provider_token:
        config["provider_token"] = provider_token
    if wifi_ssid:
        config["wifi"] = {"ssid": wifi_ssid, "password": wifi_password or ""}
    if transport == "mqtt":
        mqtt: dict[str, Any] = {"broker": mqtt_broker or ""}
        if mqtt_port is not None:
            mqtt["port"] = mqtt_port
        if mqtt_user:  # the board's own broker credential (pump1/config.py: mqtt.user, mqtt.password)
            mqtt["user"] = mqtt_user
            mqtt["password"] = mqtt_password or ""
        config["mqtt"] = mqtt
    if transport == "serial" and serial_uart:
        config["serial"] = {"uart": int(serial_uart) if serial_uart.isdigit() else serial_uart}
    config["watchdog_s"] = watchdog_s
    return config


def shown(config: Mapping[str, Any]) -> str:
    return orjson.dumps(masked(config)).decode()
