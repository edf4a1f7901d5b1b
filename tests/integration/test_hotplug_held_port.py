"""A hot-plugged serial port released for a flash stays released when its board re-enumerates.

A native-USB board (ESP32-S3, C3, C6) leaves USB and comes back as it resets into its boot loader and
after the flash: udev reports the node removed and added again, maybe under another name. The port
stays let go of (its lock free for the flash) until broker_serial_resume or `[serial] max_hold_s`
from the release. A real gateway, real pseudo-terminals as the ports, the project's PtyEnumerator as
udev, and a real MCP client calling `_broker`.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.app import GatewayServer
from gateway.config import GatewayConfig
from gateway.core.broker.status import serial_status
from gateway.southbound.serial.hotplug import UsbPort
from tests.conftest import wait_for
from tests.integration.test_serial_boards import FAST_RETRY, broker_call, ptys  # noqa: F401 (fixture)
from tests.support.serial_ports import PtyEnumerator, PtyPair

BOARD = {"vid_pid": "303a:1001", "serial_number": "F4:12:FA:00:00:01"}


def ports(server: GatewayServer) -> dict[str, dict[str, Any]]:
    return {port["path"]: port for port in serial_status(server.gateway)["ports"]}


def state(server: GatewayServer, path: str) -> str | None:
    port = ports(server).get(path)
    return None if port is None else str(port["state"])


def locked(path: str) -> bool:
    """Whether another open file holds the tty's exclusive lock, as the flash's open would find it."""
    fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@contextlib.asynccontextmanager
async def hotplug_gateway(max_hold_s: float = 900) -> AsyncIterator[tuple[GatewayServer, PtyEnumerator]]:
    enumerator = PtyEnumerator()
    config = GatewayConfig.model_validate(
        {"port": 0, "serial": {"hotplug": {"enabled": True}, "max_hold_s": max_hold_s, **FAST_RETRY}}
    )
    server = GatewayServer(config, serial_enumerator=enumerator)
    await server.start()
    try:
        yield server, enumerator
    finally:
        await server.stop()


async def plugged_and_open(server: GatewayServer, enumerator: PtyEnumerator, cable: PtyPair) -> None:
    enumerator.plug(cable, **BOARD)
    await wait_for(lambda: state(server, cable.path) == "open", what="the hot-plugged port to open")
    assert locked(cable.path)


async def test_a_released_port_that_re_enumerates_stays_held_until_max_hold_s_from_the_release(
    ptys: Any,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "gateway.southbound.serial")
    async with hotplug_gateway(max_hold_s=2.0) as (server, enumerator):
        cable = ptys()
        await plugged_and_open(server, enumerator, cable)
        released = await broker_call(server, "broker_serial_release", {"port": cable.path})
        released_at = time.monotonic()
        assert (released["state"], released["closed"]) == ("held", True)
        assert not locked(cable.path)

        # The board resets into its boot loader: udev removes the node and adds it again.
        enumerator.unplug(cable)
        await wait_for(lambda: cable.path not in ports(server), what="the port to go")
        enumerator.plug(cable, **BOARD)
        await wait_for(lambda: state(server, cable.path) == "held", what="the port back, held")
        assert not locked(cable.path), "the gateway took the port the flash is writing to"
        back = ports(server)[cable.path]
        assert back["held_since"] == released["held_since"]  # the hold's time runs from the release
        assert back["given_back_in_s"] <= 2.0 - (time.monotonic() - released_at) + 0.05
        assert serial_status(server.gateway)["hotplug"]["attached"] == 2

        # No resume: the gateway takes the current port back once max_hold_s has passed since the release.
        await wait_for(lambda: state(server, cable.path) == "open", timeout=10, what="the port taken back")
        assert time.monotonic() - released_at >= 2.0 - 0.05
        assert locked(cable.path)
        assert any("taken back after serial.max_hold_s" in record.getMessage() for record in caplog.records)


async def test_a_released_port_back_under_another_name_stays_held_and_resumes_by_its_old_name(
    ptys: Any,  # noqa: F811
) -> None:
    async with hotplug_gateway() as (server, enumerator):
        first = ptys()
        await plugged_and_open(server, enumerator, first)
        await broker_call(server, "broker_serial_release", {"port": first.path})
        # The node is still open (by the flash) as the board comes back: the kernel gives it a new name.
        second = ptys()
        enumerator.unplug(first)
        enumerator.plug(second, **BOARD)
        await wait_for(lambda: state(server, second.path) == "held", what="the board back under a new name, held")
        assert first.path not in ports(server)
        assert not locked(second.path)

        # The flash is over and gives back the port it was given, by the name it asked for.
        resumed = await broker_call(server, "broker_serial_resume", {"port": first.path})
        assert (resumed["port"], resumed["state"]) == (second.path, "open")
        assert locked(second.path)


async def test_a_port_resumed_while_unplugged_opens_when_it_comes_back(
    ptys: Any,  # noqa: F811
) -> None:
    async with hotplug_gateway() as (server, enumerator):
        cable = ptys()
        await plugged_and_open(server, enumerator, cable)
        await broker_call(server, "broker_serial_release", {"port": cable.path})
        enumerator.unplug(cable)
        await wait_for(lambda: cable.path not in ports(server), what="the port to go")

        # The flash ends while the board is still away re-enumerating: the hold ends with it.
        resumed = await broker_call(server, "broker_serial_resume", {"port": cable.path})
        assert resumed == {"port": cable.path, "state": "unplugged", "closed": True}
        enumerator.plug(cable, **BOARD)
        await wait_for(lambda: state(server, cable.path) == "open", what="the port back and open")
        assert locked(cable.path)

        # A different board on that node later is opened as usual: nothing of the hold is left.
        released = await broker_call(server, "broker_serial_release", {"port": cable.path})
        assert released["already_held"] is False


async def test_a_node_that_names_another_board_in_one_batch_of_events_serves_the_new_board(
    ptys: Any,  # noqa: F811
) -> None:
    async with hotplug_gateway() as (server, enumerator):
        cable = ptys()
        await plugged_and_open(server, enumerator, cable)
        # One poll of the port list (or one read of udev's queue) finds another board on the same node:
        # its detach and its attach come together, before the old port's stop has run.
        other = UsbPort(cable.path, 0x303A, 0x1001, "F4:12:FA:00:00:02", "1-1:1.0", "test board")
        enumerator.update([other])
        await wait_for(
            lambda: (ports(server).get(cable.path) or {}).get("usb", {}).get("serial_number") == other.serial_number,
            what="the new board's port served",
        )
        await wait_for(lambda: state(server, cable.path) == "open", what="the new board's port open")
        assert serial_status(server.gateway)["hotplug"]["attached"] == 2
