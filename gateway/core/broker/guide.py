"""The `broker_guide` pages: Markdown written from the running configuration and live state.

Pure: the JSON of broker_info and providers_list, the current problems and the masked configuration
in, one Markdown page out. URLs, paths, limits and slot names are this gateway's real ones, so a
page can be pasted into a device sketch or a client config as it stands.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.core.broker.guide_clients import page_connect_client, page_deploy, page_host_config
from gateway.core.broker.guide_providers import page_publish_provider
from gateway.core.broker.guide_text import GuideInput, effective_configuration, header, slot_note, slots_table
from gateway.core.broker.guide_troubleshooting import page_troubleshooting

TOPICS: dict[str, str] = {
    "index": "What this gateway is, its addresses, its slots, and where to read on",
    "publish-provider": "Connect a board or an MCP server as a provider (WebSocket paths, register frame, rules)",
    "connect-client": "Call a slot, _all or _broker from an MCP client (URLs, both protocol eras, examples)",
    "host-config": "Configuration snippets for MCP hosts (IDEs, agents) and hosts that only launch commands",
    "deploy": "Run, configure, secure, monitor and stop the gateway",
    "troubleshooting": "Every close code, close reason and error text the gateway sends, with its fix",
}


# -- pages ------------------------------------------------------------------------------------


def page_index(data: GuideInput) -> str:
    info = data.info
    urls = info["urls"]
    lines = header(data, "mcp-gateway guide")
    lines += [
        "This gateway puts MCP servers (ESP32 boards, simulators, SDK servers) behind one MCP endpoint. Each "
        "provider connects out to the gateway and is reachable under a **slot** name; clients call a slot, "
        "`_all` (every provider that opted in, tools named `<slot>-<tool>`) or `_broker` (this introspection "
        "server).",
        "",
        "## Addresses",
        "",
        "| What | URL |",
        "|---|---|",
        f"| Provider, one slot per WebSocket | `{urls['provider']}` |",
        f"| Provider, many slots per WebSocket (envelopes) | `{urls['providers']}` |",
        f"| Client, one slot (MCP Streamable HTTP) | `{urls['client']}` |",
        f"| Client, one slot (legacy HTTP+SSE; raw WebSocket) | `{urls['sse']}`; `{urls['client_websocket']}` |",
        f"| Client, aggregate of opted-in slots | `{urls['all']}` |",
        f"| Client, this introspection server | `{urls['broker']}` |",
        f"| Client, tool groups (`<slot>{info['groups']['separator']}<tool>`, guidance, search) | `{urls['mcp']}`, "
        f"`{urls['mcp']}/<group>` |",
        f"| Liveness / readiness | `{urls['healthz']}`, `{urls['readyz']}` |",
        f"| Prometheus metrics | `{urls['metrics']}` |",
        "",
        "## Slots now",
        "",
        *slots_table(data),
    ]
    counts = info["counts"]
    lines += [
        f"{counts['connected']} of {counts['slots']} slots connected, {counts['aggregate_members']} in `_all` "
        f"({counts['aggregate_tools']} tools), {counts['sessions']} client sessions.",
        "",
        "## Findings",
        "",
    ]
    worst = [p for p in data.problems if p.severity != "info"]
    if worst:
        lines += [f"- **{p.severity}** `{p.id}`{slot_note(p)}: {p.summary}" for p in worst]
        lines += ["", "Call `broker_diagnose` for evidence and fixes."]
    else:
        lines.append("No errors or warnings. `broker_diagnose` lists informational findings too.")
    lines += ["", "## Topics", ""]
    lines += [
        f'- `{topic}`: {text}. Tool `broker_guide {{"topic": "{topic}"}}`, resource `broker://guide/{topic}`.'
        for topic, text in TOPICS.items()
    ]
    lines += [
        "",
        "## Tools of `_broker`",
        "",
        "- `broker_info`: version, uptime, addresses, security posture, counts, limits.",
        "- `providers_list`: every slot with its state.",
        '- `provider_status {"name": "<slot>"}`: one slot in detail (transport, connected since, pending, '
        "hello, tool-list hash, heartbeat misses, counters, last disconnect).",
        '- `broker_diagnose {"slot": "<slot>"?}`: problems with evidence and a fix.',
        '- `broker_guide {"topic": "<topic>"?}`: these pages.',
        "",
        "The same data is readable as resources: `broker://info`, `broker://providers`, "
        "`broker://providers/{name}`, `broker://diagnose`, `broker://guide/{topic}`.",
        "",
    ]
    lines += effective_configuration(data)
    return "\n".join(lines)


PAGES: dict[str, Callable[[GuideInput], str]] = {
    "index": page_index,
    "publish-provider": page_publish_provider,
    "connect-client": page_connect_client,
    "host-config": page_host_config,
    "deploy": page_deploy,
    "troubleshooting": page_troubleshooting,
}


def render(topic: str, data: GuideInput) -> str:
    """One guide page; `topic` must be a key of TOPICS."""
    return PAGES[topic](data)
