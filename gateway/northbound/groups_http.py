"""HTTP routes of the tool-group bridge: /mcp, /mcp/<group>, GET /groups and GET /mcp-servers.

/mcp and /mcp/<group> are MCP Streamable HTTP endpoints of both eras, served by the same machinery as
/<slot>/mcp (sessions, expiry, limits, admission); only the target differs. A WebSocket upgrade at the
same path makes a raw WebSocket client of the target (gateway/northbound/websocket.py). /mcp/mcp, /mcp/sse and
/mcp/messages are not matched here, so they stay the endpoints of a slot named "mcp". Every route
passes the entry gate first (Origin/Host, client authentication, counting) like any client endpoint.
"""

from __future__ import annotations

from aiohttp import web

from gateway.core.gateway import Gateway
from gateway.core.groups.catalog import GroupTarget
from gateway.core.groups.views import BRIDGE_PATH, GROUPS_PATH, SERVERS_PATH, SLOT_SEGMENTS
from gateway.core.names import decode_path_segment
from gateway.core.routing import Target
from gateway.http_answers import http_error, json_response
from gateway.northbound.streamable_http import SESSION_HEADER, StreamableHttpEndpoint
from gateway.northbound.websocket import ClientWebSockets, is_upgrade
from gateway.policy.request_principal import request_principal

GROUP_ROUTE = BRIDGE_PATH + "/{group:(?!(?:" + "|".join(sorted(SLOT_SEGMENTS)) + r")$)[^/]+}"
"""/mcp/<group>, except the segments that belong to a slot named "mcp" (they fall through to the slot routes)."""


class GroupEndpoints:
    def __init__(
        self, gateway: Gateway, clients: StreamableHttpEndpoint, sockets: ClientWebSockets | None = None
    ) -> None:
        self.gateway = gateway
        self.catalog = gateway.groups
        self.clients = clients
        self.sockets = sockets
        """Raw WebSocket clients of /mcp and /mcp/<group>: an upgrade at the endpoint's own path."""

    async def serve(self, request: web.Request, target: Target) -> web.StreamResponse:
        if self.sockets is not None and is_upgrade(request):
            return await self.sockets.serve(request, target)
        return await self.clients.serve(request, target)

    def routes(self) -> list[web.RouteDef]:
        """Added before the catch-all client route."""
        return [
            web.route("*", BRIDGE_PATH, self.bridge),
            web.route("*", GROUP_ROUTE, self.group),
            web.route("*", GROUPS_PATH, self.groups),
            web.route("*", SERVERS_PATH, self.servers),
        ]

    async def bridge(self, request: web.Request) -> web.StreamResponse:
        return await self.serve(request, self.catalog.bridge)

    async def group(self, request: web.Request) -> web.StreamResponse:
        # The raw path, so that an encoded "/" stays part of the (then unknown) name.
        name = decode_path_segment(request.rel_url.raw_path.split("/", 2)[2])
        target = self.catalog.target_for(name) or self.retired_target(request, name)
        if target is None:
            return self.unknown_group(name)
        return await self.serve(request, target)

    def retired_target(self, request: web.Request, name: str) -> GroupTarget | None:
        """The target of a group a reload removed or disabled, for a session still bound to it: the
        session sees the group empty, as a raw WebSocket client does. A 404 would make an SDK client
        start a new session, which gets the 404 again."""
        session_id = request.headers.get(SESSION_HEADER)
        session = self.gateway.sessions.get(session_id) if session_id else None
        target = session.target if session is not None else None
        return target if isinstance(target, GroupTarget) and target.group == name else None

    def unknown_group(self, name: str) -> web.Response:
        enabled = [spec.name for spec in self.catalog.enabled]
        configured = {spec.name for spec in self.catalog.specs}
        why = "is disabled" if name in configured else "does not exist"
        where = ", ".join(f"{BRIDGE_PATH}/{group}" for group in enabled) or "none (no group is enabled)"
        return json_response(
            {
                "error": "unknown_group",
                "error_description": f'Tool group "{name[:64]}" {why}. Enabled groups: {where}; '
                f"{BRIDGE_PATH} serves all of them, GET {GROUPS_PATH} lists every group.",
                "enabled_groups": enabled,
            },
            status=404,
        )

    async def groups(self, request: web.Request) -> web.Response:
        if request.method not in ("GET", "HEAD"):
            return self.get_only(GROUPS_PATH)
        return json_response(self.catalog.groups_listing(request_principal(request)))

    async def servers(self, request: web.Request) -> web.Response:
        if request.method not in ("GET", "HEAD"):
            return self.get_only(SERVERS_PATH)
        return json_response(self.catalog.servers_listing(request_principal(request)))

    @staticmethod
    def get_only(path: str) -> web.Response:
        response = http_error(405, "method_not_allowed", f"{path} is read with GET")
        response.headers["Allow"] = "GET"
        return response
