"""The two sides a LAN bind must authenticate (clients, providers), as refusals, logs and broker_info name them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class LanSide(NamedTuple):
    """One side a LAN bind must authenticate, as the refusal, the logs and broker_info name it."""

    off: str
    """What is off when the side is open, e.g. "client authentication"."""
    short: str
    """The same in a log line's prefix, e.g. "client auth"."""
    risk: str
    """What anyone who reaches the port can then do."""


# The two sides a LAN bind must authenticate (GatewayConfig.lan_open_sides).
LAN_SIDES: dict[str, LanSide] = {
    "clients": LanSide("client authentication", "client auth", "call every device"),
    "providers": LanSide(
        "provider authentication", "provider auth", "publish a free slot and answer its calls with false readings"
    ),
}


def lan_sides_text(sides: Sequence[str]) -> tuple[str, str]:
    """What the open sides leave off and what anyone can then do, as prose: ("client authentication or
    provider authentication", "call every device and publish a free slot ...")."""
    return " or ".join(LAN_SIDES[side].off for side in sides), " and ".join(LAN_SIDES[side].risk for side in sides)


def bind_shown(host: str) -> str:
    """The listen address as a message names it: an empty host (every interface, IPv4 and IPv6) is named."""
    return host or '"" (every interface)'
