"""A provider admitted under one [providers.auth] whose link is still being attached when a reload
withdraws its credential (its takeover probe of a quiet holder takes up to providers.takeover_probe_ms):
the reload finds no session of it to close, so the link is judged again once attached and closed with
1008 when its credential no longer stands, on /provider/<slot> and for a /providers claim alike.

An in-process gateway reloaded from its file, raw aiohttp WebSocket boards; the quiet holder reads its
own socket, so the test knows the probe has started (its ping arrives) before it reloads.
"""

from __future__ import annotations

import secrets

import aiohttp
import orjson
from aiohttp import WSMsgType

from gateway.app import GatewayServer
from gateway.southbound.websocket.endpoints import WITHDRAWN
from tests.conftest import wait_for
from tests.integration.test_reload import Reloadable, reloadable, rewrite, sha

__all__ = ["reloadable"]  # the fixture, used by name

REGISTER = {"jsonrpc": "2.0", "method": "notifications/register"}


def config(identities: dict[str, tuple[str, list[str]]]) -> str:
    """Each identity name: (secret, slot patterns); the takeover probe waits 3 s for a quiet holder."""
    text = 'port = 0\n[providers]\ntakeover_probe_ms = 3000\n[providers.auth]\nmode = "identities"\n'
    for name, (secret, slots) in identities.items():
        patterns = orjson.dumps(slots).decode()
        text += f'[[providers.auth.identities]]\nname = "{name}"\nsha256 = "{sha(secret)}"\nslots = {patterns}\n'
    return text


def holder(server: GatewayServer, slot: str) -> tuple[str, str | None] | None:
    held = server.gateway.registry.slots.get(slot)
    live = held.live if held is not None else None
    return (live.link.info.transport, live.link.info.identity) if live is not None else None


async def probed(quiet: aiohttp.ClientWebSocketResponse) -> None:
    """Wait for the takeover probe's ping on the quiet holder's socket (it does not answer it)."""
    while True:
        message = await quiet.receive(timeout=10)
        if message.type is WSMsgType.PING:
            return
        assert message.type not in (WSMsgType.CLOSE, WSMsgType.CLOSED, WSMsgType.CLOSING), message


async def ended(socket: aiohttp.ClientWebSocketResponse) -> str:
    """Read `socket` until the gateway closes it (a request it sent first is left unanswered); the close
    reason (a close reason is cut at 123 bytes)."""
    while True:
        message = await socket.receive(timeout=15)
        if message.type in (WSMsgType.CLOSE, WSMsgType.CLOSED, WSMsgType.CLOSING):
            return str(message.extra or "")


async def test_a_board_whose_identity_a_reload_removes_during_its_takeover_is_closed_once_attached(
    reloadable: Reloadable,
) -> None:
    keep, rogue = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    both = {"keep": (keep, ["pump-*"]), "rogue": (rogue, ["pump-*"])}
    server = await reloadable(config(both))
    url = server.url.replace("http", "ws", 1) + "/provider/pump-1"
    async with aiohttp.ClientSession() as http:
        quiet = await http.ws_connect(url, headers={"X-Provider-Token": keep}, autoping=False)
        await wait_for(lambda: holder(server, "pump-1") == ("websocket", "keep"), 10, "the quiet holder")
        newcomer = await http.ws_connect(url, headers={"X-Provider-Token": rogue})
        await probed(quiet)
        rewrite(server, config({"keep": both["keep"]}))
        report = await server.reload()
        assert report.outcome == "applied", report.refusals
        # The probe ends (the holder never answers): the newcomer is attached, judged again, and closed.
        reason = await ended(newcomer)
        assert newcomer.close_code == 1008 and reason.startswith(WITHDRAWN[:60]), (newcomer.close_code, reason)
        assert holder(server, "pump-1") != ("websocket", "rogue")
        await quiet.close()


async def test_a_claim_on_providers_whose_slot_a_reload_withdraws_during_its_takeover_is_closed_once_attached(
    reloadable: Reloadable,
) -> None:
    mux, quiet_secret = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    wide = {"mux": (mux, ["pump-*", "tank-*"]), "quiet": (quiet_secret, ["tank-*"])}
    server = await reloadable(config(wide))
    base = server.url.replace("http", "ws", 1)
    async with aiohttp.ClientSession() as http:
        quiet = await http.ws_connect(
            base + "/provider/tank-1", headers={"X-Provider-Token": quiet_secret}, autoping=False
        )
        await wait_for(lambda: holder(server, "tank-1") == ("websocket", "quiet"), 10, "the quiet holder")
        board = await http.ws_connect(base + "/providers", headers={"X-Provider-Token": mux})
        await board.send_str(orjson.dumps({"provider": "pump-1", "payload": REGISTER}).decode())
        await wait_for(lambda: holder(server, "pump-1") == ("websocket-mux", "mux"), 10, "pump-1 on /providers")
        await board.send_str(orjson.dumps({"provider": "tank-1", "payload": REGISTER}).decode())
        await probed(quiet)
        rewrite(server, config({"mux": (mux, ["pump-*"]), "quiet": wide["quiet"]}))
        report = await server.reload()
        assert report.outcome == "applied", report.refusals
        await ended(quiet)  # the probe went unanswered: the claim takes the slot, and is judged
        await wait_for(lambda: holder(server, "tank-1") is None, 10, "the claim closed")
        assert holder(server, "pump-1") == ("websocket-mux", "mux")  # the socket keeps the slots it may publish
        await board.close()
