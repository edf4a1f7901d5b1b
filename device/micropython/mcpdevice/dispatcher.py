"""The device side of MCP: one JSON-RPC frame in, at most one frame out (docs/protocol.md "Device profile")."""

# Transport-free (a WebSocket, a serial line or MQTT feeds it frames) and plain Python, so it runs on
# MicroPython and under CPython. Answers `initialize`, `ping`, `tools/list` (paged so that every
# answer fits the frame cap), `tools/call` and the device's own `methods`; takes notifications
# silently (calls finish at once, so `notifications/cancelled` has nothing to cancel); answers
# anything else with a named JSON-RPC error and keeps serving. A `tools/call` whose id and bytes
# repeat one of the last few calls is answered from a small cache of recent responses instead of
# acting twice (MQTT QoS 1 redelivery, also after a new `initialize` on the same MQTT link). The
# cache outlives `initialize` and is emptied by new_link(), which the WebSocket way calls for every
# new connection: a gateway such as mcp-broker numbers requests from 1 per connection, while over
# MQTT and serial the gateway never repeats an id within its process (docs/protocol.md).
# Every object it writes is an OrderedDict made with keyword arguments, so that an answer's bytes are
# the same on a board as under CPython (the simulator) and from the C board: MicroPython's dict
# iterates in hash order, and json.dumps would write a plain dict's keys in that order.
#
# API
# ---
# Dispatcher(registry, handlers, server_info, instructions=None, frame_max=4096, cache_size=4, log=None,
#            telemetry=None, capabilities=None, methods=None)
#     registry     mcpdevice.registry.ToolRegistry (the schema file)
#     handlers     {tool name: fn(arguments dict) -> CallToolResult dict}; must match the registry
#     server_info  {"name": ..., "version": ...} for the initialize result
#     capabilities the initialize result's capabilities; None: {"tools": {"listChanged": False}}
#     methods      {method: fn(params dict) -> result object} for requests beyond the four above
#                  (e.g. "resources/list", "resources/read"; naming one of the four raises
#                  ValueError, as they cannot be replaced); a handler raises ValueError(code,
#                  message) to answer with that JSON-RPC error; any other exception is answered -32603
#     log          optional function(event, **fields), told about errors (first of a kind, then
#                  every hundredth), duplicates, and errors the gateway sends with id null
#     telemetry    optional mcpdevice.telemetry.Telemetry, told the _meta of each tools/call while its
#                  handler runs (.serving), so that what the call causes carries the caller's trace
#     .handle(frame: bytes) -> bytes, a list of bytes (one frame in parts), or None
#     .oversize(size, head: bytes) -> bytes      the answer to a frame too large to read; `head`
#                                                (its first bytes) gives the request id when present
#     .new_link()  empties the cache of answers: the transport's link is a new gateway session
#     .counts      {"requests": n, "duplicates": n, "errors": n}
# tool_budget(frame_max) -> int   the largest tool (compact bytes) one tools/list answer can carry
# assemble(answer) -> bytes or None   one answer as a single bytes object (for CPython callers such as
#                                     the simulator; a board's transport streams the parts instead)

import json
from collections import OrderedDict

from mcpdevice import results

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
_ENVELOPE = 96  # '{"jsonrpc":"2.0","id":,"result":{"tools":[]' plus '],"nextCursor":"NN"}}'
_ID_ROOM = 32  # ids the tool budget is planned for; the gateway's look like "brk-1234"
_COMPACT = (",", ":")


def tool_budget(frame_max):
    return frame_max - _ENVELOPE - _ID_ROOM


def assemble(answer):
    if answer is None or not isinstance(answer, list):
        return answer
    out = bytearray()
    for part in answer:
        for chunk in part.chunks() if hasattr(part, "chunks") else (part,):
            out.extend(chunk)
    return bytes(out)


def _valid_id(value):
    return type(value) is str or type(value) is int


def _digits(text):
    # Not str.isdigit(): under CPython it is true for "²" and other digits that int() refuses.
    return len(text) > 0 and all("0" <= char <= "9" for char in text)


class Dispatcher:
    def __init__(
        self,
        registry,
        handlers,
        server_info,
        instructions=None,
        frame_max=4096,
        cache_size=4,
        log=None,
        telemetry=None,
        capabilities=None,
        methods=None,
    ):
        names = registry.names
        odd = [name for name in names if name not in handlers] + [name for name in handlers if name not in names]
        if odd:
            raise ValueError("tool handlers and schema disagree on: " + ", ".join(odd))
        if methods:  # pump-1 has none: the code for them is a module it never loads (heap)
            from mcpdevice.methods import check

            check(methods)
        self.registry = registry
        self.handlers = handlers
        self.server_info = server_info
        self.instructions = instructions
        self.frame_max = frame_max
        self.cache_size = cache_size
        self._cache = []  # (request id, hash of the request frame, response bytes), oldest first
        self._log = log
        self.telemetry = telemetry
        self._seen = {}
        self.counts = {"requests": 0, "duplicates": 0, "errors": 0}
        self.capabilities = capabilities or {"tools": {"listChanged": False}}
        self.methods = methods

    def handle(self, frame):
        try:
            message = json.loads(frame)
        except Exception:
            return self._error(None, PARSE_ERROR, "Parse error: the frame is not valid JSON (%d bytes)" % len(frame))
        if type(message) is not dict:
            return self._error(None, INVALID_REQUEST, "Invalid Request: send one JSON-RPC object per frame, no batches")
        method = message.get("method")
        request_id = message.get("id")
        if method is None and ("result" in message or "error" in message):
            error = message.get("error")
            if request_id is None and type(error) is dict:
                # Addressed to no request: the gateway refusing this board (over MQTT, where no close
                # reason exists). The console is the only place a person sees why the slot stays empty.
                self._note("gateway_error", str(error.get("message"))[:200])
            return None  # an answer to a request of ours; the device sends none that it waits for
        if "id" not in message and type(method) is str:
            return None  # a notification
        if not _valid_id(request_id):
            return self._error(None, INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
        if type(method) is not str or message.get("jsonrpc") != "2.0":
            return self._error(request_id, INVALID_REQUEST, 'Invalid Request: needs "jsonrpc":"2.0" and a method')
        params = message.get("params")
        message = None
        if params is None:
            params = {}
        elif type(params) is not dict:
            return self._error(request_id, INVALID_PARAMS, "Invalid params: params must be an object")
        self.counts["requests"] += 1
        if method == "tools/call":
            return self._call(request_id, params, frame)
        if method == "tools/list":
            return self._list(request_id, params.get("cursor"))
        if method == "ping":
            return self._result(request_id, {})
        if method == "initialize":
            version = params.get("protocolVersion")
            result = OrderedDict(
                protocolVersion=version if version in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0],
                capabilities=self.capabilities,
                serverInfo=self.server_info,
            )
            if self.instructions:
                result["instructions"] = self.instructions
            return self._result(request_id, result)
        if self.methods:
            from mcpdevice.methods import serve

            return serve(self, request_id, method, params)
        return self._error(
            request_id,
            METHOD_NOT_FOUND,
            "Method not found: %s. This device answers initialize, ping, tools/list and tools/call" % method,
        )

    def new_link(self):
        self._cache = []

    def oversize(self, size, head):
        return self._error(
            _id_in(head),
            INVALID_REQUEST,
            "Request too large: %d bytes; this device accepts frames of at most %d bytes" % (size, self.frame_max),
        )

    def _list(self, request_id, cursor):
        first = 0
        if cursor is not None:
            if type(cursor) is not str or not _digits(cursor) or not 0 < int(cursor) < len(self.registry.names):
                return self._error(request_id, INVALID_PARAMS, "Invalid params: unknown cursor " + json.dumps(cursor))
            first = int(cursor)
        head = '{"jsonrpc":"2.0","id":%s,"result":{"tools":[' % json.dumps(request_id)
        tools, after = self.registry.page(first, self.frame_max - _ENVELOPE - len(head))
        parts = [head.encode()]
        for tool in tools:
            if len(parts) > 1:
                parts.append(b",")
            parts.append(tool)
        parts.append(b"]}}" if after is None else ('],"nextCursor":"%d"}}' % after).encode())
        return parts

    def _call(self, request_id, params, frame):
        fingerprint = hash(frame)
        for entry in self._cache:
            if entry[0] == request_id and type(entry[0]) is type(request_id) and entry[1] == fingerprint:
                self.counts["duplicates"] += 1
                self._note("duplicate_request", "id %s answered from the cache" % json.dumps(request_id))
                return entry[2]
        name = params.get("name")
        handler = self.handlers.get(name) if type(name) is str else None
        arguments = params.get("arguments")
        if handler is None:
            return self._error(
                request_id,
                INVALID_PARAMS,
                "Unknown tool: %s. This device offers %s" % (json.dumps(name), ", ".join(self.registry.names)),
            )
        if arguments is None:
            arguments = {}
        elif type(arguments) is not dict:
            return self._error(request_id, INVALID_PARAMS, "Invalid params: arguments must be an object")
        telemetry = self.telemetry
        if telemetry is not None:
            telemetry.serving(params.get("_meta"))
        try:
            result = handler(arguments)
        except Exception as exc:  # a bug in a tool must not take the device off the air
            self._note("tool_failed", "%s: %r" % (name, exc), name)
            result = results.error("Tool %s failed inside the device: %r" % (name, exc))
        if telemetry is not None:
            telemetry.serving(None)
        response = self._result(request_id, result)
        cache = [entry for entry in self._cache if entry[0] != request_id]
        cache.append((request_id, fingerprint, response))
        self._cache = cache[-self.cache_size :]
        return response

    def _result(self, request_id, result):
        response = json.dumps(OrderedDict(jsonrpc="2.0", id=request_id, result=result), separators=_COMPACT).encode()
        if len(response) > self.frame_max:
            return self._error(request_id, INTERNAL_ERROR, "Response too large: %d bytes" % len(response))
        return response

    def _error(self, request_id, code, message):
        self.counts["errors"] += 1
        self._note("request_error", message, message[:12])
        while True:  # one method, not two: each method a class holds costs the boot's heap
            error = OrderedDict(code=code, message=message)
            answer = json.dumps(OrderedDict(jsonrpc="2.0", id=request_id, error=error), separators=_COMPACT).encode()
            if len(answer) <= self.frame_max or len(message) <= 3:
                return answer
            # A message quoting a long method or tool name is cut so that the answer fits the cap.
            message = message[: max(0, len(message) - (len(answer) - self.frame_max) - 3)] + "..."

    def _note(self, event, detail, kind=""):
        # The first of a kind, then every hundredth: the counts carry the rest. A kind is the event and
        # what the device's own code says (an error's fixed opening words, a listed tool's name), never
        # text from the wire (a gateway's message, a request id): each kind holds heap for good.
        if self._log is None:
            return
        kind = event + kind
        seen = self._seen.get(kind, 0) + 1
        self._seen[kind] = seen
        if seen == 1 or seen % 100 == 0:
            self._log(event, detail=detail, seen=seen)


def _id_in(head):
    """The request id in the first bytes of a frame, or None."""
    at = head.find(b'"id"')
    rest = head[at + 4 :].lstrip() if at >= 0 else b""
    if not rest.startswith(b":"):
        return None
    rest = rest[1:].lstrip()
    end = 0
    if rest.startswith(b'"'):
        end = rest.find(b'"', 1) + 1
    else:
        while end < len(rest) and rest[end] in b"-0123456789":
            end += 1
        if end == len(rest) or rest[end] not in b" \t\r\n,}":
            return None  # cut off by the end of the head, a fraction, or not JSON: not the request's id
    try:
        value = json.loads(rest[:end])
    except Exception:
        return None
    return value if _valid_id(value) else None
