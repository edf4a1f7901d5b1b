"""mDNS: the gateway advertises how to connect and nothing else, says goodbye, and `discover` finds it.

Multicast needs an interface that carries it, and a CI machine may have none (or one on a real
network the test must not talk to). The `multicast_link` fixture makes its own
(tests/support/multicast.py): a veth pair (a dummy interface where veth is unavailable) with private
addresses from 198.18.0.0/15 and 2001:2::/48 (reserved for tests) and multicast on. The gateway
binds to that address, so it advertises there and only there; the browser and `mcp-gateway
discover` listen on it too, and the kernel loops multicast back to them. Creating an interface needs
root (CAP_NET_ADMIN) and iproute2: without them these tests FAIL with what is missing. They are
never skipped.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import socket
from collections.abc import Iterator
from functools import partial
from typing import Any

import aiohttp
import orjson
import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from zeroconf import ServiceStateChange

from gateway import __version__
from gateway.app import GatewayServer
from gateway.config import GatewayConfig
from gateway.discovery.mdns import SERVICE_TYPES
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.support.dns_query import MalformedMessage, Question, query_questions
from tests.support.multicast import (
    BROKER_TYPE,
    MCP_TYPE,
    MulticastLink,
    Watcher,
    ip,
    make_multicast_link,
    run_discover,
)


@pytest.fixture(scope="module")
def multicast_link() -> Iterator[MulticastLink]:
    """A private interface that carries multicast, removed again when the module's tests are done."""
    yield from make_multicast_link()


@pytest.fixture
async def watcher(multicast_link: MulticastLink) -> Any:
    watching = Watcher(multicast_link.address)
    yield watching
    await watching.close()


def valve_server() -> MCPServer:
    """A provider whose tool name is as distinctive as its slot name: neither may reach the network."""
    server = MCPServer("valves")

    @server.tool()
    def open_valve_qx7(position: int) -> int:
        """Open the valve."""
        return position

    return server


async def call_broker(server: GatewayServer, tool: str, arguments: dict[str, Any] | None = None) -> Any:
    async with Client(f"{server.url}/_broker/mcp", mode="legacy") as client:
        result = await client.call_tool(tool, arguments or {})
    if result.structured_content is not None:
        return result.structured_content
    return result.content[0].text  # type: ignore[union-attr]


async def test_the_advertisement_says_how_to_connect_and_names_no_slot_and_says_goodbye(
    multicast_link: MulticastLink, watcher: Watcher, publishers: Publishers
) -> None:
    instance = f"mdns test {secrets.token_hex(4)}"
    config = GatewayConfig.model_validate(
        {
            "host": multicast_link.address,
            "port": 0,
            "insecure_lan": True,
            "mdns": {"enabled": True, "instance_name": instance},
        }
    )
    server = GatewayServer(config)
    await server.start()
    stopped = False
    try:
        slot = f"line9-valve-{secrets.token_hex(3)}"
        await publishers.start(server, slot, valve_server())
        watcher.start()
        names = {service_type: f"{instance}.{service_type}" for service_type in (BROKER_TYPE, MCP_TYPE)}
        await wait_for(
            lambda: all(watcher.saw(name, ServiceStateChange.Added) for name in names.values()),
            10,
            "the browser to see both service types",
        )
        expected_txt = {
            "txtvers": "1",
            "version": __version__,
            "proto": "2025-11-25,2026-07-28",
            "tls": "0",
            "auth": "none",
            "pauth": "none",
            "provider": "/provider/",
            "providers": "/providers",
            "client": "/{slot}/mcp",
            "all": "/_all/mcp",
            "broker": "/_broker/mcp",
            "path": "/_all/mcp",
        }
        for service_type, name in names.items():
            info = await watcher.resolve(service_type, name)
            assert info.port == server.port  # the bound port, not the configured 0
            assert info.parsed_addresses() == [multicast_link.address]
            assert info.server is not None and info.server.endswith(".local.")
            assert info.decoded_properties == expected_txt
        heard = watcher.everything_heard()
        assert slot not in heard
        assert "open_valve_qx7" not in heard
        assert "valves" not in heard

        # A board that found the gateway connects with what the advertisement says.
        info = await watcher.resolve(BROKER_TYPE, names[BROKER_TYPE])
        async with Client(f"http://{info.parsed_addresses()[0]}:{info.port}/{slot}/mcp", mode="legacy") as client:
            assert (await client.call_tool("open_valve_qx7", {"position": 40})).structured_content == {"result": 40}

        status = (await call_broker(server, "broker_info"))["mdns"]
        assert status["state"] == "advertising"
        assert status["addresses"] == [multicast_link.address]
        assert status["interfaces"] == [multicast_link.interface]
        assert status["names"] == {BROKER_TYPE: names[BROKER_TYPE], MCP_TYPE: names[MCP_TYPE]}
        async with aiohttp.ClientSession() as http, http.get(f"{server.url}/metrics") as response:
            metrics = await response.text()
        assert "mcpgw_mdns_advertising 1.0" in metrics.splitlines()
        assert "mcpgw_mdns_addresses 1.0" in metrics.splitlines()
        page = await call_broker(server, "broker_guide", {"topic": "publish-provider"})
        assert f"advertises itself with mDNS as **{instance}**" in page
        assert f"addresses {multicast_link.address}" in page

        await publishers.stop_all()
        publishers.running.clear()
        await server.stop()
        stopped = True
        # Goodbye packets (TTL 0) remove the service at once; without them browsers would keep it
        # until its records expire, more than an hour for the service pointer.
        await wait_for(
            lambda: all(watcher.saw(name, ServiceStateChange.Removed) for name in names.values()),
            5,
            "the goodbye for both service types",
        )
    finally:
        if not stopped:
            await server.stop()


async def test_discover_lists_the_gateway_as_json_and_as_text(
    multicast_link: MulticastLink, gateway_factory: GatewayFactory
) -> None:
    instance = f"discover test {secrets.token_hex(4)}"
    server = await gateway_factory(
        host=multicast_link.address, insecure_lan=True, mdns={"enabled": True, "instance_name": instance}
    )
    await wait_for(lambda: server.mdns is not None and server.mdns.state == "advertising", 10, "the advertisement")

    # The default browse (3 s): a gateway that has just announced itself answers a question only a
    # second after its last multicast of the record (RFC 6762 section 14), so a 2 s browse could end
    # before the answer on a loaded machine.
    code, out, err = await run_discover("--json", "--interface", multicast_link.address)
    assert code == 0, err
    found = {entry["name"]: entry for entry in orjson.loads(out)}
    assert instance in found, out
    entry = found[instance]
    assert entry["kind"] == "gateway"
    assert entry["url"] == f"http://{multicast_link.address}:{server.port}"
    assert entry["port"] == server.port
    assert entry["addresses"] == [multicast_link.address]
    assert entry["service_types"] == [BROKER_TYPE, MCP_TYPE]
    assert entry["txt"]["provider"] == "/provider/"
    assert entry["txt"]["tls"] == "0"

    code, out, err = await run_discover("--interface", multicast_link.address)
    assert code == 0, err
    assert instance in out
    assert f"url        http://{multicast_link.address}:{server.port}" in out


async def test_discover_asks_every_question_for_a_multicast_answer(multicast_link: MulticastLink) -> None:
    """A unicast answer to port 5353 of a machine where another mDNS stack holds a socket on the same
    address reaches only one of them: the gateway on the same box took it in six browses of ten before
    discover asked for multicast answers. So no question may carry the unicast-response (QU) bit."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    listener.bind(("", 5353))
    membership = socket.inet_aton("224.0.0.251") + socket.inet_aton(multicast_link.address)
    listener.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, membership)
    listener.setblocking(False)
    questions: list[Question] = []
    malformed: list[str] = []

    async def listen() -> None:
        loop = asyncio.get_running_loop()
        while True:
            data, _ = await loop.sock_recvfrom(listener, 9000)
            try:
                questions.extend(q for q in query_questions(data) if q.name in SERVICE_TYPES)
            except MalformedMessage as exc:
                malformed.append(f"{exc}: {data!r}")

    listening = asyncio.create_task(listen())
    try:
        # 1.5 s: the browser's first query and the one a second later, when zeroconf switches to QM anyway.
        code, _, err = await run_discover("--timeout", "1.5", "--interface", multicast_link.address)
    finally:
        listening.cancel()
        listener.close()
    assert code == 0, err
    assert malformed == []
    assert {q.name for q in questions} == set(SERVICE_TYPES), questions
    assert len(questions) >= 2 * len(SERVICE_TYPES), questions  # both queries were heard
    assert [q for q in questions if q.unicast] == []


async def test_discover_with_nothing_advertised_says_none_found_and_exits_0(multicast_link: MulticastLink) -> None:
    code, out, err = await run_discover("--timeout", "0.5", "--interface", multicast_link.address)
    assert code == 0, err
    assert out.startswith("no gateway found")
    code, out, err = await run_discover("--json", "--timeout", "0.5", "--interface", multicast_link.address)
    assert code == 0, err
    assert orjson.loads(out) == []


async def test_multicast_off_is_logged_once_diagnosed_and_not_fatal(
    multicast_link: MulticastLink, gateway_factory: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.mdns")
    assert ip("link", "set", multicast_link.interface, "multicast", "off").returncode == 0
    try:
        server = await gateway_factory(
            host=multicast_link.address, insecure_lan=True, mdns={"enabled": True, "refresh_s": 0.05}
        )
        await wait_for(lambda: server.mdns is not None and server.mdns.state == "failed", 5, "the failure")
        await asyncio.sleep(0.3)  # several refreshes, each failing the same way
        warnings = [record for record in caplog.records if record.name == "gateway.mdns"]
        assert len(warnings) == 1
        assert f"multicast is off on {multicast_link.interface}" in warnings[0].getMessage()

        problems = (await call_broker(server, "broker_diagnose"))["problems"]
        problem = next(p for p in problems if p["id"] == "mdns.failed")
        assert problem["severity"] == "warning"
        assert f"ip link set {multicast_link.interface} multicast on" in problem["evidence"]
        assert (await call_broker(server, "broker_info"))["name"] == "mcp-gateway"  # still serving

        # Multicast back on: the next refresh advertises, without a restart.
        assert ip("link", "set", multicast_link.interface, "multicast", "on").returncode == 0
        await wait_for(lambda: server.mdns is not None and server.mdns.state == "advertising", 10, "the recovery")
    finally:
        ip("link", "set", multicast_link.interface, "multicast", "on")


async def test_a_loopback_gateway_is_not_advertised_and_diagnosis_says_why(gateway_factory: GatewayFactory) -> None:
    server = await gateway_factory(mdns={"enabled": True})
    await wait_for(lambda: server.mdns is not None and server.mdns.state == "not_advertised", 5, "the decision")
    info = await call_broker(server, "broker_info")
    assert info["mdns"]["addresses"] == []
    problems = (await call_broker(server, "broker_diagnose"))["problems"]
    problem = next(p for p in problems if p["id"] == "mdns.not_advertised")
    assert "127.0.0.1" in problem["evidence"]


async def test_mdns_is_off_by_default(gateway: GatewayServer) -> None:
    assert gateway.mdns is None
    assert (await call_broker(gateway, "broker_info"))["mdns"] == {"enabled": False, "state": "off"}
    page = await call_broker(gateway, "broker_guide", {"topic": "publish-provider"})
    assert "Boards cannot find this gateway by browsing: mDNS is off" in page


def advertising(server: GatewayServer) -> bool:
    return server.mdns is not None and server.mdns.state == "advertising"


async def test_a_second_gateway_with_the_same_name_takes_another_and_says_which(
    multicast_link: MulticastLink,
) -> None:
    instance = f"twin test {secrets.token_hex(4)}"
    settings = {"host": multicast_link.address, "port": 0, "insecure_lan": True}
    servers = [
        GatewayServer(GatewayConfig.model_validate({**settings, "mdns": {"enabled": True, "instance_name": instance}}))
        for _ in range(2)
    ]
    try:
        for server in servers:
            await server.start()
            await wait_for(partial(advertising, server), 15, "the gateway to advertise")
        first, second = [(await call_broker(server, "broker_info"))["mdns"] for server in servers]
        assert first["instance"] == instance
        assert second["instance"] == f"{instance}-2"  # the gateway takes the next free name; broker_info shows it
        assert second["names"][BROKER_TYPE] == f"{instance}-2.{BROKER_TYPE}"
        page = await call_broker(servers[1], "broker_guide", {"topic": "publish-provider"})
        assert f"advertises itself with mDNS as **{instance}-2**" in page
    finally:
        for server in servers:
            await server.stop()
