"""The `troubleshooting` page: every close code, close reason and error text the gateway sends,
with what it means and the fix, and the current problems.
"""

from __future__ import annotations

from gateway.core.broker.guide_text import GuideInput, header, slot_note

# Every close code, close reason and error text the gateway sends, with what it means and the fix.
# (where, what the peer sees, fix); `{...}` placeholders are filled from the configuration.
TROUBLE_PROVIDER: list[tuple[str, str, str]] = [
    (
        "HTTP 400 `bad_provider_path`",
        "`Missing slot name`, `Empty slot name` or `Too many path segments`",
        "Connect to `/provider/<slot>` with exactly one percent-encoded segment, or to `/providers`.",
    ),
    (
        "close 1008",
        "`Slot name is empty` / `Slot name is <n> bytes; the limit is 64 bytes of UTF-8` / `Slot name contains "
        "control characters (U+0085 at character 5); use printable characters only` (or format characters, "
        'bidirectional controls, …) / `Slot name ".." is a path step in URLs`',
        "Use a slot name of 1 to 64 bytes of UTF-8, printable characters only (no control, format or "
        "bidirectional characters), not `.` or `..`.",
    ),
    (
        "close 1008",
        '`Provider "_broker" is reserved by the broker` / `... reserved: names starting with "_" belong to the '
        "gateway`",
        "Pick a name that does not start with `_`.",
    ),
    (
        "close 1008 (error envelope -32001 on /providers)",
        "`Slot not declared on this gateway; add it under [slots.declared] or fix the name. Slot: <slot>`",
        "`slots.only_declared` is on: fix the name in the device, or declare the slot.",
    ),
    (
        "close 1008",
        "`Too many slots (limit {max_slots}); raise limits.max_slots`",
        "Raise `limits.max_slots`, or set `slots.only_declared` so stray names are refused early.",
    ),
    (
        "close 1008",
        '`Slot already held by a live provider; call provider_status on _broker. Slot: "<slot>"`',
        "Another provider holds the slot and answered a ping (takeover policy `{takeover}`). Give each device its "
        "own slot name; a rebooted board gets the slot back once the old link misses a heartbeat.",
    ),
    (
        "close 1008 on /providers",
        '`No slot served: every slot claimed was refused (last: "<slot>"); the error envelopes said why`',
        "Every slot the socket claimed was refused, each with an error envelope saying why; the socket is closed "
        "{handshake}s after it connected so that the board reconnects and claims again. Fix what the refusals "
        "name (a slot held by another live provider: give each device its own slot name).",
    ),
    (
        "close 1008 (error envelope -32000 on /providers)",
        '`Provider "<slot>" is managed by a stdio upstream` / `... by a remote upstream`',
        "The gateway itself runs or reaches this slot's server ([[upstreams.stdio]] / --stdio, "
        "[[upstreams.remote]] / --remote): give the device another slot name, or remove the upstream from the "
        "configuration.",
    ),
    (
        "close 1008",
        "`Replaced: no answer to the takeover probe within {takeover_probe} ms (providers.takeover_probe_ms); "
        "a new provider took the slot` / `Replaced: this link missed its heartbeat and a new provider claimed the "
        "slot` / `Replaced by a newer connection of the same provider identity`",
        "Expected after a reboot or network change: a new provider claimed the slot and the old link did not "
        "answer the ping sent then, or had already missed a heartbeat. If the old link was actually alive, two "
        "devices share a slot name, or it answers pings late: raise `providers.takeover_probe_ms`.",
    ),
    (
        "close 1008",
        "`No answer to heartbeat ping within {heartbeat}s; reconnect`",
        "The provider did not answer WebSocket pings. Keep servicing the socket while working; check Wi-Fi. "
        "No setting counts missed pings: a sleepy device must answer within one to two "
        "`providers.heartbeat_interval_s`, so raise that, but keep it below 90 s: the boards and the simulator "
        "redial a link silent for 90 s (and a turning pump's dead-man stops it).",
    ),
    (
        "close 1008",
        "`Provider must answer initialize within {init_timeout}ms (providers.initialize_timeout_ms); "
        "it sent no answer`",
        "The provider did not answer the gateway's handshake request named (`initialize` or `tools/list`) in "
        "time. Answer both as soon as the link is up; raise `providers.initialize_timeout_ms` for a slow board.",
    ),
    (
        "close 1008",
        "`Provider must answer initialize and tools/list: <reason>`",
        "The provider answered `initialize` or `tools/list` with an error (or with something that is not a "
        "result); the reason is what it answered.",
    ),
    (
        "close 1008 (and an error envelope)",
        "`Envelope frame on slot-scoped path /provider/<slot>: use DirectTransport here, or connect to /providers`",
        "A multiplexing client was pointed at a one-slot URL: connect it to `/providers`, or send bare JSON-RPC.",
    ),
    (
        "close 1008 (and an error message)",
        "`Plain JSON-RPC on multiplex path /providers: use MultiplexTransport here, or connect to /provider/<name>`",
        "A one-slot client was pointed at `/providers`: connect it to `/provider/<slot>`, or wrap frames in envelopes.",
    ),
    (
        "close 1009",
        "`Frame over {max_frame} bytes; raise limits.max_frame_bytes or send smaller messages`",
        "A frame exceeded {max_frame} bytes (`limits.max_frame_bytes`): page `tools/list`, shorten results, or "
        "raise the limit.",
    ),
    (
        "close 1008 / error envelope -32000",
        "`Gateway is shutting down; reconnect later`",
        "Reconnect with back-off; the gateway is restarting.",
    ),
    (
        "close 1001",
        "`Gateway shutting down`",
        "Reconnect with back-off.",
    ),
    (
        "JSON-RPC error -32601 to a provider request",
        "`Method not found: the gateway does not relay <method> from providers`",
        "Providers may send `ping`, `sampling/createMessage`, `elicitation/create` and `roots/list`; nothing else.",
    ),
    (
        "JSON-RPC error -32601 to a sampling, elicitation or roots request",
        "`Method not found: the gateway did not relay <method> to a client: <why>`",
        "`<why>` says it: the client did not declare the capability (ask only when "
        '`_meta["io.github.mcp-gateway/clientCapabilities"]` of the call has it), no client request is '
        'pending, or several are and the request names none (set `_meta["io.github.mcp-gateway/relatedRequest"]`).',
    ),
]

TROUBLE_CLIENT: list[tuple[str, str, str]] = [
    (
        "-32000",
        '`Provider "<slot>" not connected`',
        "No provider holds the slot. Check `providers_list`; power or reconnect the device.",
    ),
    (
        "-32000",
        '`Provider "<slot>" disconnected`',
        "The provider's link dropped while the request was pending; retry once it is back (`provider_status` "
        "shows the last disconnect reason).",
    ),
    (
        "-32000",
        '`Provider "<slot>" did not respond within <ms>ms. ...`',
        "The provider is connected but did not answer in time. Check the device; raise `request_timeout_ms` or a "
        "per-tool `tool_timeouts_ms` for slow tools. When the text says it sent answers whose id matched no "
        "request, it answers under another id: it must echo each id exactly, a string id as a string.",
    ),
    (
        "-32000",
        '`Provider "<slot>" disconnected: the gateway is shutting down`',
        "Retry after the gateway is back.",
    ),
    (
        "-32000",
        '`Upstream "<slot>" answered HTTP <status>: <start of its answer>`',
        "The remote upstream refused this request at the HTTP level (a proxy error, a 403 for this tool, ...); "
        "its own JSON-RPC errors are passed on unchanged instead. Check the remote server.",
    ),
    (
        "-32000",
        '`Upstream "<slot>" ended the answer before it was complete: <why>`',
        "The remote upstream's connection broke mid-answer (it restarted or a proxy cut it); the call may or may "
        "not have run. Check before retrying a call that changes something.",
    ),
    (
        "-32000",
        '`Too many requests in flight for slot "<slot>" (limit {max_pending_slot}); ...` / `... for this '
        "client session (limit {max_pending_client})`",
        "Wait for answers before sending more, or raise `limits.max_pending_per_slot` / "
        "`limits.max_pending_per_client`.",
    ),
    (
        "-32602",
        "`Unknown tool: <name> is not offered by <slot>; call tools/list`",
        "Call `tools/list` and use a listed name exactly (in `_all`, as listed: `<slot>-<tool>`).",
    ),
    (
        "-32601",
        "`Method not found: <method> is not served by <where>`",
        "`_all` serves tools only; `ping`, `logging/setLevel` and `resources/subscribe` do not exist in the "
        "stateless era (use `subscriptions/listen`).",
    ),
    (
        "-32600",
        "`initialize is only valid as the first request` / `initialize does not exist in 2026-07-28; just send "
        "requests`",
        "Session era: initialize once per session. Stateless era: do not initialize.",
    ),
    (
        "-32602",
        "`Invalid cursor: the gateway lists all tools at once`",
        "Do not page `tools/list`; the first answer is complete.",
    ),
]

TROUBLE_REFUSED: list[tuple[str, str, str]] = [
    (
        "`argument_limit`, `invalid_arguments`, `pattern_timeout`",
        '`Not forwarded to <slot>: Argument "<name>" = <value> ...`',
        "The tool's inputSchema or an operator limit refused the value; send what the text says instead "
        "(`policy explain` shows the limits).",
    ),
    (
        "`confirmation_required`",
        "`Not forwarded yet: the operator's policy (<rule>) has a person confirm <tool> on <slot> ...`",
        "An operator runs `mcp-gateway approve <id>` (or `broker_approve`); then send the same call again with "
        "the same arguments within the rule's `expires_s`. When the text says no one can approve it on this "
        "gateway (no `[auth]`: every caller is anonymous), it cannot be done until the operator adds `[auth]`.",
    ),
    (
        "`declined`",
        "`Not done: <tool> on <slot> was not forwarded to the device; <who> declined it ...`",
        "A person said no, or nobody answered in time: ask them before trying again.",
    ),
]

TROUBLE_HTTP: list[tuple[str, str, str]] = [
    (
        "404 `not_found`",
        "`No such endpoint. Clients use /<slot>/mcp ...`",
        "Use `/<slot>/mcp`, `/_all/mcp` or `/_broker/mcp`.",
    ),
    (
        "404 `unknown_slot` / `slot_refused` (503 for the slot limit)",
        "the slot-name rule that failed",
        "Fix the slot name in the URL; names starting with `_` other than `_all` and `_broker` are reserved.",
    ),
    (
        "400 -32600",
        "`Missing Mcp-Session-Id header; send initialize first`",
        "Session era: send `initialize` first and echo the `Mcp-Session-Id` it returns.",
    ),
    (
        "404 -32600",
        "`Unknown or expired session; send initialize to start a new one`",
        "The session ended (DELETE, idle for {idle}s, or a gateway restart): initialize again.",
    ),
    (
        "503 -32000",
        "`Too many client sessions (limit {max_sessions}); ...`",
        "End sessions with DELETE when done, or raise `limits.max_sessions`.",
    ),
    (
        "400 -32022",
        "`Unsupported MCP-Protocol-Version ...` / `Unsupported protocol version` (`data.supported` lists ours)",
        "Use one of the versions in `data.supported`.",
    ),
    (
        "400 -32020",
        "`mcp-protocol-version header does not match ...` / `mcp-method ...` / `mcp-name ...` / `<header> header "
        "appears more than once`",
        "Stateless era: the `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers must repeat the body.",
    ),
    (
        "400 -32602",
        "`params._meta must be an object carrying ...` / `params._meta is missing: ...`",
        "Stateless era: every request carries `io.modelcontextprotocol/protocolVersion` and "
        "`io.modelcontextprotocol/clientCapabilities` in `params._meta`.",
    ),
    (
        "400 -32700 / -32600",
        "`Invalid JSON-RPC: ...` / `JSON-RPC batches are not supported; send one message per POST`",
        "POST exactly one JSON-RPC object per request.",
    ),
    (
        "413 `body_too_large`",
        "`Request body is <n> bytes; the limit is {max_body} (limits.max_body_bytes)`",
        "Send smaller requests or raise `limits.max_body_bytes`.",
    ),
    (
        "403 `origin_not_allowed`",
        "`Origin '<origin>' is not allowed. ...`",
        "Add the browser client's origin to `allowed_origins`.",
    ),
    (
        "403 `host_not_allowed`",
        "`Host '<host>' is not a name of this gateway. ...`",
        "While bound to loopback only localhost names are accepted; add the name to `allowed_hosts` if it is yours.",
    ),
    (
        "406 `not_acceptable` / 409 `stream_open` / 405",
        "`The GET stream is text/event-stream; accept it` / `This session already has a GET stream open` / "
        "wrong method",
        "Send `Accept: text/event-stream` for GET; keep one GET stream per session; stateless era is POST only.",
    ),
    (
        "SSE stream ends",
        "(no text: the stream closes)",
        "A client stream that falls {notification_queue} notifications behind is closed rather than silently "
        "losing messages: read it promptly and re-open it (then re-list).",
    ),
    (
        "-32000 on subscriptions/listen",
        "`Too many subscriptions/listen streams open on this gateway (limit {max_subscriptions}, ...)` / "
        "`... for <caller> (limit {max_subscriptions_per_principal}, ...)`",
        "Close listen streams you no longer read, or raise `limits.max_subscriptions` / "
        "`limits.max_subscriptions_per_principal`.",
    ),
    (
        "-32000 on resources/subscribe",
        "`... data.reason = subscription_limit` naming `limits.max_subscription_uri_bytes`, "
        "`limits.max_subscribed_uris_per_slot` or `limits.max_frame_bytes`",
        "Subscribe to fewer or shorter resource URIs in the slot, or raise the setting named.",
    ),
]


def page_troubleshooting(data: GuideInput) -> str:
    config = data.config
    limits = config["limits"]
    providers = config["providers"]
    values = {
        "max_slots": limits["max_slots"],
        "takeover": providers["takeover"],
        "heartbeat": f"{providers['heartbeat_interval_s']:g}",
        "takeover_probe": providers["takeover_probe_ms"],
        "handshake": f"{limits['connections']['handshake_timeout_s']:g}",
        "init_timeout": providers["initialize_timeout_ms"],
        "max_frame": limits["max_frame_bytes"],
        "max_pending_slot": limits["max_pending_per_slot"],
        "max_pending_client": limits["max_pending_per_client"],
        "idle": f"{limits['session_idle_timeout_s']:g}",
        "max_sessions": limits["max_sessions"],
        "max_body": limits["max_body_bytes"],
        "max_subscriptions": limits["max_subscriptions"],
        "max_subscriptions_per_principal": limits["max_subscriptions_per_principal"],
        "notification_queue": limits["notification_queue"],
    }

    def table(rows: list[tuple[str, str, str]], first: str) -> list[str]:
        out = [f"| {first} | Text | Fix |", "|---|---|---|"]
        out += [f"| {a} | {b.format(**values)} | {c.format(**values)} |" for a, b, c in rows]
        return [*out, ""]

    lines = header(data, "Troubleshooting")
    lines += ["## Findings now", ""]
    if data.problems:
        for problem in data.problems:
            lines.append(f"- **{problem.severity}** `{problem.id}`{slot_note(problem)}: {problem.summary}.  ")
            lines.append(f"  Evidence: {problem.evidence}.  ")
            lines.append(f"  Fix: {problem.fix}")
    else:
        lines.append("Nothing to report.")
    lines += [
        "",
        "## What a provider sees",
        "",
        "Close reasons are cut to 123 bytes, the actionable part first. On `/providers` a refused slot gets an "
        'error envelope `{"provider":"<slot>","payload":{"jsonrpc":"2.0","id":null,"error":...}}` '
        "with the same text and the socket stays open.",
        "",
        *table(TROUBLE_PROVIDER, "Close / code"),
        "## What a client sees: JSON-RPC errors",
        "",
        *table(TROUBLE_CLIENT, "Code"),
        "## What a client sees: tool errors the gateway answers itself",
        "",
        "Not forwarded to the device; an `isError` result whose text says why and what to do, so an agent's model "
        'reads it, and `_meta["io.github.mcp-gateway/refused"]` whose `reason` names the case:',
        "",
        *table(TROUBLE_REFUSED, "reason"),
        "## What a client sees: HTTP",
        "",
        *table(TROUBLE_HTTP, "Status"),
        "## Where to look",
        "",
        '- `provider_status {"name": "<slot>"}`: counters (unparsable messages, unmatched responses, '
        "deadlines, heartbeat misses), last error, last disconnect and its reason.",
        "- `broker_diagnose`: the findings above with evidence.",
        "- `/metrics`: `mcpgw_provider_faults_total`, `mcpgw_call_errors_total`, "
        "`mcpgw_call_latency_seconds`, `mcpgw_heartbeat_misses_total`.",
        "- The log: one warning per slot per kind of fault.",
        "",
    ]
    return "\n".join(lines)
