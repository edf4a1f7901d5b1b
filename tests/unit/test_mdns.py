"""mDNS without the network: which addresses are advertised, what the TXT record holds, how it is
switched on, and the appliance's default configuration (tests/integration/test_mdns.py puts it on
a real link)."""

from __future__ import annotations

import secrets
import socket
from pathlib import Path

import orjson
import pytest

from gateway.cli import _config_flags, build_parser, main, refuse_insecure_bind
from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.discovery.interfaces import (
    HostAddress,
    UnknownInterface,
    multicast_sockets,
    resolve_interfaces,
    served_addresses,
)
from gateway.discovery.mdns import txt_properties
from gateway.discovery.names import (
    default_instance_name,
    host_label,
    host_label_differs,
    instance_candidate,
    service_target,
)
from gateway.discovery.srv_target import packed, whose, yields
from gateway.policy.client_auth import check_client_auth
from gateway.policy.tls_self_signed import create as create_tls
from gateway.policy.token_files import create_token

REPO = Path(__file__).resolve().parents[2]

MACHINE = [
    HostAddress("lo", "127.0.0.1", 1),
    HostAddress("lo", "::1", 1),
    HostAddress("eth0", "192.168.1.20", 2),
    HostAddress("eth0", "fe80::1", 2),
    HostAddress("eth0", "fd00::20", 2),
    HostAddress("wlan0", "10.0.0.7", 3),
]


def addresses(bound: list[str], only: list[str] | None = None) -> list[str]:
    return [entry.address for entry in served_addresses(bound, MACHINE, only or [])]


def test_a_wildcard_bind_advertises_every_address_of_its_family_but_loopback() -> None:
    assert addresses(["0.0.0.0"]) == ["192.168.1.20", "10.0.0.7"]
    # asyncio binds "::" IPv6-only: IPv4 peers could not connect, so no IPv4 address is advertised.
    assert addresses(["::"]) == ["fe80::1", "fd00::20"]
    assert addresses(["0.0.0.0", "::"]) == ["192.168.1.20", "fe80::1", "fd00::20", "10.0.0.7"]


def test_a_specific_bind_advertises_that_address_only() -> None:
    assert addresses(["10.0.0.7"]) == ["10.0.0.7"]


def test_a_loopback_bind_advertises_nothing() -> None:
    assert addresses(["127.0.0.1"]) == []
    assert addresses(["::1"]) == []


def test_interfaces_keep_the_listed_names_and_addresses() -> None:
    assert addresses(["0.0.0.0"], ["eth0"]) == ["192.168.1.20"]
    assert addresses(["0.0.0.0"], ["10.0.0.7"]) == ["10.0.0.7"]
    assert addresses(["10.0.0.7"], ["eth0"]) == []  # listed, but the listener does not serve it


def test_an_interface_is_picked_by_name_or_by_one_of_its_addresses() -> None:
    """`discover --interface` takes what [mdns] interfaces takes: a name, or an address of the interface."""
    eth0 = ["192.168.1.20", "fe80::1", "fd00::20"]
    assert [entry.address for entry in resolve_interfaces(["eth0"], MACHINE)] == eth0
    assert [entry.address for entry in resolve_interfaces(["fd00::20"], MACHINE)] == eth0
    assert [entry.address for entry in resolve_interfaces(["wlan0", "192.168.1.20"], MACHINE)] == [*eth0, "10.0.0.7"]


@pytest.mark.parametrize("wanted", ["eth9", "", "10.9.9.9"])
def test_an_interface_this_machine_does_not_have_is_named_in_the_error(wanted: str) -> None:
    with pytest.raises(UnknownInterface, match=f"named {wanted!r} .*interfaces with an address: eth0, lo, wlan0"):
        resolve_interfaces([wanted], MACHINE)


def test_the_multicast_group_is_joined_once_per_interface_and_family() -> None:
    """IPv4 joins by address, IPv6 by interface index; loopback never."""
    assert multicast_sockets(["eth0"], MACHINE) == ["192.168.1.20", 2]
    assert multicast_sockets(["eth0", "wlan0"], MACHINE) == ["192.168.1.20", 2, "10.0.0.7"]
    assert multicast_sockets(["lo"], MACHINE) == []


@pytest.mark.parametrize("args", [["--interface", "no-such-if0"], ["--interface", ""], ["--interface", "203.0.113.77"]])
def test_discover_refuses_an_unknown_interface_by_name_and_as_json(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A name used to crash with a traceback, an address this machine lacks to print `[Errno 19]` and
    no JSON: now both are named errors, exit 2, with the error as a JSON object on stdout for --json."""
    assert main(["discover", *args, "--json", "--timeout", "0.1"]) == 2
    out, err = capsys.readouterr()
    answer = orjson.loads(out)
    assert answer["error"] == "unknown_interface"
    assert f"named {args[1]!r}" in answer["message"]
    assert err.startswith("mcp-gateway discover: --interface: no interface of this machine")
    assert main(["discover", *args, "--timeout", "0.1"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert f"named {args[1]!r}" in err


def test_the_txt_record_says_how_to_connect_and_names_nothing_behind_the_gateway() -> None:
    digest = "ab" * 32
    config = GatewayConfig.model_validate(
        {
            "host": "0.0.0.0",
            "public_url": "https://gateway.plant.lan:3000/",
            "slots": {"declared": {"secret-pump-77": {}}},
            "groups": {"hidden-group-42": {"slots": ["secret-*"]}},
            "auth": {
                "tokens": [{"name": "scada-ops-13", "sha256": digest}],
                "required_scopes": {"secret-pump-77": ["scope-zeta-9"]},
            },
            "providers": {
                "auth": {
                    "mode": "identities",
                    "identities": [{"name": "board-kappa-5", "sha256": "cd" * 32, "slots": ["pump-omega-*"]}],
                }
            },
        }
    )
    txt = txt_properties(config)
    assert txt == {
        "txtvers": "1",
        "version": txt["version"],
        "proto": "2025-11-25,2026-07-28",
        "tls": "0",
        "auth": "token",
        "pauth": "identities",
        "provider": "/provider/",
        "providers": "/providers",
        "client": "/{slot}/mcp",
        "all": "/_all/mcp",
        "broker": "/_broker/mcp",
        "path": "/_all/mcp",
        "url": "https://gateway.plant.lan:3000",
    }
    advertised = " ".join([*txt, *txt.values(), default_instance_name()])
    for name in ("secret-pump-77", "hidden-group-42", "scada-ops-13", "scope-zeta-9", "board-kappa-5", "omega", digest):
        assert name not in advertised


def test_mdns_is_off_by_default_and_switched_by_file_environment_and_flag(tmp_path: Path) -> None:
    assert load_config(environ={}).mdns.enabled is False
    assert load_config(environ={"MCP_GATEWAY_MDNS__ENABLED": "true"}).mdns.enabled is True
    on = tmp_path / "on.toml"
    on.write_text("[mdns]\nenabled = true\n")
    assert load_config(on, environ={}).mdns.enabled is True
    parser = build_parser()
    off = _config_flags(parser.parse_args(["run", "--no-mdns"]))
    assert load_config(on, environ={}, flags=off).mdns.enabled is False
    assert load_config(environ={}, flags=_config_flags(parser.parse_args(["run", "--mdns"]))).mdns.enabled is True
    assert "mdns.enabled" not in _config_flags(parser.parse_args(["run"]))  # the file decides


@pytest.mark.parametrize("name", ["", "   ", "x" * 64, "é" * 32, "line\n3"])
def test_an_instance_name_that_cannot_be_a_dns_label_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match=r"mdns\.instance_name"):
        load_config(environ={}, flags={"mdns.instance_name": name})


def test_an_instance_name_with_a_dot_is_refused_and_says_why() -> None:
    """python-zeroconf writes every dot as a label separator (it has no `\\.` escape): "v2.1" went out as
    two labels, and avahi did not see the gateway."""
    with pytest.raises(ConfigError, match=r"mdns\.instance_name.*cannot hold a dot"):
        load_config(environ={}, flags={"mdns.instance_name": "Pump hall v2.1"})


@pytest.mark.parametrize(
    ("name", "number", "taken"),
    [
        ("Line 3", 2, "Line 3-2"),
        ("L" * 63, 2, "L" * 61 + "-2"),
        ("L" * 63, 10, "L" * 60 + "-10"),
        ("é" * 31 + "x", 2, "é" * 30 + "-2"),  # cut before the character that would not fit whole
    ],
)
def test_the_name_taken_after_a_conflict_stays_one_dns_label(name: str, number: int, taken: str) -> None:
    assert instance_candidate(name, 1) == name
    assert instance_candidate(name, number) == taken
    assert len(taken.encode("utf-8")) <= 63


def test_a_hostname_that_is_not_a_dns_name_is_answered_in_its_dns_form_and_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "plant_gw.example.com")
    assert host_label() == "plant-gw.local."
    assert service_target(3000) == "plant-gw-3000.local."
    reason = host_label_differs()
    assert reason is not None and "'plant_gw' is not a DNS name" in reason and "boards dial plant-gw.local" in reason
    monkeypatch.setattr(socket, "gethostname", lambda: "plantgw")
    assert host_label_differs() is None
    monkeypatch.setattr(socket, "gethostname", lambda: "x" * 70)
    assert service_target(3000) == "x" * 58 + "-3000.local."


def test_a_taken_srv_target_is_numbered_within_one_dns_label(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "plantgw")
    assert service_target(3000, 1) == "plantgw-3000.local."
    assert service_target(3000, 2) == "plantgw-3000-2.local."
    monkeypatch.setattr(socket, "gethostname", lambda: "x" * 70)
    assert service_target(3000, 100) == "x" * 54 + "-3000-100.local."


def test_of_two_responders_answering_one_srv_target_exactly_one_gives_it_up() -> None:
    """RFC 6762 section 8.2: the greatest record (type, then address bytes) wins; each side reaches the
    same verdict from the records it hears, so the name is never given up by both or by neither."""
    a_type, aaaa_type = 1, 28
    line_a = packed(["198.18.42.1"])
    line_e = packed(["198.18.42.2", "fe80::1%eth0"])
    # Line E's AAAA record is the greatest: line A gives the name up on hearing it, line E never does.
    assert yields(line_a, packed(["fe80::1"]).pop(), aaaa_type) is True
    assert yields(line_a, packed(["198.18.42.2"]).pop(), a_type) is True
    assert yields(line_e, packed(["198.18.42.1"]).pop(), a_type) is False
    # IPv4 only on both sides: the higher address keeps the name.
    assert yields(packed(["198.18.42.2"]), packed(["198.18.42.1"]).pop(), a_type) is False
    assert yields(packed(["198.18.42.1"]), packed(["198.18.42.2"]).pop(), a_type) is True


def test_a_srv_target_answered_from_this_machine_blames_another_gateway_here_not_another_machine() -> None:
    """Two gateways on one machine on one port, bound to different addresses, answer one SRV target: the
    warning says so and advises other ports; a responder elsewhere is another machine of the same name."""
    local = ["127.0.0.1", "192.0.2.2", "fd00::2", "fe80::1"]
    here = (
        "another gateway on this machine listens on port 3000 at another address",
        "give the gateways on this machine different ports",
    )
    elsewhere = (
        "another machine has the host name plantgw and a gateway on port 3000",
        "give the machines different host names",
    )
    assert whose(["192.0.2.2"], local, "plantgw", 3000) == here
    assert whose(["fd00::2", "fe80::1%eth0"], local, "plantgw", 3000) == here
    assert whose(["192.168.1.20"], local, "plantgw", 3000) == elsewhere
    assert whose(["192.0.2.2", "192.168.1.20"], local, "plantgw", 3000) == elsewhere  # one is elsewhere
    assert whose(["a responder with no address of that family (NSEC)"], local, "plantgw", 3000) == elsewhere
    assert whose([], local, "plantgw", 3000) == elsewhere


def test_tls_self_signed_says_the_hostname_is_no_dns_name_not_a_flag_never_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(socket, "gethostname", lambda: "plant_gw")
    assert main(["tls", "self-signed", "--dir", str(tmp_path / "tls")]) == 2
    err = capsys.readouterr().err
    assert "this machine's hostname 'plant_gw' is not a DNS name" in err
    assert "--host plant-gw.local" in err
    assert "--host 'plant_gw'" not in err
    assert not (tmp_path / "tls").exists()
    assert main(["tls", "self-signed", "--dir", str(tmp_path / "tls"), "--host", "plant-gw.local"]) == 0


def test_an_instance_name_of_63_bytes_is_accepted() -> None:
    assert load_config(environ={}, flags={"mdns.instance_name": "é" * 31 + "x"}).mdns.instance_name == "é" * 31 + "x"


def test_the_appliance_configuration_advertises_and_run_accepts_it(tmp_path: Path) -> None:
    """image/mcp-gateway.toml, with the files first boot makes, loads and passes `run`'s checks."""
    text = (REPO / "image" / "mcp-gateway.toml").read_text(encoding="utf-8")
    assert text.count("/etc/mcp-gateway/") >= 4
    etc = tmp_path / "etc"
    create_tls(etc / "tls", ["gateway.plant.lan"], ["192.168.1.20"])
    create_token(etc / "tokens.toml", "operator", [], replace=False)
    (etc / "provider-secret").write_text(secrets.token_urlsafe(32) + "\n")
    (etc / "mqtt-password").write_text(secrets.token_urlsafe(32) + "\n")
    (etc / "policy.toml").write_text((REPO / "image" / "policy.toml").read_text(encoding="utf-8"))  # installed
    local = tmp_path / "mcp-gateway.toml"
    local.write_text(text.replace("/etc/mcp-gateway/", f"{etc}/"), encoding="utf-8")

    config = load_config(local, environ={})
    assert config.mdns.enabled is True
    assert config.host == "0.0.0.0"
    assert config.port == 3000
    assert config.tls.enabled
    assert refuse_insecure_bind(config) is None
    check_client_auth(config)
    assert txt_properties(config)["tls"] == "1"
    assert txt_properties(config)["auth"] == "token"
    assert txt_properties(config)["pauth"] == "shared"
    # The appliance's own mosquitto, on the loopback listener of image/mosquitto/mcp-gateway.conf.
    [broker] = config.mqtt.brokers
    assert (broker.url, broker.username, broker.profiles) == ("mqtt://127.0.0.1:1884", "mcp-gateway", ["plain", "mcp"])
    assert broker.password is not None and broker.password.file == f"{etc}/mqtt-password"
