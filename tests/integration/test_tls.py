"""TLS on the listener ([tls]) with certificates made by `mcp-gateway tls self-signed`.

Real SDK clients over https, a real Publisher over wss, raw TLS handshakes where the test needs the
certificate the gateway serves, and a real `mcp-gateway run` process for the SIGHUP reload.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import signal
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.app import GatewayServer
from gateway.cli import main as cli_main
from gateway.config import ConfigError, GatewayConfig
from gateway.policy.tls_self_signed import issue, load_authority
from tests.conftest import GatewayFactory, Publishers, wait_for, wait_ready_slot
from tests.support.servers import demo_server

LISTENING = re.compile(r"listening on (https?://[^\s\"]+)")


def self_signed(directory: Path, *args: str) -> Path:
    """`mcp-gateway tls self-signed` for this machine's loopback names; the directory it wrote."""
    code = cli_main(["tls", "self-signed", "--dir", str(directory), "--host", "localhost", "--ip", "127.0.0.1", *args])
    assert code == 0
    return directory


def tls_section(directory: Path, **extra: str) -> dict[str, Any]:
    return {"cert_file": str(directory / "server.pem"), "key_file": str(directory / "server-key.pem"), **extra}


def trusting(directory: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(directory / "ca.pem"))


def serial_of(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


async def served_serial(port: int, context: ssl.SSLContext, host: str = "localhost") -> int:
    """The serial number of the certificate the gateway presents in a fresh TLS handshake."""
    _, writer = await asyncio.open_connection(host, port, ssl=context)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der).serial_number
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


@pytest.fixture
def tls_dir(tmp_path: Path) -> Path:
    return self_signed(tmp_path / "tls")


@pytest.fixture
async def tls_gateway(gateway_factory: GatewayFactory, tls_dir: Path) -> GatewayServer:
    return await gateway_factory(tls=tls_section(tls_dir))


@contextlib.asynccontextmanager
async def sdk_client(url: str, verify: ssl.SSLContext | bool, mode: str) -> AsyncIterator[Client]:
    """The v2 SDK client over https: its transport takes an httpx2 client, which takes the CA."""
    async with (
        httpx2.AsyncClient(verify=verify, timeout=httpx2.Timeout(30, read=300)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


# -- serving ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_sdk_client_over_https_calls_a_publisher_over_wss(
    tls_gateway: GatewayServer, publishers: Publishers, tls_dir: Path, mode: str
) -> None:
    assert tls_gateway.url.startswith("https://127.0.0.1:")
    await publishers.start(tls_gateway, "pump-1", demo_server("pump"), ca_file=str(tls_dir / "ca.pem"))
    async with sdk_client(f"{tls_gateway.url}/pump-1/mcp", trusting(tls_dir), mode) as client:
        result = await client.call_tool("add", {"a": 40, "b": 2})
    assert result.structured_content == {"result": 42}

    # Every URL the gateway shows is https:// or wss:// now.
    async with sdk_client(f"{tls_gateway.url}/_broker/mcp", trusting(tls_dir), mode) as broker:
        info = (await broker.call_tool("broker_info", {})).structured_content
        status = (await broker.call_tool("provider_status", {"name": "pump-1"})).structured_content
    assert info is not None and status is not None
    assert info["tls"] is True
    assert info["security"]["tls_listener"] is True
    assert info["url"] == tls_gateway.url
    assert info["urls"]["provider"] == f"wss://127.0.0.1:{tls_gateway.port}/provider/<slot>"
    assert status["provider_url"] == f"wss://127.0.0.1:{tls_gateway.port}/provider/pump-1"
    assert status["client_url"] == f"https://127.0.0.1:{tls_gateway.port}/pump-1/mcp"


async def test_clients_that_do_not_trust_the_ca_are_refused_by_their_own_check(
    tls_gateway: GatewayServer, publishers: Publishers, tmp_path: Path
) -> None:
    stranger = self_signed(tmp_path / "other-ca")  # a valid chain, but from another CA
    publisher = await publishers.start(
        tls_gateway, "pump-1", demo_server("pump"), wait_ready=False, ca_file=str(stranger / "ca.pem")
    )
    await wait_for(lambda: publisher.last_close is not None, what="the failed dial")
    assert publisher.connections == 0
    assert publisher.last_close is not None and "CERTIFICATE_VERIFY_FAILED" in publisher.last_close[1]

    with pytest.raises(Exception) as failure:  # the SDK wraps the transport error
        async with sdk_client(f"{tls_gateway.url}/_broker/mcp", trusting(stranger), "legacy") as client:
            await client.list_tools()
    assert "CERTIFICATE_VERIFY_FAILED" in repr(failure.value) or "certificate verify failed" in repr(failure.value)
    assert "pump-1" not in tls_gateway.gateway.registry.slots


async def test_plain_http_and_ws_to_the_tls_port_fail(tls_gateway: GatewayServer) -> None:
    plain = tls_gateway.url.replace("https://", "http://")
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.ClientError):
            async with http.get(f"{plain}/healthz") as response:
                await response.read()
        with pytest.raises(aiohttp.ClientError):
            await http.ws_connect(plain.replace("http://", "ws://") + "/provider/pump-1")
    assert "pump-1" not in tls_gateway.gateway.registry.slots


async def test_tls_1_1_is_refused(tls_gateway: GatewayServer, tls_dir: Path) -> None:
    old = trusting(tls_dir)
    old.minimum_version = ssl.TLSVersion.TLSv1
    old.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises(ssl.SSLError):
        await served_serial(tls_gateway.port, old)


async def test_client_ca_file_requires_a_client_certificate(
    gateway_factory: GatewayFactory, tls_dir: Path, tmp_path: Path
) -> None:
    gateway = await gateway_factory(tls=tls_section(tls_dir, client_ca_file=str(tls_dir / "ca.pem")))
    without = trusting(tls_dir)
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.ClientError):
            async with http.get(f"{gateway.url}/healthz", ssl=without) as response:
                await response.read()

        certificate, key = issue(load_authority(tls_dir), ["pump-1.plant.lan"], [], 30, client=True)
        (tmp_path / "client.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        (tmp_path / "client-key.pem").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        with_cert = trusting(tls_dir)
        with_cert.load_cert_chain(str(tmp_path / "client.pem"), str(tmp_path / "client-key.pem"))
        async with http.get(f"{gateway.url}/healthz", ssl=with_cert) as response:
            assert response.status == 200
            assert (await response.json())["status"] == "alive"


# -- failing closed at startup ------------------------------------------------------------------


def test_an_unusable_certificate_or_key_stops_startup_naming_the_file(tls_dir: Path, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    other = self_signed(tmp_path / "other")
    cases = [
        (tls_section(tls_dir, cert_file=str(garbage)), f"tls.cert_file {garbage}: not a PEM certificate"),
        (tls_section(tls_dir, key_file=str(garbage)), f"tls.key_file {garbage}: not a PEM private key"),
        (
            tls_section(tls_dir, key_file=str(other / "server-key.pem")),
            f"tls.key_file {other / 'server-key.pem'} does not belong to the certificate in tls.cert_file "
            f"{tls_dir / 'server.pem'}",
        ),
    ]
    for section, message in cases:
        config = GatewayConfig.model_validate({"port": 0, "tls": section})
        with pytest.raises(ConfigError) as failure:
            GatewayServer(config)
        assert str(failure.value) == message


async def run_gateway(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli",
        "run",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def test_run_with_a_missing_key_exits_with_one_message(tls_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    missing = tmp_path / "nowhere-key.pem"
    config.write_text(f'port = 0\n[tls]\ncert_file = "{tls_dir / "server.pem"}"\nkey_file = "{missing}"\n')
    process = await run_gateway("--config", str(config))
    stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2
    assert stdout == b""
    lines = stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert f"key_file {missing}: not found" in lines[0]


# -- SIGHUP reload --------------------------------------------------------------------------------


class RunningGateway:
    """`mcp-gateway run` in a subprocess; its log lines as they arrive."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.lines: list[str] = []
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        assert self.process.stderr is not None
        async for raw in self.process.stderr:
            self.lines.append(raw.decode(errors="replace").rstrip())

    async def wait_line(self, pattern: str, after: int = 0) -> str:
        found: list[str] = []

        def seen() -> bool:
            found[:] = [line for line in self.lines[after:] if re.search(pattern, line)]
            return bool(found) or self._reader.done()

        await wait_for(seen, 20, f"log line {pattern!r}")
        assert found, "gateway exited:\n" + "\n".join(self.lines)
        return found[0]

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 10)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._reader, 2)


@pytest.fixture
async def running(tls_dir: Path, tmp_path: Path) -> AsyncIterator[tuple[RunningGateway, int]]:
    config = tmp_path / "gateway.toml"
    config.write_text(
        f'port = 0\n[logging]\nformat = "json"\n[tls]\ncert_file = "{tls_dir / "server.pem"}"\n'
        f'key_file = "{tls_dir / "server-key.pem"}"\n'
    )
    gateway = RunningGateway(await run_gateway("--config", str(config)))
    try:
        line = await gateway.wait_line("listening on")
        match = LISTENING.search(line)
        assert match is not None and match.group(1).startswith("https://"), line
        yield gateway, int(match.group(1).rsplit(":", 1)[1])
    finally:
        await gateway.stop()


async def test_sighup_swaps_the_certificate_and_a_bad_reload_keeps_the_old_one(
    running: tuple[RunningGateway, int], tls_dir: Path
) -> None:
    gateway, port = running
    trust = trusting(tls_dir)
    first = serial_of(tls_dir / "server.pem")
    assert await served_serial(port, trust) == first

    # Renewed under the same CA (boards keep their ca.pem), then SIGHUP.
    self_signed(tls_dir, "--force")
    second = serial_of(tls_dir / "server.pem")
    assert second != first
    mark = len(gateway.lines)
    gateway.process.send_signal(signal.SIGHUP)
    await gateway.wait_line("TLS certificate reloaded", after=mark)
    assert await served_serial(port, trust) == second

    # A broken certificate file: the error names it, and the listener keeps the pair it had.
    good = (tls_dir / "server.pem").read_bytes()
    (tls_dir / "server.pem").write_text("this is not a certificate\n")
    mark = len(gateway.lines)
    gateway.process.send_signal(signal.SIGHUP)
    line = await gateway.wait_line("TLS reload failed", after=mark)
    assert orjson.loads(line)["level"] == "error"
    assert f"tls.cert_file {tls_dir / 'server.pem'}: not a PEM certificate" in line
    assert await served_serial(port, trust) == second

    # A key that does not match (half-way through a manual renewal): refused the same way.
    (tls_dir / "server.pem").write_bytes(good)
    self_signed(tls_dir / "elsewhere")
    (tls_dir / "server-key.pem").write_bytes((tls_dir / "elsewhere" / "server-key.pem").read_bytes())
    mark = len(gateway.lines)
    gateway.process.send_signal(signal.SIGHUP)
    line = await gateway.wait_line("TLS reload failed", after=mark)
    assert "does not belong to the certificate" in line
    assert await served_serial(port, trust) == second

    # Still serving requests, over the pair it kept.
    async with aiohttp.ClientSession() as http, http.get(f"https://localhost:{port}/healthz", ssl=trust) as response:
        assert response.status == 200
    assert gateway.process.returncode is None


async def test_publisher_reconnects_over_wss_after_a_restart_with_a_renewed_certificate(
    gateway_factory: GatewayFactory, publishers: Publishers, tls_dir: Path
) -> None:
    """Boards trust the CA, not one certificate: a renewal does not cut them off."""
    gateway = await gateway_factory(tls=tls_section(tls_dir))
    publisher = await publishers.start(
        gateway, "pump-1", demo_server("pump"), ca_file=str(tls_dir / "ca.pem"), backoff_max_s=0.2
    )
    self_signed(tls_dir, "--force")
    assert gateway.reload_tls() is True
    await publisher.drop()
    await wait_for(lambda: publisher.connections >= 2, what="the reconnect")
    await wait_ready_slot(gateway, "pump-1")
    assert (await provider_status_https(gateway, tls_dir))["connects"] == 2
    assert await served_serial(gateway.port, trusting(tls_dir), "127.0.0.1") == serial_of(tls_dir / "server.pem")


async def provider_status_https(gateway: GatewayServer, tls_dir: Path) -> dict[str, Any]:
    async with sdk_client(f"{gateway.url}/_broker/mcp", trusting(tls_dir), "legacy") as client:
        result = (await client.call_tool("provider_status", {"name": "pump-1"})).structured_content
    assert isinstance(result, dict)
    return result


# -- the simulator, as a user runs it against a TLS gateway with provider identities ---------------


async def spawn_cli(*args: str, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )


async def stop_process(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()


@pytest.mark.parametrize("secret_from", ["file", "env"])
async def test_sim_publishes_over_wss_with_its_provider_token(
    gateway_factory: GatewayFactory, tls_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, secret_from: str
) -> None:
    token = secrets.token_urlsafe(32)
    token_file = tmp_path / "sim.token"
    token_file.write_text(token + "\n")
    monkeypatch.setenv("TEST_SIM_TOKEN", token)
    gateway = await gateway_factory(
        tls=tls_section(tls_dir),
        providers={
            "auth": {
                "mode": "identities",
                "identities": [{"name": "sim", "env": "TEST_SIM_TOKEN", "slots": ["pump-*"]}],
            }
        },
    )
    args = ["sim", "--gateway", f"wss://localhost:{gateway.port}", "--ca-file", str(tls_dir / "ca.pem")]
    args += ["--control-port", "0"]
    env: dict[str, str] = {}
    if secret_from == "file":
        args += ["--provider-token-file", str(token_file)]
    else:
        env["MCP_SIM_PROVIDER_TOKEN"] = token
    process = await spawn_cli(*args, env=env)
    try:
        await wait_ready_slot(gateway, "pump-1", timeout=20)
        session = gateway.gateway.registry.slots["pump-1"].live
        assert session is not None and session.link.info.identity == "sim"
    finally:
        await stop_process(process)


async def test_run_with_sim_pumps_publishes_into_its_own_tls_listener_with_the_shared_secret(
    tls_dir: Path, tmp_path: Path
) -> None:
    token_file = tmp_path / "shared.token"
    token_file.write_text(secrets.token_urlsafe(32))
    config = tmp_path / "gateway.toml"
    config.write_text(
        f'port = 0\n[logging]\nformat = "json"\n[tls]\ncert_file = "{tls_dir / "server.pem"}"\n'
        f'key_file = "{tls_dir / "server-key.pem"}"\n'
        f'[providers.auth]\nmode = "shared"\nshared_secret = {{file = "{token_file}"}}\n'
    )
    gateway = RunningGateway(
        await spawn_cli("run", "--config", str(config), "--sim-pumps", "1", "--sim-control-port", "0")
    )
    try:
        match = LISTENING.search(await gateway.wait_line("listening on"))
        assert match is not None
        url = match.group(1)
        await gateway.wait_line("provider attached to slot pump-1")
        async with sdk_client(f"{url}/_broker/mcp", trusting(tls_dir), "legacy") as broker:
            status: Any = (await broker.call_tool("provider_status", {"name": "pump-1"})).structured_content
        assert (status["identity"], status["transport"]) == ("shared", "websocket")
        assert token_file.read_text() not in "\n".join(gateway.lines)
    finally:
        await gateway.stop()
