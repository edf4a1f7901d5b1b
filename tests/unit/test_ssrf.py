"""The SSRF guard: which URLs learned from a remote upstream the gateway follows, and where it connects."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from gateway.policy.ssrf import (
    GuardedResolver,
    SsrfRefused,
    UpstreamPlace,
    address_refusal,
    learned_url_refusal,
    resolve_place,
    same_origin_url,
)


def place(*addresses: str) -> UpstreamPlace:
    return UpstreamPlace(frozenset(ipaddress.ip_address(text) for text in addresses))


PUBLIC = place("93.184.216.34")
LOOPBACK = place("127.0.0.1")
LAN = place("10.0.0.7")


@pytest.mark.parametrize(
    ("address", "where", "refused"),
    [
        ("93.184.216.34", LAN, None),
        ("2606:4700::1111", LAN, None),
        ("10.0.0.7", LAN, None),  # the configured upstream's own address
        ("10.0.0.8", LAN, "private address other than the configured upstream's own"),
        ("192.168.1.1", PUBLIC, "private address"),
        ("fd12::1", PUBLIC, "private address"),
        ("100.64.0.1", PUBLIC, "non-public address"),
        ("fe80::1", PUBLIC, "link-local address"),
        ("169.254.10.10", PUBLIC, "link-local address"),
        ("127.0.0.1", PUBLIC, "loopback address and the configured upstream is not on loopback"),
        ("127.0.0.1", LOOPBACK, None),
        ("::1", LOOPBACK, None),
        ("169.254.169.254", PUBLIC, "cloud metadata address"),
        ("169.254.169.254", place("169.254.169.254"), "cloud metadata address"),  # never, even there
        ("::ffff:169.254.169.254", PUBLIC, "cloud metadata address"),  # IPv4-mapped
        ("fd00:ec2::254", PUBLIC, "cloud metadata address"),
        ("0.0.0.0", PUBLIC, "unspecified address"),
        ("::", PUBLIC, "unspecified address"),
        ("224.0.0.1", PUBLIC, "multicast address"),
    ],
)
def test_address_rule(address: str, where: UpstreamPlace, refused: str | None) -> None:
    reason = address_refusal(ipaddress.ip_address(address), where)
    if refused is None:
        assert reason is None
    else:
        assert reason is not None and refused in reason


@pytest.mark.parametrize(
    ("url", "where", "refused"),
    [
        ("https://auth.example.com/realms/plant", LAN, None),
        ("https://93.184.216.34/token", LAN, None),
        ("http://auth.example.com/token", LAN, "plain http"),
        ("http://127.0.0.1:8080/token", LOOPBACK, None),
        ("http://localhost:8080/token", LOOPBACK, None),
        ("http://127.0.0.1:8080/token", LAN, "loopback address"),
        ("https://10.0.0.9/token", LAN, "private address"),
        ("https://[fd00:ec2::254]/latest", PUBLIC, "cloud metadata"),
        ("https://user:pw@auth.example.com/token", PUBLIC, "user info"),
        ("ftp://auth.example.com/token", PUBLIC, "not an absolute http(s) URL"),
        ("/token", PUBLIC, "not an absolute http(s) URL"),
    ],
)
def test_learned_url_rule(url: str, where: UpstreamPlace, refused: str | None) -> None:
    reason = learned_url_refusal(url, where)
    if refused is None:
        assert reason is None
    else:
        assert reason is not None and refused in reason


BASE = "http://127.0.0.1:8931/sse"


@pytest.mark.parametrize(
    ("learned", "expected"),
    [
        ("/messages/?session_id=abc", "http://127.0.0.1:8931/messages/?session_id=abc"),
        ("messages?x=1", "http://127.0.0.1:8931/messages?x=1"),
        ("http://127.0.0.1:8931/messages", "http://127.0.0.1:8931/messages"),
        ("HTTP://127.0.0.1:8931/m", "http://127.0.0.1:8931/m"),
    ],
)
def test_same_origin_urls_are_followed(learned: str, expected: str) -> None:
    assert same_origin_url(learned, BASE, "SSE endpoint") == expected


@pytest.mark.parametrize(
    "learned",
    [
        "http://127.0.0.2:8931/messages",  # another host, even on loopback
        "http://127.0.0.1:8932/messages",  # another port
        "https://127.0.0.1:8931/messages",  # another scheme
        "//evil.example/messages",  # scheme-relative: another host
        "http://169.254.169.254/latest/meta-data",
        "http://user@127.0.0.1:8931/messages",
        "javascript:alert(1)",
    ],
)
def test_other_origins_are_refused(learned: str) -> None:
    with pytest.raises(SsrfRefused, match="SSE endpoint"):
        same_origin_url(learned, BASE, "SSE endpoint")


class TableResolver(AbstractResolver):
    """A resolver with fixed answers: what a hostile or rebinding DNS server could say."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            ResolveResult(hostname=host, host=address, port=port, family=family, proto=0, flags=0)
            for address in self.table[host]
        ]

    async def close(self) -> None:
        pass


async def test_resolver_hands_on_only_allowed_addresses() -> None:
    resolver = GuardedResolver(LAN, TableResolver({"auth.plant.test": ["10.0.0.9", "93.184.216.34", "10.0.0.7"]}))
    results = await resolver.resolve("auth.plant.test", 443)
    assert [result["host"] for result in results] == ["93.184.216.34", "10.0.0.7"]


async def test_resolver_refuses_a_name_that_resolves_only_to_forbidden_addresses() -> None:
    resolver = GuardedResolver(PUBLIC, TableResolver({"metadata.plant.test": ["169.254.169.254", "127.0.0.1"]}))
    with pytest.raises(SsrfRefused, match=r"169\.254\.169\.254 is a cloud metadata address"):
        await resolver.resolve("metadata.plant.test", 80)


@pytest.fixture
async def loopback_site() -> AsyncIterator[int]:
    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="reached")

    app = web.Application()
    app.router.add_get("/", ok)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    await runner.cleanup()


@pytest.mark.parametrize(("where", "reached"), [(LOOPBACK, True), (LAN, False)])
async def test_connections_use_the_checked_addresses(loopback_site: int, where: UpstreamPlace, reached: bool) -> None:
    """A name resolving to loopback is reached only when the configured upstream is on loopback."""
    resolver = GuardedResolver(where, TableResolver({"rebind.plant.test": ["127.0.0.1"]}))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(resolver=resolver)) as http:
        url = f"http://rebind.plant.test:{loopback_site}/"
        if reached:
            async with http.get(url) as response:
                assert await response.text() == "reached"
        else:
            with pytest.raises(aiohttp.ClientConnectorError) as caught:
                await http.get(url)
            assert isinstance(caught.value.os_error, SsrfRefused)


async def test_place_of_a_literal_and_of_localhost() -> None:
    assert (await resolve_place("10.0.0.7")).addresses == {ipaddress.ip_address("10.0.0.7")}
    assert (await resolve_place("localhost")).on_loopback
    assert not (await resolve_place("no-such-host.invalid")).addresses
