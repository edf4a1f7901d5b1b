"""Which URLs learned from a remote upstream the gateway may follow (server-side request forgery guard).

The operator configures an upstream's URL (and, for OAuth, its token URL): those are trusted as
written. Everything else the gateway could be told to fetch comes from the upstream and is checked:

- Same-origin URLs only, for a legacy SSE `endpoint` event and for redirects: scheme, host and port
  equal to the configured URL's (at most MAX_REDIRECTS redirects, never to another host).
- Other hosts only for OAuth metadata (RFC 9728 `resource_metadata`, RFC 8414 authorization-server
  metadata, the token endpoint they name): https (http only to a loopback host), no user info, and
  the addresses the name resolves to must be public, or loopback when the configured upstream is on
  loopback, or exactly one of the configured upstream's own addresses. Cloud metadata addresses
  are never allowed. An IPv6 address that carries an IPv4 one (IPv4-mapped, NAT64, 6to4, Teredo,
  IPv4-compatible) is judged by the IPv4 address it reaches. The check runs on the resolved
  addresses the connection then uses (GuardedResolver), so a name that resolves differently a
  second time cannot slip past it.

The rules are pure functions of URLs and addresses; only GuardedResolver does I/O.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_REDIRECTS = 3
DEFAULT_PORTS = {"http": 80, "https": 443}
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(text)
    for text in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack instance metadata
        "169.254.170.2",  # AWS ECS task metadata
        "fd00:ec2::254",  # AWS instance metadata over IPv6
        "100.100.100.200",  # Alibaba Cloud metadata
    )
)


NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052: the IPv4 address in the last 32 bits
NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215: translated to the site's own network
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")  # deprecated (RFC 4291), still routed by some stacks
IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")  # SIIT (RFC 2765): the IPv4 address in the last 32 bits
ISATAP_IDS = (0x00005EFE, 0x02005EFE)  # RFC 5214: an interface id of 0:5efe or 200:5efe, then the IPv4 address


class SsrfRefused(OSError):
    """A learned URL, redirect or resolved address the guard does not allow; the message says why."""


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"


def origin_of(url: str) -> Origin:
    """Scheme, lower-cased host and explicit port of an absolute http(s) URL (ValueError otherwise)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"{url!r} is not an absolute http(s) URL")
    port = parts.port if parts.port is not None else DEFAULT_PORTS[scheme]
    return Origin(scheme, parts.hostname.lower(), port)


def _literal(host: str) -> IPAddress | None:
    try:
        address = ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped if mapped is not None else address


def is_loopback_name(host: str) -> bool:
    address = _literal(host)
    if address is not None:
        return address.is_loopback
    host = host.lower().rstrip(".")
    return host == "localhost" or host.endswith(".localhost")


@dataclass(frozen=True)
class UpstreamPlace:
    """Where the configured upstream itself is: the addresses its host resolved to."""

    addresses: frozenset[IPAddress] = frozenset()

    @property
    def on_loopback(self) -> bool:
        return any(address.is_loopback for address in self.addresses)


def embedded_ipv4(address: IPAddress) -> list[tuple[ipaddress.IPv4Address, str]]:
    """The IPv4 addresses an IPv6 address carries by translation or tunnelling, each with the scheme's
    name: a packet to the IPv6 address reaches (or comes from) the IPv4 one. Teredo carries two, its
    server and its client (de-obfuscated); the other schemes one. Empty for any other address."""
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    mapped = address.ipv4_mapped
    if mapped is not None:
        return [(mapped, "IPv4-mapped, ::ffff:0:0/96")]
    low_32 = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in NAT64_WELL_KNOWN:
        return [(low_32, "NAT64, 64:ff9b::/96")]
    if address in IPV4_TRANSLATED:
        return [(low_32, "IPv4-translated, ::ffff:0:0:0/96")]
    if address.sixtofour is not None:
        return [(address.sixtofour, "6to4, 2002::/16")]
    if address.teredo is not None:
        server, client = address.teredo
        return [(server, "Teredo server, 2001::/32"), (client, "Teredo client, 2001::/32")]
    if address in IPV4_COMPATIBLE and int(address) > 1:  # ::1 is loopback and :: unspecified, not IPv4
        return [(low_32, "IPv4-compatible, ::/96")]
    if (int(address) >> 32) & 0xFFFFFFFF in ISATAP_IDS:
        return [(low_32, "ISATAP, <prefix>:0:5efe:a.b.c.d")]
    return []


def address_refusal(address: IPAddress, place: UpstreamPlace) -> str | None:
    """Why the gateway may not connect to `address` for a learned URL, or None when it may.

    An IPv6 address that carries an IPv4 one (embedded_ipv4) is judged by that IPv4 address: on an
    IPv6-only network with NAT64, [64:ff9b::a00:5] is 10.0.0.5. The NAT64 local-use prefix
    (64:ff9b:1::/48, RFC 8215) translates to the site's own IPv4 network: a private address."""
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address = mapped
    carried = embedded_ipv4(address)
    if address in METADATA_ADDRESSES:
        return f"{address} is a cloud metadata address"
    for ipv4, scheme in carried:
        if ipv4 in METADATA_ADDRESSES:
            return f"{address} carries the cloud metadata address {ipv4} ({scheme})"
    if address in place.addresses:
        return None
    if address in NAT64_LOCAL_USE:
        return (
            f"{address} is a private address (NAT64 local-use prefix 64:ff9b:1::/48, the site's own IPv4 "
            "network) other than the configured upstream's own"
        )
    if carried:
        for ipv4, scheme in carried:
            reason = _plain_refusal(ipv4, place)
            if reason is not None:
                return f"{address} carries the IPv4 address {ipv4} ({scheme}): {reason}"
        return None
    return _plain_refusal(address, place)


def _plain_refusal(address: IPAddress, place: UpstreamPlace) -> str | None:
    """address_refusal for an address that carries no other (metadata addresses already refused)."""
    if address.is_loopback:
        if place.on_loopback:
            return None
        return f"{address} is a loopback address and the configured upstream is not on loopback"
    site_local = isinstance(address, ipaddress.IPv6Address) and address.is_site_local  # fec0::/10, a site's own
    if address.is_global and not address.is_multicast and not site_local:
        return None
    if address in place.addresses:
        return None
    if address.is_unspecified:
        kind = "unspecified"
    elif address.is_multicast:
        kind = "multicast"
    elif address.is_link_local:
        kind = "link-local"
    elif site_local:
        kind = "site-local (fec0::/10)"
    elif address.is_private:
        kind = "private"
    else:
        kind = "non-public"
    return f"{address} is a {kind} address other than the configured upstream's own"


def learned_url_refusal(url: str, place: UpstreamPlace) -> str | None:
    """Why a URL learned from upstream metadata (on any host) may not be fetched, or None when it may.

    Checks what the URL itself shows; a host name is checked again after resolution (GuardedResolver)."""
    try:
        where = origin_of(url)
    except ValueError as exc:
        return str(exc)
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        return f"{url!r} carries user info"
    if where.scheme != "https" and not is_loopback_name(where.host):
        return f"{url!r} is plain http to a host that is not loopback; only https may be followed"
    literal = _literal(where.host)
    if literal is not None:
        return address_refusal(literal, place)
    return None


def same_origin_url(learned: str, base: str, what: str) -> str:
    """Resolve `learned` (absolute or relative) against `base`; refuse it unless it stays on base's origin."""
    absolute = urljoin(base, learned)
    try:
        target = origin_of(absolute)
    except ValueError:
        raise SsrfRefused(f"{what} {learned!r} is not an http(s) URL") from None
    home = origin_of(base)
    if target != home:
        raise SsrfRefused(f"{what} {learned!r} leaves the upstream's origin {home}; not followed")
    parts = urlsplit(absolute)
    if parts.username is not None or parts.password is not None:
        raise SsrfRefused(f"{what} {learned!r} carries user info; not followed")
    return absolute


class GuardedResolver(AbstractResolver):
    """An aiohttp resolver that hands the connector only the addresses `address_refusal` allows."""

    def __init__(self, place: UpstreamPlace, inner: AbstractResolver | None = None) -> None:
        self.place = place
        self._inner = inner if inner is not None else DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        allowed: list[ResolveResult] = []
        reasons: list[str] = []
        for result in results:
            address = _literal(result["host"])
            reason = "unparsable address" if address is None else address_refusal(address, self.place)
            if reason is None:
                allowed.append(result)
            else:
                reasons.append(reason)
        if not allowed:
            raise SsrfRefused(f"{host} resolves only to addresses the gateway will not reach: {'; '.join(reasons)}")
        return allowed

    async def close(self) -> None:
        await self._inner.close()


async def resolve_place(host: str) -> UpstreamPlace:
    """The configured upstream's addresses (empty when its name does not resolve right now)."""
    literal = _literal(host)
    if literal is not None:
        return UpstreamPlace(frozenset({literal}))
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return UpstreamPlace()
    found: set[IPAddress] = set()
    for info in infos:
        address = _literal(str(info[4][0]))
        if address is not None:
            found.add(address)
    return UpstreamPlace(frozenset(found))
