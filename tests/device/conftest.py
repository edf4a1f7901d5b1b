"""Fixtures for device tests: pump-1 on the MicroPython Unix port, a scripted gateway, a relay."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.device.harness import SCHEMA_FILE, Device, FakeGateway, LinkProxy, find_tool, start_device
from tests.device.umqtt_package import umqtt_library

DeviceFactory = Callable[..., Awaitable[Device]]


@pytest.fixture(scope="session")
def micropython() -> str:
    return find_tool("micropython")


@pytest.fixture(scope="session")
def mpy_cross() -> str:
    return find_tool("mpy-cross")


@pytest.fixture(scope="session")
def umqtt(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """umqtt.simple from PyPI, kept in pytest's cache between runs (in a temporary folder without one)."""
    cache = getattr(request.config, "cache", None)
    folder = cache.mkdir("umqtt-simple") if cache is not None else tmp_path_factory.mktemp("umqtt-simple")
    return umqtt_library(folder)


@pytest.fixture
async def devices(micropython: str, tmp_path: Path) -> AsyncIterator[DeviceFactory]:
    """Start pump-1 devices: `await devices(gateway_url, deadman_s=1, ...)`; all are killed at the end."""
    started: list[Device] = []

    async def start(gateway_url: str, **overrides: Any) -> Device:
        config = {
            "gateway_url": gateway_url,
            "schema_path": str(SCHEMA_FILE),
            "backoff_min_s": 0.1,
            "backoff_max_s": 0.5,
            "connect_timeout_s": 2,
            **overrides,
        }
        device = await start_device(micropython, tmp_path / f"device-{len(started)}.json", config)
        started.append(device)
        return device

    yield start
    for device in started:
        await device.stop()


@pytest.fixture
async def fake_gateway() -> AsyncIterator[FakeGateway]:
    gateway = FakeGateway()
    await gateway.start()
    yield gateway
    await gateway.stop()


@pytest.fixture
async def link_proxy() -> AsyncIterator[Callable[[int], Awaitable[LinkProxy]]]:
    proxies: list[LinkProxy] = []

    async def make(target_port: int) -> LinkProxy:
        proxy = LinkProxy(target_port)
        await proxy.start()
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        await proxy.stop()
