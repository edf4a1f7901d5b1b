"""Remote upstreams: what callers are told when an answer is too large, when the server dies mid-answer,
when it cannot be reached, or when a reload restarts the upstream; and that progress reaches them clean.

Every remote is a real SDK server served by uvicorn on loopback (tests/support/remote_server.py);
clients are SDK clients of both eras (docs/upstreams.md, Remote upstreams).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.server.mcpserver import Context, MCPServer

from bench.ports import free_port
from gateway.app import GatewayServer
from gateway.core.relay import RELATED_REQUEST_KEY
from gateway.reload import ConfigSource
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_remote_upstreams import ERAS, KINDS, SLOT, entry, pending, slot_url, start_gateway, text
from tests.integration.test_remote_upstreams import upstream as upstream_status
from tests.support.remote_server import Mode, RemoteServer, remote_server
from tests.support.servers import demo_server

# The demo server logs on purpose (logging is deprecated in 2026-07-28, still part of the session era).
pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

BOUND = 65_536


def large_server() -> MCPServer:
    """The demo server plus a tool with a large answer and one that sends a large log message."""
    server = demo_server("files")

    @server.tool()
    def big(size: int) -> str:
        """Answer with `size` bytes of text."""
        return "y" * size

    @server.tool()
    async def shout(size: int, ctx: Context) -> str:
        """Send a log message of `size` bytes (a notification: it answers no call), then answer."""
        await ctx.info("z" * size)
        return "shouted"

    return server


# -- an answer too large ------------------------------------------------------------------------


async def test_an_sse_event_over_the_bound_answers_its_caller_and_the_link_stays(
    gateway_factory: GatewayFactory,
) -> None:
    async with remote_server(large_server, "sse") as remote:
        server = await start_gateway(
            gateway_factory, entry(remote.url, transport="sse"), limits={"max_frame_bytes": BOUND}
        )
        await wait_ready_slot(server, SLOT)
        async with Client(slot_url(server), mode="legacy") as other, Client(slot_url(server), mode="legacy") as one:
            in_flight = asyncio.create_task(other.call_tool("sleep", {"seconds": 1.5}))
            await wait_for(lambda: pending(server) == 1, what="the other call pending at the remote")
            started = time.monotonic()
            with pytest.raises(MCPError) as failure:
                await asyncio.wait_for(one.call_tool("big", {"size": 4 * BOUND}), 20)
            assert time.monotonic() - started < 10
            assert failure.value.error.message == (
                f'Upstream "{SLOT}" ended the answer before it was complete: the answer is larger than {BOUND} '
                "bytes (limits.max_frame_bytes)"
            )
            # Every other call goes on: the stream skipped the event, the session stands.
            assert text(await asyncio.wait_for(in_flight, 20)) == "slept 1.5"
            # A message over the bound that names no call (a log message) is dropped and counted.
            assert text(await one.call_tool("shout", {"size": 2 * BOUND})) == "shouted"
            assert text(await one.call_tool("add", {"a": 2, "b": 3})) == "5"
        status = upstream_status(server)
        assert status["connects"] == 1 and status["state"] == "connected"
        assert status["oversized_messages"] == 2


@pytest.mark.parametrize(("mode", "transport"), [("session", "streamable-http"), ("stateless", "streamable-http")])
async def test_a_notification_over_the_bound_on_an_answer_stream_is_dropped_and_the_call_answered(
    gateway_factory: GatewayFactory, mode: Mode, transport: str
) -> None:
    # The log message goes on the call's own event stream, before the answer: dropping it must not end
    # the call (it did, blaming "the answer is larger"), while an answer over the bound still does.
    async with remote_server(large_server, mode) as remote:
        server = await start_gateway(
            gateway_factory, entry(remote.url, transport=transport), limits={"max_frame_bytes": BOUND}
        )
        await wait_ready_slot(server, SLOT)
        async with Client(slot_url(server), mode="legacy") as client:
            assert text(await asyncio.wait_for(client.call_tool("shout", {"size": 2 * BOUND}), 20)) == "shouted"
            with pytest.raises(MCPError) as failure:
                await asyncio.wait_for(client.call_tool("big", {"size": 4 * BOUND}), 20)
            assert failure.value.error.message.endswith(
                f"the answer is larger than {BOUND} bytes (limits.max_frame_bytes)"
            )
            assert text(await client.call_tool("add", {"a": 2, "b": 3})) == "5"
        assert upstream_status(server)["oversized_messages"] == 2


async def test_a_request_to_the_client_over_the_bound_ends_its_call_at_once(gateway_factory: GatewayFactory) -> None:
    # The call waits for the client's answer to the question, which the gateway cannot pass on: it ends
    # now with the reason, not at its deadline with "raise request_timeout_ms".
    from tests.support.asking_server import Name

    def asking() -> MCPServer:
        server = large_server()

        @server.tool()
        async def ask_big(size: int, ctx: Context) -> str:
            """Ask the client a question of `size` bytes."""
            result = await ctx.elicit("q" * size, Name)
            return result.action

        return server

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": "x"})

    async with remote_server(asking, "session") as remote:
        server = await start_gateway(
            gateway_factory, entry(remote.url, transport="streamable-http"), limits={"max_frame_bytes": BOUND}
        )
        await wait_ready_slot(server, SLOT)
        async with Client(slot_url(server), mode="legacy", elicitation_callback=elicit) as client:
            assert text(await asyncio.wait_for(client.call_tool("ask_big", {"size": 10}), 20)) == "accept"
            started = time.monotonic()
            with pytest.raises(MCPError) as failure:
                await asyncio.wait_for(client.call_tool("ask_big", {"size": 2 * BOUND}), 20)
            assert time.monotonic() - started < 10
            assert failure.value.error.message.endswith(
                f"the upstream sent its client a request (elicitation/create) larger than {BOUND} bytes "
                "(limits.max_frame_bytes), which the gateway cannot pass on"
            )
            assert text(await client.call_tool("add", {"a": 2, "b": 3})) == "5"


# -- a server that dies mid-answer --------------------------------------------------------------


async def kill(remote: RemoteServer) -> None:
    """What a killed server leaves behind: every open connection cut where it stands, then nothing."""
    assert remote._uvicorn is not None
    for connection in list(remote._uvicorn.server_state.connections):
        connection.transport.abort()
    await remote.stop()


@pytest.mark.parametrize(("mode", "transport", "era"), KINDS)
async def test_a_server_gone_mid_answer_is_named_in_plain_words(
    gateway_factory: GatewayFactory, mode: str, transport: str, era: str
) -> None:
    async with remote_server(lambda: demo_server("files"), mode) as remote:  # type: ignore[arg-type]
        server = await start_gateway(gateway_factory, entry(remote.url, transport=transport))
        await wait_ready_slot(server, SLOT)
        async with Client(slot_url(server), mode="legacy") as client:
            call = asyncio.create_task(client.call_tool("sleep", {"seconds": 30}))
            await wait_for(lambda: pending(server) == 1, what="the call pending at the remote")
            await asyncio.sleep(0.2)
            await kill(remote)
            with pytest.raises(MCPError) as failure:
                await asyncio.wait_for(call, 15)
    message = failure.value.error.message
    if era == "legacy-sse":
        # The session was the stream: the call is answered with the link's end.
        assert message == (
            f'Provider "{SLOT}" disconnected: the upstream\'s SSE stream broke: the upstream closed the connection'
        )
    else:
        assert message.startswith(f'Upstream "{SLOT}" ended the answer before it was complete: ')
        assert "the upstream closed the connection before" in message
    for internal in ("Error", "400", "<", "payload"):
        assert internal not in message, message


# -- progress -----------------------------------------------------------------------------------


@pytest.mark.parametrize("client_era", ERAS)
@pytest.mark.parametrize(("mode", "transport", "era"), KINDS)
async def test_progress_from_a_remote_reaches_the_client_without_the_gateways_key(
    gateway_factory: GatewayFactory, mode: str, transport: str, era: str, client_era: str
) -> None:
    async with remote_server(lambda: demo_server("files"), mode) as remote:  # type: ignore[arg-type]
        server = await start_gateway(gateway_factory, entry(remote.url, transport=transport))
        await wait_ready_slot(server, SLOT)
        seen: list[Any] = []
        reported: list[float] = []

        async def on_message(message: Any) -> None:
            if isinstance(message, types.ProgressNotification):
                seen.append(message.params.model_dump(by_alias=True))

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            reported.append(progress)

        async with Client(slot_url(server), mode=client_era, message_handler=on_message) as client:
            assert text(await client.call_tool("echo", {"text": "hi"}, progress_callback=on_progress)) == "hi"
        assert reported == [0.5]
        for params in seen:
            assert RELATED_REQUEST_KEY not in (params.get("_meta") or {}), params


# -- a server that cannot be reached ------------------------------------------------------------


async def test_a_remote_never_reached_says_where_the_gateway_connects_and_why_it_failed(
    gateway_factory: GatewayFactory,
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp?api_key=never-shown"
    server = await start_gateway(gateway_factory, entry(url, transport="streamable-http"))
    await wait_for(lambda: upstream_status(server)["failures_in_a_row"] >= 1, what="a failed attempt")
    async with Client(slot_url(server), mode="legacy") as client:
        with pytest.raises(MCPError) as failure:
            await client.call_tool("add", {"a": 1, "b": 1})
    message = failure.value.error.message
    assert message.startswith(
        f'Provider "{SLOT}" not connected: the gateway has not connected to its remote server at '
        f"http://127.0.0.1:{port}/mcp?… yet; last attempt: "
    )
    assert "starts itself" not in message
    assert "never-shown" not in message
    assert "(provider_status on _broker)" in message
    last_attempt = message.partition("; last attempt: ")[2]
    assert last_attempt.partition(" (provider_status")[0] in upstream_status(server)["last_error"]


# -- a reload that restarts the upstream --------------------------------------------------------


def remote_entry(url: str, request_timeout_ms: int) -> str:
    return (
        f'port = 0\n[[upstreams.remote]]\nname = "{SLOT}"\nurl = "{url}"\n'
        f"request_timeout_ms = {request_timeout_ms}\nreconnect_initial_s = 0.05\n"
    )


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
async def test_a_reload_that_changes_a_remote_upstream_tells_its_callers_it_restarted(
    tmp_path: Path, transport: str
) -> None:
    mode: Mode = "sse" if transport == "sse" else "session"
    async with remote_server(lambda: demo_server("files"), mode) as remote:
        path = tmp_path / "gateway.toml"
        path.write_text(remote_entry(remote.url, 20_000) + f'transport = "{transport}"\n')
        source = ConfigSource(str(path), environ={})
        server = GatewayServer(source.load(), source=source)
        await server.start()
        try:
            await wait_ready_slot(server, SLOT)
            async with Client(slot_url(server), mode="legacy") as client:
                call = asyncio.create_task(client.call_tool("sleep", {"seconds": 30}))
                await wait_for(lambda: pending(server) == 1, what="the call pending at the remote")
                path.write_text(remote_entry(remote.url, 30_000) + f'transport = "{transport}"\n')
                report = await server.reload()
                assert report.outcome == "applied", report.refusals
                assert report.changes == (f"upstreams.remote: restarted {SLOT}",)
                with pytest.raises(MCPError) as failure:
                    await asyncio.wait_for(call, 10)
                assert failure.value.error.message == (
                    f'Provider "{SLOT}" disconnected: upstream restarted by a configuration reload'
                )
                await wait_ready_slot(server, SLOT)
                assert text(await client.call_tool("add", {"a": 1, "b": 1})) == "2"
            assert server.gateway.registry.managers[SLOT].status_extra()["state"] == "connected"
        finally:
            await server.stop()
