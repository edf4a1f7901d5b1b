"""A request sent while a provider's socket is already closing: the caller and provider_status read a
named reason (docs/protocol.md, "Provider <slot> disconnected"), never the transport library's words."""

from __future__ import annotations

import asyncio

import pytest

from gateway.core import errors
from gateway.core.provider_session import ProviderSession
from gateway.southbound.websocket.endpoints import WebSocketLink
from tests.conftest import GatewayFactory, Publishers
from tests.support.servers import demo_server

CLOSING = "connection closing: the provider's socket was already closing when the request was sent"


async def test_a_request_meeting_a_closing_socket_names_why(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    gateway = await gateway_factory()
    await publishers.start(gateway, "cell-3", demo_server())
    session = gateway.gateway.registry.slots["cell-3"].live
    assert isinstance(session, ProviderSession)
    link = session.link
    assert isinstance(link, WebSocketLink)
    transport = link.sender.transport
    assert transport is not None
    # The gateway's end of the real socket starts closing; its end is noticed only on a later loop turn,
    # so a request sent now meets the closing socket.
    transport.close()
    with pytest.raises(errors.RpcError) as caught:
        await session.request("tools/list", None)
    assert caught.value.message == f'Provider "cell-3" disconnected: {CLOSING}'
    assert "Cannot write" not in caught.value.message
    assert session.close_reason == CLOSING
    await asyncio.sleep(0)
