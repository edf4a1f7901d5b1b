"""An OTLP/HTTP endpoint that takes every export and discards it: what `bench.telemetry` exports to, so
the gateway's cost of recording and sending spans is measured without a collector's.

    python -m bench.otlp_sink --port P      prints "ready" once it listens on 127.0.0.1:P
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from aiohttp import web


async def serve(port: int) -> None:
    async def discard(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=b"", content_type="application/x-protobuf")

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/{signal}", discard)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print("ready", flush=True)
    await asyncio.Event().wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.otlp_sink", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
