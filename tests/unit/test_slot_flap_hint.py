"""The flap summary's hint (gateway/core/slot_flaps.py): two providers when the attaches came from more
than one host; both causes, two providers or one that keeps reconnecting, when they all came from one."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.core.slot_flaps import SlotFlapLog, host_of

INTERVAL_S = 0.1


def summary(caplog: pytest.LogCaptureFixture) -> str:
    [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    return line


async def flap(hosts: list[str]) -> None:
    now = [100.0]
    flaps = SlotFlapLog(lambda: INTERVAL_S, lambda slot: True, lambda: now[0])
    flaps.attached("pump", None, hosts[0], host_of(hosts[0]))
    for remote in hosts:
        flaps.left("pump", "link closed")
        now[0] += 0.01
        flaps.attached("pump", now[0] - 0.01, remote, host_of(remote))
    await asyncio.sleep(INTERVAL_S * 1.5)


async def test_one_host_reconnecting_is_not_blamed_on_two_providers_alone(caplog: pytest.LogCaptureFixture) -> None:
    await flap(["10.0.0.7:4001", "10.0.0.7:4002", "10.0.0.7:4003", "10.0.0.7:4004"])
    assert summary(caplog).endswith(
        "; two providers on one slot push each other off, or one provider keeps reconnecting (docs/operations.md, Logs)"
    )


async def test_attaches_from_two_hosts_are_two_providers(caplog: pytest.LogCaptureFixture) -> None:
    await flap(["10.0.0.7:4001", "10.0.0.8:4002", "10.0.0.7:4003", "10.0.0.8:4004"])
    assert summary(caplog).endswith("; two providers on one slot push each other off (docs/operations.md, Logs)")


async def test_a_slot_flapping_over_mqtt_points_to_the_mqtt_troubleshooting(caplog: pytest.LogCaptureFixture) -> None:
    # Two boards with one client id push each other off at the broker: the MQTT page says what to do.
    await flap(["broker pumps/pump over mqtt"] * 4)
    assert summary(caplog).endswith("(docs/device-mqtt.md, Troubleshooting)")


async def test_a_serial_slot_flapping_is_not_sent_to_the_mqtt_page(caplog: pytest.LogCaptureFixture) -> None:
    await flap(["/dev/ttyUSB0 over serial"] * 4)
    assert summary(caplog).endswith("keeps reconnecting (docs/operations.md, Logs)")
