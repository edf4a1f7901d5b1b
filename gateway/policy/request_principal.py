"""Where the caller established by client authentication travels with one HTTP request.

The entry gate stores ANONYMOUS under PRINCIPAL_KEY on every request, and its authentication step,
when [auth] configures one, replaces it with the caller it established; every client way in (and
every later policy step: rate limits, session ownership) reads it with `request_principal`.
A typed aiohttp RequestKey rather than the string "principal": aiohttp warns once per process about
string keys, and a typo in a string key would silently read as anonymous.
"""

from __future__ import annotations

from aiohttp import web

from gateway.core.principal import ANONYMOUS, Principal

PRINCIPAL_KEY = web.RequestKey("principal", Principal)


def request_principal(request: web.Request) -> Principal:
    """The authenticated caller of this request; ANONYMOUS when no client authentication is configured."""
    try:
        # The entry gate stores ANONYMOUS on every request first: `request.get` would raise and catch
        # a KeyError on every unauthenticated request (web.Request is a Mapping without its own get).
        principal: Principal = request[PRINCIPAL_KEY]
    except KeyError:  # a request that did not come through the gate (a handler called directly)
        return ANONYMOUS
    return principal
