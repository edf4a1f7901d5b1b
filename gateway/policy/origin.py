"""The one Origin/Host predicate applied to every HTTP and WebSocket entry (MCP.md, security rules).

A request with an Origin header passes only if that origin is allowed; one without (native clients,
boards) passes. While bound to loopback, the Host header must name this machine, which defeats DNS
rebinding (a hostile page whose name resolves to 127.0.0.1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]", "::1")


def _pattern(origin: str) -> re.Pattern[str]:
    """'http://localhost:*' matches any port; 'https://*.plant.lan' any subdomain; else exact."""
    parts: list[str] = []
    for index, piece in enumerate(origin.split("*")):
        if index:
            parts.append("[0-9]+" if parts and parts[-1].endswith(":") else "[A-Za-z0-9_.-]+")
        parts.append(re.escape(piece))
    return re.compile("".join(parts), re.IGNORECASE)


def _host_name(host: str) -> str:
    """The name part of a Host header ('[::1]:3000' -> '[::1]', 'pi.local:3000' -> 'pi.local')."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1] if end != -1 else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


@dataclass(frozen=True)
class Refusal:
    status: int
    error: str
    description: str


class OriginPolicy:
    def __init__(
        self, allowed_origins: list[str], loopback_only: bool, allowed_hosts: list[str], bind_host: str
    ) -> None:
        self.allowed_origins = list(allowed_origins)
        self._patterns = [_pattern(origin.rstrip("/")) for origin in allowed_origins]
        self.loopback_only = loopback_only
        hosts = {h.lower() for h in LOOPBACK_HOSTS} | {h.lower() for h in allowed_hosts}
        hosts.add(bind_host.lower())
        self.allowed_hosts = hosts

    def origin_allowed(self, origin: str | None) -> bool:
        if origin is None:
            return True
        return any(pattern.fullmatch(origin) for pattern in self._patterns)

    def host_allowed(self, host: str | None) -> bool:
        if not self.loopback_only or host is None:
            return True
        return _host_name(host) in self.allowed_hosts

    def own_origin(self, origin: str | None, host: str | None) -> bool:
        """Whether `origin` is this gateway's own origin: the Host it was reached at, when that Host
        names this gateway (a loopback name, the bind address, or an allowed_hosts entry).

        Only a page served from this very host and port carries that origin, and the gateway serves
        no pages, so admitting it opens nothing; a rebinding page carries its own name (evil.com),
        which is never one of this gateway's. MCP clients that send an Origin equal to the URL they
        talk to (the conformance suite does) are therefore served without configuration."""
        if origin is None or host is None or _host_name(host) not in self.allowed_hosts:
            return False
        origin = origin.lower().rstrip("/")
        host = host.strip().lower()
        return origin in (f"http://{host}", f"https://{host}")

    def check(self, origin: str | None, host: str | None) -> Refusal | None:
        if not self.origin_allowed(origin) and not self.own_origin(origin, host):
            return Refusal(
                403,
                "origin_not_allowed",
                f"Origin {origin!r} is not allowed. Browsers are refused unless their origin is configured: add it to "
                "allowed_origins in the config file, or set MCP_GATEWAY_ALLOWED_ORIGINS='[\"<origin>\"]'.",
            )
        if not self.host_allowed(host):
            return Refusal(
                403,
                "host_not_allowed",
                f"Host {host!r} is not a name of this gateway. While bound to loopback only localhost names are "
                "accepted (DNS-rebinding guard); add the name to allowed_hosts if it is yours.",
            )
        return None
