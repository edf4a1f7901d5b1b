"""Why a publisher could not get or keep its link: named errors, and the gateway's refusal read from
the HTTP answer to the upgrade (its JSON body's `error_description`), which aiohttp would discard."""

from __future__ import annotations

import aiohttp
import orjson

REFUSAL_BODY_BYTES = 4096
"""How much of a refused upgrade's body is read for its `error_description` (the gateway's is < 1 KiB)."""
REFUSAL_TEXT_CHARS = 1000
"""Longest error or description kept from a refusal: it goes into logs and `last_close`."""
REFUSED_STATUSES = frozenset({401, 403})
"""Refusals of the publisher's credential or slot: retried only every `backoff_max_s`."""


class UpgradeRefused(aiohttp.ClientError):
    """The gateway answered the WebSocket upgrade with an HTTP error (401, 403, 400...)."""

    def __init__(self, status: int, error: str, description: str) -> None:
        self.status = status
        self.error = error
        self.description = description
        text = f"HTTP {status}"
        if error:
            text += f" {error}"
        if description:
            text += f": {description}"
        super().__init__(text)


class ConnectTimeout(aiohttp.ClientError):
    """No WebSocket upgrade within `connect_timeout_s` (a peer that takes TCP and never answers)."""


class PublishRefused(Exception):
    """`run()` with `reconnect=False` whose only link the gateway refused (HTTP 401/403, or a close
    1008 before it accepted any slot); `last_close` is the `(code, reason)` it gave."""

    def __init__(self, last_close: tuple[int | None, str]) -> None:
        self.last_close = last_close
        code, reason = last_close
        super().__init__(f"the gateway refused the publisher: {reason}" + (f" (close {code})" if code else ""))


def plain(value: object) -> str:
    """A string from the wire as a log line may show it: printable characters only, bounded."""
    if not isinstance(value, str):
        return ""
    text = "".join(char if char.isprintable() else "?" for char in value[: REFUSAL_TEXT_CHARS + 1])
    return text if len(text) <= REFUSAL_TEXT_CHARS else text[:REFUSAL_TEXT_CHARS] + "..."


async def check_upgrade(response: aiohttp.ClientResponse) -> None:
    """The session's `raise_for_status`: an HTTP error answer to the upgrade becomes UpgradeRefused
    carrying the gateway's `error` and `error_description` (a JSON body of at most REFUSAL_BODY_BYTES)."""
    if response.status < 400:
        return
    error = description = ""
    try:
        body = orjson.loads(await response.content.read(REFUSAL_BODY_BYTES))
    except (orjson.JSONDecodeError, aiohttp.ClientError, OSError, ValueError):
        body = None
    if isinstance(body, dict):
        error, description = plain(body.get("error")), plain(body.get("error_description"))
    if not description:
        description = plain(response.reason)
    raise UpgradeRefused(response.status, error, description)
