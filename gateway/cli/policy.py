"""`mcp-gateway policy check|explain`: check a policy file; say how the policy decides one request."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from gateway.cli.common import Commands, _load, gateway_timeout_option, gateway_url_option
from gateway.cli.parsing import subcommands
from gateway.config.base import ENV_CONFIG_FILE

EXPLAIN_EXIT = {True: 0, False: 1}
"""explain's exit status: 0 allowed, 1 denied (2: the policy or the flags cannot be used)."""


def _plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def cmd_policy_check(args: argparse.Namespace) -> int:
    """Load a policy file as the gateway would; print what it holds, or every mistake in it."""
    from gateway.policy.rules import PolicyError, load_policy

    try:
        document = load_policy(args.file).document
    except PolicyError as exc:
        print(f"mcp-gateway policy check: {exc}", file=sys.stderr)
        # A file that cannot be opened is a usage error (2); one read and found wrong, the check's finding (1).
        return 2 if isinstance(exc.__cause__, OSError) else 1
    held = [
        _plural(len(document.roles), "role", "roles"),
        _plural(len(document.assign), "assignment", "assignments"),
        _plural(len(document.deny), "deny", "denies"),
        _plural(len(document.limits), "limit", "limits"),
    ]
    # Named only when there are some.
    if document.confirm:
        confirms = _plural(len(document.confirm), "confirmation rule", "confirmation rules")
        # by = "another" changes who may answer: worth naming in the summary.
        by_another = sum(1 for rule in document.confirm if rule.by == "another")
        held.append(f'{confirms} ({by_another} by = "another")' if by_another else confirms)
    if document.execution_limits:
        held.append(_plural(len(document.execution_limits), "execution limit", "execution limits"))
    if document.declared_limits:
        held.append(_plural(len(document.declared_limits), "declared limit", "declared limits"))
    for warning in document.warnings:
        print(f"mcp-gateway policy check: warning: {warning}", file=sys.stderr)
    print("policy OK: " + ", ".join(held))
    return 0


def cmd_policy_explain(args: argparse.Namespace) -> int:
    """How the policy decides one request: the decision, the resource, each rule, the argument limits."""
    import orjson

    from gateway.policy.rules import Ask, PolicyError, load_policy
    from gateway.policy.rules.subjects import subject_error

    for subject in args.principal:
        problem = subject_error(subject)
        if problem is not None or subject == "*":
            # "*" is a rule's wildcard, not someone who can call.
            problem = problem or '"*" matches any caller in a rule; name one caller, e.g. token:agent-1 or anonymous'
            print(f"mcp-gateway policy explain: --principal {problem}", file=sys.stderr)
            return 2
    if args.method == "tools/call" and not args.tool:
        print("mcp-gateway policy explain: --tool is needed to explain a tools/call", file=sys.stderr)
        return 2
    arguments: Any = None
    if args.args is not None:
        try:
            arguments = orjson.loads(args.args)
        except orjson.JSONDecodeError as exc:
            print(f"mcp-gateway policy explain: --args is not JSON: {exc}", file=sys.stderr)
            return 2
    try:
        if args.policy is not None:
            policy = load_policy(args.policy)
        else:
            config = _load(args)
            if config.policy is None:
                # Without a file the defaults answer, and they must not read as a configuration that was checked.
                given = getattr(args, "config", None) or os.environ.get(ENV_CONFIG_FILE)
                where = (
                    "no [policy] in the configuration"
                    if given
                    else f"no configuration given (--config or {ENV_CONFIG_FILE}): "
                    "the built-in defaults have no [policy]"
                )
                print(f"{where}: every request is allowed (authentication and scopes apply)")
                return 0
            policy = load_policy(config.policy)
    except PolicyError as exc:
        print(f"mcp-gateway policy explain: {exc}", file=sys.stderr)
        return 2
    tool = args.tool if args.method == "tools/call" else None
    read_only = True if args.read_only else None
    ask = Ask(frozenset(args.principal), args.slot, args.method, tool, read_only)
    print("\n".join(policy.explain(ask)))
    decision = policy.decide(ask)
    if tool is not None and decision.allowed:
        print(_execution_limits_line(policy, ask, decision.resource))
    arguments_pass = True
    if tool is not None and args.args is not None:
        line, arguments_pass = _arguments_line(tool, arguments, decision.limits, decision.resource)
        print(line)
    # Refused arguments fail the call as a denial does, so a script sees the same answer either way.
    return EXPLAIN_EXIT[decision.allowed and arguments_pass]


def _execution_limits_line(policy: Any, ask: Any, resource: str) -> str:
    """The [[execution_limits]] that would count this call (their counters live in the running gateway)."""
    from gateway.policy.execution.rules import Target, compile_limit
    from gateway.policy.rules.capabilities import TOOL_PREFIX, TOOLS_CALL, tool_class

    named = TOOL_PREFIX + (ask.tool or "")
    target = Target(ask.subjects, ask.slot, frozenset({TOOLS_CALL, named, tool_class(ask.read_only)}), named, resource)
    rules = [compile_limit(entry) for entry in policy.document.execution_limits]
    counting = [rule.id for rule in rules if rule.limits_calls and rule.matches(target)]
    return f"execution limits: {', '.join(counting) if counting else 'none count this call'}"


def _arguments_line(tool: str, arguments: Any, limits: Any, resource: str) -> tuple[str, bool]:
    """What the limits make of --args, as the gateway would check them (the tool's inputSchema aside),
    and whether the call would go ahead with them."""
    from gateway.policy.arguments import ArgumentRefused, check_arguments
    from gateway.policy.schemas import SchemaCache

    try:
        checked = check_arguments({"name": tool}, arguments, limits, SchemaCache(), resource=resource)
    except ArgumentRefused as exc:
        return f"arguments: refused: {exc.message}", False
    if checked.clamped:
        return f"arguments: clamped: {'; '.join(checked.clamped)}", True
    return "arguments: within the limits (the tool's inputSchema is checked by the gateway, not here)", True


def cmd_policy_reload(args: argparse.Namespace) -> int:
    from gateway.cli.calls import gateway_client
    from gateway.client import render_result

    async def go() -> int:
        async with gateway_client(args, "_broker") as client:
            result = await client.call_tool("broker_policy_reload", {})
        if result.get("isError"):  # a refusal: on stderr, as every command's
            print("mcp-gateway policy reload: " + render_result(result), file=sys.stderr)
            return 1
        sys.stdout.write(render_result(result) + "\n")
        return 0

    return asyncio.run(go())


def add_policy(commands: Commands) -> None:
    policy = commands.add_parser("policy", help="check a policy, or explain how it decides a request ([policy])")
    policy_commands = subcommands(policy, "policy_command")
    check = policy_commands.add_parser(
        "check",
        help="check a policy file and list every mistake in it",
        description="Load a policy TOML file as the gateway would. Prints a summary when it can be used; "
        "otherwise every mistake, each with where it is, and exits 1.",
    )
    check.add_argument("file", help="the policy file, e.g. /etc/mcp-gateway/policy.toml")
    check.set_defaults(func=cmd_policy_check)

    explain = policy_commands.add_parser(
        "explain",
        help="show how the policy decides one request",
        description="Show the decision on one request: allowed or denied and why, the slot's resource path, "
        "the capability asked, every rule considered and what it did, and the argument limits. "
        "Exits 0 when allowed, 1 when denied, 2 when the policy or a flag cannot be used.",
    )
    explain.add_argument(
        "--principal",
        action="append",
        required=True,
        metavar="SUBJECT",
        help="who calls, as a subject: token:NAME, user:SUB, group:NAME, client:ID, service:NAME or anonymous; "
        "repeat for each (a user and its groups: --principal user:alice --principal group:operators)",
    )
    explain.add_argument("--slot", required=True, help="the slot called, e.g. pump-1")
    explain.add_argument("--tool", help="the tool called, by its provider's name")
    explain.add_argument(
        "--method", default="tools/call", help="the MCP method (default tools/call), e.g. tools/list, resources/read"
    )
    explain.add_argument(
        "--read-only", action="store_true", help="the tool is an observe tool (its annotations say readOnlyHint: true)"
    )
    explain.add_argument(
        "--args", metavar="JSON", help="the call's arguments, checked against the limits: '{\"speed_rpm\": 2500}'"
    )
    source = explain.add_mutually_exclusive_group()
    source.add_argument("--policy", metavar="FILE", help="a policy file")
    source.add_argument(
        "--config", help="the gateway's TOML config file, for its [policy] (default: $MCP_GATEWAY_CONFIG)"
    )
    explain.set_defaults(func=cmd_policy_explain)

    reload = policy_commands.add_parser(
        "reload",
        help="make a running gateway load its policy again",
        description="Ask a running gateway (its _broker tool broker_policy_reload) to load [policy] again and use "
        "it from the next request on, as SIGHUP does. A policy with a mistake is not used: the answer lists every "
        "mistake and the command exits 1. The policy must give the caller that tool (an action on "
        "/_system/broker); unknown tool means it does not, or the gateway has no [policy].",
    )
    gateway_url_option(reload)
    gateway_timeout_option(reload)
    reload.add_argument(
        "--token-file", metavar="FILE", help="a file holding the client token (default: $MCP_GATEWAY_TOKEN)"
    )
    reload.set_defaults(func=cmd_policy_reload)
