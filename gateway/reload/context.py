"""What a reload works on: the running gateway's parts (a narrow view of GatewayServer), and what one
part of the configuration prepares before anything is swapped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from aiohttp import web

from gateway.config import GatewayConfig
from gateway.core.gateway import Gateway
from gateway.policy.governor import Governor
from gateway.policy.limiters import Limiters
from gateway.policy.tls import ServerTls
from gateway.southbound.remote.upstreams import RemoteUpstreams
from gateway.southbound.stdio.supervisor import StdioUpstreams

if TYPE_CHECKING:
    from gateway.discovery.mdns import MdnsAdvertiser


class Running(Protocol):
    """The parts of a running gateway a reload reads and swaps (GatewayServer has them all)."""

    config: GatewayConfig
    gateway: Gateway
    app: web.Application
    runner: web.AppRunner
    limiters: Limiters
    tls: ServerTls | None
    governor: Governor | None
    stdio_upstreams: StdioUpstreams
    remote_upstreams: RemoteUpstreams
    mdns: MdnsAdvertiser | None
    port: int


@dataclass
class Context:
    running: Running
    rate_checked_at_entry: bool
    """Whether the HTTP entry was built with a rate-limit check (it is, when [limits.rate] was on at start)."""
    parked_mdns: MdnsAdvertiser | None = None
    """An advertiser a reload turned off, kept to be turned on again (its metrics exist once per process)."""


class Prepared:
    """One part's change, built and checked without touching the running gateway.

    `swap` puts it in place (references are replaced, nothing is read or parsed); `settle` does what
    takes time once every part is swapped (starting and stopping upstreams, closing links whose
    credential no longer stands) and returns what it adds to the report.

    A `fallible` part's swap builds from files or a library that may still refuse (the TLS pair read
    again, telemetry exporters): such parts swap first, and raise Refused before any other part has.
    Every part has an `undo` that puts back what its swap changed: when a later part refuses, or any
    swap fails unexpectedly (that part itself included), the reloader undoes the parts swapped so far,
    newest first, and the reload is refused whole (gateway/reload/reloader.py)."""

    fallible = False

    def __init__(self, changes: list[str]) -> None:
        self.changes = changes

    def swap(self) -> None:
        return None

    def undo(self) -> None:
        return None

    async def settle(self) -> list[str]:
        return []
