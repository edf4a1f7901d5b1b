"""What the core asks of the ways in it does not own (gateway/reload/recheck.py builds it over them):
check every live provider link against the credentials as they stand now and end those that no
longer stand, for `_broker`'s broker_providers_recheck tool (`mcp-gateway devices revoke` calls it)."""

from __future__ import annotations

from typing import Protocol

from gateway.core.jsonrpc import JsonObject


class ProviderRecheck(Protocol):
    async def recheck(self) -> JsonObject:
        """End the links whose credential no longer stands; which were ended, per slot why and how."""
        ...
