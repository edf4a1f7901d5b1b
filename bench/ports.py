"""Free loopback ports for the processes the benchmarks and tests start.

A port that `bind(("127.0.0.1", 0))` hands out comes from the kernel's ephemeral range, the range
every outgoing connection on the machine also takes its local port from. Between probing such a
port and the child binding it (a second or more while Python starts), a connection elsewhere in a
test run can take it, and the child fails with EADDRINUSE. Ports drawn below that range are never
handed to an outgoing connection, so only another explicit listener could take one.
"""

from __future__ import annotations

import random
import socket
from collections import deque
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 20000
"""The bottom of the band drawn from: above the ports services usually claim."""
DRAWS = 50
_handed_out: deque[int] = deque(maxlen=512)
"""Ports this process handed out lately: a caller often takes several before its children bind any
(a gateway's, a server's, a broker's), and a random draw must not give one of them twice."""


def ephemeral_low(range_file: Path = EPHEMERAL_RANGE_FILE) -> int | None:
    """The first port of the kernel's ephemeral range, or None where it cannot be read."""
    try:
        return int(range_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port(range_file: Path = EPHEMERAL_RANGE_FILE) -> int:
    """A loopback port nobody listens on right now, below the ephemeral range where there is room
    (see the module's docstring); otherwise one the kernel picks."""
    low = ephemeral_low(range_file)
    if low is not None and low - LOWEST_PORT >= 1000:
        for _ in range(DRAWS):
            port = random.randrange(LOWEST_PORT, low)
            if port not in _handed_out and bindable(port):
                _handed_out.append(port)
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port_given: int = probe.getsockname()[1]
    _handed_out.append(port_given)
    return port_given
