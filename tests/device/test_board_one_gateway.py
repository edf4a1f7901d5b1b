"""A board knows one gateway (docs/device-micropython.md, `gateway_url`): a list of URLs or a URL
without its scheme is refused at boot with a config_error naming the key and the expected form,
instead of a board that boots and then fails every dial with a cryptic error. While that one gateway
is away, the board's log keeps saying so."""

from __future__ import annotations

import itertools

import pytest

from bench.ports import free_port
from tests.device.conftest import DeviceFactory


@pytest.mark.parametrize(
    "gateway_url",
    [
        "ws://127.0.0.1:42901,ws://127.0.0.1:42902",  # two gateways, as a user might try for a spare
        "127.0.0.1:42901",  # no scheme
        "ws://127.0.0.1:70000",  # no such port
        "ws://:3000",  # no host
    ],
)
async def test_a_gateway_url_that_is_not_one_url_is_a_config_error(devices: DeviceFactory, gateway_url: str) -> None:
    device = await devices(gateway_url)
    error = await device.wait_event("config_error")
    assert error["error"] == (
        f"gateway_url must be one gateway's URL, ws://HOST[:PORT][/PATH] or wss://..., not '{gateway_url}'"
    )
    assert await device.wait_exit() == 1
    assert not device.named("ready") and not device.named("link_down")


async def test_a_long_outage_keeps_a_link_down_line_coming_every_two_longest_back_offs(
    devices: DeviceFactory,
) -> None:
    # Nothing listens: every dial fails at once. Past the third failure in a row the board logs one
    # link_down line per two longest back-offs (60 s with the defaults; 0.6 s here), whose
    # failed_dials shows the dials it passed over, so the board never looks as if it gave up.
    device = await devices(f"ws://127.0.0.1:{free_port()}", backoff_min_s=0.02, backoff_max_s=0.3)
    await device.wait_event("link_down", count=6, timeout=20)
    down = device.named("link_down")
    assert [event["failed_dials"] for event in down[:3]] == [0, 1, 2]
    later = down[3:]
    gaps = [after["t"] - before["t"] for before, after in itertools.pairwise(later)]
    assert all(0.55 <= gap <= 1.5 for gap in gaps), gaps  # at least once per 0.6 s and one wait
    skipped = [after["failed_dials"] - before["failed_dials"] for before, after in itertools.pairwise(later)]
    assert all(dials >= 2 for dials in skipped), skipped  # waits of 0.15 to 0.3 s: 2 or more dials a line
