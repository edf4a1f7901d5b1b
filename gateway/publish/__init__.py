"""Publish servers written with the official `mcp` SDK into a gateway slot.

    from gateway.publish import Publisher
    publisher = Publisher(server, "ws://127.0.0.1:3000", slot="pump-1", aggregate=True)
    await publisher.run()          # reconnects with jittered back-off until stopped

Requires the `provider` extra (the `mcp` package). See docs/provider-api.md.
"""

from gateway.publish.loopback import attach_loopback
from gateway.publish.websocket import MultiplexedPublisher, Publisher

__all__ = ["MultiplexedPublisher", "Publisher", "attach_loopback"]
