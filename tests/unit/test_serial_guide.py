"""broker_guide's serial section, written from the running configuration (no sockets, no port opened)."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.config import GatewayConfig, masked_dump
from gateway.core.broker.guide import render
from gateway.core.broker.guide_text import GuideInput
from gateway.core.broker.status import broker_info, providers_list
from gateway.core.gateway import Gateway
from gateway.policy.limiters import Limiters
from gateway.southbound.serial.hotplug import DiffingEnumerator, HotplugPorts
from gateway.southbound.serial.ports import SerialLines


def publish_page(settings: dict[str, Any]) -> str:
    config = GatewayConfig.model_validate(settings)
    gateway = Gateway(config, Limiters.from_config(config.limits).for_core())
    lines = SerialLines(gateway)  # not started: the ports stay closed, their state idle
    if config.serial.hotplug.enabled:
        enumerator = DiffingEnumerator()
        enumerator.name = "poll"
        HotplugPorts(lines, config.serial.hotplug, enumerator)
    data = GuideInput(broker_info(gateway), providers_list(gateway)["providers"], [], masked_dump(config))
    return render("publish-provider", data)


def section(page: str) -> str:
    start = page.index("## Over a serial line")
    return page[start : page.index("\n## ", start + 1)]


def test_the_serial_section_lists_the_ports_hot_plug_and_what_a_board_sends() -> None:
    page = publish_page(
        {
            "serial": {
                "ports": [{"path": "/dev/serial/by-id/usb-CP2102N-0001", "baud": 921600, "slots": ["pump-*"]}],
                "hotplug": {"enabled": True, "slots": ["valve-*"], "vid_pid": ["303a:1001", "10c4:ea60"]},
            }
        }
    )
    text = section(page)
    assert "| `/dev/serial/by-id/usb-CP2102N-0001` | config | 921600 | idle | `pump-*` | - |" in text
    assert (
        "USB hot-plug is on (events from `poll`): a USB serial device with VID:PID `10c4:ea60`, `303a:1001` is "
        "opened at 115200 baud as it is plugged in, and let go as it is pulled out; a board on it may publish "
        "`valve-*`." in text
    )
    register = {
        "jsonrpc": "2.0",
        "method": "notifications/register",
        "params": {"slot": "pump-1", "aggregate": True, "hello": {"device_id": "a4:cf:12:34:56:78"}},
    }
    assert orjson.dumps(register).decode() in text
    board = {"transport": "serial", "slot": "pump-1", "serial": {"uart": 2, "baud": 921600, "tx": 17, "rx": 16}}
    assert orjson.dumps(board).decode() in text
    assert "Both ends at 921600 baud." in text
    assert "DTR and RTS stay unconnected" in text
    assert '{"jsonrpc":"2.0","method":"broker/register"}' in text
    assert "docs/device-serial.md" in text


def test_without_serial_ports_the_section_says_how_to_add_one() -> None:
    text = section(publish_page({}))
    assert "This gateway serves no serial port." in text
    assert "`mcp-gateway run --serial /dev/ttyUSB0@115200`" in text
    assert "`[serial.hotplug]` `enabled = true`" in text


def test_a_port_that_cannot_open_shows_why_and_hot_plug_off_says_how_to_turn_it_on() -> None:
    gateway_settings = {"serial": {"ports": [{"path": "/dev/ttyUSB7"}]}}
    config = GatewayConfig.model_validate(gateway_settings)
    gateway = Gateway(config, Limiters.from_config(config.limits).for_core())
    lines = SerialLines(gateway)
    port = lines.ports["/dev/ttyUSB7"]
    port.state = "backoff"
    port.last_error = "cannot open: No such file or directory (ENOENT)"
    data = GuideInput(broker_info(gateway), providers_list(gateway)["providers"], [], masked_dump(config))
    text = section(render("publish-provider", data))
    assert (
        "| `/dev/ttyUSB7` | config | 115200 | backoff (cannot open: No such file or directory (ENOENT)) | `*` | - |"
        in text
    )
    assert "USB hot-plug is off (`[serial.hotplug] enabled = true` turns it on)." in text
