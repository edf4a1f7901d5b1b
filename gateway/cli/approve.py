"""`mcp-gateway approve`: list the device calls waiting for a person's approval, approve or deny one
(through the running gateway's _broker tools broker_approvals and broker_approve)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from gateway.cli.common import Commands, gateway_timeout_option, gateway_url_option

if TYPE_CHECKING:
    from gateway.client import GatewayCallError

NOTHING_WAITS = "No call waits for an approval you may give."
"""What `approve` says, on stderr, when the list is empty."""


def render_approvals(approvals: list[dict[str, Any]], now_ms: int) -> str:
    """One line per waiting call, oldest first; the words an operator approves by. The time left is the
    gateway's (`expires_in_ms`, on its monotonic clock): this machine's clock may differ from its clock;
    `now_ms` serves only a gateway that does not send it. What the caller named (its tool, slot, arguments)
    shows what does not print escaped."""
    from gateway.client import terminal_text

    if not approvals:
        return NOTHING_WAITS
    lines = []
    for item in approvals:
        left_ms = item.get("expires_in_ms")
        if not isinstance(left_ms, int):
            left_ms = int(item["expires_ms"]) - now_ms
        left_s = max(0, left_ms // 1000)
        arguments = json.dumps(item.get("arguments"), separators=(",", ":"), sort_keys=True, ensure_ascii=False)
        decided = f" by {item['decided_by']}" if item.get("decided_by") else ""
        # After a reload that changed the [[confirm]] rules, confirm[N] of the list may be another rule now.
        rule = f"{item['rule']} of an earlier policy" if item.get("rule_reloaded") else item["rule"]
        # A masked value hides what may tell two calls apart: the approver is told it does not see it.
        masked = [str(key) for key in item.get("masked") or []]
        more = item.get("masked_more") or 0
        hidden = f"  masked: {', '.join(masked)}{f' and {more} more' if more else ''}" if masked else ""
        line = (
            f"{item['id']}  {item['state']}{decided}  {', '.join(item['principal'])} -> {item['tool']} on "
            f"{item['slot']} ({item['resource']}) {arguments}{hidden}  [{rule}, expires in {left_s} s]"
        )
        lines.append(terminal_text(line))
    return "\n".join(lines)


def refused(result: dict[str, Any], as_json: bool) -> int:
    """A tool error of _broker (an approval id no call waits under, or a call already decided, named with
    whose decision holds): said on stderr, exit 1; with --json the answer goes to stdout as well, so a
    script reads its data (reason, decided_by)."""
    from gateway.client import render_result, terminal_text

    if as_json:  # escaped as render_result is: the answer carries what callers and providers wrote
        sys.stdout.write(terminal_text(json.dumps(result, ensure_ascii=False)) + "\n")
    print(f"mcp-gateway approve: {render_result(result)}", file=sys.stderr)
    return 1


def refused_by_error(exc: GatewayCallError, as_json: bool) -> int:
    """A JSON-RPC error of _broker (a caller deciding its own call, a caller without the rights): said on
    stderr, exit 1; with --json the error object goes to stdout as a tool error's answer does."""
    from gateway.client import terminal_text

    if as_json and exc.error is not None:
        sys.stdout.write(terminal_text(json.dumps({"error": exc.error}, ensure_ascii=False)) + "\n")
    print(f"mcp-gateway approve: {exc}", file=sys.stderr)
    return 1


def cmd_approve(args: argparse.Namespace) -> int:
    from gateway.cli.calls import gateway_client, refused_as_not_utf8
    from gateway.client import GatewayCallError, render_result, terminal_text

    if refused_as_not_utf8("approve", [("the ID", args.id), ("--url", args.url)]):
        return 2
    if args.deny and args.id is None:
        print(
            "mcp-gateway approve: --deny needs the ID of the call to deny (mcp-gateway approve lists them)",
            file=sys.stderr,
        )
        return 2

    async def go() -> int:
        async with gateway_client(args, "_broker") as client:
            if args.id is None:
                result = await client.call_tool("broker_approvals", {})
                if result.get("isError"):
                    return refused(result, args.json)
                if args.json:
                    sys.stdout.write(render_result(result) + "\n")
                    return 0
                approvals = result["structuredContent"]["approvals"]
                if not approvals:  # a note, on stderr: stdout stays the list, empty
                    print(f"mcp-gateway approve: {NOTHING_WAITS}", file=sys.stderr)
                    return 0
                sys.stdout.write(render_approvals(approvals, int(time.time() * 1000)) + "\n")
                return 0
            result = await client.call_tool("broker_approve", {"id": args.id, "approve": not args.deny})
        if result.get("isError"):
            return refused(result, args.json)
        if args.json:
            sys.stdout.write(render_result(result) + "\n")
            return 0
        decided = result["structuredContent"]
        verb = "approved" if decided["state"] == "approved" else "denied"
        said = (
            f"{decided['id']} {verb}: {decided['tool']} on {decided['slot']} for {', '.join(decided['principal'])}; "
            "its next attempt with the same arguments is "
            f"{'forwarded' if verb == 'approved' else 'answered as declined'}, once."
        )
        sys.stdout.write(terminal_text(said) + "\n")
        return 0

    async def decided() -> int:
        try:
            return await go()
        except GatewayCallError as exc:
            return refused_by_error(exc, args.json)

    return asyncio.run(decided())


def add_approve(commands: Commands) -> None:
    approve = commands.add_parser(
        "approve",
        help="list device calls waiting for a person's approval; approve or deny one",
        description="Without ID: list the calls the policy has a person confirm ([[confirm]]) whose client could "
        "not ask its user, only those the token may decide (calls it may make itself under the policy). With ID: "
        "approve it (or deny it with --deny); the caller's next attempt of the same call before it expires is "
        "forwarded (or answered as declined), once. Runs the _broker tools broker_approvals and broker_approve, "
        "which the policy gives to operators.",
    )
    approve.add_argument("id", nargs="?", help="the approval id to decide, as the list shows it")
    approve.add_argument("--deny", action="store_true", help="deny the call instead of approving it")
    approve.add_argument("--json", action="store_true", help="print the gateway's JSON answer")
    gateway_url_option(approve)
    approve.add_argument(
        "--token-file", metavar="FILE", help="a file holding the client token (default: $MCP_GATEWAY_TOKEN)"
    )
    gateway_timeout_option(approve)
    approve.set_defaults(func=cmd_approve)
