"""The sd_notify side of gateway/service: the notifier, the watchdog interval and task, the readiness wait
and STATUS=, each against a real AF_UNIX datagram socket standing in for systemd's."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass

import pytest

from gateway.config import SystemdConfig
from gateway.service import Notifier, SystemdService, watchdog_interval
from gateway.service.notify import MAX_STATUS_CHARS, socket_address
from gateway.service.readiness import wait_settled
from gateway.service.status import SlotStatus
from gateway.service.watchdog import Watchdog
from tests.support.systemd import NotifySocket, parse_notify


def hold_the_loop(seconds: float) -> None:
    """Block the thread that runs the event loop, as a stuck handler would."""
    time.sleep(seconds)


@dataclass
class Upstream:
    state: str


def test_the_socket_address_is_a_path_or_an_abstract_name() -> None:
    assert socket_address("/run/systemd/notify") == "/run/systemd/notify"
    assert socket_address("@/org/freedesktop/systemd1/notify/1") == "\0/org/freedesktop/systemd1/notify/1"
    assert socket_address("@") is None
    assert socket_address("vsock:2:1234") is None
    assert socket_address("") is None


def test_without_notify_socket_nothing_is_sent() -> None:
    notifier = Notifier.from_environ({})
    assert not notifier.enabled
    assert notifier.ready("0 slots connected") is False
    assert notifier.watchdog() is False
    assert notifier.sent == 0


async def test_each_message_is_one_datagram_of_key_value_lines() -> None:
    with NotifySocket() as systemd:
        notifier = Notifier.from_environ({"NOTIFY_SOCKET": systemd.path})
        assert notifier.enabled
        assert notifier.ready("3 slots\nconnected")
        assert await systemd.next() == {"READY": "1", "STATUS": "3 slots connected"}  # one line, always
        before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        notifier.reloading()
        reloading = await systemd.next()
        assert reloading["RELOADING"] == "1"
        assert before <= int(reloading["MONOTONIC_USEC"]) <= time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        notifier.stopping()
        assert (await systemd.next())["STOPPING"] == "1"
        notifier.watchdog()
        assert await systemd.next() == {"WATCHDOG": "1"}
        notifier.status("x" * 1000)
        assert len((await systemd.next())["STATUS"]) == MAX_STATUS_CHARS
        notifier.close()


async def test_an_abstract_socket_name_is_reached() -> None:
    name = f"mcpgw-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as systemd:
        systemd.bind("\0" + name)
        systemd.settimeout(10)
        notifier = Notifier(f"@{name}")
        assert notifier.watchdog()
        assert parse_notify(systemd.recv(4096)) == {"WATCHDOG": "1"}
        notifier.close()


def test_a_failed_send_is_logged_once_and_never_raises(caplog: pytest.LogCaptureFixture, tmp_path: object) -> None:
    notifier = Notifier("/nonexistent/mcp-gateway/notify")
    with caplog.at_level(logging.WARNING, logger="gateway.service"):
        assert notifier.ready() is False
        assert notifier.watchdog() is False
    assert notifier.failures == 2
    assert [record.getMessage() for record in caplog.records if "cannot notify systemd" in record.getMessage()] == [
        "cannot notify systemd at /nonexistent/mcp-gateway/notify: [Errno 2] No such file or directory "
        "(further failures are not logged)"
    ]


def test_the_watchdog_interval_is_half_the_timeout_for_this_process_only() -> None:
    assert watchdog_interval({"WATCHDOG_USEC": "400000"}) == 0.2
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}) == 15.0
    assert watchdog_interval({"WATCHDOG_USEC": "400000", "WATCHDOG_PID": str(os.getpid() + 1)}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "400000", "WATCHDOG_PID": "x"}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "0"}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "soon"}) is None
    assert watchdog_interval({}) is None


async def test_a_blocked_event_loop_sends_no_watchdog() -> None:
    with NotifySocket() as systemd:
        notifier = Notifier(systemd.path)
        watchdog = Watchdog(notifier, 0.05)
        watchdog.start()
        try:
            await systemd.until(lambda message: message.get("WATCHDOG") == "1")
            systemd.drain()
            hold_the_loop(0.5)  # ten intervals with the loop held: a ping from a thread would show here
            assert systemd.drain() == []
            await systemd.until(lambda message: message.get("WATCHDOG") == "1")  # the loop turns: pings again
        finally:
            await watchdog.stop()
            notifier.close()


async def test_readiness_waits_for_first_attempts_and_no_longer_than_the_bound() -> None:
    stdio, remote, serial = Upstream("starting"), Upstream("connecting"), Upstream("open")
    upstreams = {"stdio a": stdio, "remote b": remote, "serial port /dev/ttyUSB0": serial}
    waiting = asyncio.create_task(wait_settled(upstreams, wait_s=30))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    stdio.state, remote.state = "ready", "unreachable"  # one came up, one failed its first attempt
    assert await waiting == []
    # One that never settles keeps READY=1 back no longer than the wait.
    assert await wait_settled({"MQTT broker mqtt://x:1883": Upstream("connecting")}, wait_s=0.1) == [
        "MQTT broker mqtt://x:1883"
    ]
    assert await wait_settled({}, wait_s=0) == []


async def test_status_follows_the_connected_slots_at_most_once_per_interval() -> None:
    with NotifySocket() as systemd:
        notifier = Notifier(systemd.path)
        connected = [0]
        status = SlotStatus(notifier, lambda: connected[0], interval_s=3600)
        connected[0] = 2
        status.changed("pump-1")
        assert await systemd.next() == {"STATUS": "2 slots connected"}
        connected[0] = 1
        status.changed("pump-2")
        status.changed("pump-3")
        await asyncio.sleep(0.05)
        assert systemd.drain() == []  # due an hour after the last one, as one message
        status.close()
        notifier.close()


async def test_the_service_announces_ready_reloads_and_stops() -> None:
    with NotifySocket() as systemd:
        notifier = Notifier(systemd.path)
        service = SystemdService(notifier, SystemdConfig(ready_wait_s=5), lambda: 1, environ={})
        assert service.watchdog is None  # no WATCHDOG_USEC: no watchdog
        assert await service.announce_ready({"remote a": Upstream("connected")}) == []
        assert await systemd.next() == {"READY": "1", "STATUS": "1 slot connected"}
        service.notifier.reloading()
        assert (await systemd.next())["RELOADING"] == "1"
        service.reloaded()
        assert await systemd.next() == {"READY": "1", "STATUS": "1 slot connected"}
        service.stopping()
        assert await systemd.next() == {"STOPPING": "1", "STATUS": "stopping"}
        await service.close()
