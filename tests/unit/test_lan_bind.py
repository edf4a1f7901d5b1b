"""The LAN-bind rule: off loopback the gateway needs client AND provider authentication, or --insecure-lan,
and under --insecure-lan every log line and broker_info say which side is open."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import orjson
import pytest

from gateway.app import listening_line
from gateway.cli import refuse_insecure_bind
from gateway.config import GatewayConfig
from gateway.core.broker.status import insecure_lan_warning
from gateway.logs import JsonFormatter, TextFormatter, insecure_lan_prefix, setup_logging

CLIENT_AUTH = {"tokens": [{"name": "ops", "sha256": hashlib.sha256(b"ops-token").hexdigest()}]}
PROVIDER_AUTH = {
    "auth": {
        "mode": "identities",
        "identities": [{"name": "board", "sha256": hashlib.sha256(b"board-secret").hexdigest(), "slots": ["*"]}],
    }
}


def config(host: str, *, clients: bool, providers: bool, insecure_lan: bool = False) -> GatewayConfig:
    settings: dict[str, Any] = {"host": host, "insecure_lan": insecure_lan}
    if clients:
        settings["auth"] = CLIENT_AUTH
    if providers:
        settings["providers"] = PROVIDER_AUTH
    return GatewayConfig.model_validate(settings)


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
@pytest.mark.parametrize(("clients", "providers"), [(False, False), (True, False), (False, True), (True, True)])
def test_loopback_starts_whatever_is_configured(host: str, clients: bool, providers: bool) -> None:
    loopback = config(host, clients=clients, providers=providers)
    assert loopback.lan_open_sides == []
    assert refuse_insecure_bind(loopback) is None
    # --insecure-lan on loopback opens nothing, so nothing says so.
    flagged = config(host, clients=clients, providers=providers, insecure_lan=True)
    assert (flagged.insecure_lan_open, flagged.lan_without_auth) == ([], False)


@pytest.mark.parametrize(
    ("clients", "providers", "missing", "risk"),
    [
        (
            False,
            False,
            "without client authentication or provider authentication",
            "could call every device and publish a free slot",
        ),
        (True, False, "without provider authentication:", "could publish a free slot and answer its calls"),
        (False, True, "without client authentication:", "could call every device."),
    ],
)
def test_a_lan_bind_without_either_side_is_refused_naming_what_is_missing(
    clients: bool, providers: bool, missing: str, risk: str
) -> None:
    refusal = refuse_insecure_bind(config("0.0.0.0", clients=clients, providers=providers))
    assert refusal is not None
    assert refusal.startswith(f"refusing to listen on 0.0.0.0 {missing}")
    assert risk in refusal
    # One message, both keys, and the two other ways out.
    assert "[auth] tokens, token_files or oauth" in refusal
    assert '[providers.auth] mode = "shared" or "identities"' in refusal
    assert "bind to 127.0.0.1" in refusal
    assert "--insecure-lan" in refusal


def test_a_lan_bind_with_both_sides_authenticated_starts_and_says_nothing() -> None:
    both = config("192.168.1.20", clients=True, providers=True)
    assert refuse_insecure_bind(both) is None
    assert both.lan_open_sides == []
    flagged = config("192.168.1.20", clients=True, providers=True, insecure_lan=True)
    assert (flagged.insecure_lan_open, flagged.lan_without_auth) == ([], False)


@pytest.mark.parametrize(
    ("clients", "providers", "open_sides"),
    [(False, False, ["clients", "providers"]), (True, False, ["providers"]), (False, True, ["clients"])],
)
def test_insecure_lan_starts_and_names_the_open_side(clients: bool, providers: bool, open_sides: list[str]) -> None:
    flagged = config("0.0.0.0", clients=clients, providers=providers, insecure_lan=True)
    assert refuse_insecure_bind(flagged) is None
    assert flagged.insecure_lan_open == open_sides
    assert flagged.lan_without_auth


def test_the_warning_names_the_open_side() -> None:
    assert insecure_lan_warning(["providers"]) == (
        "INSECURE-LAN: listening on the network without provider authentication; anyone who can reach this "
        "address can publish a free slot and answer its calls with false readings"
    )
    assert insecure_lan_warning(["clients"]).startswith(
        "INSECURE-LAN: listening on the network without client authentication; anyone"
    )
    both = insecure_lan_warning(["clients", "providers"])
    assert "without client authentication or provider authentication" in both
    assert "call every device and publish a free slot" in both


def record(message: str) -> logging.LogRecord:
    return logging.makeLogRecord({"name": "gateway.test", "levelname": "INFO", "msg": message})


@pytest.mark.parametrize(
    ("open_sides", "prefix"),
    [
        (["providers"], "[INSECURE-LAN: no provider auth] "),
        (["clients"], "[INSECURE-LAN: no client auth] "),
        (["clients", "providers"], "[INSECURE-LAN: no client auth, no provider auth] "),
        ([], ""),
    ],
)
def test_every_log_line_names_the_open_side(open_sides: list[str], prefix: str) -> None:
    assert insecure_lan_prefix(open_sides) == prefix
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        for fmt in ("json", "text"):
            setup_logging("info", fmt, open_sides)
            formatter = root.handlers[0].formatter
            assert formatter is not None
            line = formatter.format(record("slot attached"))
            if fmt == "text":
                assert isinstance(formatter, TextFormatter)
                assert line.startswith(prefix)
                continue
            assert isinstance(formatter, JsonFormatter)
            entry = orjson.loads(line)
            if open_sides:
                assert (entry["insecure_lan"], entry["insecure_lan_open"]) == (True, open_sides)
            else:
                assert "insecure_lan" not in entry and "insecure_lan_open" not in entry
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)


@pytest.mark.parametrize(
    ("addresses", "urls"),
    [
        ([("0.0.0.0", 3000)], "http://0.0.0.0:3000"),  # every IPv4 address, not 127.0.0.1 alone
        ([("::", 3000, 0, 0)], "http://[::]:3000"),
        ([("192.0.2.7", 3000)], "http://192.0.2.7:3000"),
        ([("127.0.0.1", 3000), ("::1", 3000, 0, 0)], "http://127.0.0.1:3000 and http://[::1]:3000"),  # "localhost"
    ],
)
def test_the_startup_line_names_every_bound_socket(addresses: list[tuple[Any, ...]], urls: str) -> None:
    assert listening_line("1.2.3", addresses, "http", None) == f"mcp-gateway 1.2.3 listening on {urls}"


def test_the_startup_line_adds_the_url_clients_use_when_public_url_is_set() -> None:
    line = listening_line("1.2.3", [("0.0.0.0", 3000)], "https", "https://gw.plant.lan:3000/")
    assert line == "mcp-gateway 1.2.3 listening on https://0.0.0.0:3000; clients use https://gw.plant.lan:3000"
