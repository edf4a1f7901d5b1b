"""A 2026-07-28 `subscriptions/listen` stream on `_all` follows its token's current scopes: after a reload
that gives the token pump-2's scope, the stream hears pump-2's board go; after one that takes the scope
away, it hears nothing more of pump-2. Either reload is itself news to the stream (its view changed).

A real `mcp-gateway run` process reloaded with SIGHUP, the simulator's pumps as boards over WebSockets, a
raw aiohttp client holding the listen stream and listing tools with stateless requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson

from tests.conftest import wait_for
from tests.integration.test_http_stateless_era import request, routing_headers
from tests.integration.test_list_changed_visibility import QUIET_S, board
from tests.integration.test_streams_credential import Recorder
from tests.support.gateway_process import GatewayProcess, gateway_process
from tests.support.listening_callers import reload, token_entry

TOKEN = secrets.token_urlsafe(32)
CHANGED = "notifications/tools/list_changed"


def config_text(scopes: list[str]) -> str:
    """pump-2 needs scope pump-2; the one token holds `scopes`."""
    return 'port = 0\n[auth.required_scopes]\n"pump-2" = ["pump-2"]\n' + token_entry("t", TOKEN, scopes)


def headers(body: dict[str, object]) -> dict[str, str]:
    return {**routing_headers(body), "Authorization": f"Bearer {TOKEN}"}


class Listening:
    """The token's listen stream on `_all` and its stateless tools/list."""

    def __init__(self, gateway: GatewayProcess, http: aiohttp.ClientSession, stream: Recorder) -> None:
        self.url = f"{gateway.url}/_all/mcp"
        self.http = http
        self.stream = stream
        self.mark = 0

    def heard(self) -> int:
        """list_changed heard since the last `reset`."""
        return sum(1 for message in self.stream.messages()[self.mark :] if message.get("method") == CHANGED)

    def reset(self) -> None:
        self.mark = len(self.stream.messages())

    async def slots(self) -> set[str]:
        body = request("tools/list", request_id=7)
        async with self.http.post(self.url, data=orjson.dumps(body), headers=headers(body)) as response:
            assert response.status == 200, await response.text()
            tools = (await response.json())["result"]["tools"]
        return {tool["name"].rsplit("-", 1)[0] for tool in tools}

    async def hears(self, what: str, timeout: float = 20) -> None:
        await wait_for(lambda: self.heard() > 0, timeout, what)

    async def quiet(self, what: str) -> None:
        await asyncio.sleep(QUIET_S)
        assert self.heard() == 0, f"{what}: {self.stream.messages()[self.mark :]}"


@contextlib.asynccontextmanager
async def listening(gateway: GatewayProcess) -> AsyncIterator[Listening]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as http:
        body = request("subscriptions/listen", {"notifications": {"toolsListChanged": True}}, request_id="sub-1")
        response = await http.post(f"{gateway.url}/_all/mcp", data=orjson.dumps(body), headers=headers(body))
        assert response.status == 200, await response.text()
        stream = Recorder(response)
        try:
            await wait_for(lambda: len(stream.messages()) >= 1, 10, "the acknowledgement")
            assert stream.messages()[0]["method"] == "notifications/subscriptions/acknowledged"
            yield Listening(gateway, http, stream)
        finally:
            await stream.close()


async def settled(seen: Listening, slots: set[str]) -> None:
    """The stateless list shows `slots`, and the stream has heard what it will of getting there."""

    async def listed() -> bool:
        return await seen.slots() == slots

    deadline = asyncio.get_running_loop().time() + 20
    while not await listed():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {slots}: {await seen.slots()}"
        await asyncio.sleep(0.05)
    await asyncio.sleep(QUIET_S)
    seen.reset()


async def test_a_listen_stream_hears_of_a_slot_its_token_gained_by_a_reload(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(config_text([]))
    async with gateway_process("--config", str(config)) as gateway, board(gateway, 1), listening(gateway) as seen:
        async with board(gateway, 2):
            await settled(seen, {"pump-1"})
            await seen.quiet("pump-2 is hidden from the token")

            await reload(gateway, config, config_text(["pump-2"]))
            await seen.hears("the reload that gave the token pump-2")
            await settled(seen, {"pump-1", "pump-2"})
        # pump-2's board left: a change of the list the token gets now.
        await seen.hears("pump-2's departure, after the token gained its scope")
        await settled(seen, {"pump-1"})
        async with board(gateway, 2):
            await seen.hears("pump-2's return")
            await settled(seen, {"pump-1", "pump-2"})


async def test_a_listen_stream_that_saw_nothing_hears_at_once_of_what_a_reload_shows_it(tmp_path: Path) -> None:
    """Its view was empty, so the reload's own announcement is not written to it: the gateway judges its
    credential when the catalog is compared, not at the next keepalive (limits.sse_keepalive_s, 15 s)."""
    config = tmp_path / "gateway.toml"
    config.write_text(config_text([]))
    async with gateway_process("--config", str(config)) as gateway, board(gateway, 2), listening(gateway) as seen:
        await settled(seen, set())
        await reload(gateway, config, config_text(["pump-2"]))
        await seen.hears("the reload that gave the token pump-2", timeout=5)
        await settled(seen, {"pump-2"})
        async with board(gateway, 3):
            await seen.hears("pump-3's arrival")


async def test_a_listen_stream_hears_nothing_of_a_slot_its_token_lost_by_a_reload(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(config_text(["pump-2"]))
    async with gateway_process("--config", str(config)) as gateway, board(gateway, 1), listening(gateway) as seen:
        async with board(gateway, 2):
            await seen.hears("pump-2's arrival, while the token holds its scope")
            await settled(seen, {"pump-1", "pump-2"})

            await reload(gateway, config, config_text([]))
            await seen.hears("the reload that took pump-2 from the token")
            await settled(seen, {"pump-1"})
        await seen.quiet("pump-2's departure, hidden from the token now")
        async with board(gateway, 2):
            await seen.quiet("pump-2's return, hidden from the token now")
            assert await seen.slots() == {"pump-1"}
