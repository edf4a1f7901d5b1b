"""allowed_hosts and allowed_origins entries as an operator writes them (gateway/config/hosts.py,
origins.py, entries.py): a port and a subdomain wildcard in allowed_hosts are honoured by the Host check;
an entry no request can match loads with a warning (`config check` prints it) and is ignored; every
malformed entry is named in one error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.cli import main
from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.config.entries import config_warnings
from gateway.config.hosts import check_allowed_host
from gateway.policy.origin import OriginPolicy

pytestmark = pytest.mark.usefixtures("cli_environment")


def host_check(allowed_hosts: list[str]) -> OriginPolicy:
    config = GatewayConfig.model_validate({"allowed_hosts": allowed_hosts})
    return OriginPolicy([], True, config.allowed_hosts, "127.0.0.1")


@pytest.mark.parametrize(
    ("entry", "kept"),
    [
        ("GW.plant.lan:43420", "gw.plant.lan:43420"),
        ("10.0.0.5:3000", "10.0.0.5:3000"),
        ("[FD00:0::2]:3000", "[fd00::2]:3000"),
        ("*.Plant.lan", "*.plant.lan"),
        ("*.plant.lan:3000", "*.plant.lan:3000"),
    ],
)
def test_an_entry_with_a_port_or_a_wildcard_loads(entry: str, kept: str) -> None:
    assert check_allowed_host(entry) == kept
    config = GatewayConfig.model_validate({"allowed_hosts": [entry]})
    assert config.allowed_hosts == [kept]
    assert config_warnings(config) == []


def test_a_host_and_port_entry_admits_that_host_at_that_port_only() -> None:
    policy = host_check(["gw.plant.lan:43420", "[fd00::2]:3000", "10.0.0.5:80"])
    for host in ("gw.plant.lan:43420", "GW.Plant.LAN:43420", "[fd00:0::2]:3000", "10.0.0.5:80"):
        assert policy.check(None, host) is None, host
    for host in ("gw.plant.lan", "gw.plant.lan:43421", "[fd00::2]", "[fd00::2]:3001", "10.0.0.5", "evil.example:43420"):
        refusal = policy.check(None, host)
        assert refusal is not None and refusal.error == "host_not_allowed", host


def test_a_name_without_port_still_admits_any_port() -> None:
    policy = host_check(["gw.plant.lan"])
    assert policy.check(None, "gw.plant.lan:3000") is None
    assert policy.check(None, "gw.plant.lan") is None


def test_a_subdomain_wildcard_admits_one_label_or_more_under_the_domain() -> None:
    policy = host_check(["*.plant.lan", "*.lab.example:3000"])
    for host in ("gw.plant.lan", "gw.plant.lan:3000", "a.b.plant.lan:9", "x.lab.example:3000"):
        assert policy.check(None, host) is None, host
    for host in ("plant.lan", "evilplant.lan", "plant.lan.evil.example", "gw.plant.lan.evil", "x.lab.example:3001"):
        refusal = policy.check(None, host)
        assert refusal is not None and refusal.error == "host_not_allowed", host


def test_the_own_origin_follows_the_same_entries() -> None:
    policy = host_check(["gw.plant.lan:43420", "*.lab.example"])
    assert policy.check("http://gw.plant.lan:43420", "gw.plant.lan:43420") is None
    assert policy.check("http://pump.lab.example:3000", "pump.lab.example:3000") is None
    refusal = policy.check("http://gw.plant.lan:43421", "gw.plant.lan:43421")
    assert refusal is not None and refusal.error == "origin_not_allowed"


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("fe80::1%eth0", r"no zone id .*'fe80::1'"),
        ("[fe80::1%25eth0]:3000", r"no zone id .*'fe80::1'"),
        ("*", "stands only as the first label"),
        ("*.lan", "stands only as the first label"),
        ("gw-*.plant.lan", "stands only as the first label"),
        ("*.0.0.1", "stands only as the first label"),
    ],
)
def test_an_allowed_hosts_entry_no_host_can_match_loads_with_a_warning(entry: str, reason: str) -> None:
    config = GatewayConfig.model_validate({"allowed_hosts": [entry, "gw.plant.lan"]})
    assert config.allowed_hosts == [entry.strip(), "gw.plant.lan"]
    [warning] = config_warnings(config)
    assert warning.startswith(f"allowed_hosts entry {entry!r} never matches and is ignored")
    assert re.search(reason, warning), warning
    policy = OriginPolicy([], True, config.allowed_hosts, "127.0.0.1")
    assert policy.check(None, "gw.plant.lan") is None
    for host in ("evil.example", "127.0.0.2", "anything.lan"):
        assert policy.check(None, host) is not None


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("http://::1:8080", r"stands in brackets.*'http://\[::1\]:8080'"),
        ("http://[fe80::1%25eth0]:8080", "no zone id"),
    ],
)
def test_an_allowed_origins_entry_no_browser_sends_loads_with_a_warning(entry: str, reason: str) -> None:
    config = GatewayConfig.model_validate({"allowed_origins": [entry, "http://localhost:*"]})
    assert config.allowed_origins == [entry, "http://localhost:*"]
    [warning] = config_warnings(config)
    assert warning.startswith(f"allowed_origins entry {entry!r} never matches and is ignored")
    assert re.search(reason, warning), warning
    policy = OriginPolicy(config.allowed_origins, True, [], "127.0.0.1")
    assert not policy.origin_allowed(entry)  # ignored: not even a client sending it literally passes
    assert policy.origin_allowed("http://localhost:5173")


def test_every_malformed_entry_is_named_in_one_message(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(
        'allowed_hosts = ["ok.plant.lan", "http://gw.plant.lan", "[]", "fe80::1%eth0", "[gggg::1]", "pi local"]\n',
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as refused:
        load_config(path, environ={})
    message = str(refused.value)
    assert "4 entries are malformed" in message
    for named in ("'http://gw.plant.lan'", "'[]'", "'gggg::1'", "'pi local'"):
        assert named in message
    assert "fe80::1%eth0" not in message  # loads, with a warning


def test_every_malformed_origin_is_named_in_one_message() -> None:
    with pytest.raises(ValidationError) as refused:
        GatewayConfig.model_validate({"allowed_origins": ["http://[::1", "https://console.plant.lan", "*", "x.lan"]})
    message = str(refused.value)
    assert "3 entries are malformed" in message
    assert "'http://[::1'" in message and "'*'" in message and "'x.lan'" in message


def test_config_check_prints_each_warning_on_stderr_and_passes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(
        'allowed_hosts = ["gw.plant.lan", "gw.plant.lan:43420", "*.plant.lan", "fe80::1%eth0"]\n'
        'allowed_origins = ["http://::1:8080"]\n',
        encoding="utf-8",
    )
    assert main(["config", "check", "--config", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out == "configuration OK\n"
    warnings = err.splitlines()
    assert len(warnings) == 2, err
    assert warnings[0].startswith("mcp-gateway config check: warning: allowed_hosts entry 'fe80::1%eth0' never matches")
    assert warnings[1].startswith(
        "mcp-gateway config check: warning: allowed_origins entry 'http://::1:8080' never matches"
    )
