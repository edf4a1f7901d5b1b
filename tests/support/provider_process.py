"""A provider in its own process: demo_server() published with gateway.publish.

    python -m tests.support.provider_process --url http://127.0.0.1:3000 --slot pump-1 [--multiplexed]

Tests kill it (SIGKILL) to lose a provider mid-call, or watch it exit when the gateway shuts down.
It prints "connected" once its socket is open and, on exit, "closed <code>" with the close code the
gateway sent (it does not reconnect), so a test can read what the provider saw.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from gateway.publish import MultiplexedPublisher, Publisher
from tests.support.servers import demo_server


async def main(url: str, slot: str, multiplexed: bool) -> None:
    publisher: Publisher | MultiplexedPublisher
    if multiplexed:
        publisher = MultiplexedPublisher({slot: demo_server(slot)}, url, reconnect=False)
    else:
        publisher = Publisher(demo_server(slot), url, slot, reconnect=False)
    task = asyncio.create_task(publisher.run())
    connected = asyncio.create_task(publisher.connected.wait())
    await asyncio.wait({task, connected}, return_when=asyncio.FIRST_COMPLETED)
    if connected.done():
        print("connected", flush=True)
    else:
        connected.cancel()
    await task
    code = publisher.last_close[0] if publisher.last_close else None
    print(f"closed {code}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--slot", required=True)
    parser.add_argument("--multiplexed", action="store_true")
    args = parser.parse_args()
    asyncio.run(main(args.url, args.slot, args.multiplexed))
    sys.exit(0)
