"""A slot's lines reach the journal with SLOT= (what `journalctl -u mcp-gateway SLOT=pump-1` selects on):
a real gateway and provider, the gateway's log handled by the journal handler, a real datagram socket
standing in for journald's."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from gateway.app import GatewayServer
from gateway.service.journal import JournalHandler
from tests.conftest import Publishers, wait_for
from tests.support.servers import demo_server
from tests.support.systemd import DatagramSocket, parse_journal


@pytest.fixture
def journald() -> Iterator[tuple[DatagramSocket, list[dict[str, list[str]]]]]:
    """The gateway's loggers at info, into the journal handler; the entries read so far."""
    logger = logging.getLogger("gateway")
    level = logger.level
    with DatagramSocket("journal-socket") as socket:
        handler = JournalHandler(logging.NullHandler(), path=socket.path)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        try:
            yield socket, []
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
            handler.close()


async def test_a_slots_attach_and_leave_carry_its_name(
    gateway: GatewayServer,
    publishers: Publishers,
    journald: tuple[DatagramSocket, list[dict[str, list[str]]]],
) -> None:
    socket, entries = journald

    def logged(text: str) -> bool:
        entries.extend(parse_journal(data) for data in socket.drain())
        return any(entry["MESSAGE"][0].startswith(text) for entry in entries)

    publisher = await publishers.start(gateway, "pump-1", demo_server("pump-1"))
    await wait_for(lambda: logged("provider attached to slot pump-1"), what="the attach line")
    await publisher.stop()
    await wait_for(lambda: logged("provider left slot pump-1"), what="the leave line")
    of_pump = [entry for entry in entries if entry.get("SLOT") == ["pump-1"]]
    messages = [entry["MESSAGE"][0] for entry in of_pump]
    assert any(message.startswith("provider attached to slot pump-1") for message in messages)
    assert any(message.startswith("provider left slot pump-1") for message in messages)
    assert {entry["LOGGER"][0] for entry in of_pump} == {"gateway.slots"}
    assert {entry["PRIORITY"][0] for entry in of_pump} == {"6"}
