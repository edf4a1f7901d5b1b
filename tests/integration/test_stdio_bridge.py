"""`mcp-gateway stdio` launched by a real SDK stdio client, in front of a live gateway.

The bridge is a subprocess speaking newline-delimited JSON-RPC on its stdin/stdout; these tests
drive it with `mcp.Client(StdioServerParameters(...))` as a desktop host would, and with raw lines
where a test must see exactly what the bridge writes. A recording proxy between the bridge and the
gateway captures a signed request as it went over the wire, to replay it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any, Self

import aiohttp
import mcp_types as types
import orjson
import pytest
from aiohttp import web
from mcp import Client, MCPError, StdioServerParameters

from bench.ports import free_port
from gateway.app import GatewayServer
from gateway.config import GatewayConfig
from gateway.policy import hmac_signing
from tests.conftest import GatewayFactory, Publishers, wait_for, wait_ready_slot
from tests.integration.test_metrics import Scrape
from tests.support.answers import decode_answer
from tests.support.servers import demo_server

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

REPO = Path(__file__).resolve().parents[2]
HMAC_SECRET = "s3cret-for-the-desk-bridge-0123456789"
DESK_TOKEN = "desk-token-0123456789abcdef0123456789"


def bridge(url: str, *extra: str, slot: str = "pump-1", env: dict[str, str] | None = None) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "gateway.cli", "stdio", "--slot", slot, "--url", url, *extra],
        env=env,
        cwd=str(REPO),
    )


async def text_of(client: Client, tool: str, arguments: dict[str, Any]) -> str:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result
    content = result.content[0]
    assert isinstance(content, types.TextContent)
    return content.text


async def refused_on_connect(params: StdioServerParameters) -> MCPError:
    """The error a host gets when the bridge answers its initialize with a JSON-RPC error."""
    try:
        async with Client(params, mode="legacy"):
            pass
    except BaseException as exc:  # the SDK raises it inside an exception group from its task group
        found = [exc] if isinstance(exc, MCPError) else []
        if isinstance(exc, BaseExceptionGroup):
            _, rest = exc.split(MCPError)
            matched, _ = exc.split(MCPError)
            assert matched is not None, rest
            found = list(_leaves(matched))
        assert found, repr(exc)
        return found[0]
    raise AssertionError("the host connected, but it should have been refused")


def _leaves(group: BaseExceptionGroup[Any]) -> list[MCPError]:
    leaves: list[MCPError] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            leaves.extend(_leaves(exc))
        elif isinstance(exc, MCPError):
            leaves.append(exc)
    return leaves


def no_sessions(server: GatewayServer) -> bool:
    return not server.gateway.sessions.sessions


@pytest.fixture
async def pump(gateway: GatewayServer, publishers: Publishers) -> GatewayServer:
    await publishers.start(gateway, "pump-1", demo_server("pump-1"), aggregate=True)
    return gateway


# -- plain ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_sdk_host_uses_a_slot_through_the_bridge(pump: GatewayServer, mode: str) -> None:
    reported: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append(progress)

    async with Client(bridge(pump.url), mode=mode) as client:
        assert client.protocol_version == "2025-11-25"
        assert client.server_info is not None and client.server_info.name == "pump-1"
        names = [tool.name for tool in (await client.list_tools()).tools]
        assert {"add", "echo", "sleep", "fail"} <= set(names)
        assert (await client.call_tool("add", {"a": 2, "b": 3})).structured_content == {"result": 5}
        # Request-tied notifications come back on the POST's SSE answer and are relayed in order.
        assert await text_of(client, "echo", {"text": "hi"}) == "hi"
        await client.call_tool("echo", {"text": "again"}, progress_callback=on_progress)
        assert reported == [0.5]
        failed = await client.call_tool("fail", {"message": "nope"})
        assert failed.is_error
        assert len(pump.gateway.sessions.sessions) == 1
    # EOF on the bridge's stdin ends the gateway session.
    await wait_for(lambda: no_sessions(pump), what="the bridge's DELETE")


async def test_notifications_of_the_get_stream_are_relayed(gateway: GatewayServer, publishers: Publishers) -> None:
    changed: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.append(message.method)

    await publishers.start(gateway, "pump-1", demo_server("pump-1"), aggregate=True)
    await wait_for(lambda: gateway.gateway.aggregate.members() == ["pump-1"], what="pump-1 in _all")
    async with Client(bridge(gateway.url, slot="_all"), mode="legacy", message_handler=on_message) as client:
        assert "pump-1-add" in [tool.name for tool in (await client.list_tools()).tools]
        await wait_for(
            lambda: any(s.stream is not None for s in gateway.gateway.sessions.sessions.values()),
            what="the bridge's GET stream",
        )
        await publishers.start(gateway, "pump-2", demo_server("pump-2"), aggregate=True)
        await wait_for(lambda: changed == ["notifications/tools/list_changed"], what="list_changed via the bridge")
        names = [tool.name for tool in (await client.list_tools()).tools]
        assert "pump-2-add" in names
        assert await text_of(client, "pump-2-echo", {"text": "routed"}) == "routed"


# -- bearer token ------------------------------------------------------------------------------------


async def test_a_bearer_token_from_the_environment_or_a_file(
    gateway_factory: GatewayFactory, publishers: Publishers, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DESK_TOKEN", DESK_TOKEN)
    server = await gateway_factory(auth={"tokens": [{"name": "desk", "scopes": ["pumps"], "env": "DESK_TOKEN"}]})
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    async with Client(bridge(server.url, env={"MCP_GATEWAY_TOKEN": DESK_TOKEN}), mode="legacy") as client:
        assert (await client.call_tool("add", {"a": 1, "b": 1})).structured_content == {"result": 2}
        (owner,) = [session.principal for session in server.gateway.sessions.sessions.values()]
        assert (owner.kind, owner.name) == ("token", "desk")
    token_file = tmp_path / "token"
    token_file.write_text(DESK_TOKEN + "\n")
    async with Client(bridge(server.url, "--token-file", str(token_file)), mode="legacy") as client:
        assert (await client.call_tool("add", {"a": 2, "b": 2})).structured_content == {"result": 4}
    # Without a token the host gets the gateway's refusal as a JSON-RPC error, not a broken pipe.
    refused = await refused_on_connect(bridge(server.url))
    assert refused.error.code == -32001
    assert "HTTP 401" in refused.error.message
    assert "needs authentication" in refused.error.message


# -- HMAC signing -------------------------------------------------------------------------------------


class RecordingProxy:
    """Forwards every request to the gateway unchanged (streaming answers) and records signed POSTs."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.posts: list[tuple[str, dict[str, str], bytes]] = []
        self.runner: web.AppRunner | None = None
        self.url = ""
        self.http: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.forward)
        self.runner = web.AppRunner(app, handler_cancellation=True)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        self.http = aiohttp.ClientSession(auto_decompress=False)

    async def stop(self) -> None:
        if self.http is not None:
            await self.http.close()
        if self.runner is not None:
            await self.runner.cleanup()

    async def forward(self, request: web.Request) -> web.StreamResponse:
        assert self.http is not None
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        if request.method == "POST":
            self.posts.append((request.raw_path, headers, body))
        async with self.http.request(
            request.method, self.upstream + request.raw_path, headers=headers, data=body
        ) as upstream:
            passed = {
                k: v
                for k, v in upstream.headers.items()
                if k.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server")
            }
            response = web.StreamResponse(status=upstream.status, headers=passed)
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response


@pytest.fixture
async def signed_gateway(gateway_factory: GatewayFactory, publishers: Publishers, tmp_path: Path) -> GatewayServer:
    secret_file = tmp_path / "desk.key"
    secret_file.write_text(HMAC_SECRET + "\n")
    server = await gateway_factory(
        auth={
            "hmac": {
                "keys": [
                    {"key_id": "desk-1", "file": str(secret_file), "principal": "desk", "scopes": ["pumps", "metrics"]}
                ],
                "max_skew_s": 60,
            }
        }
    )
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    return server


async def signed_scrape(http: aiohttp.ClientSession, server: GatewayServer) -> Scrape:
    """/metrics needs the `metrics` scope once authentication is on; the desk key has it."""
    headers = hmac_signing.sign("desk-1", HMAC_SECRET.encode(), "GET", "/metrics")
    async with http.get(f"{server.url}/metrics", headers=headers) as response:
        assert response.status == 200
        return Scrape(await response.text())


def hmac_args(tmp_path: Path) -> list[str]:
    secret_file = tmp_path / "bridge.key"
    secret_file.write_text(HMAC_SECRET)
    return ["--hmac-key-id", "desk-1", "--hmac-secret-file", str(secret_file)]


async def test_signed_requests_pass_and_a_captured_one_cannot_be_replayed(
    signed_gateway: GatewayServer, tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    proxy = RecordingProxy(signed_gateway.url)
    await proxy.start()
    try:
        async with Client(bridge(proxy.url, *hmac_args(tmp_path)), mode="legacy") as client:
            assert (await client.call_tool("add", {"a": 20, "b": 22})).structured_content == {"result": 42}
            (owner,) = [session.principal for session in signed_gateway.gateway.sessions.sessions.values()]
            assert (owner.kind, owner.name, owner.scopes) == ("hmac", "desk", frozenset({"pumps", "metrics"}))
            # Every request the bridge sent was signed, each with its own nonce.
            nonces = [headers["X-MCPGW-Nonce"] for _, headers, _ in proxy.posts]
            assert len(nonces) >= 3 and len(set(nonces)) == len(nonces)
            assert all("Authorization" not in headers for _, headers, _ in proxy.posts)
            path, headers, body = next(
                (path, headers, body) for path, headers, body in proxy.posts if b'"tools/call"' in body
            )
            assert path == "/pump-1/mcp"
            # The same bytes and headers, sent again: refused, though the signature is good.
            async with http.post(signed_gateway.url + path, data=body, headers=headers) as replay:
                assert replay.status == 401
                assert replay.headers["WWW-Authenticate"].startswith("Bearer ")
                refusal = await replay.json()
            assert refusal["error"] == "invalid_token"
            assert refusal["error_description"].startswith("replayed request")
            # A fresh signature over the same request is fine: the nonce, not the content, is single-use.
            fresh = hmac_signing.sign("desk-1", HMAC_SECRET.encode(), "POST", path, body)
            resent = {**headers, **fresh}
            async with http.post(signed_gateway.url + path, data=body, headers=resent) as again:
                assert again.status == 200
                answer = decode_answer(again.content_type, await again.read())
                assert answer["result"]["structuredContent"] == {"result": 42}
    finally:
        await proxy.stop()
    metrics = await signed_scrape(http, signed_gateway)
    assert metrics.get("mcpgw_auth_failures_total", reason="replayed") == 1
    assert metrics.value("mcpgw_limit", limit="auth.hmac.nonce_cache") == 65536
    assert metrics.value("mcpgw_limit", limit="auth.hmac.max_skew_s") == 60


async def test_a_timestamp_outside_the_skew_window_is_refused_naming_the_skew(
    signed_gateway: GatewayServer, http: aiohttp.ClientSession
) -> None:
    initialize = orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
    )
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    stale = hmac_signing.sign("desk-1", HMAC_SECRET.encode(), "POST", "/pump-1/mcp", initialize, now=time.time() - 600)
    async with http.post(f"{signed_gateway.url}/pump-1/mcp", data=initialize, headers={**headers, **stale}) as response:
        assert response.status == 401
        refusal = await response.json()
    assert "behind the gateway's clock" in refusal["error_description"]
    assert "auth.hmac.max_skew_s" in refusal["error_description"]
    # A wrong secret is a bad signature; the right one within the window opens a session.
    forged = hmac_signing.sign("desk-1", b"not-the-secret-at-all-0123456789", "POST", "/pump-1/mcp", initialize)
    async with http.post(
        f"{signed_gateway.url}/pump-1/mcp", data=initialize, headers={**headers, **forged}
    ) as response:
        assert response.status == 401
        assert "signature does not match" in (await response.json())["error_description"]
    good = hmac_signing.sign("desk-1", HMAC_SECRET.encode(), "POST", "/pump-1/mcp", initialize)
    async with http.post(f"{signed_gateway.url}/pump-1/mcp", data=initialize, headers={**headers, **good}) as response:
        assert response.status == 200
    metrics = await signed_scrape(http, signed_gateway)
    assert metrics.get("mcpgw_auth_failures_total", reason="clock_skew") == 1
    assert metrics.get("mcpgw_auth_failures_total", reason="bad_signature") == 1


async def test_a_bridge_signing_with_the_wrong_secret_gets_a_clear_error(
    signed_gateway: GatewayServer, tmp_path: Path
) -> None:
    wrong = tmp_path / "wrong.key"
    wrong.write_text("this-is-not-the-secret-0123456789")
    refused = await refused_on_connect(
        bridge(signed_gateway.url, "--hmac-key-id", "desk-1", "--hmac-secret-file", str(wrong))
    )
    assert refused.error.code == -32001
    assert "signature does not match" in refused.error.message


# -- an unreachable gateway ------------------------------------------------------------------------------


class RawBridge:
    """The bridge as a subprocess driven line by line, to see every byte it writes on stdout."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls, url: str, slot: str = "pump-1", *extra: str) -> Self:
        """`extra`: more options of `mcp-gateway stdio` (credentials, say)."""
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "gateway.cli",
            "stdio",
            "--slot",
            slot,
            "--url",
            url,
            *extra,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=str(REPO),
            env={k: v for k, v in os.environ.items() if k != "MCP_GATEWAY_TOKEN"},
        )
        return cls(process)

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(orjson.dumps(message) + b"\n")
        await self.process.stdin.drain()

    async def receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), 15)
        assert line.endswith(b"\n"), f"bridge ended: {line!r}; stderr: {await self.stderr()}"
        message: dict[str, Any] = orjson.loads(line)
        assert message["jsonrpc"] == "2.0"
        return message

    async def stderr(self) -> str:
        assert self.process.stderr is not None
        with contextlib.suppress(TimeoutError):
            return (await asyncio.wait_for(self.process.stderr.read(), 5)).decode(errors="replace")
        return ""

    async def close(self) -> int:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            return await asyncio.wait_for(self.process.wait(), 10)
        except TimeoutError:
            self.process.kill()
            return await self.process.wait()


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "host", "version": "1"}},
}


async def test_gateway_down_gives_a_clean_error_and_the_bridge_retries_with_the_next_message(
    publishers: Publishers,
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    raw = await RawBridge.start(url)
    server: GatewayServer | None = None
    try:
        await raw.send(INITIALIZE)
        refused = await raw.receive()
        assert refused["id"] == 1
        assert refused["error"]["code"] == -32000
        assert refused["error"]["message"].startswith(f"Cannot reach the MCP gateway at {url}/pump-1/mcp")
        assert "tries again with the next message" in refused["error"]["message"]
        assert refused["error"]["data"]["reason"] == "gateway_unreachable"
        # A notification gets no answer (it has no id); garbage gets a parse error; the bridge stays up.
        await raw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert raw.process.stdin is not None
        raw.process.stdin.write(b"{not json\n")
        await raw.process.stdin.drain()
        garbage = await raw.receive()
        assert garbage["id"] is None and garbage["error"]["code"] == -32700
        await raw.send({"jsonrpc": "2.0", "id": "p", "method": "ping"})
        assert (await raw.receive())["error"]["data"]["reason"] == "gateway_unreachable"
        # The gateway comes up: the next message opens the session the client asked for.
        server = GatewayServer(GatewayConfig.model_validate({"port": port}))
        await server.start()
        await publishers.start(server, "pump-1", demo_server("pump-1"))
        await raw.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "add", "arguments": {"a": 1, "b": 2}},
            }
        )
        answer = await raw.receive()
        if answer.get("method") == "notifications/tools/list_changed":
            answer = await raw.receive()
        assert answer["id"] == 2 and answer["result"]["structuredContent"] == {"result": 3}
        (session,) = server.gateway.sessions.sessions.values()
        assert session.client_info == {"name": "host", "version": "1"}  # the client's own initialize
        assert await raw.close() == 0
        await wait_for(lambda: server is not None and no_sessions(server), what="DELETE at EOF")
        assert "Traceback" not in await raw.stderr()
    finally:
        if raw.process.returncode is None:
            raw.process.kill()
            await raw.process.wait()
        await publishers.stop_all()
        if server is not None:
            await server.stop()


async def test_a_gateway_restart_is_survived_by_an_sdk_host(publishers: Publishers) -> None:
    port = free_port()
    config = GatewayConfig.model_validate({"port": port})
    first = GatewayServer(config)
    await first.start()
    second: GatewayServer | None = None
    changed: list[str] = []
    logged: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.append(message.method)

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(f"{params.level}: {params.data}")

    try:
        await publishers.start(first, "pump-1", demo_server("pump-1"), backoff_initial_s=0.1, backoff_max_s=0.2)
        async with Client(
            bridge(first.url), mode="legacy", message_handler=on_message, logging_callback=on_log
        ) as client:
            assert (await client.call_tool("add", {"a": 1, "b": 1})).structured_content == {"result": 2}
            await client.set_logging_level("error")  # the echo tool's info line is not wanted from now on
            assert (await client.call_tool("echo", {"text": "one"})).structured_content == {"result": "one"}
            await first.stop()
            with pytest.raises(MCPError) as down:
                await client.call_tool("add", {"a": 1, "b": 1})
            assert down.value.error.code == -32000
            assert "Cannot reach the MCP gateway" in down.value.error.message
            second = GatewayServer(config)
            await second.start()
            await wait_ready_slot(second, "pump-1", timeout=10)
            # The new gateway does not know the old session: the bridge opens one and resends.
            assert (await client.call_tool("add", {"a": 2, "b": 2})).structured_content == {"result": 4}
            await wait_for(lambda: "notifications/tools/list_changed" in changed, what="list_changed after renewal")
            # The host set its log level once, on the old session: the new one has it too.
            assert (await client.call_tool("echo", {"text": "two"})).structured_content == {"result": "two"}
            assert logged == []
        await wait_for(lambda: second is not None and no_sessions(second), what="DELETE at EOF")
    finally:
        await publishers.stop_all()
        if second is not None:
            await second.stop()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--url", "ftp://gateway"], "--url must start with http:// or https://"),
        (["--slot", "_secret"], "--slot"),
        (["--hmac-key-id", "desk-1"], "needs both --hmac-key-id and --hmac-secret-file"),
        (["--hmac-key-id", "k", "--hmac-secret-file", "/nonexistent", "--token-file", "t"], "not both"),
        (["--token-file", "/nonexistent/token"], "--token-file /nonexistent/token: cannot be read"),
    ],
)
def test_bad_options_stop_the_bridge_before_it_serves(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from gateway.cli import main

    assert main(["stdio", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # stdout belongs to the host, even for errors
    assert needle in captured.err


async def test_without_slot_the_bridge_serves_all(gateway: GatewayServer, publishers: Publishers) -> None:
    """A host configuration with just `["stdio"]` reaches every provider that opted in to `_all`."""
    await publishers.start(gateway, "pump-1", demo_server("pump-1"), aggregate=True)
    await wait_for(lambda: gateway.gateway.aggregate.members() == ["pump-1"], what="pump-1 in _all")
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "gateway.cli", "stdio", "--url", gateway.url], cwd=str(REPO)
    )
    async with Client(params, mode="legacy") as client:
        assert client.server_info is not None and client.server_info.name == "mcp-gateway _all"
        assert await text_of(client, "pump-1-echo", {"text": "default slot"}) == "default slot"
        assert [session.target.name for session in gateway.gateway.sessions.sessions.values()] == ["_all"]


async def test_a_stateless_era_host_is_passed_through_without_a_session(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    """A host pinned to 2026-07-28 gets its requests passed through as stateless-era POSTs, with the
    routing headers (Mcp-Name, Mcp-Param-* from the schema the host listed) the gateway checks."""
    from tests.integration.test_conformance_regressions import routed_server

    await publishers.start(gateway, "router", routed_server())
    async with Client(bridge(gateway.url, slot="router"), mode="2026-07-28") as client:
        assert [tool.name for tool in (await client.list_tools()).tools] == ["route"]
        # Non-ASCII travels base64-encoded in Mcp-Param-Region; the gateway checks it against the body.
        routed = await client.call_tool("route", {"region": "nord-ü", "priority": 3})
        assert routed.structured_content == {"result": "nord-ü/3/"}
        assert gateway.gateway.sessions.sessions == {}  # nothing held at the gateway for this host


async def test_a_stateless_hosts_cancel_closes_the_call_and_the_provider_hears_it(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    from tests.integration.test_http_session_era import pump_server

    cancelled: list[float] = []
    await publishers.start(gateway, "pump-1", pump_server(cancelled))
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    raw = await RawBridge.start(gateway.url)
    try:
        call = {"name": "sleep", "arguments": {"seconds": 30}, "_meta": meta}
        await raw.send({"jsonrpc": "2.0", "id": "s-1", "method": "tools/call", "params": call})
        slot = gateway.gateway.registry.slots["pump-1"]
        await wait_for(lambda: slot.live is not None and slot.live.in_flight == 1, what="the call at pump-1")
        await raw.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "s-1"}})
        await wait_for(lambda: cancelled == [30.0], what="the provider to see notifications/cancelled")
        # The bridge goes on: the next stateless request is answered.
        await raw.send({"jsonrpc": "2.0", "id": "s-2", "method": "tools/list", "params": {"_meta": meta}})
        listed = await raw.receive()
        assert listed["id"] == "s-2" and "sleep" in {tool["name"] for tool in listed["result"]["tools"]}
        assert gateway.gateway.sessions.sessions == {}
    finally:
        assert await raw.close() == 0
