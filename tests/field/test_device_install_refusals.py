"""`device install` refuses, before it touches the board, every value the board or the gateway would refuse.

The board: the MicroPython Unix port behind a PTY (tests/field/test_device_install.py's `Board`). A
refused install sends it nothing: no Ctrl-C (its console logs none), no file, no registry. Then the
board's own check, the real `micropython` booting main.py with each refused config.json, stops with the
config_error whose text the install quoted: the two agree because the install runs that very check
(gateway/provision/config_check.py). What the board learns only later is the gateway's to refuse: a
gateway_url it cannot dial (it boots, then every dial fails), a slot name the gateway refuses (the
gateway's own rules, gateway/core/names.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.devices.registry import default_registry_path
from gateway.provision.board import board_config
from gateway.provision.config_check import board_refusal, gateway_url_problem
from tests.device.harness import find_tool, start_device
from tests.field.test_device_install import Board, board, cli_parser, run_cli, state_dir

__all__ = ["board", "state_dir"]  # fixtures, used by name
URL = "ws://192.168.1.10:3000"
LONG_SLOT = "p" * 65


def refusals(passwd: Path) -> list[tuple[list[str], str]]:
    """Options of `device install` (after PORT) and the one line each is refused with."""
    mqtt = ["--transport", "mqtt", "--mqtt-broker", "127.0.0.1", "--mosquitto-passwd", str(passwd)]
    return [
        (
            ["--slot", "_bad", "--gateway-url", URL],
            """--slot '_bad': Provider "_bad" is reserved: names starting with "_" belong to the gateway """
            "(the gateway refuses a board by that name)",
        ),
        (
            ["--slot", ".", "--gateway-url", URL],
            """--slot '.': Slot name "." is a path step in URLs; pick another name, e.g. pump-1 """
            "(the gateway refuses a board by that name)",
        ),
        (
            ["--slot", LONG_SLOT, "--gateway-url", URL],
            f"--slot '{LONG_SLOT}': Slot name is 65 bytes; the limit is 64 bytes of UTF-8 "
            "(the gateway refuses a board by that name)",
        ),
        (
            ["--slot", "pump-7", "--gateway-url", "192.168.1.10:3000"],
            "--gateway-url '192.168.1.10:3000' must start with ws:// (the board dials the gateway's WebSocket), "
            "e.g. --gateway-url ws://192.168.1.10:3000",
        ),
        (
            ["--slot", "pump-7", "--gateway-url", "ws://192.168.1.10:99999"],
            "--gateway-url 'ws://192.168.1.10:99999' has no valid port (1-65535), "
            "e.g. --gateway-url ws://192.168.1.10:3000",
        ),
        (
            ["--slot", "pump-7", "--gateway-url", "ws://operator:S3cretPass@192.168.1.10:3000"],
            "--gateway-url holds a user part (user@ or user:password@, not shown): the board refuses one at boot "
            "and authenticates with its provider token instead, e.g. --gateway-url ws://192.168.1.10:3000",
        ),
        (
            ["--slot", "pump-7", "--gateway-url", "wss://gateway.plant.lan:3000"],
            "--gateway-url 'wss://gateway.plant.lan:3000': a board dials wss:// only with the gateway's CA "
            "(ca_file in its config.json), which device install does not write: the board would stop at boot with "
            "a config_error. Install with ws://, or put ca_file and the CA on the board by hand "
            '(docs/device-micropython.md, "TLS and a provider secret")',
        ),
        (
            ["--slot", "$pump", *mqtt],
            "--slot '$pump': the board would refuse it at boot "
            "(config_error: slot must not start with $ or have an empty topic level)",
        ),
    ]


async def test_a_refused_install_leaves_the_board_and_the_registry_untouched(
    board: Board, state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    passwd = tmp_path / "passwd"
    passwd.write_text("")
    for options, said in refusals(passwd):
        for dry_run in ([], ["--dry-run"]):
            argv = ["device", "install", board.port, *options, "--pace-ms", "0", *dry_run]
            code, out, err = await run_cli(capsys, *argv)
            assert (code, out, err) == (2, "", f"mcp-gateway: {said}\n"), argv  # usage errors (docs/cli.md)
    # The tester's command line: --watchdog-s -5 is a usage error, before any of it runs.
    with pytest.raises(SystemExit) as caught:
        cli_parser().parse_args(
            ["device", "install", board.port, "--slot", "_bad", "--gateway-url", "192.168.1.10:3000",
             "--watchdog-s", "-5", "--pace-ms", "0"]
        )  # fmt: skip
    assert caught.value.code == 2
    assert "argument --watchdog-s: expected a whole number of 0 or more (0: off), got '-5'" in capsys.readouterr().err
    assert board.events == ["ready"]  # no Ctrl-C, no reset: the port was never written to
    assert list(board.root.iterdir()) == []
    assert not default_registry_path().exists()
    assert passwd.read_text() == ""


def config(**changes: Any) -> dict[str, Any]:
    """The config.json `device install` writes, with `changes` to its options."""
    options: dict[str, Any] = {
        "slot": "pump-7",
        "transport": "websocket",
        "gateway_url": "ws://127.0.0.1:1",
        "provider_token": "the-board-secret",
        "wifi_ssid": None,
        "wifi_password": None,
        "watchdog_s": 10,
    }
    return board_config(**{**options, **changes})


BOARD_REFUSES = [
    # (config.json, the board's config_error, the install's refusal of it: None where gateway_url_problem says it)
    (
        config(slot="_bad"),
        "slot must be a name that does not start with _",
        "--slot '_bad': the board would refuse it at boot (config_error: slot must be a name that does not start "
        "with _)",
    ),
    (
        config(slot="$pump", transport="mqtt", gateway_url=None, provider_token=None, mqtt_broker="127.0.0.1"),
        "slot must not start with $ or have an empty topic level",
        "--slot '$pump': the board would refuse it at boot (config_error: slot must not start with $ or have an "
        "empty topic level)",
    ),
    (
        config(transport="serial", gateway_url=None, serial_uart="3"),
        'serial.uart must be 1 or 2 (a UART on its own pins) or "console"',
        "--serial-uart 3: the board would refuse it at boot (config_error: serial.uart must be 1 or 2 (a UART on "
        'its own pins) or "console")',
    ),
    (
        config(watchdog_s=-5),
        "watchdog_s must be 0 (no watchdog) or more",
        "--watchdog-s -5: the board would refuse it at boot (config_error: watchdog_s must be 0 (no watchdog) or more)",
    ),
    (config(gateway_url="wss://127.0.0.1:1"), "a wss:// gateway needs ca_file (or tls_insecure: true in a lab)", None),
    (
        config(gateway_url="ws://operator:S3cretPass@127.0.0.1:1"),
        "gateway_url must be one gateway's URL, ws://HOST[:PORT][/PATH] or wss://..., not "
        "'a URL with a user part (not shown)'",
        None,
    ),
]


@pytest.mark.parametrize(
    ("refused", "board_error", "install_error"), BOARD_REFUSES, ids=["_bad", "$pump", "uart", "watchdog", "wss", "user"]
)
async def test_the_board_refuses_at_boot_what_the_install_refuses(
    tmp_path: Path, refused: dict[str, Any], board_error: str, install_error: str | None
) -> None:
    device = await start_device(find_tool("micropython"), tmp_path / "config.json", refused)
    try:
        event = await device.wait_event("config_error")
        assert event["error"] == board_error
        assert await device.wait_exit() == 1  # the app never started
    finally:
        await device.stop()
    if install_error is None:
        assert board_refusal(refused) is None  # the board's config check takes it; its boot does not
        assert gateway_url_problem(refused["gateway_url"]) is not None
    else:
        assert board_refusal(refused) == install_error


async def test_a_config_the_install_accepts_boots_on_the_board(tmp_path: Path) -> None:
    accepted = config(watchdog_s=0)
    assert board_refusal(accepted) is None
    assert gateway_url_problem(accepted["gateway_url"]) is None
    device = await start_device(find_tool("micropython"), tmp_path / "config.json", accepted)
    try:
        ready = await device.wait_event("ready")
        assert ready["slot"] == "pump-7"
        assert not device.named("config_error")
    finally:
        await device.stop()
