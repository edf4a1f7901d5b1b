"""A provider's hello (docs/protocol.md, "Hello"): the register frame or `notifications/hello` that
carries it, and its `schema` checked against the hash of the tools the provider lists.

A board pins the hash of its tools in its firmware (docs/pump-1.md, "Schema hash"). The gateway serves
the tools the provider lists whatever the hello says; a hash that differs is shown in `broker_diagnose`
(`provider.schema_mismatch`) and warned about once per connection, since it means the pinned hash is
stale or the tools changed, and a board that comes back with other tools then goes unnoticed.
"""

from __future__ import annotations

from typing import Any, Protocol

from gateway.core.jsonrpc import JsonObject
from gateway.core.provider_tools import ToolListing


class HelloSession(Protocol):
    """What this needs of a provider session (gateway/core/provider_session.py)."""

    hello: JsonObject | None
    aggregate: bool

    @property
    def slot(self) -> str: ...

    @property
    def tools_hash(self) -> str: ...

    @property
    def tool_listing(self) -> ToolListing: ...

    def relist(self, *, noticed: bool = False) -> None: ...

    def warn_once(self, kind: str, text: str, *args: Any) -> None: ...


def announced_schema(hello: JsonObject | None) -> str | None:
    """The schema hash a hello announces (None: no hello, or no `schema` string in it)."""
    schema = hello.get("schema") if isinstance(hello, dict) else None
    return schema if isinstance(schema, str) and schema else None


def schema_mismatch(session: HelloSession) -> str | None:
    """The schema hash the provider's hello announces when it is not the hash of the tools it lists;
    None when they agree, when either is not known yet, or when the last listing left tools out (its
    hash is then of fewer tools than the provider has, so it cannot be compared)."""
    announced = announced_schema(session.hello)
    listed = session.tools_hash
    if announced is None or not listed or announced.lower() == listed:
        return None
    listing = session.tool_listing
    last = listing.last
    if last.over_cap or last.over_bytes or last.pages_cut or last.names_left_out or listing.unreadable:
        return None
    return announced


def check_schema(session: HelloSession) -> None:
    """Warn once per connection when the hello's schema hash is not the hash of the tools listed."""
    announced = schema_mismatch(session)
    if announced is None:
        return
    session.warn_once(
        "schema_mismatch",
        "provider for slot %s announces schema %s in its hello, but the tools it lists hash to %s: the "
        "firmware's pinned hash is stale or its tools changed (mcp-gateway schema-hash --slot %s prints the "
        "hash of what it lists); the gateway serves the tools it lists",
        session.slot,
        announced,
        session.tools_hash,
        session.slot,
    )


def on_register(session: HelloSession, method: str, params: JsonObject) -> None:
    """A register frame or hello sent on the link after the start: its `_all` opt-in and its hello
    (the caller tells the registry).
    A hello whose schema differs from the one before has the tools listed again (and checked then);
    otherwise the hello is checked against the tools listed now."""
    hello = params.get("hello") if method == "notifications/register" else params
    if method == "notifications/register" and "aggregate" in params:
        session.aggregate = params.get("aggregate") is True
    if isinstance(hello, dict):
        old_schema = (session.hello or {}).get("schema")
        session.hello = hello
        if old_schema is not None and hello.get("schema") != old_schema:
            session.relist()
        else:
            check_schema(session)
