"""[mdns] at run time: advertising turned on or off, its instance name, interfaces and refresh; and the
TXT record again when what it says changed (TLS, client or provider authentication modes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.config import GatewayConfig
from gateway.core.jsonrpc import JsonObject
from gateway.reload.context import Context, Prepared
from gateway.reload.diff import scalar_changes

if TYPE_CHECKING:
    from gateway.discovery.mdns import MdnsAdvertiser

OWNS = ("mdns",)


def txt(config: GatewayConfig) -> dict[str, str]:
    if not config.mdns.enabled:
        return {}
    from gateway.discovery.mdns import txt_properties  # zeroconf is loaded only by a gateway that advertises

    return txt_properties(config)


class MdnsSwap(Prepared):
    def __init__(self, changes: list[str], context: Context, new: GatewayConfig) -> None:
        super().__init__(changes)
        self.context = context
        self.new = new
        self.stopping: MdnsAdvertiser | None = None
        self.previous: tuple[MdnsAdvertiser | None, Callable[[], JsonObject] | None] | None = None

    def swap(self) -> None:
        running = self.context.running
        if not self.new.mdns.enabled and running.mdns is not None:
            self.previous = (self.context.parked_mdns, running.gateway.discovery)
            self.stopping, running.mdns = running.mdns, None
            self.context.parked_mdns = self.stopping
            running.gateway.discovery = None

    def undo(self) -> None:
        if self.previous is not None and self.stopping is not None:
            running = self.context.running
            running.mdns, (self.context.parked_mdns, running.gateway.discovery) = self.stopping, self.previous
            self.stopping = self.previous = None

    async def settle(self) -> list[str]:
        running = self.context.running
        if self.stopping is not None:
            await self.stopping.stop()
            return []
        if not self.new.mdns.enabled:
            return []
        advertiser = running.mdns or self.context.parked_mdns
        if advertiser is None:
            from gateway.discovery.mdns import MdnsAdvertiser

            # What the sockets are bound to, as at start: only addresses that answer are advertised.
            bound = [str(address[0]) for address in running.runner.addresses] or [self.new.host]
            advertiser = MdnsAdvertiser(self.new, bound, running.port, running.gateway.metrics)
            advertiser.start()
        else:
            await advertiser.reconfigure(self.new)
        self.context.parked_mdns = None
        running.mdns = advertiser
        running.gateway.discovery = advertiser.status
        return []


def prepare(old: GatewayConfig, new: GatewayConfig, context: Context) -> Prepared | None:
    if old.mdns == new.mdns and txt(old) == txt(new):
        return None
    changes = scalar_changes("mdns", old.mdns, new.mdns) or ["mdns: TXT record re-advertised"]
    return MdnsSwap(changes, context, new)
