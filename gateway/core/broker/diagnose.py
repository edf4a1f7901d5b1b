"""What is wrong with this gateway right now, as a list of named problems with evidence and a fix.

A snapshot of the registry, the client sessions and the configuration in, problems out, with the
standing problems the parts looking after the gateway's files report (problems.STANDING: the state
lock, the device registry). The snapshot is taken by `gateway.core.broker.status`; `broker_diagnose`,
`broker://diagnose` and the troubleshooting guide show the result. Every problem id is documented in
docs/operations.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.core.broker.diagnose_declarations import declaration_problems
from gateway.core.broker.diagnose_limits import limit_problems
from gateway.core.broker.diagnose_links import mdns_problems, mqtt_problems, serial_problems
from gateway.core.broker.diagnose_slots import slot_faults, slot_presence
from gateway.core.broker.problems import (
    SEVERITY_ORDER,
    STANDING,
    GatewayView,
    Problem,
    near,
    provider_url,
    ws_base,
)


def _oauth_key_problems(view: GatewayView) -> list[Problem]:
    """[auth.oauth] holds no key to check a token with (every OAuth caller refused), or holds keys its last
    fetch could not refresh (a rotation since is refused). Static tokens, HMAC and boards work either way,
    so /readyz does not depend on the authorization server; this is where an operator learns of it."""
    keys = view.oauth_keys
    if not keys:
        return []
    source, error = keys.get("source"), keys.get("last_error") or "no error recorded"
    retry = keys.get("next_fetch_in_s")
    retry_text = f"; the next fetch is in {retry:g}s" if isinstance(retry, int | float) else ""
    fix = (
        "Check that the gateway reaches auth.oauth.jwks_url (curl it from the gateway's machine: DNS, proxy, "
        "firewall, TLS trust) and that it serves a JSON Web Key Set with keys of auth.oauth.algorithms, or fix "
        "auth.oauth.jwks_file; the gateway fetches it again by itself (docs/security-auth.md#oauth-21-resource-server)."
    )
    if not keys.get("loaded") or not keys.get("keys"):
        never = not keys.get("loaded")
        return [
            Problem(
                "auth.oauth_keys_unavailable",
                "error",
                "The gateway holds no key of the authorization server: every OAuth access token is refused",
                (f"no key set loaded from {source} yet: {error}" if never else f"the key set at {source} holds no key")
                + retry_text,
                fix,
            )
        ]
    if keys.get("last_fetch_failed"):
        ago = keys.get("fetched_ago_s")
        since = f" fetched {ago:g}s ago" if isinstance(ago, int | float) else ""
        return [
            Problem(
                "auth.oauth_keys_stale",
                "warning",
                "The authorization server's keys could not be refreshed: a token signed by a key rotated in since "
                "is refused",
                f"the last fetch from {source} failed: {error}; tokens are checked against the {keys.get('keys')} "
                f"keys{since}{retry_text}",
                fix,
            )
        ]
    return []


def _gateway_problems(view: GatewayView) -> list[Problem]:
    problems: list[Problem] = _oauth_key_problems(view)
    if view.insecure_lan and not view.is_loopback:
        problems.append(
            Problem(
                "security.insecure_lan",
                "warning",
                "The gateway listens on the network without client authentication (--insecure-lan)",
                f"bound to {view.host} with insecure_lan = true and no [auth]; anyone who can reach {view.url} can "
                "call every device",
                "Configure client authentication ([auth] tokens, token_files or oauth, or [auth.hmac] keys; "
                "docs/security-auth.md#client-authentication), or bind to "
                '127.0.0.1 (host = "127.0.0.1") behind a reverse proxy that authenticates, or restrict the network '
                "with a firewall; drop --insecure-lan once client and provider authentication are configured.",
            )
        )
    if not view.is_loopback and view.provider_auth == "none":
        problems.append(
            Problem(
                "security.providers_unauthenticated",
                "warning",
                "Any device on the network can publish a slot (provider authentication is off)",
                f'bound to {view.host} with [providers.auth] mode = "none": whoever reaches '
                f"{ws_base(view)}/provider/<slot> can claim a free slot and answer its clients' calls",
                'Give each board a secret: set [providers.auth] mode = "identities" with one identity per device and '
                'the slots it may publish (or mode = "shared" for a quick setup), and put the secret in the board\'s '
                "provider_token (X-Provider-Token); see docs/security-auth.md#provider-identities.",
            )
        )
    if not view.is_loopback and view.static_tokens and not view.tls:
        problems.append(
            Problem(
                "security.static_tokens_without_tls",
                "warning",
                "Static client tokens work only from this machine: the listener has no TLS",
                f"bound to {view.host} with {view.static_tokens} static tokens and no [tls]; clients on other "
                "machines get 401 not_tls (a token sent over plain HTTP could be read on the way)",
                "Configure [tls] (mcp-gateway tls self-signed makes a certificate), replace any token already sent "
                "over plain HTTP (mcp-gateway token create NAME --replace), or use OAuth access tokens.",
            )
        )
    if not view.is_loopback and not view.public_url:
        problems.append(
            Problem(
                "config.public_url_missing",
                "info",
                "Guides show a loopback URL because public_url is not set",
                f"bound to {view.host}; guides and broker_info show {view.url}",
                'Set public_url (e.g. "http://gateway.plant.lan:3000") so guides show the address boards and '
                "clients on the network use.",
            )
        )
    if not view.allowed_origins:
        problems.append(
            Problem(
                "security.no_origins_configured",
                "info",
                "Browser-based clients are refused (no allowed origins)",
                "allowed_origins is empty: requests with an Origin header get HTTP 403 origin_not_allowed; native "
                "clients and boards (no Origin header) are not affected",
                "To use a browser client (web console, browser Inspector), add its origin to allowed_origins, e.g. "
                '["http://localhost:6274"].',
            )
        )
    if near(view.sessions, view.max_sessions):
        problems.append(
            Problem(
                "sessions.near_cap",
                "error" if view.sessions >= view.max_sessions else "warning",
                "Client sessions are close to their limit",
                f"{view.sessions} of at most {view.max_sessions} session-era client sessions are held",
                "Clients should end sessions with DELETE when done; lower limits.session_idle_timeout_s so idle "
                "ones expire sooner, or raise limits.max_sessions.",
            )
        )
    if near(view.subscriptions, view.max_subscriptions):
        problems.append(
            Problem(
                "subscriptions.near_cap",
                "error" if view.subscriptions >= view.max_subscriptions else "warning",
                "Open subscriptions/listen streams are close to their limit",
                f"{view.subscriptions} of at most {view.max_subscriptions} streams are open",
                "Close streams that are no longer read, or raise limits.max_subscriptions.",
            )
        )
    if near(len(view.slots), view.max_slots):
        problems.append(
            Problem(
                "slots.near_cap",
                "warning",
                "The number of slots is close to its limit",
                f"{len(view.slots)} of at most {view.max_slots} slots are tracked",
                "Raise limits.max_slots, or set slots.only_declared = true so unknown names are refused.",
            )
        )
    if not any(slot.connects for slot in view.slots):
        problems.append(
            Problem(
                "providers.none",
                "info",
                "No provider has connected yet",
                "no slot has had a provider since the gateway started",
                f"Connect a board or server to {provider_url(view, '<slot>')} (one slot) or to "
                f"{ws_base(view)}/providers (many slots); see broker_guide topic publish-provider.",
            )
        )
    if not view.aggregate_members:
        problems.append(
            Problem(
                "aggregate.empty",
                "info",
                "_all lists no tools: no provider has opted in",
                "no ready provider registered with aggregate = true",
                'A provider joins _all by sending {"jsonrpc":"2.0","method":"notifications/register",'
                '"params":{"aggregate":true}} as its first frame (in an envelope on /providers).',
            )
        )
    problems.extend(_group_problems(view))
    problems.extend(_governance_problems(view))
    problems.extend(limit_problems(view))
    problems.extend(declaration_problems(view))
    problems.extend(mdns_problems(view))
    problems.extend(mqtt_problems(view))
    problems.extend(serial_problems(view))
    problems.extend(held_port_problems(view))
    return problems


def held_port_problems(view: GatewayView) -> list[Problem]:
    """Serial ports let go of for another program (broker_serial_release) and not taken back yet: their
    boards are away until then, which a flash that died before it could resume leaves behind."""
    problems: list[Problem] = []
    for port in view.serial.get("ports") or []:
        if port.get("state") != "held":
            continue
        path = port.get("path")
        back_in = port.get("given_back_in_s")
        bound = port.get("max_hold_s")
        back = (
            f"; the gateway takes it back by itself in {back_in:g}s (serial.max_hold_s = {bound:g})"
            if isinstance(back_in, int | float) and isinstance(bound, int | float)
            else ""
        )
        problems.append(
            Problem(
                "serial.port_held",
                "warning",
                f"Serial port {path} is let go of for another program: the slots of a board on it are detached",
                f"released by broker_serial_release (mcp-gateway flash, device update) since "
                f"{port.get('held_since') or 'an unknown time'}{back}",
                f"When the flash or update is over, or was killed, take the port back now: broker_serial_resume "
                f'{{"port": "{path}"}}; otherwise the gateway takes it back when serial.max_hold_s has passed.',
                port=path,
            )
        )
    return problems


def _group_problems(view: GatewayView) -> list[Problem]:
    """Enabled groups that serve nothing although providers are ready: most often a typo in the
    group's slot patterns or tool prefixes, which would otherwise only show as an agent missing tools."""
    ready = [slot.name for slot in view.slots if slot.state == "ready"]
    if not ready:
        return []
    problems: list[Problem] = []
    for group in view.groups:
        if not group.members:
            problems.append(
                Problem(
                    "group.no_members",
                    "info",
                    f'Tool group "{group.name}" has no members: /mcp/{group.name} lists no device tool',
                    f"its slot patterns {', '.join(group.slot_patterns)} match none of the {len(ready)} ready "
                    f"slots ({', '.join(ready[:10])}{', …' if len(ready) > 10 else ''})",
                    f"Check slots under [groups.{group.name}] against providers_list (fnmatch patterns, "
                    "case-sensitive), or connect the devices it is meant for.",
                )
            )
        elif not group.tools:
            problems.append(
                Problem(
                    "group.no_tools",
                    "warning",
                    f'Tool group "{group.name}" lists no tool although it has members',
                    f"no tool of {', '.join(group.members[:10])} starts with one of its prefixes "
                    f"{', '.join(group.prefixes)}",
                    f"Check tools under [groups.{group.name}] against the tools the members list "
                    "(prefixes are case-sensitive; guidance with topic groups shows them).",
                )
            )
    return problems


def _governance_problems(view: GatewayView) -> list[Problem]:
    governance = view.governance
    if governance is None:
        return []  # not a problem: the diagnosis says `governed: false` (server.py)
    return _unapprovable_problems(governance) + _audit_problems(governance)


def _unapprovable_problems(governance: Mapping[str, Any]) -> list[Problem]:
    """[[confirm]] rules covering the anonymous caller on a gateway without [auth]: a call of theirs that
    waits for `mcp-gateway approve` waits for nobody, as an anonymous caller approves no anonymous call."""
    policy = governance.get("policy")
    rules = policy.get("unapprovable_confirm_rules") if isinstance(policy, Mapping) else None
    if not rules:
        return []
    return [
        Problem(
            "governance.approvals_unanswerable",
            "warning",
            "Calls that wait for `mcp-gateway approve` can be approved by nobody: there is no [auth]",
            f"{', '.join(map(str, rules))} {'makes' if len(rules) == 1 else 'make'} calls wait for a person "
            '(every call under by = "another"; under '
            'by = "caller" those of a client that cannot be asked); without [auth] every caller is anonymous, and '
            "an anonymous caller never approves an anonymous call",
            "Add [auth] with a token for the approver and one for each agent (mcp-gateway token create NAME), then "
            "restart; the approver runs `mcp-gateway approve` with its token "
            "(docs/governance.md#confirmation-of-device-writes).",
        )
    ]


def _audit_problems(governance: Mapping[str, Any]) -> list[Problem]:
    audit = governance.get("audit")
    if isinstance(audit, Mapping) and not audit.get("healthy", True):
        evidence = f"{audit.get('path')}: {audit.get('last_error') or 'the last write failed'}"
        # The running gateway never makes the directory again: a storage device that went away would
        # be replaced, unnoticed, by the directory under its mount point. Only the operator can tell.
        gone = ""
        if "No such file or directory" in evidence:
            folder = os.path.dirname(str(audit.get("path") or "")) or "."
            gone = (
                f"If its directory {folder} is gone, mount its storage again or re-create it (mkdir -p {folder}, "
                "owned by the gateway's user, mode 0700): the running gateway does not, and needs no restart. "
            )
        return [
            Problem(
                "audit.unavailable",
                "error",
                "The audit trail cannot be written: governed calls are refused",
                evidence,
                f"{gone}Mend what the detail names ([audit] path): free disk space, make a read-only file system "
                'writable, fix the file\'s permissions, or move a damaged file ("file is not a database", '
                '"malformed") aside for a new one to be started at the path. The gateway tries again with each '
                "call and serves again once a write succeeds; /readyz answers 503 meanwhile.",
            )
        ]
    return []


def diagnose(view: GatewayView, slot: str | None = None) -> list[Problem]:
    """Every problem, worst first; with `slot`, only that slot's (a name never seen is itself a finding)."""
    if slot is not None:
        found = next((entry for entry in view.slots if entry.name == slot), None)
        if found is None:
            known = ", ".join(entry.name for entry in view.slots) or "none"
            return [
                Problem(
                    "slot.unknown",
                    "warning",
                    f'No slot "{slot}" has been seen',
                    "no provider or client has used this name since the gateway started, or not lately: a slot "
                    f"left vacant is forgotten after limits.vacant_slot_ttl_s; known slots: {known}",
                    f"Check the spelling against providers_list; a provider creates the slot by connecting to "
                    f"{provider_url(view, slot)}.",
                    slot,
                )
            ]
        problems = slot_presence(view, found) + slot_faults(view, found)
        problems += [problem for problem in declaration_problems(view) if problem.slot == slot]
    else:
        problems = _gateway_problems(view) + STANDING.current()
        for entry in view.slots:
            problems.extend(slot_presence(view, entry))
            problems.extend(slot_faults(view, entry))
    return sorted(problems, key=lambda p: (SEVERITY_ORDER[p.severity], p.slot or "", p.id))


def worst(problems: Sequence[Problem]) -> str:
    """'ok' when nothing is wrong, else the most severe level present."""
    if not problems:
        return "ok"
    return min((p.severity for p in problems), key=lambda s: SEVERITY_ORDER[s])
