"""BadRequestLogFilter: parser errors become one safe line, counted when repeated; other records pass as they are."""

from __future__ import annotations

import logging
import sys

from aiohttp.http_exceptions import BadHttpMessage, BadStatusLine, InvalidHeader, LineTooLong

from gateway.logs import BadRequestLogFilter

TOKEN = "tok-3Zq9VvT1s0mEsecretvalue"


def record_for(exc: BaseException, level: int = logging.ERROR) -> logging.LogRecord:
    try:
        raise exc
    except BaseException:
        exc_info = sys.exc_info()
    message = "Error handling request from %s"
    return logging.LogRecord("aiohttp.server", level, __file__, 1, message, ("10.0.0.7",), exc_info)


def test_a_parser_error_becomes_one_warning_without_the_request_bytes() -> None:
    log_filter = BadRequestLogFilter()
    for exc in (
        BadHttpMessage(f"Missing expected LF after header value:\n\n    b'Authorization: Bearer {TOKEN}\\r'\n"),
        InvalidHeader(f"Authorization: Bearer {TOKEN}".encode()),
        LineTooLong(f"Authorization: Bearer {TOKEN}".encode(), 8190),
        BadStatusLine(f"GET /?t={TOKEN} HTTP/1.1 junk"),
        BadHttpMessage(f"Invalid {TOKEN}"),
    ):
        record = record_for(exc)
        assert log_filter.filter(record)
        text = logging.Formatter().format(record)
        assert TOKEN not in text and TOKEN[:8] not in text
        assert record.levelno == logging.WARNING and "\n" not in text
        assert text.startswith(f"malformed HTTP request from 10.0.0.7: {type(exc).__name__} (HTTP 400): ")
    assert text.endswith(": malformed request")  # an unknown reason is not copied


def test_a_repeated_fault_is_written_once_per_interval_and_counted() -> None:
    now = [100.0]
    log_filter = BadRequestLogFilter(repeat_interval_s=60, clock=lambda: now[0])
    exc = BadHttpMessage("Invalid header token:\n\n    b'X : y'")
    assert log_filter.filter(record_for(exc))
    assert not log_filter.filter(record_for(exc))
    assert not log_filter.filter(record_for(exc))
    now[0] += 61
    record = record_for(exc)
    assert log_filter.filter(record)
    assert record.getMessage().endswith("Invalid header token (2 more since the last line)")


def test_a_scanners_debug_line_stays_at_debug() -> None:
    record = record_for(BadStatusLine("\x16\x03\x01", "Received HTTPS traffic on an HTTP port"), logging.DEBUG)
    assert BadRequestLogFilter().filter(record)
    assert record.levelno == logging.DEBUG and record.exc_info is None


def test_other_errors_pass_unchanged() -> None:
    record = record_for(RuntimeError("handler failed"))
    assert BadRequestLogFilter().filter(record)
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert record.getMessage() == "Error handling request from 10.0.0.7"


def test_setup_logging_gives_the_filter_the_configured_interval() -> None:
    from gateway.logs import SERVER_LOGGERS, setup_logging

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        setup_logging("info", "text", repeat_interval_s=5.0)
        filters = [f for f in logging.getLogger(SERVER_LOGGERS[0]).filters if isinstance(f, BadRequestLogFilter)]
        assert [f.repeats.repeat_interval_s for f in filters] == [5.0]
    finally:
        root.handlers[:], root.level = handlers, level
