"""A broker connection opened while more than 1,023 descriptors are in use works (real mosquitto).

With the descriptor limit raised at start (gateway/listener.py) and a thousand boards connected, the
next socket the gateway opens has a number above FD_SETSIZE (1024), which select() cannot watch;
paho's network loop waits with poll() instead (gateway/southbound/mqtt/paho_select.py).
"""

from __future__ import annotations

import gc
import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager

from tests.conftest import GatewayFactory, wait_for
from tests.support.mosquitto import Mosquitto
from tests.support.southbound import first_mqtt_broker

QUICK = {"reconnect_initial_s": 0.05, "reconnect_max_s": 0.3, "connect_timeout_s": 3}


@contextmanager
def descriptors_in_use_up_to(highest: int) -> Iterator[None]:
    """Hold open descriptors until the next one the process opens is above `highest`."""
    # A socket an earlier test left to the garbage collector would be closed meanwhile, freeing a low
    # number for the gateway's next socket: collect it before the low numbers are taken.
    gc.collect()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard == resource.RLIM_INFINITY or hard > highest + 64, f"hard descriptor limit {hard} is too low"
    if soft != resource.RLIM_INFINITY and soft <= highest + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    held: list[int] = []
    try:
        while not held or held[-1] < highest:
            held.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for descriptor in held:
            os.close(descriptor)


async def test_the_broker_connection_works_on_a_descriptor_above_1023(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    with descriptors_in_use_up_to(1100):
        gateway = await gateway_factory(mqtt={"brokers": [{"url": mosquitto.url, "check_anonymous": False, **QUICK}]})
        broker = first_mqtt_broker(gateway)
        # Three SUBACKs: paho's loop read them from its socket, numbered above 1023.
        await wait_for(lambda: len(broker.subscribed) == 3, 10, "the gateway's subscriptions")
        sock = broker.client._client.socket() if broker.client._client is not None else None
        assert sock is not None and sock.fileno() > 1023
