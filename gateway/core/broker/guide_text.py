"""What every `broker_guide` page is written from (GuideInput) and the Markdown pieces they share."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson

from gateway.core.broker.problems import Problem
from gateway.core.jsonrpc import JsonObject


@dataclass(frozen=True)
class GuideInput:
    info: JsonObject  # broker_info
    providers: Sequence[JsonObject]  # providers_list()["providers"]
    problems: Sequence[Problem]
    config: JsonObject  # masked effective configuration (rights.guide_config's part of it for a non-operator)
    config_shown: bool = True
    """Whether the index page shows the configuration: to an operator of `_broker` only (rights.py)."""


def json_text(value: Any) -> str:
    return orjson.dumps(value).decode()


def pretty(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


def code(text: str, language: str = "") -> str:
    return f"```{language}\n{text}\n```"


def slot_path(name: str) -> str:
    return quote(name, safe="")


def example_slot(data: GuideInput, *, free: bool = False) -> str:
    """A slot name for examples: a connected one to call, or (`free`) a declared one still waiting for
    its provider, so an example never tells a new provider to claim a slot that is already held."""
    if free:
        for entry in data.providers:
            if entry["declared"] and not entry["connected"]:
                return str(entry["name"])
        held = {entry["name"] for entry in data.providers if entry["connected"]}
        return next(f"pump-{n}" for n in range(1, len(held) + 2) if f"pump-{n}" not in held)
    for entry in data.providers:
        if entry["connected"]:
            return str(entry["name"])
    for entry in data.providers:
        if entry["declared"]:
            return str(entry["name"])
    return "pump-1"


def takeover_rule(policy: str, probe_ms: int) -> str:
    """What happens to a second provider claiming a held slot, under the configured policy."""
    if policy == "reject":
        return 'is always refused with 1008 while the holder is connected (`providers.takeover = "reject"`)'
    rule = (
        "is refused with 1008 unless the holder has missed a heartbeat or fails to answer an immediate ping "
        f"within {probe_ms} ms"
    )
    if policy == "always":
        return (
            "replaces the holder when both authenticated as the same provider identity "
            f'(`providers.takeover = "always"`); otherwise it {rule}'
        )
    return f'{rule} (`providers.takeover = "liveness"`)'


def header(data: GuideInput, title: str) -> list[str]:
    info = data.info
    lines = [f"# {title}", ""]
    lines.append(
        f"mcp-gateway {info['version']} at **{info['url']}**, running since {info['started_at']} "
        f"({info['uptime_s']:.0f} s)."
    )
    if info["insecure_lan"]:
        lines += ["", f"> **{info['warnings'][0]}.**"]
    if not info["security"]["loopback_only"] and not info["public_url"]:
        lines += [
            "",
            f"> The gateway is bound to `{info['host']}`; the URLs below use `{info['url']}`, which only works on "
            "this machine. From other machines use this machine's network address, or set `public_url` so these "
            "pages show it.",
        ]
    lines.append("")
    return lines


def slots_table(data: GuideInput, *, for_providers: bool = False) -> list[str]:
    if not data.providers:
        return ["No slots yet: no provider has connected and none is declared.", ""]
    url_key, heading = ("provider_url", "Provider URL") if for_providers else ("client_url", "Client URL")
    lines = [f"| Slot | State | Transport | Tools | In _all | {heading} |", "|---|---|---|---|---|---|"]
    for entry in data.providers:
        state = entry["state"] + (" (declared)" if entry["declared"] else "")
        lines.append(
            f"| `{entry['name']}` | {state} | {entry['transport'] or '-'} | {entry['tools']} | "
            f"{'yes' if entry['in_aggregate'] else 'no'} | {entry[url_key]} |"
        )
    lines.append("")
    return lines


def effective_configuration(data: GuideInput) -> list[str]:
    if not data.config_shown:
        return [
            "## Effective configuration",
            "",
            "Shown to operators of `_broker` only (docs/security-auth.md); `mcp-gateway config show` prints it "
            "on the gateway's machine.",
            "",
        ]
    return [
        "## Effective configuration",
        "",
        "Defaults, then the config file, then `MCP_GATEWAY_*` environment variables, then command-line flags "
        "(secrets masked):",
        "",
        code(pretty(data.config), "json"),
        "",
    ]


def slot_note(problem: Problem) -> str:
    return f" (slot `{problem.slot}`)" if problem.slot else ""


def host_port(url: str) -> str:
    rest = url.split("://", 1)[-1]
    return rest.split("/", 1)[0]
