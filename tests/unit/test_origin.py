"""The Origin/Host predicate (gateway/policy/origin.py) on whole requests: every Origin and Host header
received, and the request target, absolute-form included (RFC 9112 §3.2.2)."""

from __future__ import annotations

import pytest

from gateway.policy.origin import OriginPolicy, target_authority

ALLOWED = ["https://console.plant.lan"]
LOOPBACK = OriginPolicy(ALLOWED, True, ["pump-gw.plant.lan"], "127.0.0.1")
LAN = OriginPolicy(ALLOWED, False, [], "0.0.0.0")


# -- the request target --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "authority"),
    [
        ("/pump-1/mcp", None),  # origin-form, what every client sends to a server
        ("/", None),
        ("*", None),  # asterisk-form (OPTIONS *)
        ("http://evil.example/pump-1/mcp", "evil.example"),
        ("http://evil.example:3000/pump-1/mcp?x=1", "evil.example:3000"),
        ("http://evil.example?x", "evil.example"),
        ("HTTPS://[::1]:3000/x", "[::1]:3000"),
        ("http://localhost@evil.example/x", "evil.example"),  # userinfo names no host
        ("evil.example:443", "evil.example:443"),  # authority-form (CONNECT)
    ],
)
def test_the_authority_of_a_request_target(target: str, authority: str | None) -> None:
    assert target_authority(target) == authority


# -- absolute-form targets -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    [
        "http://evil.example/pump-1/mcp",
        "http://evil.example:3000/provider/pump-1",
        "http://localhost@evil.example/pump-1/mcp",
        "http://127.0.0.1.nip.io:3000/pump-1/mcp",
        "evil.example:443",
    ],
)
def test_an_absolute_form_target_naming_another_host_is_refused_on_loopback(target: str) -> None:
    # The Host header names the gateway, but the target is what the request is for (RFC 9112 §3.2.2).
    refusal = LOOPBACK.check_request([], ["127.0.0.1:3000"], target)
    assert refusal is not None
    assert (refusal.status, refusal.error) == (403, "host_not_allowed")
    authority = target_authority(target)
    assert authority is not None
    assert f"The request target names {authority.rpartition('@')[2]!r}" in refusal.description
    assert "send the path alone" in refusal.description
    assert "allowed_hosts" in refusal.description


@pytest.mark.parametrize(
    "target",
    [
        "http://127.0.0.1:3000/pump-1/mcp",
        "HTTP://LOCALHOST:3000/pump-1/mcp",
        "http://[::1]:3000/pump-1/mcp",
        "https://pump-gw.plant.lan/pump-1/mcp",  # an allowed_hosts entry
    ],
)
def test_an_absolute_form_target_naming_this_gateway_passes(target: str) -> None:
    assert LOOPBACK.check_request([], ["localhost:3000"], target) is None


def test_an_absolute_form_target_does_not_excuse_a_foreign_host_header() -> None:
    refusal = LOOPBACK.check_request([], ["evil.example"], "http://127.0.0.1:3000/pump-1/mcp")
    assert refusal is not None
    assert refusal.error == "host_not_allowed"
    assert "Host 'evil.example' is not a name of this gateway" in refusal.description


def test_the_gateways_own_origin_is_the_targets_authority_in_absolute_form() -> None:
    # A rebinding page naming itself in Origin and target, the Host header borrowed from the gateway.
    refusal = LOOPBACK.check_request(["http://evil.example:3000"], ["localhost:3000"], "http://evil.example:3000/x")
    assert refusal is not None and refusal.error == "origin_not_allowed"
    assert LOOPBACK.check_request(["http://localhost:3000"], ["localhost:3000"], "http://localhost:3000/x") is None


def test_absolute_form_is_not_checked_on_a_lan_bind() -> None:
    # Off loopback no Host is checked (authentication protects that case): the target's name is a Host too.
    assert LAN.check_request([], ["gw.plant.lan"], "http://gw.plant.lan/pump-1/mcp") is None
    assert LAN.check_request([], [], "http://other.plant.lan/pump-1/mcp") is None


# -- Host ----------------------------------------------------------------------------------------


def test_a_request_without_host_is_refused_on_loopback() -> None:
    # HTTP/1.0 lets a client leave Host out; a rebinding page's request would then name no host at all.
    refusal = LOOPBACK.check_request([], [], "/pump-1/mcp")
    assert refusal is not None
    assert (refusal.status, refusal.error) == (403, "host_not_allowed")
    assert refusal.description.startswith("The request has no Host header.")
    assert "send Host: localhost" in refusal.description
    assert LOOPBACK.check(None, None) == refusal  # the one-header predicate says the same


def test_a_request_without_host_passes_on_a_lan_bind() -> None:
    assert LAN.check_request([], [], "/pump-1/mcp") is None


@pytest.mark.parametrize("policy", [LOOPBACK, LAN])
def test_two_host_headers_are_a_malformed_request(policy: OriginPolicy) -> None:
    refusal = policy.check_request([], ["localhost:3000", "evil.example"], "/pump-1/mcp")
    assert refusal is not None
    assert (refusal.status, refusal.error) == (400, "duplicate_host")
    assert refusal.description == (
        "The request carries 2 Host headers; HTTP allows exactly one. Send one Host header naming this gateway."
    )


def test_one_loopback_host_passes() -> None:
    assert LOOPBACK.check_request([], ["localhost:3000"], "/pump-1/mcp") is None


# -- Origin --------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", [LOOPBACK, LAN])
@pytest.mark.parametrize(
    "origins",
    [
        ["https://console.plant.lan", "https://evil.example"],  # the first alone would pass
        ["https://evil.example", "https://console.plant.lan"],
        ["https://console.plant.lan", "https://console.plant.lan"],
    ],
)
def test_two_origin_headers_are_a_malformed_request(policy: OriginPolicy, origins: list[str]) -> None:
    refusal = policy.check_request(origins, ["localhost:3000"], "/pump-1/mcp")
    assert refusal is not None
    assert (refusal.status, refusal.error) == (400, "duplicate_origin")
    assert refusal.description == (
        "The request carries 2 Origin headers; a browser sends one. Send at most one Origin header."
    )


def test_one_origin_is_checked_as_before() -> None:
    assert LOOPBACK.check_request(["https://console.plant.lan"], ["localhost"], "/pump-1/mcp") is None
    refusal = LOOPBACK.check_request(["https://evil.example"], ["localhost"], "/pump-1/mcp")
    assert refusal is not None and (refusal.status, refusal.error) == (403, "origin_not_allowed")
    assert LOOPBACK.check_request([], ["localhost"], "/pump-1/mcp") is None


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        ("http://localhost", True),  # a browser leaves the default port out of Origin
        ("http://localhost:8080", True),
        ("https://localhost", False),  # another scheme
        ("http://localhost:", False),
        ("http://localhost.evil.example", False),
    ],
)
def test_any_port_admits_the_default_port_a_browser_leaves_out(origin: str, allowed: bool) -> None:
    policy = OriginPolicy(["http://localhost:*"], True, [], "127.0.0.1")
    assert policy.origin_allowed(origin) is allowed
