"""What a serial port counts (gateway/southbound/serial/ports.py): its frames, bytes and drops, kept per
port for provider_status and exported as the mcpgw_serial_* series."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import Counter, Gauge

from gateway.southbound.serial import framing
from gateway.telemetry.metrics import Metrics

PORT_DROP_REASONS = (*framing.DROP_REASONS, "unregistered", "refused", "backlog")
"""framing's reasons, and: unregistered (a valid message from a board that has not registered),
refused (a register frame for a slot the port may not publish, over its max_slots, or that the core
refused), backlog (more than serial.backlog_messages messages unread, or waiting behind attaches; or a
board's request dropped while limits.max_pending_per_slot answers to its slot wait to be written)."""


class SerialMetrics:
    """The serial series, registered once per gateway on its own registry."""

    def __init__(self, metrics: Metrics) -> None:
        r = metrics.registry
        self.open = Gauge("mcpgw_serial_port_open", "1 while the serial port is open", ["port"], registry=r)
        self.failures = Counter(
            "mcpgw_serial_port_failures",
            "Serial ports that could not be opened, failed or disappeared",
            ["port"],
            registry=r,
        )
        self.frames = Counter(
            "mcpgw_serial_frames", "Valid serial frames by direction (in, out)", ["port", "direction"], registry=r
        )
        self.dropped = Counter(
            "mcpgw_serial_dropped_frames",
            "Serial frames dropped: " + ", ".join(PORT_DROP_REASONS),
            ["port", "reason"],
            registry=r,
        )


@dataclass
class PortCounters:
    opens: int = 0
    failures: int = 0
    frames_in: int = 0
    frames_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    unregistered: int = 0
    refused: int = 0
    backlog: int = 0
    register_requests: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(framing.DROP_REASONS, 0))
