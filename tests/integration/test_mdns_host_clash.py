"""Two gateways whose SRV target `<hostname>-<port>.local` is the same name: two gateways on this machine
bound to two addresses of the test link with one port, or two appliances made from one image (one host
name), both listening on the same port (a responder announcing an address this machine does not have).
The target is probed before it is announced and defended after: the second gateway takes
`<hostname>-<port>-2.local`, logs why (naming another gateway on this machine or another machine), and
`discover` lists each gateway at its own address.

The test link is tests/support/multicast.py's; the tests fail, and say why, where it cannot be made.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import secrets
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
import pytest
from mcp import Client
from zeroconf import ServiceInfo
from zeroconf.asyncio import AsyncZeroconf

from gateway.app import GatewayServer
from gateway.config import GatewayConfig
from gateway.discovery.mdns import BROWSE_ANSWER_S
from gateway.discovery.names import service_target
from tests.conftest import wait_for
from tests.support.multicast import MCP_TYPE, MulticastLink, ip, make_multicast_link, run_discover


@pytest.fixture(scope="module")
def multicast_link() -> Iterator[MulticastLink]:
    yield from make_multicast_link()


@pytest.fixture(scope="module")
def second_address(multicast_link: MulticastLink) -> Iterator[str]:
    """Another IPv4 address on the test link: the second appliance's."""
    address = str(ipaddress.ip_address(multicast_link.address) + 1)
    added = ip("addr", "add", f"{address}/32", "dev", multicast_link.interface)
    if added.returncode != 0:
        pytest.fail(f"cannot add {address} to {multicast_link.interface}: {added.stderr.strip()}")
    try:
        yield address
    finally:
        ip("addr", "del", f"{address}/32", "dev", multicast_link.interface)


@pytest.fixture
async def servers() -> AsyncIterator[list[GatewayServer]]:
    started: list[GatewayServer] = []
    yield started
    for server in started:
        await server.stop()


def free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        port: int = probe.getsockname()[1]
        return port


def gateway(servers: list[GatewayServer], address: str, port: int, instance: str) -> GatewayServer:
    config = GatewayConfig.model_validate(
        {"host": address, "port": port, "insecure_lan": True, "mdns": {"enabled": True, "instance_name": instance}}
    )
    server = GatewayServer(config)
    servers.append(server)
    return server


async def mdns_info(server: GatewayServer) -> Any:
    async with Client(f"{server.url}/_broker/mcp", mode="legacy") as client:
        result = await client.call_tool("broker_info", {})
    assert result.structured_content is not None
    return result.structured_content["mdns"]


async def discovered(interface: str) -> dict[str, Any]:
    code, out, err = await run_discover("--json", "--interface", interface)
    assert code == 0, err
    return {entry["name"]: entry for entry in orjson.loads(out)}


async def assert_each_found_at_its_own_address(interface: str, gateways: list[tuple[str, str, GatewayServer]]) -> None:
    found = await discovered(interface)
    for instance, address, server in gateways:
        assert instance in found, found
        entry = found[instance]
        assert entry["addresses"] == [address], (instance, entry)
        assert entry["url"] == f"http://{address}:{server.port}", (instance, entry)
        assert entry["host"] == (await mdns_info(server))["srv_target"], (instance, entry)


async def test_a_gateway_whose_srv_target_is_answered_takes_the_next_and_says_why(
    multicast_link: MulticastLink,
    second_address: str,
    servers: list[GatewayServer],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Line A's gateway advertises first; line E's, with the same host name and port, finds the SRV target
    answered, takes `-2`, and logs the clash at WARNING. Before, both answered the one name and discover
    sent line E's clients to line A."""
    caplog.set_level(logging.INFO, logger="gateway.mdns")
    tag = secrets.token_hex(4)
    port = free_port(multicast_link.address)
    line_a = gateway(servers, multicast_link.address, port, f"Line A {tag}")
    await line_a.start()
    await wait_for(lambda: line_a.mdns is not None and line_a.mdns.state == "advertising", 15, "line A to advertise")
    line_e = gateway(servers, second_address, port, f"Line E {tag}")
    await line_e.start()
    await wait_for(lambda: line_e.mdns is not None and line_e.mdns.state == "advertising", 15, "line E to advertise")

    assert (await mdns_info(line_a))["srv_target"] == service_target(port)
    status = await mdns_info(line_e)
    assert status["srv_target"] == service_target(port, 2)
    assert status["addresses"] == [second_address]
    warned = [
        record.getMessage()
        for record in caplog.records
        if record.name == "gateway.mdns" and record.levelno == logging.WARNING
    ]
    taken, renamed = service_target(port).rstrip("."), service_target(port, 2).rstrip(".")
    assert any(
        f"{taken} is already answered" in line and multicast_link.address in line and renamed in line for line in warned
    ), warned
    # The name is answered from this machine: another gateway here, not a machine of the same name.
    assert any(
        f"another gateway on this machine listens on port {port} at another address" in line
        and "give the gateways on this machine different ports" in line
        for line in warned
    ), warned
    assert not any("another machine" in line or "different host names" in line for line in warned), warned
    said = [record.getMessage() for record in caplog.records if record.name == "gateway.mdns"]
    assert any(f"SRV target {renamed}" in line and f"Line E {tag}" in line for line in said), said

    await assert_each_found_at_its_own_address(
        multicast_link.interface,
        [(f"Line A {tag}", multicast_link.address, line_a), (f"Line E {tag}", second_address, line_e)],
    )


async def test_two_gateways_started_together_settle_on_two_srv_targets(
    multicast_link: MulticastLink, second_address: str, servers: list[GatewayServer]
) -> None:
    """Started at the same moment, both probe the SRV target while neither answers it yet, and both
    announce it: each hears the other's address records for its name, and the one whose records compare
    lower gives the name up and takes `-2` (RFC 6762 sections 8.2 and 9)."""
    tag = secrets.token_hex(4)
    port = free_port(multicast_link.address)
    line_a = gateway(servers, multicast_link.address, port, f"Line A {tag}")
    line_e = gateway(servers, second_address, port, f"Line E {tag}")
    await asyncio.gather(line_a.start(), line_e.start())

    def settled() -> bool:
        states = [server.mdns.status() for server in (line_a, line_e) if server.mdns is not None]
        return (
            len(states) == 2
            and all(state["state"] == "advertising" for state in states)
            and len({state["srv_target"] for state in states}) == 2
        )

    await wait_for(settled, 20, "the two gateways to settle on two SRV targets")
    targets = {(await mdns_info(server))["srv_target"] for server in (line_a, line_e)}
    assert targets == {service_target(port), service_target(port, 2)}
    await asyncio.sleep(1.5)  # the goodbye for the name given up takes effect a second after it arrives
    await assert_each_found_at_its_own_address(
        multicast_link.interface,
        [(f"Line A {tag}", multicast_link.address, line_a), (f"Line E {tag}", second_address, line_e)],
    )


async def announce_the_target(responder: AsyncZeroconf, tag: str, port: int, address: str) -> None:
    """Another responder ("Line E") announces a service whose SRV target is the gateway's own, at `address`."""
    announced = ServiceInfo(
        MCP_TYPE,
        f"Line E {tag}.{MCP_TYPE}",
        port=port,
        properties={"path": "/mcp"},
        server=service_target(port),
        parsed_addresses=[address],
    )
    await (await responder.async_register_service(announced, cooperating_responders=True))


@pytest.mark.parametrize("gives_up", [True, False], ids=["lower-address-gives-up", "higher-address-keeps"])
async def test_a_responder_announcing_the_srv_target_later_is_settled_by_the_tie_break(
    multicast_link: MulticastLink,
    second_address: str,
    servers: list[GatewayServer],
    caplog: pytest.LogCaptureFixture,
    gives_up: bool,
) -> None:
    """Another responder announces address records for the gateway's SRV target after the gateway
    announced it (the two probed on separate links, then the links were joined): the one whose address
    record compares lower gives the name up and probes for the next; the other keeps it and says so."""
    caplog.set_level(logging.INFO, logger="gateway.mdns")
    tag = secrets.token_hex(4)
    # multicast_link.address < second_address: the gateway on the lower one gives the name up.
    own, others = (multicast_link.address, second_address) if gives_up else (second_address, multicast_link.address)
    port = free_port(own)
    server = gateway(servers, own, port, f"Line A {tag}")
    await server.start()
    await wait_for(lambda: server.mdns is not None and server.mdns.state == "advertising", 15, "the advertisement")
    assert server.mdns is not None and server.mdns.status()["srv_target"] == service_target(port)
    other = AsyncZeroconf(interfaces=[others])
    try:
        await announce_the_target(other, tag, port, others)
        warned = "gives the name up" if gives_up else "keeps the name"
        await wait_for(
            lambda: any(warned in record.getMessage() and others in record.getMessage() for record in caplog.records),
            10,
            "the gateway to hear the other responder",
        )
        heard = next(record.getMessage() for record in caplog.records if warned in record.getMessage())
        assert f"another gateway on this machine listens on port {port} at another address" in heard, heard
        if gives_up:
            await wait_for(
                lambda: (
                    server.mdns is not None
                    and server.mdns.state == "advertising"
                    and server.mdns.status()["srv_target"] == service_target(port, 2)
                ),
                15,
                "the gateway to take the next name",
            )
        else:
            await asyncio.sleep(BROWSE_ANSWER_S)
        status = await mdns_info(server)
        assert status["state"] == "advertising"
        assert status["srv_target"] == service_target(port, 2 if gives_up else 1)
    finally:
        await other.async_close()


async def test_a_responder_of_another_machine_is_blamed_on_the_host_name(
    multicast_link: MulticastLink, servers: list[GatewayServer], caplog: pytest.LogCaptureFixture
) -> None:
    """A responder announcing the gateway's SRV target with an address this machine does not have is
    another machine of the same host name with a gateway on the same port: the warning says so."""
    caplog.set_level(logging.INFO, logger="gateway.mdns")
    tag = secrets.token_hex(4)
    elsewhere = str(ipaddress.ip_address(multicast_link.address) + 77)  # on no interface of this machine
    port = free_port(multicast_link.address)
    server = gateway(servers, multicast_link.address, port, f"Line A {tag}")
    await server.start()
    await wait_for(lambda: server.mdns is not None and server.mdns.state == "advertising", 15, "the advertisement")
    other = AsyncZeroconf(interfaces=[multicast_link.address])
    try:
        await announce_the_target(other, tag, port, elsewhere)
        await wait_for(
            lambda: any(
                elsewhere in record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING
            ),
            10,
            "the gateway to hear the other responder",
        )
        heard = next(record.getMessage() for record in caplog.records if elsewhere in record.getMessage())
        assert "gives the name up" in heard, heard
        assert server.mdns is not None
        assert f"another machine has the host name {server.mdns.host.removesuffix('.local.')}" in heard, heard
        assert "give the machines different host names" in heard, heard
    finally:
        await other.async_close()
