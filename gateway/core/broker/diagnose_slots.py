"""Problems of one slot: its provider missing (a board, a stdio or remote upstream) or failing."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from gateway.core.broker.problems import NEAR_CAP, GatewayView, Problem, SlotView, bring_back, last_link, provider_url

# -- slot problems ----------------------------------------------------------------------------


def _stderr_evidence(upstream: Mapping[str, Any], lines: int = 5) -> str:
    tail = [str(line) for line in upstream.get("stderr_tail") or []][-lines:]
    return "last stderr lines: " + (" | ".join(tail) if tail else "(none)")


def _stdout_oversized_lines(slot: SlotView) -> int:
    """How many stdout lines of a stdio upstream were dropped for their length (0 for other slots)."""
    upstream = slot.upstream or {}
    return int(upstream.get("stdout_oversized_lines") or 0) if upstream.get("kind") == "stdio" else 0


def _stdio_upstream_presence(slot: SlotView, upstream: Mapping[str, Any]) -> list[Problem]:
    """A stdio upstream is not a board: its absence is a child that exits, hangs or cannot start."""
    name = slot.name
    command = shlex.join(str(part) for part in upstream.get("command") or [])  # to paste into a shell
    failures = int(upstream.get("failures_in_a_row") or 0)
    last_exit = upstream.get("last_exit") or "none yet"
    next_in = upstream.get("next_restart_in_s")
    restart = f"; next start in {next_in:.1f}s" if isinstance(next_in, int | float) else ""
    run_by_hand = (
        f"Run the command by hand with the same working directory and environment to see it fail: {command}. "
        "The child sees only PATH, HOME, LANG, LC_ALL, TZ, TMPDIR and the variables named in its env and "
        f"env_passthrough (provider_status {name!r} lists them): a missing variable is a common cause. "
        "An MCP stdio server must answer initialize on stdin/stdout and log only to stderr."
    )
    deadline_kind = upstream.get("last_exit_kind")
    too_slow = deadline_kind in ("startup_timeout", "discover_timeout")
    raise_timeout = (
        f"The child must answer within startup_timeout_s ({upstream.get('startup_timeout_s')}s); raise it "
        "for a slow starter (a package manager fetching on first run). "
    )
    if deadline_kind == "discover_timeout":
        # Silence to server/discover alone: most likely a session-era server that ignores unknown requests.
        raise_timeout = (
            "It answered nothing to server/discover: a server of the session era that ignores unknown methods "
            'gets initialize only from its next start on; pin it with era = "session" to skip the probe. '
            + raise_timeout
        )
    if upstream.get("crash_loop"):
        return [
            Problem(
                "upstream.crash_loop",
                "error",
                f'The stdio upstream "{name}" keeps ending: {failures} times in a row',
                f"last end: {last_exit}{restart} (back-off doubles up to restart_max_s "
                f"{upstream.get('restart_max_s')}s); {_stderr_evidence(upstream)}",
                # Ended each time by its start-up deadline, it may only be slow: that fix comes first.
                (raise_timeout if too_slow else "") + run_by_hand,
                name,
            )
        ]
    # Before the check of a provider: the link of a child still in its handshake holds the slot already.
    if upstream.get("state") == "starting" and not upstream.get("last_exit"):
        return [
            Problem(
                "upstream.starting",
                "info",
                f'The stdio upstream "{name}" is starting',
                f"pid {upstream.get('pid')}; it has startup_timeout_s ({upstream.get('startup_timeout_s')}s) "
                "to answer initialize and tools/list",
                "Wait: a call meanwhile waits for the handshake to end, at most startup_timeout_s.",
                name,
            )
        ]
    if slot.connected:
        return []
    if too_slow:
        return [
            Problem(
                "upstream.startup_timeout",
                "error",
                f'The stdio upstream "{name}" did not answer '
                + ("server/discover" if deadline_kind == "discover_timeout" else "initialize and tools/list")
                + " in time",
                f"last end: {last_exit}{restart}; {_stderr_evidence(upstream)}",
                raise_timeout + run_by_hand,
                name,
            )
        ]
    return [
        Problem(
            "upstream.down",
            "warning",
            f'The stdio upstream "{name}" is not serving',
            f"state {upstream.get('state')}; last end: {last_exit}{restart}; {_stderr_evidence(upstream)}",
            f"The gateway restarts it on its own. If it keeps ending: {run_by_hand}",
            name,
        )
    ]


def _remote_upstream_presence(slot: SlotView, upstream: Mapping[str, Any]) -> list[Problem]:
    """A remote upstream is reached by the gateway: its absence is a server it cannot reach or that refuses it."""
    name = slot.name
    url = upstream.get("url")
    state = upstream.get("state")
    failures = int(upstream.get("failures_in_a_row") or 0)
    next_in = upstream.get("next_attempt_in_s")
    retry = f"; next attempt in {next_in:.1f}s" if isinstance(next_in, int | float) else ""
    evidence = (
        f"{url}: {upstream.get('last_error') or 'no error recorded'}{retry}; {failures} failed attempt(s) in a row"
    )
    waiting = (
        f"Clients get 'Provider \"{name}\" not connected' until it succeeds; the gateway keeps trying with back-off."
    )
    if state == "auth_failed":
        credential = (upstream.get("credential") or {}).get("kind", "none")
        if credential == "oauth client credentials":
            fix = (
                "Check client_id and client_secret with the authorization server's administrator, the token_url, "
                "scope and audience under oauth_client_credentials, and that the server accepts tokens from it."
            )
        elif credential == "none":
            fix = (
                "The server requires a credential: configure secret (with header_name), headers_file or "
                "oauth_client_credentials."
            )
        else:
            fix = (
                "Replace the secret (the file or environment variable named by secret, or headers_file) with one the "
                "server accepts, check header_name, and restart the gateway (secrets are read at start)."
            )
        return [
            Problem(
                "upstream.auth_failed",
                "error",
                f'The remote upstream "{name}" refuses the gateway\'s credentials ({credential})',
                evidence,
                f"{fix} {waiting}",
                name,
            )
        ]
    if state in ("unreachable", "incompatible", "refused"):
        return [
            Problem(
                "upstream.unreachable",
                "error",
                f'The remote upstream "{name}" cannot be reached',
                evidence,
                "Check the URL (provider_status shows it), that the server runs and listens there, DNS and firewalls, "
                "TLS (ca_file for a private CA), and that it speaks MCP over the configured transport "
                f"({upstream.get('transport')}). {waiting}",
                name,
            )
        ]
    if slot.connected:
        return []
    if state == "connecting" and not failures:
        return [
            Problem(
                "upstream.connecting",
                "info",
                f'The remote upstream "{name}" is being connected',
                f"{url}: attempt {upstream.get('attempts')}",
                f"Wait a moment. {waiting}",
                name,
            )
        ]
    return [
        Problem(
            "upstream.down",
            "warning",
            f'The remote upstream "{name}" is not serving',
            f"state {state}; {evidence}",
            f"The gateway connects again on its own. {waiting}",
            name,
        )
    ]


def _upstream_presence(view: GatewayView, slot: SlotView) -> list[Problem] | None:
    """Problems of a configured upstream's slot, or None when the slot is not one (or of a kind not known here)."""
    upstream = slot.upstream
    if upstream is None:
        return None
    if upstream.get("kind") == "stdio":
        return _stdio_upstream_presence(slot, upstream)
    if upstream.get("kind") == "remote":
        return _remote_upstream_presence(slot, upstream)
    return None


def slot_presence(view: GatewayView, slot: SlotView) -> list[Problem]:
    upstream = _upstream_presence(view, slot)
    if upstream is not None:
        return upstream
    if slot.connected:
        return []
    if slot.last_error.startswith("initialize failed"):
        return [
            Problem(
                "provider.initialize_failed",
                "error",
                f'The provider for "{slot.name}" connected but did not complete initialize and tools/list',
                f"{slot.last_error}; {last_link(slot)}",
                "The provider must answer initialize, then tools/list, within "
                f"providers.initialize_timeout_ms ({view.initialize_timeout_ms} ms). Check the device's log for "
                "the failure; raise providers.initialize_timeout_ms for a slow board.",
                slot.name,
            )
        ]
    if slot.declared:
        return [
            Problem(
                "slot.disconnected",
                "error",
                f'Declared slot "{slot.name}" has no provider',
                f"declared under [slots.declared]; {last_link(slot)}",
                f"{bring_back(view, slot)} Clients of this slot get 'Provider \"{slot.name}\" not connected' "
                "until then.",
                slot.name,
            )
        ]
    if slot.connects:
        return [
            Problem(
                "slot.disconnected",
                "warning",
                f'Slot "{slot.name}" lost its provider',
                f"{last_link(slot)}; it had {slot.connects} connection(s) since start",
                f"{bring_back(view, slot)} If it should always be there, declare it under [slots.declared] so "
                "its absence is an error.",
                slot.name,
            )
        ]
    return [
        Problem(
            "slot.never_connected",
            "warning",
            f'Clients asked for slot "{slot.name}" but no provider ever connected to it',
            "the name was referenced by a client request; no provider has used it since the gateway started",
            f"Check the spelling against providers_list; or connect a provider to {provider_url(view, slot.name)}.",
            slot.name,
        )
    ]


def _foreign_answers(slot: SlotView, foreign: int) -> Problem:
    """The board answered requests of this gateway's id form that this process never sent: someone
    else talks to it on the same medium (gateway/core/unmatched_answers.py)."""
    where = f" ({slot.provider_url})" if slot.provider_url else ""
    restart = (
        "A few such answers right after this gateway started can be owed to the gateway process before it; "
        "a count that keeps growing means a second client."
    )
    if slot.way_in == "mqtt":
        summary = f'Another gateway talks to the board of "{slot.name}" over MQTT'
        fix = (
            f"Two gateways are subscribed to this board's topics{where}: the board obeys both, each gateway hears "
            "the answers of the other, and the policy and audit of each see only its own calls. Stop the other "
            "gateway (a spare restored from this one's backup has its broker login), or give it other broker "
            "credentials and an ACL that keeps it off this board's topics (docs/mqtt-broker.md). " + restart
        )
    elif slot.way_in == "serial":
        summary = f'Another program sends requests on the serial line of "{slot.name}"'
        fix = (
            f"A second program writes to this board's line{where} (another gateway, a terminal or a shared serial "
            "bridge): the board obeys both, and this gateway's policy and audit do not see its calls. Close the "
            "other program. " + restart
        )
    else:
        summary = f'Another client talks to the provider of "{slot.name}"'
        fix = f"Stop the other client of this provider{where}. " + restart
    return Problem(
        "provider.another_gateway",
        "warning",
        summary,
        f"{foreign} answer(s) since start under ids of this gateway's form (brk-<n>) that this gateway never "
        "sent (the first one is in the log); they are not counted as unmatched responses",
        fix,
        slot.name,
    )


def slot_faults(view: GatewayView, slot: SlotView) -> list[Problem]:
    problems: list[Problem] = []
    counters = slot.counters
    misses = counters.get("heartbeat_misses", 0)
    if misses:
        problems.append(
            Problem(
                "provider.heartbeat_misses",
                "warning",
                f'The provider for "{slot.name}" missed heartbeats and was dropped',
                f"{misses} missed heartbeat(s) at an interval of {view.heartbeat_interval_s:g}s since start; "
                f"{slot.connects} connection(s); {last_link(slot)}",
                "The provider must answer WebSocket pings (or JSON-RPC ping) within one heartbeat interval. "
                "Check Wi-Fi signal and power; a board that blocks its loop for long (sensor reads, flash writes) "
                "needs to service the socket; raise providers.heartbeat_interval_s for sleepy devices, below 90 s "
                "(boards and the simulator redial a link silent for 90 s).",
                slot.name,
            )
        )
    unparsable = counters.get("unparsable", 0)
    if unparsable:
        problems.append(
            Problem(
                "provider.unparsable_messages",
                "warning",
                f'The provider for "{slot.name}" sent messages that are not JSON-RPC',
                f"{unparsable} unparsable message(s) since start (each was dropped; the first one is in the log)",
                "The child prints text on stdout, where only JSON-RPC lines belong: log to stderr instead (the "
                "latest such lines are in provider_status upstream.stdout_not_jsonrpc_tail)."
                if slot.transport == "stdio" or (slot.upstream or {}).get("kind") == "stdio"
                else "Send exactly one JSON-RPC 2.0 object per WebSocket text frame (wrapped in an envelope on "
                "/providers); keep debug prints and log text off the link.",
                slot.name,
            )
        )
    unmatched = counters.get("unmatched_responses", 0)
    if unmatched:
        if slot.id_style == "numeric":
            hint = (
                "This slot sends integer ids; echo them as integers. If the provider expects brk-<n> strings, "
                'remove id_style = "numeric" for it.'
            )
        else:
            hint = (
                'This slot sends string ids like "brk-7" and the answer must carry exactly that string. A board '
                'that parses ids as numbers needs integer ids: set id_style = "numeric" under '
                f'[slots.declared.{slot.name}] or send hello {{"ids": "numeric"}} in its register frame.'
            )
        problems.append(
            Problem(
                "provider.unmatched_responses",
                "warning",
                f'The provider for "{slot.name}" answered requests nobody waits for',
                f"{unmatched} response(s) with an unknown id since start (id style {slot.id_style}); "
                "late answers after a deadline count here too",
                hint,
                slot.name,
            )
        )
    foreign = counters.get("foreign_answers", 0)
    if foreign:
        problems.append(_foreign_answers(slot, foreign))
    if slot.connected and slot.schema_announced:
        problems.append(
            Problem(
                "provider.schema_mismatch",
                "warning",
                f'The provider for "{slot.name}" announces a schema hash that is not the hash of the tools it lists',
                f"hello schema {slot.schema_announced}; the tools it lists hash to {slot.tools_hash} "
                "(provider_status: hello.schema, tools_hash)",
                "The firmware's pinned hash is stale or its tools changed: compute the hash of its schema file again "
                f"(mcp-gateway schema-hash FILE; --slot {slot.name} hashes what it lists now) and build the firmware "
                "with it. The gateway serves the tools the provider lists; a true hash lets it notice a board that "
                "comes back with other tools (docs/pump-1.md, Schema hash).",
                slot.name,
            )
        )
    violations = counters.get("protocol_violations", 0)
    if violations:
        problems.append(
            Problem(
                "provider.protocol_violations",
                "warning",
                f'The provider for "{slot.name}" broke the protocol',
                f"{violations} protocol violation(s) since start: JSON-RPC batches (not read), tools clients "
                "cannot read (left out of tools/list) or request ids used twice; the gateway's log names each",
                "Send one JSON-RPC message per frame (batches were removed from MCP in 2025-06-18); give every tool "
                "a non-empty string name, an inputSchema object and each other member its JSON type "
                "(docs/protocol.md, Tools clients cannot read); never reuse the id of a request still open.",
                slot.name,
            )
        )
    oversized = _stdout_oversized_lines(slot)
    deadlines = counters.get("deadlines", 0)
    if deadlines:
        # An answer dropped for its size whose id was not at its start leaves its call to the deadline.
        dropped = (
            f"; {oversized} stdout line(s) longer than limits.max_frame_bytes were dropped, and an answer "
            "among them leaves its call waiting until the deadline"
            if oversized
            else ""
        )
        problems.append(
            Problem(
                "provider.deadlines",
                "warning",
                f'Requests to "{slot.name}" ran past their deadline',
                f"{deadlines} request(s) got no answer within their deadline since start "
                f"(slot default {slot.request_timeout_ms} ms){dropped}",
                ("Raise limits.max_frame_bytes first (see upstream.stdout_oversized_lines). " if oversized else "")
                + "The provider is slow or drops requests. Check it answers every request id once; for tools that "
                f"legitimately take long set tool_timeouts_ms under [slots.declared.{slot.name}], or raise its "
                "request_timeout_ms.",
                slot.name,
            )
        )
    if oversized:
        bound = (slot.upstream or {}).get("stdout_max_line_bytes")
        problems.append(
            Problem(
                "upstream.stdout_oversized_lines",
                "warning",
                f'The stdio upstream "{slot.name}" wrote lines longer than limits.max_frame_bytes',
                f"{oversized} stdout line(s) over {bound} bytes dropped since start; an answer among them ended "
                "its call at once with an error naming limits.max_frame_bytes when its id came first in the line, "
                "else its call waited until the deadline",
                f"Raise limits.max_frame_bytes (now {bound} bytes) above the largest message the child writes, or "
                "have its tools answer with less (a page of results, a resource link).",
                slot.name,
            )
        )
    if slot.connected and slot.max_pending and slot.pending >= slot.max_pending * NEAR_CAP:
        full = slot.pending >= slot.max_pending
        problems.append(
            Problem(
                "provider.pending_high",
                "error" if full else "warning",
                f'Requests to "{slot.name}" are piling up',
                f"{slot.pending} of at most {slot.max_pending} requests in flight"
                + ("; new requests are refused" if full else ""),
                "The provider answers slower than clients call it. Find the slow tool with provider_status and "
                "the latency histogram in /metrics; reduce client concurrency or raise limits.max_pending_per_slot.",
                slot.name,
            )
        )
    if slot.connected and slot.last_error:
        problems.append(
            Problem(
                "provider.error",
                "warning",
                f'The provider for "{slot.name}" reported a failure',
                slot.last_error,
                "See the gateway log for this slot; the provider keeps serving its previous tool list meanwhile.",
                slot.name,
            )
        )
    return problems
