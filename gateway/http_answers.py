"""JSON answers over HTTP, shared by every HTTP edge of the gateway: the client ways in, the provider
upgrade routes and the authentication checks in front of them.

A body the JSON encoder refuses never becomes a 500: an answer turns into its -32603 error.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web

from gateway.core import jsonrpc

log = logging.getLogger("gateway.northbound")

JSON_TYPE = "application/json"

STREAMED_STATUS_KEY = web.RequestKey("streamed_status", int)
"""Set on a request once its streamed answer (a WebSocket's 101, an event stream's 200) went out:
the entry gate counts the exchange with that status however its handler ends."""


_unencodable_warned: set[str] = set()


def _warn_unencodable(kind: str, exc: Exception) -> None:
    # Everything that enters is bounded (limits.max_json_depth): only a fault of the gateway's own
    # gets here, so once per kind in the process is enough to report it.
    if kind not in _unencodable_warned:
        _unencodable_warned.add(kind)
        log.error("could not encode a client's %s as JSON (%s); further ones are not logged", kind, exc)


def _error_instead(message: Any, exc: Exception) -> bytes:
    _warn_unencodable("answer", exc)
    return orjson.dumps(jsonrpc.unencodable_answer(message, str(exc)))


def encode_refused(message: Any, exc: Exception) -> bytes | None:
    """What a client stream carries instead of `message`, which the JSON encoder refused: an answer's
    -32603 error, or None for a notification or request (it has a method), which is dropped, so one
    message never ends the stream. The stream writing it counts the drop."""
    if isinstance(message, dict) and "method" in message:
        _warn_unencodable("notification or request", exc)
        return None
    return _error_instead(message, exc)


def json_response(message: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    try:
        body = orjson.dumps(message)
    except orjson.JSONEncodeError as exc:
        body = _error_instead(message, exc)  # an answer or a body of the gateway's own: never a 500
    # aiohttp copies `headers` into the response's own header map: no copy of ours is needed.
    return web.Response(body=body, status=status, content_type=JSON_TYPE, headers=headers or None)


def rpc_error(status: int, code: int, message: str, request_id: Any = None, data: Any = None) -> web.Response:
    return json_response(jsonrpc.error_response(request_id, code, message, data), status=status)


def http_error(status: int, error: str, description: str) -> web.Response:
    return json_response({"error": error, "error_description": description}, status=status)
