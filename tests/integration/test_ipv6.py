"""IPv6 on real gateways: a `::` bind reaches itself at [::1], the loopback Host guard reads Host strictly
on an IPv6 loopback bind, and an access token's audience is read strictly too."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

import aiohttp
import httpx2
import orjson
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory
from tests.support.gateway_process import gateway_process
from tests.support.oauth import ISSUER, JwksServer, access_token, jwks, jwks_server, rsa_key
from tests.support.raw_mcp import INITIALIZE


def ipv6_loopback() -> bool:
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET6) as probe:
        probe.bind(("::1", 0))
        return True
    return False


@pytest.fixture(autouse=True)
def _ipv6() -> None:
    """These tests check IPv6 handling: a machine without ::1 fails them, never skips them."""
    if not ipv6_loopback():
        pytest.fail("this machine has no IPv6 loopback (::1): these tests need it")


async def broker_info(url: str) -> dict[str, Any]:
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30)) as http,
        Client(streamable_http_client(f"{url}/_broker/mcp", http_client=http), mode="legacy") as client,
    ):
        info = (await client.call_tool("broker_info", {})).structured_content
    assert isinstance(info, dict)
    return info


@pytest.mark.timeout(60)
@pytest.mark.parametrize("wildcard", ["::", "0:0::0"])
async def test_a_gateway_bound_to_the_ipv6_wildcard_reaches_itself_at_ipv6_loopback(wildcard: str) -> None:
    # asyncio binds "::" IPv6-only: 127.0.0.1 has nothing listening, so the simulated pump (which dials
    # the gateway's own URL) never attached, and broker_info sent clients there.
    async with gateway_process(
        "--host", wildcard, "--insecure-lan", "--port", "0", "--sim-pumps", "1", "--sim-control-port", "0"
    ) as gateway:
        port = int(gateway.url.rsplit(":", 1)[1])
        await gateway.wait_line("provider attached to slot pump-1", timeout=20)
        info = await broker_info(f"http://[::1]:{port}")
    assert info["url"] == f"http://[::1]:{port}"
    assert "link up to ws://[::1]:" in gateway.log and "Cannot connect" not in gateway.log


async def raw_post(port: int, host: str, origin: str | None = None) -> tuple[int, dict[str, str], bytes]:
    """POST initialize to [::1]:port with exactly this Host (and Origin), as no client library would send it."""
    body = orjson.dumps(INITIALIZE)
    lines = [
        "POST /_broker/mcp HTTP/1.1",
        f"Host: {host}",
        *([f"Origin: {origin}"] if origin is not None else []),
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    reader, writer = await asyncio.open_connection("::1", port)
    try:
        writer.write("\r\n".join(lines).encode() + b"\r\n\r\n" + body)
        await writer.drain()
        header_block = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        status_line, *header_lines = header_block.decode("latin-1").rstrip("\r\n").split("\r\n")
        headers = {name.strip().lower(): value.strip() for name, _, value in (h.partition(":") for h in header_lines)}
        content = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    return int(status_line.split()[1]), headers, content


@pytest.mark.parametrize(
    "host",
    ["[::1].evil.example", "[::1]@evil.example", "[::1]evil", "[::1]:{port}:80", "[::1]x:{port}", "[::1"],
)
async def test_a_host_only_starting_like_ipv6_loopback_is_refused(gateway_factory: GatewayFactory, host: str) -> None:
    server = await gateway_factory(host="::1")
    status, _, body = await raw_post(server.port, host.format(port=server.port))
    assert status == 403
    answer = orjson.loads(body)
    assert answer["error"] == "host_not_allowed"
    assert "malformed" in answer["error_description"]


async def test_an_origin_of_a_malformed_host_is_not_the_gateways_own(gateway_factory: GatewayFactory) -> None:
    server = await gateway_factory(host="::1", allowed_origins=["http://localhost:*"])
    status, headers, body = await raw_post(server.port, "[::1].evil.example", "http://[::1].evil.example")
    assert status == 403
    assert orjson.loads(body)["error"] == "origin_not_allowed"
    assert "access-control-allow-origin" not in headers


@pytest.mark.parametrize("host", ["[::1]:{port}", "[0:0::1]:{port}", "[0:0:0:0:0:0:0:1]:{port}", "localhost:{port}"])
async def test_any_spelling_of_the_bound_ipv6_address_passes(gateway_factory: GatewayFactory, host: str) -> None:
    server = await gateway_factory(host="0:0:0:0:0:0:0:1")
    host = host.format(port=server.port)
    status, _, body = await raw_post(server.port, host, f"http://{host}")
    assert status == 200, body  # and its Origin is the gateway's own: no origin_not_allowed


async def test_allowed_hosts_and_origins_match_ipv6_as_browsers_and_clients_send_it(
    gateway_factory: GatewayFactory,
) -> None:
    server = await gateway_factory(
        host="::1",
        allowed_hosts=["FD00::4", "[fd00:0::5]"],
        allowed_origins=["http://[fd00:0:0:0::2]:8081", "http://[::ffff:127.0.0.1]:8083"],
    )
    for host in (f"[fd00::4]:{server.port}", f"[fd00::5]:{server.port}"):
        assert (await raw_post(server.port, host))[0] == 200
    assert (await raw_post(server.port, f"[fd00::6]:{server.port}"))[0] == 403
    for origin in ("http://[fd00::2]:8081", "http://[::ffff:7f00:1]:8083"):  # as a browser serialises them
        status, headers, _ = await raw_post(server.port, f"[::1]:{server.port}", origin)
        assert status == 200
        assert headers["access-control-allow-origin"] == origin


# -- the audience of an access token -----------------------------------------------------------------


@pytest.fixture
async def authority() -> Any:
    async with jwks_server(jwks(rsa_key())) as server:
        yield server


async def status_with(server: GatewayServer, audience: str) -> int:
    token = access_token(rsa_key(), audience, scope="pump-1")
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"http://[::1]:{server.port}/pump-1/mcp", data=orjson.dumps(INITIALIZE), headers=headers) as answer,
    ):
        return answer.status


@pytest.mark.parametrize(
    ("audience", "status"),
    [
        ("http://[::1]:{port}/pump-1/mcp", 200),
        ("http://[0:0::1]:{port}/pump-1/mcp", 200),  # the same address, spelled otherwise
        ("http://[::1].evil.example:{port}/pump-1/mcp", 401),
        ("http://[::1]evil:{port}/pump-1/mcp", 401),
        ("http://[::1]:{port}:80/pump-1/mcp", 401),
        ("http://evil.example:{port}/pump-1/mcp", 401),
    ],
)
async def test_an_audience_is_read_strictly_as_host_and_port(
    gateway_factory: GatewayFactory, authority: JwksServer, audience: str, status: int
) -> None:
    server = await gateway_factory(host="::1", auth={"oauth": {"issuer": ISSUER, "jwks_url": authority.url}})
    assert await status_with(server, audience.format(port=server.port)) == status


@pytest.mark.parametrize(
    ("audience", "status"),
    [
        ("https://[fd00::2]:8443/gw/pump-1/mcp", 200),
        ("https://[fd00:0::2]:8443/gw/pump-1/mcp", 200),
        ("https://[fd00::2].evil.example:8443/gw/pump-1/mcp", 401),
        ("https://[fd00::2]x:8443/gw/pump-1/mcp", 401),
    ],
)
async def test_an_audience_of_the_public_url_is_read_strictly_too(
    gateway_factory: GatewayFactory, authority: JwksServer, audience: str, status: int
) -> None:
    server = await gateway_factory(
        host="::1",
        public_url="https://[fd00::2]:8443/gw",
        auth={"oauth": {"issuer": ISSUER, "jwks_url": authority.url}},
    )
    assert await status_with(server, audience) == status
