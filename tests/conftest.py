"""Shared fixtures: a real gateway on a free loopback port, real SDK providers and clients."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.app import GatewayServer
from gateway.config import GatewayConfig
from gateway.publish import MultiplexedPublisher, Publisher
from gateway.publish.sdk_bridge import SdkServer
from tests.device.mqtt_harness import BrokerPeer
from tests.support.mosquitto import Mosquitto
from tests.support.southbound import Boards


async def wait_for(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    """Poll until `predicate()` holds; fail the test (never hang) when it does not within `timeout`."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


GatewayFactory = Callable[..., Awaitable[GatewayServer]]


@pytest.fixture
def root() -> None:
    """A test of what only root can do (give files to another user): skipped for a developer's own
    account, but a failure in CI (`.ci/run` sets CI and runs as root), where skipping would hide it."""
    if os.geteuid() == 0:
        return
    if os.environ.get("CI"):
        pytest.fail("this test needs root, and CI runs as root: run .ci/run as root")
    pytest.skip("only root can give a file to another user")


@pytest.fixture(autouse=True)
def _state_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's gateway state (the device registry, a default audit trail) in its own folder, never
    in the home directory: what systemd's StateDirectory= gives the appliance's gateway."""
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))


@pytest.fixture
async def gateway_factory() -> AsyncIterator[GatewayFactory]:
    """Start gateways with config overrides, e.g. `await gateway_factory(providers={"takeover": "reject"})`."""
    servers: list[GatewayServer] = []

    async def make(**overrides: Any) -> GatewayServer:
        config = GatewayConfig.model_validate({"port": 0, **overrides})
        server = GatewayServer(config)
        await server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        await server.stop()


@pytest.fixture
async def gateway(gateway_factory: GatewayFactory) -> GatewayServer:
    return await gateway_factory()


class Publishers:
    """Runs publishers as background tasks and stops them at the end of the test."""

    def __init__(self) -> None:
        self.running: list[tuple[Publisher | MultiplexedPublisher, asyncio.Task[None]]] = []

    async def start(
        self,
        server: GatewayServer,
        slot: str,
        provider: SdkServer,
        *,
        wait_ready: bool = True,
        **options: Any,
    ) -> Publisher:
        publisher = Publisher(provider, server.url, slot, **options)
        self.running.append((publisher, asyncio.create_task(publisher.run())))
        if wait_ready:
            await wait_ready_slot(server, slot)
        return publisher

    async def start_multiplexed(
        self, server: GatewayServer, providers: dict[str, SdkServer], *, wait_ready: bool = True, **options: Any
    ) -> MultiplexedPublisher:
        publisher = MultiplexedPublisher(providers, server.url, **options)
        self.running.append((publisher, asyncio.create_task(publisher.run())))
        if wait_ready:
            for slot in providers:
                await wait_ready_slot(server, slot)
        return publisher

    async def stop_all(self) -> None:
        for publisher, task in self.running:
            await publisher.stop()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, 5)


async def wait_ready_slot(server: GatewayServer, slot: str, timeout: float = 5.0) -> None:
    def ready() -> bool:
        entry = server.gateway.registry.slots.get(slot)
        return entry is not None and entry.live is not None and entry.live.ready

    await wait_for(ready, timeout, f"slot {slot} to be ready")


@pytest.fixture
async def publishers() -> AsyncIterator[Publishers]:
    helper = Publishers()
    yield helper
    await helper.stop_all()


@pytest.fixture
async def boards() -> AsyncIterator[Boards]:
    """Scripted boards of the wire protocol (tests/support/southbound.py), closed at the end of the test."""
    helper = Boards()
    yield helper
    await helper.aclose()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    """A plain HTTP client session for the test."""
    async with aiohttp.ClientSession() as session:
        yield session


MosquittoFactory = Callable[..., Awaitable[Mosquitto]]


@pytest.fixture
async def mosquitto_factory(tmp_path: Any) -> AsyncIterator[MosquittoFactory]:
    """Start real mosquitto brokers on free loopback ports: `await mosquitto_factory(users=..., acl=...)`
    (tests/support/mosquitto.py); every one is stopped at the end of the test."""
    brokers: list[Mosquitto] = []

    async def make(**options: Any) -> Mosquitto:
        broker = Mosquitto(tmp_path / f"mosquitto-{len(brokers)}", **options)
        brokers.append(broker)
        await broker.start()
        return broker

    yield make
    for broker in brokers:
        await broker.stop()


@pytest.fixture
async def mosquitto(mosquitto_factory: MosquittoFactory) -> Mosquitto:
    """An anonymous mosquitto on a free loopback port."""
    return await mosquitto_factory()


@pytest.fixture
async def peer(mosquitto: Mosquitto) -> AsyncIterator[BrokerPeer]:
    """The gateway's stand-in on `mosquitto` (tests/device/mqtt_harness.py), subscribed before any board
    connects."""
    stand_in = BrokerPeer(mosquitto.port)
    await stand_in.start()
    yield stand_in
    await stand_in.stop()
