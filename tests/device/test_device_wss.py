"""pump-1 on the MicroPython Unix port over wss:// to a real TLS gateway, with a provider secret.

The certificates are made by `mcp-gateway tls self-signed`; the board gets `ca.pem` (PEM, as the
command says to copy it) and checks both the chain and the gateway's name, as on an ESP32.
"""

from __future__ import annotations

import contextlib
import secrets
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.app import GatewayServer
from gateway.cli import main as cli_main
from tests.conftest import GatewayFactory, wait_ready_slot
from tests.device.conftest import DeviceFactory

SLOT = "pump-1"
TOKEN = secrets.token_urlsafe(32)


def self_signed(directory: Path, *names: str) -> Path:
    args = ["tls", "self-signed", "--dir", str(directory)]
    for name in names:
        args += ["--ip", name] if name[0].isdigit() else ["--host", name]
    assert cli_main(args) == 0
    return directory


@pytest.fixture
def tls_dir(tmp_path: Path) -> Path:
    return self_signed(tmp_path / "tls", "localhost", "127.0.0.1")


@pytest.fixture
async def wss_gateway(gateway_factory: GatewayFactory, tls_dir: Path, monkeypatch: pytest.MonkeyPatch) -> GatewayServer:
    monkeypatch.setenv("TEST_PUMP_BOARD_TOKEN", TOKEN)
    return await gateway_factory(
        tls={"cert_file": str(tls_dir / "server.pem"), "key_file": str(tls_dir / "server-key.pem")},
        providers={
            "auth": {
                "mode": "identities",
                "identities": [{"name": "pump-board", "env": "TEST_PUMP_BOARD_TOKEN", "slots": ["pump-*"]}],
            }
        },
    )


@contextlib.asynccontextmanager
async def https_client(url: str, ca_file: Path) -> AsyncIterator[Client]:
    verify = ssl.create_default_context(cafile=str(ca_file))
    async with httpx2.AsyncClient(verify=verify) as http, Client(streamable_http_client(url, http_client=http)) as c:
        yield c


def board_url(gateway: GatewayServer, host: str) -> str:
    return f"wss://{host}:{gateway.port}"


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])  # a DNS name and an IP address in the certificate
async def test_board_serves_a_client_over_wss_with_its_provider_token(
    wss_gateway: GatewayServer, devices: DeviceFactory, tls_dir: Path, host: str
) -> None:
    device = await devices(board_url(wss_gateway, host), ca_file=str(tls_dir / "ca.pem"), provider_token=TOKEN)
    await device.wait_event("link_up", url=f"{board_url(wss_gateway, host)}/provider/{SLOT}")
    await wait_ready_slot(wss_gateway, SLOT, timeout=10)
    async with https_client(f"{wss_gateway.url}/{SLOT}/mcp", tls_dir / "ca.pem") as client:
        result = await client.call_tool("get_status", {})
        assert not result.is_error
        assert isinstance(result.structured_content, dict)
        assert result.structured_content["state"] == "stopped"
        started = await client.call_tool("start", {"speed_rpm": 900})
        assert not started.is_error
    async with https_client(f"{wss_gateway.url}/_broker/mcp", tls_dir / "ca.pem") as broker:
        status: Any = (await broker.call_tool("provider_status", {"name": SLOT})).structured_content
    assert (status["identity"], status["transport"]) == ("pump-board", "websocket")
    assert status["hello"]["device_id"] == "unix-pump-1"
    assert TOKEN not in device.output()


async def test_board_refuses_a_gateway_whose_certificate_another_ca_signed(
    wss_gateway: GatewayServer, devices: DeviceFactory, tmp_path: Path
) -> None:
    stranger = self_signed(tmp_path / "stranger", "localhost", "127.0.0.1")
    device = await devices(board_url(wss_gateway, "localhost"), ca_file=str(stranger / "ca.pem"), provider_token=TOKEN)
    down = await device.wait_event("link_down")
    assert "not correctly signed by the trusted CA" in down["reason"]
    assert not device.named("link_up")
    assert SLOT not in wss_gateway.gateway.registry.slots


async def test_board_refuses_a_certificate_for_another_name(
    gateway_factory: GatewayFactory, devices: DeviceFactory, tmp_path: Path
) -> None:
    """The chain is trusted, but the certificate names gateway.plant.lan, not the address dialled."""
    elsewhere = self_signed(tmp_path / "elsewhere", "gateway.plant.lan")
    gateway = await gateway_factory(
        tls={"cert_file": str(elsewhere / "server.pem"), "key_file": str(elsewhere / "server-key.pem")}
    )
    device = await devices(board_url(gateway, "127.0.0.1"), ca_file=str(elsewhere / "ca.pem"))
    down = await device.wait_event("link_down")
    assert "does not match" in down["reason"]
    assert SLOT not in gateway.gateway.registry.slots


async def test_board_with_a_wrong_token_is_told_401_and_keeps_dialling(
    wss_gateway: GatewayServer, devices: DeviceFactory, tls_dir: Path
) -> None:
    wrong = secrets.token_urlsafe(32)
    device = await devices(board_url(wss_gateway, "localhost"), ca_file=str(tls_dir / "ca.pem"), provider_token=wrong)
    first = await device.wait_event("link_down")
    second = await device.wait_event("link_down", count=2)
    assert "HTTP 401" in second["reason"]
    assert "invalid_provider_token" in second["reason"]
    # Refused at the door: the back-off's maximum (0.5 s here) at once, not its minimum (0.1 s).
    for down in first, second:
        assert down["reason"].startswith("OSError: HTTP 401 from wss://"), down
        assert down.get("refused") is True, down
        assert 0.25 <= down["retry_in_s"] <= 0.5, down
    assert SLOT not in wss_gateway.gateway.registry.slots
    assert wrong not in device.output()


async def test_board_without_a_token_is_told_what_to_send(
    wss_gateway: GatewayServer, devices: DeviceFactory, tls_dir: Path
) -> None:
    device = await devices(board_url(wss_gateway, "localhost"), ca_file=str(tls_dir / "ca.pem"))
    down = await device.wait_event("link_down")
    assert "HTTP 401" in down["reason"]
    assert "X-Provider-Token" in down["reason"]


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({}, "a wss:// gateway needs ca_file (or tls_insecure: true in a lab)"),
        (
            {"ca_file": "ca.pem", "provider_token": "two\nlines"},
            "provider_token must be a non-empty string on one line",
        ),
        ({"ca_file": "ca.pem", "provider_token": ""}, "provider_token must be a non-empty string on one line"),
    ],
)
async def test_board_config_errors_for_wss_and_tokens(
    devices: DeviceFactory, overrides: dict[str, Any], error: str
) -> None:
    device = await devices("wss://127.0.0.1:1", **overrides)
    event = await device.wait_event("config_error")
    assert event["error"] == error
    assert await device.wait_exit() == 1  # the app never started: the Unix port says so
    assert not device.named("link_up")
