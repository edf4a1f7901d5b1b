"""[serial] configuration, `run --serial PATH[@BAUD]`, and the choice of hot-plug enumerator."""

from __future__ import annotations

import asyncio
import tomllib
from pathlib import Path

import pytest

from gateway.cli import _config_flags, build_parser
from gateway.config import DEFAULT_HOTPLUG_VID_PID, ConfigError, GatewayConfig, SerialHotplugConfig, load_config
from gateway.southbound.serial import hotplug
from gateway.southbound.serial.hotplug import (
    DiffingEnumerator,
    EnumeratorUnavailable,
    PollingEnumerator,
    PortEvent,
    UdevEnumerator,
    UsbPort,
    choose_enumerator,
    list_usb_ports,
    udev_running,
)


def test_defaults_serve_no_port_and_hot_plug_is_off() -> None:
    serial = GatewayConfig().serial
    assert serial.ports == []
    assert serial.hotplug.enabled is False
    assert serial.hotplug.vid_pid == list(DEFAULT_HOTPLUG_VID_PID)
    assert serial.hotplug.vid_pid == ["303a:1001", "10c4:ea60", "1a86:7523", "1a86:55d4", "0403:6001"]


def test_a_port_entry_and_its_defaults() -> None:
    config = GatewayConfig.model_validate({"serial": {"ports": [{"path": "/dev/ttyUSB0", "slots": ["pump-*"]}]}})
    port = config.serial.ports[0]
    assert (port.path, port.baud, port.frame_cap, port.slots, port.debug_json_lines) == (
        "/dev/ttyUSB0",
        115_200,
        8192,
        ["pump-*"],
        False,
    )


@pytest.mark.parametrize(
    ("serial", "message"),
    [
        ({"ports": [{"path": "/dev/ttyUSB0"}, {"path": "/dev/ttyUSB0"}]}, "each serial port once"),
        ({"ports": [{"path": "/dev/ttyUSB0", "baud": 0}]}, "serial.ports.0.baud"),
        ({"ports": [{"path": "/dev/ttyUSB0", "frame_cap": 10}]}, "serial.ports.0.frame_cap"),
        ({"ports": [{"path": "/dev/ttyUSB0", "slots": []}]}, "serial.ports.0.slots"),
        ({"ports": [{"path": ""}]}, "serial.ports.0.path"),
        ({"ports": [{"path": "/dev/x", "speed": 9600}]}, "unknown setting 'serial.ports.0.speed'"),
        ({"hotplug": {"vid_pid": ["303a-1001"]}}, "not VID:PID in hex"),
        ({"hotplug": {"backend": "sysfs"}}, "serial.hotplug.backend"),
        ({"retry_initial_s": 5, "retry_max_s": 1}, "retry_max_s must be at least retry_initial_s"),
        ({"backlog_messages": 0}, "serial.backlog_messages"),
        ({"register_request_interval_s": 0}, "serial.register_request_interval_s"),
    ],
)
def test_bad_settings_are_refused_by_name(tmp_path: object, serial: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, environ={}, flags={"serial": serial})


def test_serial_bounds_and_their_defaults() -> None:
    serial = GatewayConfig().serial
    assert (serial.backlog_messages, serial.register_request_interval_s, serial.write_timeout_s) == (64, 1.0, 5.0)
    config = load_config(None, environ={"MCP_GATEWAY_SERIAL__BACKLOG_MESSAGES": "256"})
    assert config.serial.backlog_messages == 256


def test_vid_pid_is_case_insensitive() -> None:
    config = GatewayConfig.model_validate({"serial": {"hotplug": {"vid_pid": ["303A:1001"]}}})
    assert config.serial.hotplug.vid_pid == ["303a:1001"]


def test_environment_turns_hot_plug_on() -> None:
    config = load_config(None, environ={"MCP_GATEWAY_SERIAL__HOTPLUG__ENABLED": "true"})
    assert config.serial.hotplug.enabled is True


@pytest.mark.parametrize(
    ("flag", "entry"),
    [
        ("/dev/ttyUSB0", {"path": "/dev/ttyUSB0"}),
        ("/dev/ttyUSB0@921600", {"path": "/dev/ttyUSB0", "baud": 921600}),
        ("/dev/serial/by-id/usb-Espressif@x@9600", {"path": "/dev/serial/by-id/usb-Espressif@x", "baud": 9600}),
    ],
)
def test_run_serial_flag_adds_ports(flag: str, entry: dict[str, object]) -> None:
    args = build_parser().parse_args(["run", "--serial", flag, "--serial", "/dev/ttyACM0"])
    flags = _config_flags(args)
    assert flags["serial.ports"] == [entry, {"path": "/dev/ttyACM0"}]
    config = load_config(None, environ={}, flags=flags)
    assert [port.path for port in config.serial.ports] == [entry["path"], "/dev/ttyACM0"]


def test_run_serial_flag_adds_to_the_ports_of_the_file(tmp_path: object) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    file = tmp_path / "gateway.toml"
    file.write_text('[[serial.ports]]\npath = "/dev/ttyUSB0"\nslots = ["pump-1"]\n')
    args = build_parser().parse_args(["run", "--config", str(file), "--serial", "/dev/ttyUSB1@9600"])
    config = load_config(str(file), environ={}, flags=_config_flags(args))
    assert [(port.path, port.baud, port.slots) for port in config.serial.ports] == [
        ("/dev/ttyUSB0", 115_200, ["pump-1"]),
        ("/dev/ttyUSB1", 9600, ["*"]),
    ]


def test_run_serial_flag_needs_a_path() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--serial", "@9600"])


@pytest.mark.parametrize("flag", ["/dev/ttyUSB0@9216OO", "/dev/ttyUSB0@abc", "/dev/ttyUSB0@", "/dev/ttyUSB0@-9600"])
def test_run_serial_flag_refuses_a_baud_that_is_not_a_number(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Not the path "/dev/ttyUSB0@9216OO" at the default baud: a port that never opens, and config check said OK.
    for command in ("run", "config"):
        with pytest.raises(SystemExit) as refused:
            build_parser().parse_args([command, *(["check"] if command == "config" else []), "--serial", flag])
        assert refused.value.code == 2
        assert (
            f"argument --serial: expected PATH[@BAUD] with BAUD a whole number, e.g. /dev/ttyUSB0@921600, got {flag!r}"
            in capsys.readouterr().err
        )


def test_one_tty_named_twice_through_a_link_is_refused_naming_both(tmp_path: Path) -> None:
    # A /dev/serial/by-id/... link and the tty it points at: the second entry could never open the port.
    tty = tmp_path / "ttyUSB0"
    tty.touch()
    by_id = tmp_path / "usb-Silicon_Labs_CP2102-if00-port0"
    by_id.symlink_to(tty)
    with pytest.raises(ConfigError) as refused:
        load_config(None, environ={}, flags={"serial": {"ports": [{"path": str(by_id)}, {"path": str(tty)}]}})
    assert str(refused.value) == (
        f"command-line flag for serial: setting 'serial': serial.ports[0] {str(by_id)!r} and "
        f"serial.ports[1] {str(tty)!r} are the same port ({tty}); each serial port once: keep one entry"
    )
    # From the file and a flag alike (run --serial adds to the file's ports).
    file = tmp_path / "gateway.toml"
    file.write_text(f"[[serial.ports]]\npath = {str(by_id)!r}\n")
    args = build_parser().parse_args(["run", "--config", str(file), "--serial", f"{tty}@9600"])
    with pytest.raises(ConfigError, match=r"serial.ports\[0\] .* and serial.ports\[1\] .* are the same port"):
        load_config(str(file), environ={}, flags=_config_flags(args))


def test_ports_that_do_not_exist_yet_are_told_apart_by_their_paths(tmp_path: Path) -> None:
    paths = [str(tmp_path / "ttyUSB0"), str(tmp_path / "ttyUSB1")]
    config = load_config(None, environ={}, flags={"serial": {"ports": [{"path": path} for path in paths]}})
    assert [port.path for port in config.serial.ports] == paths  # as written, not resolved
    twice = [f"{tmp_path}/ttyUSB0", f"{tmp_path}//ttyUSB0/"]  # one path, written two ways
    with pytest.raises(ConfigError, match=r"serial.ports\[0\] .* and serial.ports\[1\] .* are the same port"):
        load_config(None, environ={}, flags={"serial": {"ports": [{"path": path} for path in twice]}})


# -- hot-plug enumerators -----------------------------------------------------------------------


def usb(device: str, vid_pid: str = "303a:1001", serial_number: str = "A") -> UsbPort:
    vid, pid = (int(part, 16) for part in vid_pid.split(":"))
    return UsbPort(device, vid, pid, serial_number)


def test_diffing_reports_attach_detach_and_a_swapped_device() -> None:
    events: list[PortEvent] = []
    enumerator = DiffingEnumerator()
    enumerator.start(events.append)
    enumerator.update([usb("/dev/ttyACM0"), usb("/dev/ttyUSB0", "10c4:ea60", "B")])
    enumerator.update([usb("/dev/ttyACM0")])
    enumerator.update([usb("/dev/ttyACM0", serial_number="C")])  # another board on the same node
    assert [(event.action, event.port.device, event.port.serial_number) for event in events] == [
        ("attach", "/dev/ttyACM0", "A"),
        ("attach", "/dev/ttyUSB0", "B"),
        ("detach", "/dev/ttyUSB0", "B"),
        ("detach", "/dev/ttyACM0", "A"),
        ("attach", "/dev/ttyACM0", "C"),
    ]


def test_stable_id_names_the_board_not_the_node() -> None:
    assert usb("/dev/ttyACM0", serial_number="F4:12").stable_id == "usb:303a:1001:F4:12"
    assert UsbPort("/dev/ttyUSB3", 0x1A86, 0x7523, None, "1-1.4:1.0").stable_id == "usb:1a86:7523:1-1.4:1.0"


async def test_polling_enumerator_reads_the_list_every_interval() -> None:
    listed: list[list[UsbPort]] = [[], [usb("/dev/ttyACM0")], [usb("/dev/ttyACM0")], []]
    events: list[PortEvent] = []
    enumerator = PollingEnumerator(0.01, lambda: listed.pop(0) if len(listed) > 1 else listed[0])
    enumerator.start(events.append)
    for _ in range(200):
        if len(events) >= 2:
            break
        await asyncio.sleep(0.01)
    await enumerator.stop()
    assert [event.action for event in events] == ["attach", "detach"]


def hotplug_on() -> SerialHotplugConfig:
    return GatewayConfig.model_validate({"serial": {"hotplug": {"enabled": True}}}).serial.hotplug


def test_auto_falls_back_to_polling_without_udev_and_udev_refuses_by_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Whether udevd runs is the machine's business (it does not in this CI container): point the check
    # at a path that is missing, then at one that exists, so both answers are tested everywhere.
    monkeypatch.setattr(hotplug, "UDEV_CONTROL", str(tmp_path / "no-udev-control"))
    config = hotplug_on()
    assert udev_running() is False
    assert choose_enumerator(config).name == "poll"
    forced = config.model_copy(update={"backend": "udev"})
    with pytest.raises(EnumeratorUnavailable, match=r"udev is not running here .* use backend = auto or poll"):
        choose_enumerator(forced)
    assert choose_enumerator(config.model_copy(update={"backend": "poll"})).name == "poll"


def test_auto_takes_udev_where_it_runs_and_polls_when_pyudev_cannot_load(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    control = tmp_path / "control"
    control.touch()
    monkeypatch.setattr(hotplug, "UDEV_CONTROL", str(control))
    config = hotplug_on()
    assert choose_enumerator(config).name == "udev"  # pyudev and libudev are installed with the gateway

    def no_libudev() -> None:
        raise ImportError("libudev.so.1: cannot open shared object file")

    monkeypatch.setattr(hotplug, "UdevEnumerator", no_libudev)
    assert choose_enumerator(config).name == "poll"
    with pytest.raises(EnumeratorUnavailable, match=r"pyudev cannot be used \(libudev.so.1: cannot open"):
        choose_enumerator(config.model_copy(update={"backend": "udev"}))


def test_udev_enumerator_reads_the_real_tty_devices_and_keeps_only_usb_ones() -> None:
    """libudev reads sysfs without udevd: every tty of this machine goes through the device parsing."""
    ports = UdevEnumerator().scan()
    assert all(port.vid_pid is not None and port.device.startswith("/dev/") for port in ports)
    assert {port.device for port in ports} == {port.device for port in list_usb_ports()}


def test_the_appliance_configuration_turns_hot_plug_on_with_the_default_devices() -> None:
    """image/mcp-gateway.toml's [serial] section (the whole file loads in tests/unit/test_mdns.py)."""
    text = (Path(__file__).resolve().parents[2] / "image" / "mcp-gateway.toml").read_text(encoding="utf-8")
    serial = GatewayConfig.model_validate({"serial": tomllib.loads(text)["serial"]}).serial
    assert serial.hotplug.enabled is True
    assert serial.hotplug.vid_pid == list(DEFAULT_HOTPLUG_VID_PID)
    assert serial.hotplug.backend == "auto"
    assert serial.ports == []
