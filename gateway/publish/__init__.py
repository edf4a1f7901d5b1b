"""Publish servers written with the official `mcp` SDK into a gateway slot.

    from gateway.publish import Publisher
    publisher = Publisher(server, "ws://127.0.0.1:3000", slot="pump-1", aggregate=True)
    await publisher.run()          # reconnects with jittered back-off until stopped

Requires the `provider` extra (the `mcp` package). See docs/provider-api.md.
"""

from gateway import __version__

# Top-level modules that only the `provider` extra brings: the SDK, its types and its async library.
PROVIDER_MODULES = frozenset({"mcp", "mcp_types", "anyio"})


def missing_extra(missing: ModuleNotFoundError) -> ModuleNotFoundError:
    """The same missing module, with a message naming the extra and how to install it."""
    wheel = f"mcp_edge_gateway-{__version__}-py3-none-any.whl"
    return ModuleNotFoundError(
        f"gateway.publish needs the `provider` extra (the mcp SDK), which is not installed "
        f"(no module named {missing.name!r}). Install this project with it from its checkout, "
        f"pip install '/path/to/checkout[provider]', or from its wheel, pip install '/path/to/{wheel}[provider]'. "
        f"(PyPI's mcp-gateway is another project.) See docs/packaging.md.",
        name=missing.name,
    )


# Every module of this package imports through here first, so a base install without the extra
# gets one error that names the extra instead of the first SDK module that happens to be missing.
try:
    from gateway.publish.link_errors import PublishRefused
    from gateway.publish.loopback import attach_loopback
    from gateway.publish.websocket import MultiplexedPublisher, Publisher
except ModuleNotFoundError as missing:
    if (missing.name or "").partition(".")[0] not in PROVIDER_MODULES:
        raise
    raise missing_extra(missing) from missing

__all__ = ["MultiplexedPublisher", "PublishRefused", "Publisher", "attach_loopback"]
