"""The URL `mcp-gateway discover` prints for what it found: a name the certificate holds for TLS, an
address this machine reaches (one on its own networks first, a link-local one with its zone), and an
addresses line cut to a screen."""

from __future__ import annotations

import ipaddress
import socket

from gateway.discovery.browse import TXT_SHOWN_CHARS, Found, render, url_address
from gateway.discovery.names import service_target
from gateway.policy.tls_self_signed import default_names

LAN = [ipaddress.ip_network("192.168.10.0/24"), ipaddress.ip_network("2001:db8:10::/64")]


def found(addresses: list[str], host: str = "vm-3000.local.", port: int = 3000, **txt: str) -> Found:
    return Found("gw", host, port, addresses, {"provider": "/provider/", **txt}, local=LAN)


def test_a_tls_gateway_is_dialled_by_the_host_name_its_certificate_holds() -> None:
    """discover printed https://<ip>:port, an address `tls self-signed` does not put in the certificate
    (nor is the SRV target `<hostname>-<port>.local`): the URL names `<hostname>.local`, which it holds."""
    assert found(["192.168.10.7"], tls="1").url == "https://vm.local:3000"
    assert found(["192.168.10.7"], host="vm-3000-2.local.", tls="1").url == "https://vm.local:3000"
    assert found(["192.168.10.7"], host="Plant-GW-3000.local.", tls="1").url == "https://Plant-GW.local:3000"
    # Another server's SRV target is its own host name: kept.
    assert found(["192.168.10.7"], host="printer.local.", tls="1").url == "https://printer.local:3000"
    # A public_url is the gateway's own word.
    assert found(["192.168.10.7"], tls="1", url="https://gw.plant.lan").url == "https://gw.plant.lan"


def test_a_host_name_cut_to_fit_the_srv_target_label_is_not_guessed() -> None:
    long_target = "h" * (63 - len("-3000")) + "-3000.local."
    assert found(["192.168.10.7"], host=long_target, tls="1").url == f"https://{long_target.rstrip('.')}:3000"


def test_the_tls_name_matches_what_the_gateway_announces_as_its_srv_target() -> None:
    target = service_target(3000)
    hostname = target.removesuffix("-3000.local.")
    assert found(["192.168.10.7"], host=target, tls="1").url == f"https://{hostname}.local:3000"


def test_an_address_on_a_network_of_this_machine_comes_first() -> None:
    """The first address in string order was printed, even one on a network this machine is not on."""
    assert found(["10.9.0.5", "192.168.10.7"]).url == "http://192.168.10.7:3000"
    assert found(["10.9.0.5", "2001:db8:10::7"]).url == "http://[2001:db8:10::7]:3000"
    assert found(["192.168.10.7", "2001:db8:10::7"]).url == "http://192.168.10.7:3000"  # IPv4 first
    assert found(["10.9.0.5"]).url == "http://10.9.0.5:3000"  # nothing nearer: still an address


def test_a_link_local_address_is_the_last_choice_and_carries_its_zone() -> None:
    """fe80::... without its zone is no usable URL: a routable address is preferred, and a link-local one
    alone is written with the interface it was received on (RFC 6874 `%25`)."""
    index, name = socket.if_nameindex()[0]
    assert found([f"fe80::1%{index}", "192.168.10.7"]).url == "http://192.168.10.7:3000"
    assert found([f"fe80::1%{index}"]).url == f"http://[fe80::1%25{name}]:3000"
    # A zone-less link-local address comes after a routable one off this machine's networks.
    assert found(["fe80::1", "10.9.0.5"]).url == "http://10.9.0.5:3000"
    assert found(["fe80::1"]).url == "http://[fe80::1]:3000"
    assert found([]).url == "http://vm-3000.local:3000"


def test_url_address_skips_what_is_no_address() -> None:
    assert url_address(["not an address", "192.168.10.7"], LAN) == "192.168.10.7"
    assert url_address(["nonsense"], LAN) is None


def test_the_addresses_line_is_cut_to_a_screen() -> None:
    """A peer with 1500 A records made a 17 KB addresses line."""
    many = [f"10.{n // 250}.{n % 250}.1" for n in range(1500)]
    out = render([found(many)], 3)
    line = next(line for line in out.splitlines() if line.startswith("  addresses  "))
    assert len(line) < TXT_SHOWN_CHARS + 100, len(line)
    assert "more characters; --json shows them)" in line
    assert found(many).to_json()["addresses"] == many


def test_the_names_discover_prints_for_tls_are_in_the_self_signed_certificate() -> None:
    """`tls self-signed` held neither the address discover printed nor the SRV target: the name discover
    prints is in its default names, and with the port the SRV target is too."""
    names, _ = default_names(3000)
    target = service_target(3000)
    assert target.rstrip(".") in names
    url = found(["192.168.10.7"], host=target, tls="1").url
    assert url.removeprefix("https://").removesuffix(":3000") in names
    assert target.rstrip(".") not in default_names()[0]  # without a port there is no SRV target name
