"""mDNS names on a shared link: gateways of either address family, on one host or with one name, keep
their own names and addresses; a stop says goodbye only for its own records; the metrics and the
host name say what the gateway really does.

The test link (tests/support/multicast.py) carries IPv4 and IPv6 multicast; the tests that need IPv6
fail, and say why, where it has none. They are never skipped.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from mcp import Client
from zeroconf import ServiceInfo, ServiceStateChange
from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

from gateway.app import GatewayServer
from gateway.config import GatewayConfig
from gateway.discovery.browse import QUESTION_TYPE
from gateway.discovery.names import host_label, service_target
from gateway.reload import ConfigSource
from tests.conftest import GatewayFactory, wait_for
from tests.support.multicast import (
    BROKER_TYPE,
    MCP_TYPE,
    AddressResolverIPv4,
    MulticastLink,
    Watcher,
    make_multicast_link,
    run_discover,
)


@pytest.fixture(scope="module")
def multicast_link() -> Iterator[MulticastLink]:
    yield from make_multicast_link()


@pytest.fixture
async def servers() -> AsyncIterator[list[GatewayServer]]:
    """Gateways the test starts, all stopped at its end (a stop the test already made is harmless)."""
    started: list[GatewayServer] = []
    yield started
    for server in started:
        await server.stop()


async def advertised(servers: list[GatewayServer], host: str, instance: str) -> GatewayServer:
    """A gateway bound to `host` advertising `instance`, once its name is probed and registered."""
    config = GatewayConfig.model_validate(
        {"host": host, "port": 0, "insecure_lan": True, "mdns": {"enabled": True, "instance_name": instance}}
    )
    server = GatewayServer(config)
    await server.start()
    servers.append(server)
    await wait_for(lambda: server.mdns is not None and server.mdns.state == "advertising", 15, f"{host} to advertise")
    return server


async def mdns_info(server: GatewayServer) -> Any:
    async with Client(f"{server.url}/_broker/mcp", mode="legacy") as client:
        result = await client.call_tool("broker_info", {})
    assert result.structured_content is not None
    return result.structured_content["mdns"]


def names_of(instance: str) -> dict[str, str]:
    return {service_type: f"{instance}.{service_type}" for service_type in (BROKER_TYPE, MCP_TYPE)}


async def host_addresses_heard(watcher: Watcher, host: str) -> list[str]:
    """What an IPv4 board asking for `host` (an A query) is told."""
    resolver = AddressResolverIPv4(host)
    await resolver.async_request(watcher.zeroconf.zeroconf, 3000, QUESTION_TYPE)
    return [str(address) for address in resolver.parsed_addresses()]


async def test_one_name_on_ipv4_and_ipv6_gateways_is_probed_across_families(
    multicast_link: MulticastLink, servers: list[GatewayServer]
) -> None:
    """The instance name is one namespace on the link: a gateway bound to IPv6 must find the name a
    gateway bound to IPv4 holds (it probed over IPv6 only, and the IPv4 one listened over IPv4 only)."""
    address6 = multicast_link.require_ipv6()
    instance = f"family twin {secrets.token_hex(4)}"
    first = await advertised(servers, multicast_link.address, instance)
    second = await advertised(servers, address6, instance)
    assert (await mdns_info(first))["instance"] == instance
    status = await mdns_info(second)
    assert status["instance"] == f"{instance}-2"
    assert status["addresses"] == [address6]  # probed over both families, advertised with its own address only


async def test_gateways_of_both_families_on_one_host_each_list_only_their_own_addresses(
    multicast_link: MulticastLink, servers: list[GatewayServer]
) -> None:
    """Both used to point at `<hostname>.local`, so browsers merged the A and AAAA records of the two and
    listed the IPv6 gateway at an IPv4 address that refuses connections."""
    address6 = multicast_link.require_ipv6()
    tag = secrets.token_hex(4)
    v4 = await advertised(servers, multicast_link.address, f"v4 only {tag}")
    v6 = await advertised(servers, address6, f"v6 only {tag}")
    watcher = Watcher(multicast_link.address, address6)
    try:
        watcher.start()
        gateways = ((f"v4 only {tag}", v4, multicast_link.address), (f"v6 only {tag}", v6, address6))
        for instance, server, address in gateways:
            for service_type, name in names_of(instance).items():
                info = await watcher.resolve(service_type, name)
                assert info.parsed_addresses() == [address], (name, info.server)
                assert info.port == server.port
                assert info.server == service_target(server.port)
        for _, server, _ in gateways:
            assert (await mdns_info(server))["srv_target"] == service_target(server.port)
        # Boards dial <hostname>.local; both gateways still answer it, each with its own addresses.
        assert (await mdns_info(v4))["host"] == host_label()
        assert multicast_link.address in await host_addresses_heard(watcher, host_label())
    finally:
        await watcher.close()


async def test_a_stopped_gateway_says_goodbye_for_its_services_not_for_the_host_address(
    multicast_link: MulticastLink, servers: list[GatewayServer]
) -> None:
    """Two gateways on one host. A goodbye (TTL 0) for `<hostname>.local`'s address, which the other
    gateway (and avahi) still answers, made browsers drop that address a second later."""
    tag = secrets.token_hex(4)
    keep, leave = f"keep {tag}", f"leave {tag}"
    await advertised(servers, multicast_link.address, keep)
    leaving = await advertised(servers, multicast_link.address, leave)
    watcher = Watcher(multicast_link.address)
    try:
        watcher.start()
        await wait_for(
            lambda: all(
                watcher.saw(name, ServiceStateChange.Added)
                for name in [*names_of(keep).values(), *names_of(leave).values()]
            ),
            10,
            "the browser to see both gateways",
        )
        await watcher.resolve(BROKER_TYPE, names_of(keep)[BROKER_TYPE])
        assert multicast_link.address in await host_addresses_heard(watcher, host_label())

        await leaving.stop()
        await wait_for(
            lambda: all(watcher.saw(name, ServiceStateChange.Removed) for name in names_of(leave).values()),
            5,
            "the goodbye of the gateway that stopped",
        )
        await asyncio.sleep(1.5)  # a goodbye takes effect one second after it arrives (RFC 6762 section 10.1)
        host = AddressResolverIPv4(host_label())
        assert host.load_from_cache(watcher.zeroconf.zeroconf), "the browser dropped <hostname>.local's address"
        assert multicast_link.address in host.parsed_addresses()
        kept = AsyncServiceInfo(BROKER_TYPE, names_of(keep)[BROKER_TYPE])
        assert kept.load_from_cache(watcher.zeroconf.zeroconf)
        assert kept.parsed_addresses() == [multicast_link.address]
        assert not any(watcher.saw(name, ServiceStateChange.Removed) for name in names_of(keep).values())
    finally:
        await watcher.close()


async def test_a_name_held_under_one_service_type_renames_the_gateway_under_both(
    multicast_link: MulticastLink, servers: list[GatewayServer]
) -> None:
    """An ordinary MCP server holds the name under _mcp._tcp only: the gateway takes `<name>-2` under both
    types, so browsers list one gateway, not `<name>` and `<name>-2`."""
    instance = f"clash {secrets.token_hex(4)}"
    other = AsyncZeroconf(interfaces=[multicast_link.address])
    holder = ServiceInfo(
        MCP_TYPE,
        f"{instance}.{MCP_TYPE}",
        port=9,
        properties={"path": "/mcp"},
        server="another-box.local.",
        parsed_addresses=[multicast_link.address],
    )
    try:
        await (await other.async_register_service(holder))
        server = await advertised(servers, multicast_link.address, instance)
        status = await mdns_info(server)
        assert status["instance"] == f"{instance}-2"
        assert status["names"] == names_of(f"{instance}-2")
    finally:
        await other.async_close()


async def test_a_taken_name_of_63_bytes_is_cut_to_take_its_number(
    multicast_link: MulticastLink, servers: list[GatewayServer]
) -> None:
    """`<name>-2` of a 63-byte name is 65 bytes, more than a DNS label holds: the gateway failed and
    retried for ever. The name is cut on a character boundary (é is two bytes) to fit the number."""
    tag = secrets.token_hex(4)
    instance = tag + "é" * 27 + "x"
    assert len(instance.encode()) == 63
    await advertised(servers, multicast_link.address, instance)
    second = await advertised(servers, multicast_link.address, instance)
    status = await mdns_info(second)
    renamed = tag + "é" * 26 + "-2"
    assert status["instance"] == renamed
    assert status["names"] == names_of(renamed)


async def test_discover_takes_an_interface_name_as_mdns_interfaces_does(
    multicast_link: MulticastLink, gateway_factory: GatewayFactory
) -> None:
    instance = f"by name {secrets.token_hex(4)}"
    server = await gateway_factory(
        host=multicast_link.address, insecure_lan=True, mdns={"enabled": True, "instance_name": instance}
    )
    await wait_for(lambda: server.mdns is not None and server.mdns.state == "advertising", 10, "the advertisement")
    code, out, err = await run_discover("--json", "--interface", multicast_link.interface)
    assert code == 0, err
    found = {entry["name"]: entry for entry in orjson.loads(out)}
    assert instance in found, out
    assert found[instance]["url"] == f"http://{multicast_link.address}:{server.port}"


async def test_a_hostname_that_is_no_dns_name_is_answered_as_its_dns_form_and_the_log_says_which(
    multicast_link: MulticastLink,
    gateway_factory: GatewayFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.mdns")
    monkeypatch.setattr(socket, "gethostname", lambda: "plant_gw")
    server = await gateway_factory(host=multicast_link.address, insecure_lan=True, mdns={"enabled": True})
    await wait_for(lambda: server.mdns is not None and server.mdns.state == "advertising", 10, "the advertisement")
    said = [record.getMessage() for record in caplog.records if record.name == "gateway.mdns"]
    assert any("'plant_gw' is not a DNS name" in line and "boards dial plant-gw.local" in line for line in said), said
    assert (await mdns_info(server))["host"] == "plant-gw.local."
    watcher = Watcher(multicast_link.address)
    try:
        assert multicast_link.address in await host_addresses_heard(watcher, "plant-gw.local.")
    finally:
        await watcher.close()


async def test_the_mdns_gauges_are_absent_after_a_reload_turns_mdns_off(tmp_path: Path) -> None:
    """docs/discovery.md: both gauges are absent when [mdns] is off, after a reload as after a start."""
    path = tmp_path / "gateway.toml"
    path.write_text("port = 0\n[mdns]\nenabled = true\n")
    source = ConfigSource(str(path), environ={})
    server = GatewayServer(source.load(), source=source)
    await server.start()

    async def gauges() -> list[str]:
        async with aiohttp.ClientSession() as http, http.get(f"{server.url}/metrics") as response:
            text = await response.text()
        return sorted(line.split(" ")[0] for line in text.splitlines() if line.startswith("mcpgw_mdns_"))

    try:
        assert await gauges() == ["mcpgw_mdns_addresses", "mcpgw_mdns_advertising"]
        for enabled, expected in ((False, []), (True, ["mcpgw_mdns_addresses", "mcpgw_mdns_advertising"])):
            path.write_text(f"port = 0\n[mdns]\nenabled = {str(enabled).lower()}\n")
            report = await server.reload()
            assert report.outcome == "applied", report.refusals
            assert await gauges() == expected, enabled
    finally:
        await server.stop()
