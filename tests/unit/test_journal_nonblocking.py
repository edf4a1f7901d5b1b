"""A journald that does not read must not stall the process that logs: the journal handler alone, a real
AF_UNIX datagram socket standing in for journald's that the test leaves unread until it chooses to read.
Each logging call runs in a thread joined with a timeout, so a call that blocks fails the test instead of
hanging it."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable, Iterator

import pytest

from gateway.service.journal import JournalHandler
from tests.support.systemd import DatagramSocket, parse_journal, read_descriptor

LINES = 5000
"""More datagrams than an unread AF_UNIX socket queues (net.unix.max_dgram_qlen, and the sender's buffer)."""
RETURN_WITHIN_S = 20.0
"""Generous: this only tells "the calls returned" from "a call blocked"; it measures no speed."""


class Kept(logging.Handler):
    """The fallback: what the handler hands to stderr instead of the journal."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def stalled() -> Iterator[tuple[DatagramSocket, JournalHandler, Kept, logging.Logger]]:
    """A logger into a journal handler whose socket nobody reads (yet)."""
    with DatagramSocket("journal-socket") as journald:
        fallback = Kept()
        handler = JournalHandler(fallback, path=journald.path)
        logger = logging.getLogger("gateway.test_journal_stall")
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
        try:
            yield journald, handler, fallback, logger
        finally:
            logger.removeHandler(handler)
            logger.propagate = True
            handler.close()


def returns(calls: Callable[[], None]) -> bool:
    """Whether `calls` returned at all within RETURN_WITHIN_S (a daemon thread: a blocked one is left behind)."""
    thread = threading.Thread(target=calls, daemon=True)
    thread.start()
    thread.join(RETURN_WITHIN_S)
    return not thread.is_alive()


def test_logging_to_a_journald_that_does_not_read_returns_and_drops(
    stalled: tuple[DatagramSocket, JournalHandler, Kept, logging.Logger],
) -> None:
    journald, handler, fallback, logger = stalled

    def log_many() -> None:
        for number in range(LINES):
            logger.info("line %d", number, extra={"slot": "pump-1"})

    assert returns(log_many), "a log call blocked on the journal's full socket"
    queued = [parse_journal(data) for data in journald.drain()]
    assert 0 < len(queued) < LINES
    assert handler.dropped == LINES - len(queued)  # every line either queued or counted
    # Not to stderr either: under systemd that is journald's stream, stalled along with the socket.
    assert fallback.records == []

    # journald reads again: the next entry it gets says how many were lost, then the line itself.
    assert returns(lambda: logger.warning("after the stall", extra={"slot": "pump-1"}))
    notice, line = [parse_journal(data) for data in journald.drain()]
    assert notice["JOURNAL_DROPPED"] == [str(LINES - len(queued))]
    assert notice["PRIORITY"] == ["4"]
    assert notice["MESSAGE"] == [
        f"the journal's socket was full (journald not reading): {LINES - len(queued)} log entries dropped"
    ]
    assert line["MESSAGE"] == ["after the stall"]
    assert line["SLOT"] == ["pump-1"]

    # Reported once: the lines after it come alone.
    logger.info("and on")
    (following,) = [parse_journal(data) for data in journald.drain()]
    assert following["MESSAGE"] == ["and on"]
    assert "JOURNAL_DROPPED" not in following


def test_an_entry_too_big_for_a_datagram_is_dropped_too_while_journald_does_not_read(
    stalled: tuple[DatagramSocket, JournalHandler, Kept, logging.Logger],
) -> None:
    """The memfd path (SCM_RIGHTS) goes over the same socket: it must not block either, and works after."""
    journald, handler, fallback, logger = stalled
    # Another process's lines fill journald's queue, so the big entry is the first this handler cannot send.
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as other:
        other.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            for _ in range(LINES):
                other.sendto(b"MESSAGE=another service\n", journald.path)
        big = "x" * (1024 * 1024)
        assert returns(lambda: logger.info("%s", big)), "a large entry's memfd send blocked on the full socket"
    assert handler.dropped == 1
    assert fallback.records == []
    journald.drain()

    logger.info("%s", big)
    data, fd = journald.receive_with_descriptor()
    assert fd is None
    assert parse_journal(data)["JOURNAL_DROPPED"] == ["1"]
    data, fd = journald.receive_with_descriptor()
    assert data == b""
    assert fd is not None
    assert parse_journal(read_descriptor(fd))["MESSAGE"] == [big]
