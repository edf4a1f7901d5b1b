"""mDNS on a segment where another host sends what it likes. `mcp-gateway discover` meets advertisements
that name no instance of the type, a type spelled in capitals, hundreds of instances with kilobytes of
TXT: it lists the gateway, counts what it could not read or did not list, and exits 0. The advertising
gateway meets address records for its SRV target: a shared one claims nothing, a name given up is not
taken again, and conflicts in a burst are paced.

The hostile host is a python-zeroconf socket on the test link (tests/support/multicast.py) that sends
crafted responses, as any machine on a plant network can.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from functools import partial

import orjson
import pytest
from zeroconf._dns import DNSAddress, DNSPointer, DNSService, DNSText
from zeroconf._protocol.outgoing import DNSOutgoing
from zeroconf.asyncio import AsyncZeroconf
from zeroconf.const import (
    _CLASS_IN,
    _CLASS_UNIQUE,
    _FLAGS_AA,
    _FLAGS_QR_RESPONSE,
    _TYPE_A,
    _TYPE_PTR,
    _TYPE_SRV,
    _TYPE_TXT,
)

from gateway.app import GatewayServer
from gateway.discovery import mdns
from gateway.discovery.names import service_target
from tests.conftest import GatewayFactory, wait_for
from tests.support.multicast import BROKER_TYPE, MulticastLink, make_multicast_link, run_discover

RESEND_S = 0.5

Answer = DNSPointer | DNSService | DNSText | DNSAddress


@pytest.fixture(scope="module")
def multicast_link() -> Iterator[MulticastLink]:
    yield from make_multicast_link()


def pointer(alias: str) -> DNSPointer:
    return DNSPointer(BROKER_TYPE, _TYPE_PTR, _CLASS_IN, 120, alias)


def instance(name: str, host: str, address: str, txt: bytes) -> list[Answer]:
    """The records of one resolvable instance `name` (its PTR aside)."""
    return [
        DNSService(name, _TYPE_SRV, _CLASS_IN | _CLASS_UNIQUE, 120, 0, 0, 56099, host),
        DNSText(name, _TYPE_TXT, _CLASS_IN | _CLASS_UNIQUE, 120, txt),
        DNSAddress(host, _TYPE_A, _CLASS_IN | _CLASS_UNIQUE, 120, socket.inet_aton(address)),
    ]


def txt_record(**entries: str) -> bytes:
    """A TXT record's wire form: each `key=value` a length-prefixed string."""
    strings = [f"{key}={value}".encode() for key, value in entries.items()]
    return b"".join(bytes([len(string)]) + string for string in strings)


@asynccontextmanager
async def hostile_host(address: str, packets: list[list[Answer]]) -> AsyncIterator[None]:
    """Send `packets` (each a list of answers) as unsolicited responses, again every RESEND_S."""
    sender = AsyncZeroconf(interfaces=[address])
    await sender.zeroconf.async_wait_for_start()

    async def send() -> None:
        while True:
            for answers in packets:
                out = DNSOutgoing(_FLAGS_QR_RESPONSE | _FLAGS_AA)
                for answer in answers:
                    out.add_answer_at_time(answer, 0)
                sender.zeroconf.async_send(out)
            await asyncio.sleep(RESEND_S)

    sending = asyncio.create_task(send())
    try:
        yield
    finally:
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)
        await sender.async_close()


async def send_once(address: str, *answers: DNSAddress) -> None:
    """One unsolicited response from a host at `address`, as a spoofer sends it (and answers no probe)."""
    sender = AsyncZeroconf(interfaces=[address])
    try:
        await sender.zeroconf.async_wait_for_start()
        out = DNSOutgoing(_FLAGS_QR_RESPONSE | _FLAGS_AA)
        for answer in answers:
            out.add_answer_at_time(answer, 0)
        sender.zeroconf.async_send(out)
        await asyncio.sleep(0.1)
    finally:
        await sender.async_close()


def address_record(name: str, unique: bool) -> DNSAddress:
    """An A record for `name` with an address above any of the test link's: the gateway is the one to yield."""
    record_class = _CLASS_IN | (_CLASS_UNIQUE if unique else 0)
    return DNSAddress(name, _TYPE_A, record_class, 120, socket.inet_aton("198.18.255.254"))


def holds(advertiser: mdns.MdnsAdvertiser, target: str) -> bool:
    return advertiser.state == "advertising" and advertiser.target_in_use == target


async def advertised_gateway(gateway_factory: GatewayFactory, address: str, name: str) -> GatewayServer:
    server = await gateway_factory(host=address, insecure_lan=True, mdns={"enabled": True, "instance_name": name})
    await wait_for(lambda: server.mdns is not None and server.mdns.state == "advertising", 15, "the advertisement")
    return server


async def test_a_pointer_to_no_instance_of_the_type_is_counted_and_the_rest_is_listed(
    multicast_link: MulticastLink, gateway_factory: GatewayFactory
) -> None:
    """A PTR under _mcp-broker._tcp to another type, or to the type itself, made python-zeroconf raise and
    discover end with a traceback (exit 1, nothing on stdout, the gateway unlisted). A type spelled in
    capitals is the same DNS name: its instance is listed under _mcp-broker._tcp."""
    tag = secrets.token_hex(3)
    gateway = f"plant gw {tag}"
    server = await advertised_gateway(gateway_factory, multicast_link.address, gateway)
    upper = f"Pump {tag}._MCP-BROKER._tcp.local."
    packets: list[list[Answer]] = [
        [pointer(f"evil {tag}._other._tcp.local.")],
        [pointer(BROKER_TYPE)],
        [pointer(upper), *instance(upper, f"pump-{tag}.local.", multicast_link.address, txt_record(txtvers="1"))],
    ]
    async with hostile_host(multicast_link.address, packets):
        await asyncio.sleep(2 * RESEND_S)
        code, out, err = await run_discover("--json", "--interface", multicast_link.address)
        assert code == 0, err
        found = {entry["name"]: entry for entry in orjson.loads(out)}
        assert set(found) == {gateway, f"Pump {tag}"}, out
        assert found[gateway]["port"] == server.port
        assert found[f"Pump {tag}"]["service_types"] == [BROKER_TYPE]
        assert found[f"Pump {tag}"]["port"] == 56099
        assert "skipped 2 malformed advertisements" in err

        code, out, err = await run_discover("--interface", multicast_link.address)
    assert code == 0, err
    assert out.startswith(gateway + "\n"), out  # the gateway first: it is the one sought
    assert f"\nPump {tag}\n" in out
    assert out.endswith("\n\nskipped 2 malformed advertisements\n"), out


async def test_a_flood_of_instances_is_cut_to_max_and_each_txt_record_to_a_screen(
    multicast_link: MulticastLink, gateway_factory: GatewayFactory
) -> None:
    """80 advertised instances with a 730-byte TXT record each printed everything (300 of 7 KB: 1.6 MB),
    the gateway buried somewhere in it."""
    tag = secrets.token_hex(3)
    gateway = f"zz plant gw {tag}"  # after every flooding name: listed first as it has both types
    await advertised_gateway(gateway_factory, multicast_link.address, gateway)
    bulky = txt_record(**{f"k{index:02d}": "A" * 240 for index in range(3)})  # 740 characters shown
    packets: list[list[Answer]] = []
    for number in range(80):
        name = f"flood {tag} {number:02d}.{BROKER_TYPE}"
        packets.append([pointer(name), *instance(name, f"flood-{tag}-{number}.local.", "198.18.255.9", bulky)])
    async with hostile_host(multicast_link.address, packets):
        await asyncio.sleep(2 * RESEND_S)
        code, out, err = await run_discover("--interface", multicast_link.address)
        assert code == 0, err
        blocks = out.rstrip("\n").split("\n\n")
        assert len(blocks) == 64 + 1, out[-2000:]  # the default --max, then the line that counts the rest
        assert blocks[0].startswith(gateway + "\n")
        assert re.fullmatch(r"\d+ more instances not listed \(raise --max to list them\)", blocks[-1])
        txt_lines = [line for line in out.splitlines() if line.startswith("  txt        ")]
        assert len(txt_lines) == 64
        cut = [line for line in txt_lines[1:] if "… (" in line and "more characters; --json shows them)" in line]
        assert len(cut) == 63
        assert max(len(line) for line in txt_lines) < 600
        assert len(out) < 64 * 1000

        code, out, err = await run_discover("--json", "--max", "3", "--interface", multicast_link.address)
    assert code == 0, err
    listed = orjson.loads(out)
    assert listed[0]["name"] == gateway
    assert len(listed) == 3
    assert len(listed[1]["txt"]["k02"]) == 240  # JSON carries the whole record of what it lists
    assert re.search(r"\d+ more instances not listed", err), err


async def test_discover_refuses_a_max_that_is_no_count() -> None:
    for bad in ("0", "-1", "abc", "10001"):
        code, out, err = await run_discover("--json", "--max", bad, "--timeout", "0.1")
        assert code == 2, (bad, err)
        assert orjson.loads(out)["error"] == "bad_max"
        assert "--max must be a whole number from 1 to 10000" in err


async def test_a_shared_address_record_for_the_srv_target_claims_nothing(
    multicast_link: MulticastLink, gateway_factory: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """An A record without the cache-flush bit is a shared record, anyone's to send (RFC 6762 section 9):
    one such packet every few seconds made the gateway withdraw its services and probe again each time."""
    server = await advertised_gateway(gateway_factory, multicast_link.address, f"shared {secrets.token_hex(3)}")
    assert server.mdns is not None
    target = server.mdns.target_in_use
    for _ in range(2):
        await send_once(multicast_link.address, address_record(target, unique=False))
    seen = set()
    loop = asyncio.get_running_loop()
    until = loop.time() + 2 * mdns.BROWSE_ANSWER_S
    while loop.time() < until:
        seen.add((server.mdns.state, server.mdns.target_in_use))
        await asyncio.sleep(0.02)
    assert seen == {("advertising", target)}
    assert not [record for record in caplog.records if "gives the name up" in record.getMessage()]


async def test_a_srv_target_given_up_is_not_taken_again_and_a_burst_of_conflicts_is_paced(
    multicast_link: MulticastLink, gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A responder that claims the name once and answers no probe: the gateway holds the name it gave up
    (a probe with a fresh cache would find it free and take it again, over and over) and moves on. After
    CONFLICT_LIMIT conflicts within CONFLICT_WINDOW_S the next probe waits CONFLICT_BACKOFF_S (here 2
    conflicts and 3 s, to keep the test short)."""
    monkeypatch.setattr(mdns, "CONFLICT_LIMIT", 2)
    monkeypatch.setattr(mdns, "CONFLICT_BACKOFF_S", 3.0)
    server = await advertised_gateway(gateway_factory, multicast_link.address, f"yield {secrets.token_hex(3)}")
    assert server.mdns is not None
    advertiser = server.mdns
    loop = asyncio.get_running_loop()
    took: list[float] = []
    for number in (1, 2):
        assert advertiser.target_in_use == service_target(server.port, number)
        sent = loop.time()
        await send_once(multicast_link.address, address_record(advertiser.target_in_use, unique=True))
        wanted = service_target(server.port, number + 1)
        await wait_for(partial(holds, advertiser, wanted), 15, f"the gateway to take {wanted}")
        took.append(loop.time() - sent)
    assert took[0] < 3.0, took  # the first conflict: probed at once
    assert took[1] >= 3.0, took  # the second within the window: paced
