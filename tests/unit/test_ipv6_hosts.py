"""IPv6 wherever the gateway reads a host: the strict authority parser (gateway/config/hosts.py) the Host
check and the audience check share, wildcard binds in any spelling, allowed_hosts and allowed_origins
entries, the SSRF guard's IPv6 addresses that carry an IPv4 one, and IPv6 in error texts."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from pathlib import Path

import orjson
import pytest
from pydantic import ValidationError

from gateway.cli.startup import check_listen_address
from gateway.client import GatewayCallError, GatewayClient
from gateway.config import ConfigError, GatewayConfig
from gateway.config.hosts import (
    Authority,
    MalformedAuthority,
    check_allowed_host,
    host_key,
    ipv6_text,
    is_wildcard,
    parse_authority,
    url_host,
)
from gateway.config.origins import check_origin_entry
from gateway.policy.oauth import OAuthVerifier
from gateway.policy.origin import OriginPolicy
from gateway.policy.ssrf import UpstreamPlace, address_refusal, learned_url_refusal
from gateway.telemetry.metrics import Metrics
from tests.support.oauth import ISSUER, jwks, rsa_key

# -- the authority parser ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("[::1]:3000", Authority("::1", 3000)),
        ("[::1]", Authority("::1", None)),
        ("[::1]:", Authority("::1", None)),  # RFC 3986: port = *DIGIT
        ("[0:0:0:0:0:0:0:1]:3000", Authority("::1", 3000)),
        ("[FD00:0::2]:80", Authority("fd00::2", 80)),
        ("[::ffff:127.0.0.1]:1", Authority("::ffff:7f00:1", 1)),
        ("Pump-GW.plant.lan:3000", Authority("pump-gw.plant.lan", 3000)),
        ("127.0.0.1", Authority("127.0.0.1", None)),
    ],
)
def test_an_authority_is_host_and_port(text: str, parsed: Authority) -> None:
    assert parse_authority(text) == parsed


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[::1].evil.example", "only ':' and a port may follow the IPv6 literal"),
        ("[::1]@evil.example", "only ':' and a port may follow the IPv6 literal"),
        ("[::1]evil", "only ':' and a port may follow the IPv6 literal"),
        ("[::1]:3000:80", "the port must be digits only"),
        ("[::1]:3000x", "the port must be digits only"),
        ("[::1]:99999", "the port must be digits only"),
        ("[::1", "no closing ']'"),
        ("[]:80", "is not an IPv6 address"),
        ("[gggg::1]", "is not an IPv6 address"),
        ("[fe80::1%25eth0]:80", "zone id"),
        ("::1:3000", "RFC 3986 reg-name"),  # an IPv6 address without brackets
        ("user@host:80", "RFC 3986 reg-name"),
        ("", "RFC 3986 reg-name"),
        ("evil example", "RFC 3986 reg-name"),
    ],
)
def test_anything_else_is_malformed_and_says_why(text: str, reason: str) -> None:
    with pytest.raises(MalformedAuthority, match=reason):
        parse_authority(text)


@pytest.mark.parametrize(
    ("address", "browser"),
    [
        ("fd00:0:0:0::2", "fd00::2"),
        ("FD00::3", "fd00::3"),
        ("::ffff:127.0.0.1", "::ffff:7f00:1"),  # hex, as the WHATWG URL serialiser writes it
        ("1:0:0:1:0:0:0:1", "1:0:0:1::1"),  # the longest run of zeros
        ("1:0:0:1:0:0:1:1", "1::1:0:0:1:1"),  # the first of two as long
        ("1:0:1:1:1:1:1:1", "1:0:1:1:1:1:1:1"),  # a single zero piece stays
        ("::", "::"),
    ],
)
def test_ipv6_is_spelled_as_a_browser_serialises_it(address: str, browser: str) -> None:
    assert ipv6_text(ipaddress.IPv6Address(address)) == browser


def test_host_keys_compare_addresses_not_spellings() -> None:
    assert host_key("[0:0::1]") == host_key("::1") == host_key("0:0:0:0:0:0:0:1") == "::1"
    assert host_key("LocalHost") == "localhost"


# -- wildcard binds ----------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["", "0.0.0.0", "::", "::0", "0:0::0", "0:0:0:0:0:0:0:0"])
def test_every_spelling_of_a_wildcard_is_one(host: str) -> None:
    assert is_wildcard(host)


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("0.0.0.0", "http://127.0.0.1:3000"),
        ("", "http://127.0.0.1:3000"),  # every interface of both families: IPv4 loopback answers
        ("::", "http://[::1]:3000"),  # asyncio binds "::" IPv6-only: nothing at 127.0.0.1
        ("::0", "http://[::1]:3000"),
        ("0:0:0:0:0:0:0:0", "http://[::1]:3000"),
        ("fd00::2", "http://[fd00::2]:3000"),
        ("127.0.0.1", "http://127.0.0.1:3000"),
    ],
)
def test_the_gateways_own_url_for_a_bind_address(host: str, url: str) -> None:
    assert GatewayConfig.model_validate({"host": host, "port": 3000, "insecure_lan": True}).base_url() == url
    assert f"http://{url_host(host)}:3000" == url


@pytest.mark.parametrize("host", ["::", "::0", "0:0::0", "0:0:0:0:0:0:0:0", "0.0.0.0"])
def test_oauth_on_a_wildcard_in_any_spelling_needs_public_url(host: str, tmp_path: Path) -> None:
    keys = tmp_path / "jwks.json"
    keys.write_bytes(orjson.dumps(jwks(rsa_key())))
    auth = {"oauth": {"issuer": ISSUER, "jwks_file": str(keys)}}
    config = GatewayConfig.model_validate({"host": host, "auth": auth})
    with pytest.raises(ConfigError, match="set public_url"):
        OAuthVerifier.from_config(config, Metrics())


# -- the Host check ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host", ["[::1].evil.example", "[::1]@evil.example", "[::1]evil", "[::1]:42780:80", "[::1]x", "[::1"]
)
def test_a_host_that_only_starts_like_a_loopback_literal_is_refused(host: str) -> None:
    policy = OriginPolicy([], True, [], "::1")
    refusal = policy.check(None, host)
    assert refusal is not None and (refusal.status, refusal.error) == (403, "host_not_allowed")
    assert "malformed" in refusal.description
    # Nor does its Origin pass as the gateway's own.
    assert not policy.own_origin(f"http://{host}", host)


@pytest.mark.parametrize("host", ["[::1]:3000", "[0:0::1]:3000", "[0:0:0:0:0:0:0:1]:3000", "localhost:3000"])
def test_any_spelling_of_the_bind_address_passes(host: str) -> None:
    policy = OriginPolicy([], True, [], "0:0:0:0:0:0:0:1")
    assert policy.check(None, host) is None
    assert policy.check(f"http://{host}", host) is None  # the gateway's own origin


def test_the_own_origin_compares_addresses() -> None:
    policy = OriginPolicy([], True, [], "::1")
    assert policy.own_origin("http://[::1]:3000", "[0:0::1]:3000")
    assert not policy.own_origin("http://[::1]:3001", "[::1]:3000")
    assert not policy.own_origin("ftp://[::1]:3000", "[::1]:3000")


def test_a_malformed_host_on_a_lan_bind_is_no_own_origin_either() -> None:
    policy = OriginPolicy([], False, [], "::")
    refusal = policy.check("http://[::1].evil.example", "[::1].evil.example")
    assert refusal is not None and refusal.error == "origin_not_allowed"


# -- allowed_hosts and allowed_origins entries -------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "kept"),
    [
        ("fd00::2", "fd00::2"),
        ("[fd00::2]", "fd00::2"),
        ("FD00::4", "fd00::4"),
        ("[fd00:0::5]", "fd00::5"),
        ("10.0.0.5", "10.0.0.5"),
        ("Pump-GW.plant.lan", "pump-gw.plant.lan"),
    ],
)
def test_allowed_hosts_entries_are_kept_as_addresses(entry: str, kept: str) -> None:
    assert check_allowed_host(entry) == kept
    assert GatewayConfig.model_validate({"allowed_hosts": [entry]}).allowed_hosts == [kept]


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("[fd00::2", "no closing ']'"),
        ("[]", "is not an IPv6 address"),
        ("[gggg::1]", "is not an IPv6 address"),
        ("http://pi.local", "names a scheme"),
        ("pi local", "is not a name or address"),
        ("pi.local:99999", "the port must be digits only"),
    ],
)
def test_a_malformed_allowed_hosts_entry_stops_the_load(entry: str, reason: str) -> None:
    with pytest.raises(ValidationError, match=reason):
        GatewayConfig.model_validate({"allowed_hosts": [entry]})


def test_allowed_hosts_in_any_spelling_pass_the_host_check() -> None:
    config = GatewayConfig.model_validate({"allowed_hosts": ["fd00::2", "[fd00::3]", "FD00::4", "[fd00:0::5]"]})
    policy = OriginPolicy([], True, config.allowed_hosts, "::1")
    for host in ("[fd00::2]:3000", "[fd00::3]:3000", "[fd00::4]:3000", "[FD00:0:0::5]:3000"):
        assert policy.check(None, host) is None
    assert policy.check(None, "[fd00::6]:3000") is not None


@pytest.mark.parametrize(
    ("entry", "browser"),
    [
        ("http://[fd00:0:0:0::2]:8081", "http://[fd00::2]:8081"),
        ("http://[::ffff:127.0.0.1]:8083", "http://[::ffff:7f00:1]:8083"),
        ("http://[::1]:*", "http://[::1]:*"),
        ("https://[fd00::2]", "https://[fd00::2]"),
    ],
)
def test_an_ipv6_origin_entry_is_kept_as_a_browser_sends_it(entry: str, browser: str) -> None:
    assert check_origin_entry(entry) == browser
    policy = OriginPolicy([check_origin_entry(entry)], True, [], "127.0.0.1")
    assert policy.origin_allowed(browser.replace(":*", ":8080"))


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("http://[::1", "no closing"),
        ("http://[]:8080", "is not an IPv6 address"),
        ("http://[gggg::1]:8080", "is not an IPv6 address"),
        ("http://[fd00::*]:8080", "cannot stand for part of an IPv6 address"),
        ("http://a:b:8080", "neither a name nor an IPv6 address"),
    ],
)
def test_a_malformed_ipv6_origin_entry_stops_the_load(entry: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        check_origin_entry(entry)


# -- the SSRF guard ----------------------------------------------------------------------------------

PUBLIC = UpstreamPlace(frozenset({ipaddress.ip_address("93.184.216.34")}))


@pytest.mark.parametrize(
    ("address", "refused"),
    [
        ("64:ff9b::a00:5", "carries the IPv4 address 10.0.0.5 (NAT64, 64:ff9b::/96): 10.0.0.5 is a private address"),
        ("64:ff9b::7f00:1", "carries the IPv4 address 127.0.0.1 (NAT64"),
        ("64:ff9b::a9fe:a9fe", "carries the cloud metadata address 169.254.169.254 (NAT64"),
        ("64:ff9b:1::a00:5", "private address (NAT64 local-use prefix 64:ff9b:1::/48"),
        ("64:ff9b:1::808:808", "private address (NAT64 local-use prefix"),  # whatever it carries
        ("2002:a00:5::1", "carries the IPv4 address 10.0.0.5 (6to4, 2002::/16)"),
        ("2002:c0a8:101::1", "carries the IPv4 address 192.168.1.1 (6to4"),
        ("::a00:5", "carries the IPv4 address 10.0.0.5 (IPv4-compatible, ::/96)"),
        ("::a9fe:a9fe", "cloud metadata address 169.254.169.254 (IPv4-compatible"),
        # Teredo: server 65.54.227.120, client 10.0.0.5 (stored as its complement).
        ("2001:0:4136:e378:8000:63bf:f5ff:fffa", "carries the IPv4 address 10.0.0.5 (Teredo client"),
        ("2001:0:a00:5:8000:63bf:f7f7:f7f7", "carries the IPv4 address 10.0.0.5 (Teredo server"),
        ("::ffff:0:a00:5", "carries the IPv4 address 10.0.0.5 (IPv4-translated, ::ffff:0:0:0/96)"),
        ("::ffff:0:a9fe:a9fe", "cloud metadata address 169.254.169.254 (IPv4-translated"),
        ("2606:4700::5efe:a00:5", "carries the IPv4 address 10.0.0.5 (ISATAP"),
        ("2606:4700::200:5efe:a9fe:a9fe", "cloud metadata address 169.254.169.254 (ISATAP"),
        ("fec0::1", "site-local (fec0::/10)"),
        ("2606:4700::5efe:808:808", None),  # ISATAP to a public IPv4 tunnel end
        ("64:ff9b::808:808", None),  # 8.8.8.8 through NAT64
        ("2002:808:808::1", None),
        ("::808:808", None),
        ("2001:0:808:808:0:0:f7f7:f7f7", None),  # Teredo with a public server and client
        ("::ffff:10.0.0.5", "10.0.0.5 is a private address"),  # IPv4-mapped, as before
        ("::1", "loopback address"),
        ("2606:4700::1111", None),
    ],
)
def test_an_ipv6_address_carrying_an_ipv4_one_is_judged_by_it(address: str, refused: str | None) -> None:
    reason = address_refusal(ipaddress.ip_address(address), PUBLIC)
    if refused is None:
        assert reason is None
    else:
        assert reason is not None and refused in reason


def test_the_configured_upstreams_own_nat64_address_is_allowed() -> None:
    own = UpstreamPlace(frozenset({ipaddress.ip_address("64:ff9b::a00:5")}))
    assert address_refusal(ipaddress.ip_address("64:ff9b::a00:5"), own) is None
    assert address_refusal(ipaddress.ip_address("64:ff9b::a00:6"), own) is not None


def test_a_learned_url_on_a_nat64_literal_is_refused_before_any_connection() -> None:
    reason = learned_url_refusal("https://[64:ff9b::a00:5]/token", PUBLIC)
    assert reason is not None and "10.0.0.5" in reason


# -- error texts -------------------------------------------------------------------------------------


def test_a_bracketed_host_is_named_with_the_address_to_write() -> None:
    with pytest.raises(ConfigError, match=r"write the IPv6 address without brackets: host = '::1' \(--host ::1\)"):
        check_listen_address("[::1]")


def test_a_link_local_host_without_interface_is_told_to_name_one() -> None:
    with pytest.raises(ConfigError, match=r"a link-local address is bound on one interface: .*fe80::fc:ff:fe00:1%eth0"):
        check_listen_address("fe80::fc:ff:fe00:1")


def test_the_host_hint_names_ipv6_too() -> None:
    with pytest.raises(ConfigError) as refused:
        check_listen_address("999.1.1.1")
    assert ":: over IPv6" in str(refused.value) and "127.0.0.1 or ::1 for this machine only" in str(refused.value)


def free_ipv6_port() -> int | None:
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET6) as probe:
        probe.bind(("::1", 0))
        return int(probe.getsockname()[1])
    return None


async def test_an_unreachable_ipv6_gateway_is_named_in_brackets() -> None:
    port = free_ipv6_port()
    if port is None:
        pytest.fail("this machine has no IPv6 loopback (::1): this test needs it")
    async with GatewayClient(f"http://[::1]:{port}", "_broker", timeout_s=5) as client:
        with pytest.raises(GatewayCallError) as refused:
            await client.list_tools()
    assert str(refused.value) == (
        f"cannot reach the gateway at http://[::1]:{port}/_broker/mcp: "
        f"cannot connect to [::1]:{port}: Connection refused. Is `mcp-gateway run` running there? "
        "Point elsewhere with --url (or $MCP_GATEWAY_URL)"
    )


async def test_a_percent_encoded_zone_id_is_explained() -> None:
    async with GatewayClient("http://[fe80::1%25nosuchif0]:3000", "_broker", timeout_s=5) as client:
        with pytest.raises(GatewayCallError) as refused:
            await client.list_tools()
    assert "not decoded from %25 (RFC 6874)" in str(refused.value)
    assert "[fe80::1%eth0]" in str(refused.value)
