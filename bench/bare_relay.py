"""The floor of a relay hop on aiohttp, measured by `bench.relay` next to the gateway.

    python -m bench.bare_relay --port 8124

One provider publishes itself at `/provider/<slot>` over WebSocket, as into the gateway, and is opened
the way the gateway opens an SDK server: with `server/discover`, so the link speaks 2026-07-28. A
2026-07-28 `POST /<slot>/mcp` is renumbered, sent to it as one frame with the caller's params as they
came (its envelope in `_meta`, as the gateway forwards them), and the provider's answer (which stamps
`resultType`, its `serverInfo` and cache hints itself in that era) returned as JSON, so the SDK
processes at both ends do the same work on either path.

Nothing else: no Origin or Host check, authentication, rate limits, bounds, era or header checks,
deadlines, metrics, logs, session era or error handling past a 400. It is not a product and must
never face a network; it shows what the hop itself costs on this machine, so the gateway's own
share of a relayed call can be read off the same run. `GET /healthz` answers 200 once a provider
has answered `server/discover`. Prints `ready` once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import sys
from typing import Any

import orjson
from aiohttp import WSMsgType, web

from gateway import event_loop
from gateway.core import eras
from gateway.http_answers import JSON_TYPE


class Provider:
    """One provider's WebSocket and the calls waiting for its answers."""

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws
        self.pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.ids = itertools.count(1)

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        key = f"bare-{next(self.ids)}"
        message["id"] = key
        answer = self.pending[key] = asyncio.get_running_loop().create_future()
        await self.ws.send_frame(orjson.dumps(message), WSMsgType.TEXT)
        try:
            reply: dict[str, Any] = await answer
            return reply
        finally:
            del self.pending[key]

    def receive(self, data: str | bytes) -> None:
        message = orjson.loads(data)
        key = message.get("id") if isinstance(message, dict) else None
        waiting = self.pending.get(key) if isinstance(key, str) else None
        if waiting is not None and not waiting.done():
            waiting.set_result(message)


class BareRelay:
    def __init__(self) -> None:
        self.providers: dict[str, Provider] = {}
        self.ready: set[str] = set()

    async def provider(self, request: web.Request) -> web.WebSocketResponse:
        slot = request.match_info["slot"]
        ws = web.WebSocketResponse(max_msg_size=4 * 1024 * 1024)
        await ws.prepare(request)
        provider = self.providers[slot] = Provider(ws)
        await ws.receive()  # the register frame a Publisher always sends first
        reader = asyncio.create_task(self._read(provider))
        # The gateway's era probe, which opens a 2026-07-28 link with an SDK server.
        discover = {"jsonrpc": "2.0", "method": "server/discover", "params": {"_meta": eras.gateway_envelope()}}
        await provider.request(discover)
        self.ready.add(slot)
        await reader
        self.ready.discard(slot)
        self.providers.pop(slot, None)
        return ws

    @staticmethod
    async def _read(provider: Provider) -> None:
        async for message in provider.ws:
            if message.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                provider.receive(message.data)

    async def call(self, request: web.Request) -> web.Response:
        provider = self.providers.get(request.match_info["slot"])
        if provider is None:
            return web.json_response({"error": "no provider"}, status=404)
        body = orjson.loads(await request.read())
        if not isinstance(body, dict) or "id" not in body:
            return web.json_response({"error": "send one request"}, status=400)
        client_id = body["id"]
        answer = await provider.request({"jsonrpc": "2.0", "method": body["method"], "params": body.get("params")})
        answer["id"] = client_id
        return web.Response(body=orjson.dumps(answer), content_type=JSON_TYPE)

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"ready": sorted(self.ready)}, status=200 if self.ready else 503)


def application() -> web.Application:
    relay = BareRelay()
    app = web.Application()
    app.router.add_get("/healthz", relay.healthz)
    app.router.add_get("/provider/{slot}", relay.provider)
    app.router.add_post("/{slot}/mcp", relay.call)
    return app


async def serve(port: int) -> None:
    runner = web.AppRunner(application(), access_log=None, handle_signals=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print("ready", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench.bare_relay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--event-loop", choices=event_loop.EVENT_LOOPS, default="auto")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        event_loop.run(serve(args.port), args.event_loop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
