"""The stdio bridge's pass-through of a host pinned to the stateless era (2026-07-28): the routing
headers each of its requests needs, and the tools' input schemas those headers are read from."""

from __future__ import annotations

from typing import Any

from gateway.core import eras, stateless
from gateway.core.jsonrpc import JsonObject

VERSION_HEADER = "MCP-Protocol-Version"
MAX_LIST_PAGES = 20
"""The most tools/list pages the bridge asks for on its own to learn the schema of a tool the host
calls before it listed the tools (a longer catalog is cut there; the gateway then names the header
that is missing)."""


def stateless_headers(body: JsonObject, tool_schemas: dict[str, Any]) -> dict[str, str]:
    """MCP-Protocol-Version, Mcp-Method, Mcp-Name and Mcp-Param-*, as the body says (the gateway
    checks them against it); a value that is not text is left out for the gateway to refuse."""
    params = body.get("params")
    params = params if isinstance(params, dict) else {}
    meta = params.get("_meta")
    version = meta.get(eras.META_PROTOCOL_VERSION) if isinstance(meta, dict) else None
    method = body["method"]
    headers = {VERSION_HEADER: version} if isinstance(version, str) else {}
    headers["Mcp-Method"] = stateless.encode_header_value(method)
    name_key = stateless.NAME_PARAM.get(method)
    name = params.get(name_key) if name_key is not None else None
    if isinstance(name, str):
        headers["Mcp-Name"] = stateless.encode_header_value(name)
    if method == "tools/call" and isinstance(name, str):
        headers.update(stateless.param_headers(tool_schemas.get(name), params.get("arguments")))
    return headers


def unknown_tool(body: JsonObject, tool_schemas: dict[str, Any]) -> str | None:
    """The name of the tool a tools/call calls when its input schema is not known yet, else None."""
    params = body.get("params")
    name = params.get("name") if isinstance(params, dict) else None
    if body.get("method") != "tools/call" or not isinstance(name, str) or name in tool_schemas:
        return None
    return name


def list_request(call: JsonObject, request_id: str, cursor: str | None) -> JsonObject:
    """A tools/list of the bridge's own, with the `_meta` of the host's call (its protocol version,
    capabilities and client info, which every stateless-era request carries)."""
    params: JsonObject = {"_meta": call["params"].get("_meta")}
    if cursor is not None:
        params["cursor"] = cursor
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/list", "params": params}


def learn_tools(tool_schemas: dict[str, Any], reply: Any) -> str | None:
    """Note the input schemas of a tools/list answer; the cursor of its next page, if any."""
    result = reply.get("result") if isinstance(reply, dict) else None
    tools = result.get("tools") if isinstance(result, dict) else None
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, dict) and isinstance(tool.get("name"), str):
            tool_schemas[tool["name"]] = tool.get("inputSchema")
    cursor = result.get("nextCursor") if isinstance(result, dict) else None
    return cursor if isinstance(cursor, str) else None
