"""What the technician sees: one line per step and a progress bar, or one JSON line per step.

Steps, in order (docs/field.md shows both forms):
  image    {"step": "image", "file", "chip", "size", "sha256"}
  release  {"step": "release", "port"}           a running gateway let go of the port (handover)
  detect   {"step": "detect", "chip", "mac", "flash_size", "revision"}
  write    {"step": "write", "written", "total", "offset"}   repeated; `written` of the image's bytes
  verify   {"step": "verify", "ok", "md5"}
  reset    {"step": "reset"}
  resume   {"step": "resume", "port"}            the gateway took the port back
  note     {"step": "note", "message"}           a thing to know: an unlisted image, a record not written
  error    {"step": "error", "error", "message"} last line; the exit code names it too

A flash stopped by Ctrl-C, SIGTERM or SIGHUP ends with the error `interrupted`, whose message says
how far the flash got (`Seen` keeps the steps reported) and what the board may hold.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol, TextIO

import orjson

from gateway.flash.shown import printable

Event = dict[str, Any]
BAR_WIDTH = 30


class Reporter(Protocol):
    def step(self, event: Event) -> None: ...


class JsonLines:
    """One JSON object per line on `out`; write progress at most once per percent, and at the end."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._last_percent = -1

    def step(self, event: Event) -> None:
        if event["step"] == "write":
            percent = 100 * event["written"] // max(event["total"], 1)
            if percent == self._last_percent:
                return
            self._last_percent = percent
        self.out.write(orjson.dumps(event).decode() + "\n")
        self.out.flush()


class Lines:
    """Sentences on `out`; the write step as a bar on `bar` (a terminal), or nothing when bar is None."""

    def __init__(self, out: TextIO, bar: TextIO | None) -> None:
        self.out = out
        self.bar = bar
        self._bar_open = False
        self._last_drawn = -1

    def step(self, event: Event) -> None:
        kind = event["step"]
        if kind == "write":
            self._draw(event["written"], event["total"])
            if event["written"] < event["total"]:
                return
        self._end_bar()
        line = self._sentence(event)
        if line is not None:
            stream = sys.stderr if kind in ("error", "note") else self.out
            stream.write(line + "\n")
            stream.flush()

    def _sentence(self, event: Event) -> str | None:
        kind = event["step"]
        if kind == "image":
            file = printable(str(event["file"]))  # a name in the firmware directory, chosen by its writer
            return f"Image: {file} ({event['chip']}, {event['size']:,} bytes, SHA-256 {event['sha256'][:16]}…)"
        if kind == "release":
            return f"The gateway released {event['port']} for the flash."
        if kind == "detect":
            return (
                f"Board: {event['chip']} (revision {event['revision']}), MAC {event['mac']}, "
                f"flash {event['flash_size']}"
            )
        if kind == "write":
            return f"Wrote {event['total']:,} bytes at 0x{event['offset']:X}."
        if kind == "verify":
            return f"Verified: the flash holds the image (MD5 {event['md5']})."
        if kind == "reset":
            return "Reset: the board starts the new firmware."
        if kind == "resume":
            return f"The gateway took {event['port']} back."
        if kind == "error":
            return f"mcp-gateway flash: {event['message']} [{event['error']}]"
        if kind == "note":
            return f"mcp-gateway flash: note: {event['message']}"
        return None

    def _draw(self, written: int, total: int) -> None:
        if self.bar is None:
            return
        percent = 100 * written // max(total, 1)
        if percent == self._last_drawn:
            return
        self._last_drawn = percent
        filled = BAR_WIDTH * written // max(total, 1)
        self.bar.write(
            f"\rWriting [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {percent:3d}% {written:,}/{total:,} bytes"
        )
        self.bar.flush()
        self._bar_open = True

    def _end_bar(self) -> None:
        if self._bar_open and self.bar is not None:
            self.bar.write("\n")
            self.bar.flush()
        self._bar_open = False


class Seen:
    """A reporter that passes each step on to `reporter` and keeps the last event of each kind."""

    def __init__(self, reporter: Reporter) -> None:
        self.reporter = reporter
        self.last: dict[str, Event] = {}

    def step(self, event: Event) -> None:
        self.last[event["step"]] = event
        self.reporter.step(event)


INTERRUPTED = "interrupted"
"""The error of a flash stopped by a signal; its exit code is 128 plus the signal's number."""


def interrupted_event(stopped_by: str, seen: Seen) -> Event:
    """The last step of a flash that `stopped_by` ("Ctrl-C (SIGINT)", "SIGTERM") stopped: how far it got."""
    last = seen.last
    said = f"the flash was stopped by {stopped_by}"
    if "reset" in last:
        state = "after the board was flashed, verified and reset: it runs the new firmware"
    elif "verify" in last:
        state = (
            "after the image was written and verified, before the reset: reset the board (its EN/RESET button, or "
            "power) to start the new firmware"
        )
    elif "write" in last:
        write = last["write"]
        state = (
            f"during the write ({write['written']:,} of {write['total']:,} bytes at 0x{write['offset']:X}): the "
            "flash may hold part of the image, and the board may not start: run the command again"
        )
    else:
        state = (
            "before anything was written: the board holds the firmware it had (if it stays in its ROM loader, reset "
            "it: its EN/RESET button, or power)"
        )
    return {"step": "error", "error": INTERRUPTED, "message": f"{said} {state}"}
