"""TLS mistakes named as such by `mcp-gateway call` and the stdio bridge: plain http:// to a gateway's
TLS listener (which ends the request unread) and https:// without the gateway's CA.

A real gateway with [tls] from `mcp-gateway tls self-signed` on a free port, a real provider over wss,
and the CLI and the bridge as real processes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from mcp.server.mcpserver import MCPServer

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers
from tests.integration.test_cli_scripting import bridge_answer
from tests.integration.test_tls import self_signed, tls_section
from tests.support.gateway_process import run_cli
from tests.support.silent import closing_listener

pytestmark = pytest.mark.timeout(90)

TLS_HINT = "if the gateway serves TLS ([tls] in its configuration), use https://"


def counting_pump(calls: list[int]) -> MCPServer:
    """A pump whose `start` records each call it carries out."""
    server = MCPServer("pump")

    @server.tool()
    def start(speed_rpm: int) -> str:
        calls.append(speed_rpm)
        return f"started at {speed_rpm}"

    return server


@pytest.fixture
def tls_dir(tmp_path: Path) -> Path:
    return self_signed(tmp_path / "tls")


@pytest.fixture(params=["tls", "mutual-tls"])
async def tls_gateway(request: pytest.FixtureRequest, gateway_factory: GatewayFactory, tls_dir: Path) -> GatewayServer:
    """A TLS gateway; the mutual-TLS one also wants a client certificate (its handshake ends in an alert)."""
    extra = {"client_ca_file": str(tls_dir / "ca.pem")} if request.param == "mutual-tls" else {}
    return await gateway_factory(tls=tls_section(tls_dir, **extra))


def plain(url: str) -> str:
    return url.replace("https://", "http://", 1)


async def publish(gateway: GatewayServer, publishers: Publishers, tls_dir: Path, calls: list[int]) -> None:
    """The counting pump in pump-1; not on the mutual-TLS gateway, which wants a client certificate."""
    if gateway.config.tls.client_ca_file is None:
        await publishers.start(gateway, "pump-1", counting_pump(calls), ca_file=str(tls_dir / "ca.pem"))


async def test_call_over_plain_http_to_a_tls_gateway_says_use_https_and_that_nothing_ran(
    tls_gateway: GatewayServer, publishers: Publishers, tls_dir: Path
) -> None:
    calls: list[int] = []
    await publish(tls_gateway, publishers, tls_dir, calls)
    code, out, err = await run_cli("call", "pump-1", "start", "speed_rpm=1200", "--url", plain(tls_gateway.url))
    assert (code, out) == (1, "")
    assert err == (
        f"mcp-gateway: the gateway at {plain(tls_gateway.url)}/pump-1/mcp serves TLS ([tls] in its configuration) "
        "and dropped this plain-HTTP request unread, so nothing was carried out: "
        f"use https://, --url {tls_gateway.url}\n"
    )
    assert calls == []


async def test_call_over_https_without_the_ca_names_ssl_cert_file(
    gateway_factory: GatewayFactory, publishers: Publishers, tls_dir: Path
) -> None:
    gateway = await gateway_factory(tls=tls_section(tls_dir))
    calls: list[int] = []
    await publishers.start(gateway, "pump-1", counting_pump(calls), ca_file=str(tls_dir / "ca.pem"))
    code, out, err = await run_cli("call", "pump-1", "start", "speed_rpm=1200", "--url", gateway.url)
    assert (code, out) == (1, "")
    assert "CERTIFICATE_VERIFY_FAILED" in err and "the gateway's certificate is not trusted" in err, err
    assert "SSL_CERT_FILE" in err and "mcp-gateway tls self-signed" in err, err
    assert "Is `mcp-gateway run` running there?" not in err
    # What the hint says works: the same command with the CA named.
    code, out, err = await run_cli(
        "call",
        "pump-1",
        "start",
        "speed_rpm=1200",
        "--url",
        gateway.url,
        env={"SSL_CERT_FILE": str(tls_dir / "ca.pem")},
    )
    assert (code, out.strip(), calls) == (0, '{\n  "result": "started at 1200"\n}', [1200]), err


async def test_call_to_a_plain_listener_that_drops_the_request_keeps_the_warning_and_hints_https() -> None:
    """A plain-HTTP server that ends the connection (a gateway killed mid-call) is not a TLS listener:
    the call may have run, and https:// is only a hint."""
    async with closing_listener() as url:
        code, out, err = await run_cli("call", "pump-1", "start", "speed_rpm=1200", "--url", url, "--timeout", "5")
    assert (code, out) == (1, "")
    assert err == (
        f"mcp-gateway: the gateway at {url}/pump-1/mcp closed the connection before it answered; "
        f"the call may have reached the device; {TLS_HINT}\n"
    )


@contextlib.asynccontextmanager
async def alerting_listener() -> AsyncIterator[str]:
    """A TLS server's refusal as some send it: a TLS alert record (protocol_version) for the HTTP request."""

    async def alert(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            await reader.read(64)
            writer.write(b"\x15\x03\x01\x00\x02\x02\x46")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(alert, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()


async def test_call_answered_with_a_tls_alert_says_use_https() -> None:
    async with alerting_listener() as url:
        code, out, err = await run_cli("call", "pump-1", "start", "speed_rpm=1200", "--url", url)
    assert (code, out) == (1, "")
    https = url.replace("http://", "https://")
    assert err == (
        f"mcp-gateway: the gateway at {url}/pump-1/mcp serves TLS ([tls] in its configuration) and dropped this "
        f"plain-HTTP request unread, so nothing was carried out: use https://, --url {https}\n"
    )


async def test_bridge_over_plain_http_to_a_tls_gateway_says_use_https_and_that_nothing_ran(
    tls_gateway: GatewayServer, publishers: Publishers, tls_dir: Path
) -> None:
    await publish(tls_gateway, publishers, tls_dir, [])
    code, out, err = await bridge_answer({}, "--url", plain(tls_gateway.url), "--slot", "pump-1")
    assert code == 0, err
    error = orjson.loads(out.splitlines()[0])["error"]
    assert error["data"] == {"reason": "gateway_serves_tls", "url": f"{plain(tls_gateway.url)}/pump-1/mcp"}
    assert error["message"].startswith(
        f"The MCP gateway at {plain(tls_gateway.url)}/pump-1/mcp serves TLS ([tls] in its configuration) and "
        f"dropped this plain-HTTP request unread, so nothing was carried out: use https:// in --url ({tls_gateway.url})"
    ), error
    assert "may have been carried out" not in error["message"]
    assert "serves TLS and dropped the plain-HTTP initialize unread; use https://" in err


async def test_bridge_to_a_plain_listener_that_drops_the_request_keeps_the_warning_and_hints_https() -> None:
    async with closing_listener() as url:
        code, out, err = await bridge_answer({}, "--url", url, "--slot", "pump-1")
    assert code == 0, err
    error = orjson.loads(out.splitlines()[0])["error"]
    assert error["data"]["reason"] == "gateway_disconnected"
    assert "the request may have been carried out" in error["message"]
    assert error["message"].endswith("If the gateway serves TLS ([tls] in its configuration), use https:// in --url.")


async def test_bridge_over_https_without_the_ca_names_ca_file(
    gateway_factory: GatewayFactory, publishers: Publishers, tls_dir: Path
) -> None:
    gateway = await gateway_factory(tls=tls_section(tls_dir))
    await publishers.start(gateway, "pump-1", counting_pump([]), ca_file=str(tls_dir / "ca.pem"))
    code, out, err = await bridge_answer({}, "--url", gateway.url, "--slot", "pump-1")
    assert code == 0, err
    error = orjson.loads(out.splitlines()[0])["error"]
    assert error["data"]["reason"] == "gateway_unreachable"
    assert "CERTIFICATE_VERIFY_FAILED" in error["message"]
    assert "give the bridge the CA that signed it with --ca-file FILE" in error["message"]
    assert "mcp-gateway tls self-signed" in error["message"]
    assert "Is `mcp-gateway run` running there?" not in error["message"]
    code, out, err = await bridge_answer(
        {}, "--url", gateway.url, "--slot", "pump-1", "--ca-file", str(tls_dir / "ca.pem")
    )
    assert orjson.loads(out.splitlines()[0])["result"]["serverInfo"]["name"] == "pump", err
