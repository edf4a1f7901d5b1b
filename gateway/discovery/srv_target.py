"""The SRV target host name, probed before it is announced and watched while it is: two machines of the
same host name whose gateways listen on the same port must not both answer `<hostname>-<port>.local.`,
or a browser takes the addresses of one for the other.

python-zeroconf probes service instance names only; a host name it answers for (the SRV target of a
registered service) is neither probed nor defended. So the gateway asks for the name's address records
itself (RFC 6762 section 8.1) and, once it announced the name, watches for another responder's address
records for it (section 9) and settles the clash as section 8.2 does: the responder whose records
compare lower gives the name up and probes for the next one.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable, Collection, Iterable

from zeroconf import RecordUpdate, RecordUpdateListener, Zeroconf, current_time_millis
from zeroconf._dns import DNSAddress, DNSNsec, DNSQuestion, DNSRecord
from zeroconf._protocol.outgoing import DNSOutgoing
from zeroconf.const import _CLASS_IN, _FLAGS_QR_QUERY, _TYPE_A, _TYPE_AAAA

QUERY_TIMES_S = (0.0, 1.0)
"""When the address question for a candidate name goes out, from the start of its probe. Asked for
multicast answers (a unicast one can reach another mDNS stack's socket on the same machine, see
mdns._free); the second is a second later, as a responder delays an answer it multicast in the last
second (RFC 6762 section 14) and suppresses a repeated question within that second."""
GOODBYE_TTL_S = 1
"""A record received with TTL 0 (a goodbye) is kept for one second (RFC 6762 section 10.1): it does not
hold the name."""


def packed(addresses: Iterable[str]) -> set[bytes]:
    """Address texts (an IPv6 one may carry `%scope`) as the bytes an address record holds."""
    return {ipaddress.ip_address(text.split("%", 1)[0]).packed for text in addresses}


def on_this_machine(holders: Iterable[str], local: Iterable[str]) -> bool:
    """Whether the responders `holders` names (as `holders` gives them) are on this machine: each address
    is one of this machine's `local` interface addresses (another gateway here, bound to another address
    on the same port). False when any is not, or when none is an address (an NSEC-only responder)."""
    mine = packed(local)
    found = []
    for text in holders:
        try:
            found.append(ipaddress.ip_address(text.split("%", 1)[0]).packed)
        except ValueError:
            return False
    return bool(found) and all(address in mine for address in found)


def whose(holders: Iterable[str], local: Iterable[str], host: str, port: int) -> tuple[str, str]:
    """Who else answers the SRV target `<host>-<port>.local.`, and what keeps the names stable: another
    gateway on this machine (`local`: this machine's addresses) on the same port needs another port;
    another machine of the same host name with a gateway on that port needs another host name."""
    if on_this_machine(holders, local):
        return (
            f"another gateway on this machine listens on port {port} at another address",
            "give the gateways on this machine different ports",
        )
    return (
        f"another machine has the host name {host} and a gateway on port {port}",
        "give the machines different host names",
    )


def address_text(record: DNSAddress) -> str:
    address = ipaddress.ip_address(record.address)
    return str(address)


def holders(zeroconf: Zeroconf, name: str, own: Collection[bytes] = ()) -> list[str]:
    """Who else answers `name`: the addresses its records give (sorted), or `a responder with no address
    of that family (NSEC)` when all it sent is the record that says which families it has. Empty: nobody
    else answers the name."""
    now = current_time_millis()
    addresses: set[str] = set()
    denied = False
    for record in zeroconf.cache.async_entries_with_name(name):
        if record.ttl <= GOODBYE_TTL_S or record.is_expired(now):
            continue
        if isinstance(record, DNSAddress) and record.address not in own:
            addresses.add(address_text(record))
        elif isinstance(record, DNSNsec) and not own:
            denied = True
    if not addresses and denied:
        return ["a responder with no address of that family (NSEC)"]
    return sorted(addresses)


async def probe(zeroconf: Zeroconf, name: str, answer_s: float) -> list[str]:
    """Ask the link for `name`'s address records (A and AAAA) and wait `answer_s` for answers; the
    holders found (see `holders`), or an empty list when the name is free."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    for at in QUERY_TIMES_S:
        if at >= answer_s:
            break
        await asyncio.sleep(max(0.0, started + at - loop.time()))
        query = DNSOutgoing(_FLAGS_QR_QUERY)
        for record_type in (_TYPE_A, _TYPE_AAAA):
            query.add_question(DNSQuestion(name, record_type, _CLASS_IN))
        zeroconf.async_send(query)
    await asyncio.sleep(max(0.0, started + answer_s - loop.time()))
    return holders(zeroconf, name)


def yields(own: Collection[bytes], other: bytes, other_type: int) -> bool:
    """RFC 6762 section 8.2's tie-break between two responders answering one name with different
    address records: the one whose greatest record (type, then address bytes) is lower gives way."""
    if not own:
        return True
    mine = max((_TYPE_AAAA if len(address) == 16 else _TYPE_A, address) for address in own)
    return mine < (other_type, other)


class TargetWatch(RecordUpdateListener):
    """Watches the announced SRV target for another responder's address records: `on_clash` is called
    with the other responder's address, whether this gateway is the one to give the name up, and the
    record's TTL (how long browsers keep it).

    Only records sent with the cache-flush bit count: a conflict is between unique records (RFC 6762
    section 9), which every responder that owns a host name sends so (python-zeroconf, avahi). A shared
    record is anyone's to send and claims nothing: acting on one would let a single spoofed packet
    withdraw the gateway's services."""

    def __init__(self, name: str, own: Collection[bytes], on_clash: Callable[[str, bool, float], None]) -> None:
        self.name = name.lower()
        self.own = frozenset(own)
        self.on_clash = on_clash

    def async_update_records(self, zc: Zeroconf, now: float, records: list[RecordUpdate]) -> None:
        for update in records:
            record: DNSRecord = update.new
            if (
                isinstance(record, DNSAddress)
                and record.unique  # only a record sent as unique (cache-flush bit) claims the name
                and record.name.lower() == self.name
                and record.ttl > GOODBYE_TTL_S
                and record.address not in self.own
            ):
                self.on_clash(address_text(record), yields(self.own, record.address, record.type), record.ttl)
