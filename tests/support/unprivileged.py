"""Run a check as `nobody` in a forked child, for real EACCES on a port root may always open."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import orjson

NOBODY = 65534


def as_nobody(work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """What `work()` returns (JSON-able), computed in a child that dropped root for nobody.

    No pytest code runs in the child: only `work` and os._exit, whatever happens (a failure there is
    an exit status of 1, which the parent asserts against)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.write(write_end, orjson.dumps(work()))
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        result: dict[str, Any] = orjson.loads(pipe.read() or b"null") or {}
    assert os.waitpid(pid, 0)[1] == 0, "the check as nobody failed in the child"
    return result
