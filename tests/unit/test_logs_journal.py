"""Logs under systemd: setup_logging with stderr being the journal ($JOURNAL_STREAM = its device:inode)
sends native journal fields to a real AF_UNIX datagram socket standing in for journald's, and falls back
to `<N>`-prefixed lines on stderr without it."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest

from gateway.logs import setup_logging
from gateway.service import journal
from gateway.service.journal import JournalHandler, encode_field, field_name, stream_is_journal
from tests.support.systemd import DatagramSocket, parse_journal, read_descriptor

HERE = Path(__file__).resolve()


@pytest.fixture
def root_logging() -> Iterator[None]:
    """setup_logging replaces the root logger's handlers: put pytest's back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def journald(monkeypatch: pytest.MonkeyPatch) -> Iterator[DatagramSocket]:
    with DatagramSocket("journal-socket") as socket:
        monkeypatch.setattr(journal, "SOCKET_PATH", socket.path)
        yield socket


JournalStderr = Callable[[], IO[str]]


@pytest.fixture
def journal_stderr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[JournalStderr]:
    """Makes stderr what systemd connects to the journal: a real file, named by JOURNAL_STREAM. Called in
    the test's body: pytest puts its own capture back in sys.stderr when the call begins."""
    with (tmp_path / "stderr").open("w+") as stream:

        def use() -> IO[str]:
            status = os.fstat(stream.fileno())
            monkeypatch.setattr(sys, "stderr", stream)
            monkeypatch.setenv("JOURNAL_STREAM", f"{status.st_dev}:{status.st_ino}")
            return stream

        yield use


def written(stream: IO[str]) -> str:
    stream.flush()
    stream.seek(0)
    return stream.read()


def test_stderr_is_the_journal_only_when_journal_stream_names_it(tmp_path: Path) -> None:
    with (tmp_path / "a").open("w") as first, (tmp_path / "b").open("w") as second:
        status = os.fstat(first.fileno())
        named = {"JOURNAL_STREAM": f"{status.st_dev}:{status.st_ino}"}
        assert stream_is_journal(first, named)
        assert not stream_is_journal(second, named)  # e.g. stderr redirected to a file by the operator
        assert not stream_is_journal(first, {})
        assert not stream_is_journal(first, {"JOURNAL_STREAM": "garbage"})
    assert not stream_is_journal(first, named)  # closed


def test_field_names_and_the_binary_safe_form() -> None:
    assert field_name("slot") == "SLOT"
    assert field_name("trace_id") == "TRACE_ID"
    assert field_name("http.status") == "HTTP_STATUS"
    assert field_name("9lives") is None
    assert field_name("x" * 65) is None
    assert encode_field("SLOT", "pump-1") == b"SLOT=pump-1\n"
    assert encode_field("MESSAGE", "a\nb") == b"MESSAGE\n" + (3).to_bytes(8, "little") + b"a\nb\n"


@pytest.mark.usefixtures("root_logging")
def test_records_carry_native_journal_fields(journald: DatagramSocket, journal_stderr: JournalStderr) -> None:
    stderr = journal_stderr()
    setup_logging("info", "json")
    assert isinstance(logging.getLogger().handlers[0], JournalHandler)
    log = logging.getLogger("gateway.slots")
    log.info("provider attached to slot %s", "pump-1", extra={"slot": "pump-1", "trace_id": "4bf92f35" * 4})
    (entry,) = [parse_journal(data) for data in journald.drain()]
    assert entry["MESSAGE"] == ["provider attached to slot pump-1"]
    assert entry["PRIORITY"] == ["6"]
    assert entry["SYSLOG_IDENTIFIER"] == ["mcp-gateway"]
    assert entry["LOGGER"] == ["gateway.slots"]
    assert entry["CODE_FILE"] == [str(HERE)]
    assert entry["CODE_FUNC"] == ["test_records_carry_native_journal_fields"]
    assert int(entry["CODE_LINE"][0]) > 0
    assert entry["SLOT"] == ["pump-1"]  # journalctl -u mcp-gateway SLOT=pump-1
    assert entry["TRACE_ID"] == ["4bf92f35" * 4]
    assert written(stderr) == ""

    log.warning("provider for slot %s failed", "pump-2", extra={"slot": "pump-2", "fault": "relist", "n": 3})
    try:
        raise ValueError("bad\nanswer")
    except ValueError:
        logging.getLogger("gateway").exception("answering failed", extra={"slot": "pump-2"})
    logging.getLogger("gateway").debug("not at level info")
    warning, error = [parse_journal(data) for data in journald.drain()]
    assert (warning["PRIORITY"], warning["FAULT"], warning["N"]) == (["4"], ["relist"], ["3"])
    assert error["PRIORITY"] == ["3"]
    message = error["MESSAGE"][0]  # sent in the binary-safe form: it holds newlines
    assert message.startswith("answering failed\nTraceback (most recent call last):")
    assert message.endswith("ValueError: bad\nanswer")


@pytest.mark.usefixtures("root_logging")
def test_an_entry_too_big_for_a_datagram_goes_in_a_sealed_memfd(
    journald: DatagramSocket, journal_stderr: JournalStderr
) -> None:
    stderr = journal_stderr()
    setup_logging("info", "auto")
    big = "x" * (4 * 1024 * 1024)
    logging.getLogger("gateway").info("%s", big, extra={"slot": "pump-1"})
    data, fd = journald.receive_with_descriptor()
    assert data == b""
    assert fd is not None
    entry = parse_journal(read_descriptor(fd))
    assert entry["MESSAGE"] == [big]
    assert entry["SLOT"] == ["pump-1"]
    assert written(stderr) == ""


@pytest.mark.usefixtures("root_logging")
def test_under_insecure_lan_every_entry_says_which_side_is_open(
    journald: DatagramSocket, journal_stderr: JournalStderr
) -> None:
    journal_stderr()
    setup_logging("info", "auto", ["clients", "providers"])
    logging.getLogger("gateway").warning("listening")
    (entry,) = [parse_journal(data) for data in journald.drain()]
    assert entry["MESSAGE"] == ["[INSECURE-LAN: no client auth, no provider auth] listening"]
    assert entry["INSECURE_LAN"] == ["true"]
    assert entry["INSECURE_LAN_OPEN"] == ["clients,providers"]


@pytest.mark.usefixtures("root_logging")
def test_without_the_journal_socket_lines_carry_a_syslog_priority(
    tmp_path: Path, journal_stderr: JournalStderr, monkeypatch: pytest.MonkeyPatch
) -> None:
    stderr = journal_stderr()
    monkeypatch.setattr(journal, "SOCKET_PATH", str(tmp_path / "no-journald"))
    setup_logging("info", "text")
    log = logging.getLogger("gateway")
    log.warning("slot %s refused", "pump-1", extra={"slot": "pump-1"})
    log.error("two\nlines")
    lines = written(stderr).splitlines()
    assert lines[0].startswith("<4>") and lines[0].endswith("gateway: slot pump-1 refused")
    assert lines[1].startswith("<3>") and lines[1].endswith("gateway: two")
    assert lines[2] == "<3>lines"  # each line its priority: journald reads them one by one


@pytest.mark.usefixtures("root_logging")
def test_when_journald_goes_away_records_go_to_stderr(journald: DatagramSocket, journal_stderr: JournalStderr) -> None:
    stderr = journal_stderr()
    setup_logging("info", "json")
    journald.close()  # journald restarting: its socket is gone
    logging.getLogger("gateway").warning("still logged", extra={"slot": "pump-1"})
    (line,) = written(stderr).splitlines()
    assert line.startswith('<4>{"ts":')
    assert '"slot":"pump-1"' in line


@pytest.mark.usefixtures("root_logging")
def test_off_the_journal_logs_are_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with (tmp_path / "redirected").open("w+") as stream:
        monkeypatch.setattr(sys, "stderr", stream)
        monkeypatch.setenv("JOURNAL_STREAM", "1:2")  # inherited from a service, but stderr is elsewhere now
        setup_logging("info", "json")
        logging.getLogger("gateway").info("plain", extra={"slot": "pump-1"})
        (line,) = written(stream).splitlines()
    assert line.startswith('{"ts":')
    assert '"slot":"pump-1"' in line
