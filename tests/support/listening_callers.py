"""Callers with static tokens, each holding an SDK client's GET stream on several endpoints of a real
`mcp-gateway run` process, counting the `notifications/tools/list_changed` each stream hears; and the
configuration pieces and SIGHUP reload the tests of who hears what use around them."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.session import IncomingMessage, MessageHandlerFnT
from mcp.client.streamable_http import streamable_http_client

from tests.support.gateway_process import GatewayProcess


def token_entry(name: str, token: str, scopes: list[str]) -> str:
    """An [[auth.tokens]] entry for `token` (stored as its SHA-256) holding `scopes`."""
    digest = hashlib.sha256(token.encode()).hexdigest()
    return f'[[auth.tokens]]\nname = "{name}"\nsha256 = "{digest}"\nscopes = {json.dumps(scopes)}\n'


def counter(heard: dict[str, int], key: str) -> MessageHandlerFnT:
    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            heard[key] += 1

    return on_message


async def eventually(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 30.0) -> None:
    """Await `check()` until it holds; fail (never hang) after `timeout`."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


async def open_get_streams(gateway: GatewayProcess, http: httpx2.AsyncClient, token: str) -> int:
    """The gateway's open GET streams (its mcpgw_client_streams gauge, read with `token`)."""
    response = await http.get(f"{gateway.url}/metrics", headers={"Authorization": f"Bearer {token}"})
    for line in response.text.splitlines():
        if line.startswith('mcpgw_client_streams{kind="get"}'):
            return int(float(line.split()[-1]))
    return 0


class Listeners:
    """Each caller's SDK client on each path, keyed "<caller> <path>", with the list_changed each heard."""

    def __init__(self, gateway: GatewayProcess, clients: dict[str, Client], heard: dict[str, int]) -> None:
        self.gateway = gateway
        self.clients = clients
        self.heard = heard

    def reset(self) -> None:
        self.heard.update(dict.fromkeys(self.heard, 0))

    async def names(self, key: str) -> list[str]:
        return [tool.name for tool in (await self.clients[key].list_tools()).tools]


@contextlib.asynccontextmanager
async def listening(
    gateway: GatewayProcess, callers: dict[str, str], paths: Iterable[str], metrics_token: str
) -> AsyncIterator[tuple[dict[str, Client], dict[str, int]]]:
    """Every caller (name: token) connected on every path, returned once the gateway counts each one's
    GET stream open (read with `metrics_token`, which holds the `metrics` scope)."""
    heard = {f"{caller} {path}": 0 for caller in callers for path in paths}
    async with contextlib.AsyncExitStack() as stack:
        clients: dict[str, Client] = {}
        for caller, token in callers.items():
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=60))
            )
            for path in paths:
                key = f"{caller} {path}"
                clients[key] = await stack.enter_async_context(
                    Client(
                        streamable_http_client(f"{gateway.url}{path}", http_client=http),
                        mode="legacy",
                        message_handler=counter(heard, key),
                    )
                )
        metrics = await stack.enter_async_context(httpx2.AsyncClient(timeout=10))

        async def streams_open() -> bool:
            return await open_get_streams(gateway, metrics, metrics_token) == len(clients)

        await eventually(streams_open, "every GET stream")
        yield clients, heard


def rewrite(path: Path, text: str) -> None:
    path.write_text(text)


async def reload(gateway: GatewayProcess, path: Path, text: str) -> None:
    """`path` (the configuration or the policy file) rewritten with `text`, then SIGHUP and its applied reload."""
    rewrite(path, text)
    mark = len(gateway.lines)
    gateway.process.send_signal(signal.SIGHUP)
    line = await gateway.wait_line("configuration reload", after=mark)
    assert "configuration reloaded" in line, gateway.log
