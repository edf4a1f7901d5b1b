"""paho-mqtt's network loop on poll() instead of select(), so its socket may be any descriptor.

paho's loop (`Client._loop`, run by `loop_start`'s thread) waits on its socket with `select.select`,
which refuses a descriptor above 1023 (FD_SETSIZE): with the descriptor limit raised at start
(gateway/listener.py) and a thousand boards connected, a broker connection opened later gets such a
descriptor, and paho reports every wait as a lost connection. `install()` gives paho's module a
`select` whose `select()` waits with poll(), which has no such bound and answers the same question.
"""

from __future__ import annotations

import select
import types
from collections.abc import Sequence
from typing import Any

import paho.mqtt.client as paho_client

READABLE = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR
"""What select() reports as readable: data, and also a hang-up or an error (a read then says which)."""
WRITABLE = select.POLLOUT | select.POLLERR


def _descriptor(watched: Any) -> int:
    """What select() would wait on: an int, or an object's fileno(); its errors as select() raises them."""
    if isinstance(watched, int):
        descriptor = watched
    else:
        fileno = getattr(watched, "fileno", None)
        if fileno is None:
            raise TypeError("argument must be an int, or have a fileno() method.")
        try:
            descriptor = fileno()
        except OSError as exc:  # a closed SSL socket, for one
            raise ValueError(f"file descriptor cannot be read: {exc}") from exc
    if descriptor < 0:
        raise ValueError(f"file descriptor cannot be a negative integer ({descriptor})")
    return descriptor


def poll_select(
    rlist: Sequence[Any], wlist: Sequence[Any], xlist: Sequence[Any], timeout: float | None = None
) -> tuple[list[Any], list[Any], list[Any]]:
    """select.select's contract (the same objects back, in three lists) on poll(). Exceptional
    conditions (xlist) are not asked for by paho; they are reported as none."""
    poller = select.poll()
    masks: dict[int, int] = {}
    for watched in rlist:
        descriptor = _descriptor(watched)
        masks[descriptor] = masks.get(descriptor, 0) | select.POLLIN | select.POLLPRI
    for watched in wlist:
        descriptor = _descriptor(watched)
        masks[descriptor] = masks.get(descriptor, 0) | select.POLLOUT
    for descriptor, mask in masks.items():
        poller.register(descriptor, mask)
    ready = dict(poller.poll(None if timeout is None else timeout * 1000))
    readable = [watched for watched in rlist if ready.get(_descriptor(watched), 0) & READABLE]
    writable = [watched for watched in wlist if ready.get(_descriptor(watched), 0) & WRITABLE]
    return readable, writable, []


def install() -> None:
    """Point paho's client module at poll_select; its `select` name is looked up at each wait."""
    current = getattr(paho_client, "select", None)
    if getattr(current, "select", None) is not poll_select:
        shim = types.ModuleType("select")
        shim.__dict__.update(vars(select))
        shim.select = poll_select  # type: ignore[attr-defined]
        setattr(paho_client, "select", shim)  # noqa: B010 - paho's module global, not an exported name
