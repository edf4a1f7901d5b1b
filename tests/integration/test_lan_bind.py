"""The LAN-bind rule on the real `mcp-gateway run`: a network bind needs client AND provider authentication,
else it refuses to start unless --insecure-lan, which then names the open side in every log line and in
broker_info. The appliance's own configuration (image/mcp-gateway.toml) has both, and starts."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import httpx2
import orjson
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.policy.tls_self_signed import create as create_tls
from gateway.policy.token_files import create_token
from tests.integration.test_client_auth import lan_address
from tests.support.gateway_process import gateway_process, run_to_exit
from tests.support.oauth import ISSUER, access_token, jwks, rsa_key

REPO = Path(__file__).resolve().parents[2]


def lan_host() -> str:
    """A non-loopback address of this machine; every interface when it has none (still off loopback)."""
    return lan_address() or "0.0.0.0"


def client_auth_only(tmp_path: Path) -> Path:
    """Client authentication (OAuth, keys from a file: accepted from a LAN address without TLS), no
    [providers.auth]: a gateway that must not start silently."""
    keys = tmp_path / "jwks.json"
    keys.write_bytes(orjson.dumps(jwks(rsa_key())))
    config = tmp_path / "gateway.toml"
    config.write_text(
        'port = 0\n[logging]\nlevel = "info"\nformat = "json"\n'
        f'[auth.oauth]\nissuer = "{ISSUER}"\njwks_file = "{keys}"\n'
    )
    return config


async def broker_info(url: str) -> dict[str, Any]:
    endpoint = f"{url}/_broker/mcp"
    token = access_token(rsa_key(), endpoint)
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30)) as http,
        Client(streamable_http_client(endpoint, http_client=http), mode="legacy") as client,
    ):
        info = (await client.call_tool("broker_info", {})).structured_content
    assert isinstance(info, dict)
    return info


async def test_run_refuses_a_lan_bind_with_client_auth_but_no_provider_auth(tmp_path: Path) -> None:
    host = lan_host()
    config = client_auth_only(tmp_path)
    code, _, err = await run_to_exit("run", "--config", str(config), "--host", host)
    assert code == 2, err
    assert err.startswith(
        f"mcp-gateway: refusing to listen on {host} without provider authentication: anyone on the network could "
        "publish a free slot and answer its calls with false readings."
    )
    # One message: what is missing, both keys, and the other ways out.
    assert '[providers.auth] mode = "shared" or "identities"' in err
    assert "[auth] tokens, token_files or oauth" in err
    assert "bind to 127.0.0.1" in err and "--insecure-lan" in err
    assert err.count("\n") == 1
    code, out, err = await run_to_exit("config", "check", "--config", str(config), "--host", host)
    assert code == 2
    assert "`run` would refuse it: refusing to listen" in err and "configuration OK" not in out


async def test_insecure_lan_names_the_open_provider_side_in_every_log_line_and_broker_info(tmp_path: Path) -> None:
    host = lan_host()
    config = client_auth_only(tmp_path)
    async with gateway_process("--config", str(config), "--host", host, "--insecure-lan") as gateway:
        info = await broker_info(gateway.url)
        await gateway.wait_line("INSECURE-LAN")
    assert info["insecure_lan"] is True
    assert info["insecure_lan_open"] == ["providers"]
    assert info["security"]["insecure_lan_open"] == ["providers"]
    assert info["warnings"] == [
        "INSECURE-LAN: listening on the network without provider authentication; anyone who can reach this "
        "address can publish a free slot and answer its calls with false readings"
    ]
    entries = gateway.json_lines()
    assert len(entries) >= 3  # listening, the warning, shutting down, stopped
    for entry in entries:
        assert (entry["insecure_lan"], entry["insecure_lan_open"]) == (True, ["providers"]), entry
    warning = next(entry for entry in entries if str(entry["msg"]).startswith("INSECURE-LAN"))
    assert warning["level"] == "warning"
    assert f"(bound to {host})" in str(warning["msg"])


async def test_a_lan_bind_with_both_sides_authenticated_starts_and_says_nothing(tmp_path: Path) -> None:
    host = lan_host()
    config = client_auth_only(tmp_path)
    secret = tmp_path / "provider-secret"
    secret.write_text(secrets.token_urlsafe(32) + "\n")
    config.write_text(
        config.read_text() + f'[providers.auth]\nmode = "shared"\nshared_secret = {{ file = "{secret}" }}\n'
    )
    code, out, err = await run_to_exit("config", "check", "--config", str(config), "--host", host)
    assert (code, out) == (0, "configuration OK\n"), err
    async with gateway_process("--config", str(config), "--host", host) as gateway:
        info = await broker_info(gateway.url)
    assert (info["insecure_lan"], info["insecure_lan_open"], info["warnings"]) == (False, [], [])
    assert info["security"]["provider_auth"] == "shared"
    assert all("insecure_lan" not in entry for entry in gateway.json_lines())
    assert "INSECURE-LAN" not in gateway.log


async def test_the_startup_line_names_the_wildcard_address_it_is_bound_to(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('port = 0\n[logging]\nformat = "json"\n')
    async with gateway_process("--config", str(config), "--host", "0.0.0.0", "--insecure-lan") as gateway:
        port = int(gateway.url.rsplit(":", 1)[1])
        line = await gateway.wait_line(" listening on ")
    # Every IPv4 address is listening, not 127.0.0.1 alone: an operator must see the box is on the network.
    assert orjson.loads(line)["msg"].endswith(f" listening on http://0.0.0.0:{port}")


async def test_the_appliance_configuration_starts(tmp_path: Path) -> None:
    """image/mcp-gateway.toml with the files first boot makes (the header lists them): host 0.0.0.0, client
    tokens and a shared provider secret, so it starts without --insecure-lan."""
    text = (REPO / "image" / "mcp-gateway.toml").read_text(encoding="utf-8")
    etc = tmp_path / "etc"
    create_tls(etc / "tls", ["localhost"], ["127.0.0.1"])
    create_token(etc / "tokens.toml", "operator", [], replace=False)
    (etc / "provider-secret").write_text(secrets.token_urlsafe(32) + "\n")
    (etc / "mqtt-password").write_text(secrets.token_urlsafe(32) + "\n")  # its broker need not run for this
    (etc / "policy.toml").write_text(
        (REPO / "image" / "policy.toml").read_text(encoding="utf-8")
    )  # the image installs it
    config = tmp_path / "mcp-gateway.toml"
    # The image names the audit trail in the service's StateDirectory=: the test's own stands in for it.
    state = tmp_path / "state"
    assert '\n[audit]\npath = "/var/lib/mcp-gateway/audit.db"\n' in text
    local = text.replace("/etc/mcp-gateway/", f"{etc}/").replace("/var/lib/mcp-gateway/", f"{state}/")
    config.write_text(local, encoding="utf-8")
    # A free port, and no advertisement on this machine's network during a test.
    env = {"STATE_DIRECTORY": str(state)}  # systemd's StateDirectory=
    async with gateway_process("--config", str(config), "--port", "0", "--no-mdns", env=env) as gateway:
        assert gateway.url.startswith("https://")
    assert "INSECURE-LAN" not in gateway.log
    assert any(entry["msg"] == "stopped" for entry in gateway.json_lines())
    assert (state / "audit.db").is_file()
