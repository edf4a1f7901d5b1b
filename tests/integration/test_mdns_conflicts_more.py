"""A responder that claims every SRV target name the gateway announces: one spoofed AAAA record (cache-flush
bit) per name, as any host on a plant network can send. The gateway gives each name up for the TTL of the
claiming record, says truthfully why no name is left, probes again when the holds end (no reload needed),
and paces a burst of conflicts. And what changes without a conflict (an address, the TXT record) is
updated in place: browsers never see the gateway leave.

The claiming host is a python-zeroconf socket on the test link (tests/support/multicast.py); the bounds
(how many names, how many conflicts before pacing) are made small so the tests are quick.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import secrets
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest
from zeroconf import RecordUpdate, RecordUpdateListener, ServiceStateChange, Zeroconf
from zeroconf._dns import DNSAddress
from zeroconf._protocol.outgoing import DNSOutgoing
from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf
from zeroconf.const import _CLASS_IN, _CLASS_UNIQUE, _FLAGS_AA, _FLAGS_QR_RESPONSE, _TYPE_A, _TYPE_AAAA

from gateway.discovery import mdns
from gateway.discovery.names import service_target
from tests.conftest import GatewayFactory, wait_for
from tests.support.multicast import BROKER_TYPE, MulticastLink, Watcher, ip, make_multicast_link

SPOOFED = socket.inet_pton(socket.AF_INET6, "2001:2:0:c8::99")
"""The address the claimer answers with: AAAA compares above any A record, so the gateway always yields."""


@pytest.fixture(scope="module")
def multicast_link() -> Iterator[MulticastLink]:
    yield from make_multicast_link()


class Claimer(RecordUpdateListener):
    """Whenever the gateway announces an A record for one of `names`, multicast one AAAA record with the
    cache-flush bit for that name (once per name), as /tmp/review-discovery/claimer.py did."""

    def __init__(self, names: set[str], ttl: int) -> None:
        self.names = {name.lower() for name in names}
        self.ttl = ttl
        self.claimed: dict[str, float] = {}
        """Name -> when (loop time) it was claimed."""

    def async_update_records(self, zc: Zeroconf, now: float, records: list[RecordUpdate]) -> None:
        for update in records:
            record = update.new
            name = record.name.lower()
            if (
                isinstance(record, DNSAddress)
                and record.type == _TYPE_A
                and record.ttl > 1
                and name in self.names
                and name not in self.claimed
            ):
                self.claimed[name] = asyncio.get_running_loop().time()
                out = DNSOutgoing(_FLAGS_QR_RESPONSE | _FLAGS_AA)
                claim = DNSAddress(record.name, _TYPE_AAAA, _CLASS_IN | _CLASS_UNIQUE, self.ttl, SPOOFED)
                out.add_answer_at_time(claim, 0)
                zc.async_send(out)


@asynccontextmanager
async def claiming(address: str, names: set[str], ttl: int) -> AsyncIterator[Claimer]:
    peer = AsyncZeroconf(interfaces=[address])
    await peer.zeroconf.async_wait_for_start()
    claimer = Claimer(names, ttl)
    peer.zeroconf.async_add_listener(claimer, None)
    try:
        yield claimer
    finally:
        peer.zeroconf.async_remove_listener(claimer)
        await peer.async_close()


async def test_every_srv_target_claimed_is_probed_again_when_the_claims_expire(
    multicast_link: MulticastLink,
    gateway_factory: GatewayFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One spoofed record per name took every name from the gateway for good: it stopped advertising
    until a reload and said every name "is answered on the network". Here 3 names (not 100) and records
    of TTL 10 s: the gateway says it gave the names up after 3 conflicts, and advertises again once the
    first claim has expired."""
    caplog.set_level(logging.INFO, logger="gateway.mdns")
    monkeypatch.setattr(mdns, "MAX_INSTANCE_NUMBER", 3)
    address = multicast_link.address
    async with claiming(address, set(), ttl=10) as claimer:
        server = await gateway_factory(
            host=address, insecure_lan=True, mdns={"enabled": True, "instance_name": f"claimed {secrets.token_hex(3)}"}
        )
        # The names hold the port, known once the gateway listens; it announces only after probing (1.5 s).
        claimer.names = {service_target(server.port, number).lower() for number in (1, 2, 3)}
        advertiser = server.mdns
        assert advertiser is not None
        states: list[tuple[str, str]] = []

        def note() -> bool:
            states.append((advertiser.state, advertiser.reason))
            return advertiser.state == "failed" and "given up" in advertiser.reason

        await wait_for(note, 40, "every name to be given up")
        reason = advertiser.reason
        first, last = (service_target(server.port, number).rstrip(".") for number in (1, 3))
        assert f"no host name from {first} to {last} is free" in reason, reason
        assert "3 given up after 3 conflicts" in reason, reason
        assert "2001:2:0:c8::99" in reason, reason
        assert "probed again when its hold ends" in reason, reason
        assert "is answered on the network" not in reason, reason
        assert len(claimer.claimed) == 3

        # No reload: the first name's hold (the claim's TTL) ends, the gateway probes it, finds it free.
        await wait_for(
            lambda: advertiser.state == "advertising" and advertiser.target_in_use == service_target(server.port, 1),
            30,
            "the gateway to advertise again once the claims expired",
        )
    warned = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert any("given up after 3 conflicts" in line for line in warned), warned


async def test_a_burst_of_conflicts_slower_than_the_rfc_rate_is_still_paced(
    multicast_link: MulticastLink, gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each give-up and new probe takes about 2.5 s, so CONFLICT_LIMIT conflicts never fell within the
    10 s the pacing counted over and it never waited. Here CONFLICT_LIMIT is 6 (6 conflicts take about
    13 s) and the wait 4 s: the sixth conflict makes the gateway wait before it probes the next name."""
    monkeypatch.setattr(mdns, "MAX_INSTANCE_NUMBER", 8)
    monkeypatch.setattr(mdns, "CONFLICT_LIMIT", 6)
    monkeypatch.setattr(mdns, "CONFLICT_BACKOFF_S", 4.0)
    address = multicast_link.address
    async with claiming(address, set(), ttl=120) as claimer:
        server = await gateway_factory(
            host=address, insecure_lan=True, mdns={"enabled": True, "instance_name": f"burst {secrets.token_hex(3)}"}
        )
        claimer.names = {service_target(server.port, number).lower() for number in range(1, 7)}
        advertiser = server.mdns
        assert advertiser is not None
        loop = asyncio.get_running_loop()
        took: dict[int, float] = {}
        for number in range(2, 8):
            wanted = service_target(server.port, number)
            await wait_for(
                lambda wanted=wanted: advertiser.state == "advertising" and advertiser.target_in_use == wanted,  # type: ignore[misc]
                30,
                f"the gateway to take {wanted}",
            )
            took[number - 1] = loop.time() - claimer.claimed[service_target(server.port, number - 1).lower()]
    assert all(took[number] < 4.0 for number in range(1, 6)), took  # under the limit: probed at once
    assert took[6] >= 4.0, took  # the sixth conflict within the window: paced


def heard(watcher: Watcher, name: str) -> AsyncServiceInfo | None:
    info = AsyncServiceInfo(BROKER_TYPE, name)
    return info if info.load_from_cache(watcher.zeroconf.zeroconf) else None


def heard_addresses(watcher: Watcher, name: str) -> set[str]:
    info = heard(watcher, name)
    return set(info.parsed_addresses()) if info is not None else set()


async def test_a_new_address_or_txt_record_is_updated_in_place_not_withdrawn(
    multicast_link: MulticastLink, gateway_factory: GatewayFactory
) -> None:
    """An address added to the interface (a second DHCP lease), or a reload that changes only the TXT
    record, made the gateway say goodbye and announce itself anew: browsers saw it leave and come back."""
    instance = f"in place {secrets.token_hex(3)}"
    server = await gateway_factory(
        host="0.0.0.0",
        insecure_lan=True,
        mdns={"enabled": True, "instance_name": instance, "interfaces": [multicast_link.interface], "refresh_s": 0.5},
    )
    advertiser = server.mdns
    assert advertiser is not None
    await wait_for(lambda: advertiser.state == "advertising", 15, "the advertisement")
    name = f"{instance}.{BROKER_TYPE}"
    extra = str(ipaddress.ip_address(multicast_link.address) + 1)
    watcher = Watcher(multicast_link.address)
    try:
        watcher.start()
        await wait_for(lambda: watcher.saw(name, ServiceStateChange.Added), 10, "the browser to see the gateway")
        await watcher.resolve(BROKER_TYPE, name)
        assert heard_addresses(watcher, name) == {multicast_link.address}

        added = ip("addr", "add", f"{extra}/32", "dev", multicast_link.interface)
        assert added.returncode == 0, added.stderr
        await wait_for(
            lambda: heard_addresses(watcher, name) == {multicast_link.address, extra}, 10, "the added address"
        )

        config = advertiser.config.model_copy(update={"public_url": "https://gw.plant.lan:3000"})
        await advertiser.reconfigure(config)
        await wait_for(
            lambda: (
                (info := heard(watcher, name)) is not None
                and info.decoded_properties.get("url") == "https://gw.plant.lan:3000"
            ),
            10,
            "the new TXT record",
        )

        ip("addr", "del", f"{extra}/32", "dev", multicast_link.interface)
        # The goodbye for the address takes effect a second after it arrives (RFC 6762 section 10.1).
        await wait_for(lambda: heard_addresses(watcher, name) == {multicast_link.address}, 10, "the address removed")
        assert advertiser.state == "advertising"
        assert not watcher.saw(name, ServiceStateChange.Removed), watcher.events
    finally:
        ip("addr", "del", f"{extra}/32", "dev", multicast_link.interface)
        await watcher.close()
