"""[mdns]: advertising the gateway on the local network (docs/discovery.md)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from gateway.config.base import Section
from gateway.core.names import hidden_character

MDNS_INSTANCE_NAME_BYTES = 63
"""A DNS-SD instance name is one DNS label: at most 63 bytes of UTF-8."""
MIN_REFRESH_S = 0.05
"""refresh_s at least: each refresh reads every interface address, so a tiny value spins the event loop.
As the retry back-offs' floor, since a failure is retried at this interval."""


class MdnsConfig(Section):
    """[mdns]: advertise the gateway on the local network (docs/discovery.md)."""

    enabled: bool = False
    """Advertise _mcp-broker._tcp and _mcp._tcp. Off on a developer machine; the appliance's config turns it on."""
    instance_name: str | None = None
    """The name clients list, e.g. "Line 3 gateway"; default "mcp-gateway on <hostname>". Shown to the network.
    No dot: python-zeroconf cannot escape one (RFC 6763's `\\.`); no leading '_'; no control, format or bidi
    character."""
    interfaces: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    """Advertise only on these interfaces (names such as "eth0", or addresses the listener serves); default every
    interface the listener serves. A loopback-bound gateway is never advertised."""
    refresh_s: Annotated[float, Field(ge=MIN_REFRESH_S)] = 30.0
    """How often the interface addresses are read again: a changed address is re-advertised, a failure retried."""

    @field_validator("instance_name")
    @classmethod
    def _instance_name(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.strip() or len(value.encode("utf-8")) > MDNS_INSTANCE_NAME_BYTES:
            raise ValueError(f"an instance name is 1 to {MDNS_INSTANCE_NAME_BYTES} bytes of UTF-8 text")
        hidden = hidden_character(value)
        if hidden is not None:
            # Browsers and terminals would show the name reordered, hidden or cut (python-zeroconf
            # itself refuses only the C0 controls, and then every 30 s instead of at load).
            kind, char, position = hidden
            raise ValueError(
                f"an instance name cannot hold {kind} (U+{ord(char):04X} at character {position}); "
                "use characters that print"
            )
        if value.startswith("_"):
            # A leading underscore marks a DNS-SD service or subtype label (`_sub`): python-zeroconf refuses
            # "_sub" and browsers may take "_name.<type>" for a type rather than an instance.
            raise ValueError("an instance name cannot start with '_' (DNS-SD keeps such labels for service types)")
        if "." in value:
            # DNS-SD allows a dot escaped as "\." (RFC 6763 section 4.3), but python-zeroconf, which
            # advertises the name, has no escape: every dot would split the name into labels on the wire.
            raise ValueError(
                "an instance name cannot hold a dot: the mDNS library would send it as a label separator and "
                "browsers would not find the gateway; write it without dots (e.g. 'Pump hall v2-1')"
            )
        return value
