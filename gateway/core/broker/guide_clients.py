"""The `connect-client`, `host-config` and `deploy` pages: how agents, IDEs and desktop hosts reach
this gateway, and how it is run for them.
"""

from __future__ import annotations

import shlex

from gateway.core.broker.guide_text import (
    GuideInput,
    code,
    effective_configuration,
    example_slot,
    header,
    host_port,
    json_text,
    pretty,
    slot_path,
    slots_table,
)


def _python_client(slot_url: str, authenticated: bool) -> str:
    if not authenticated:
        return (
            "from mcp import Client\n\n"
            f'async with Client("{slot_url}") as client:\n'
            "    tools = await client.list_tools()\n"
            '    result = await client.call_tool("<tool>", {})'
        )
    return (
        "import os\n\n"
        "import httpx2\n"
        "from mcp import Client\n"
        "from mcp.client.streamable_http import streamable_http_client\n\n"
        'token = os.environ["MCP_GATEWAY_TOKEN"]\n'
        'headers = {"Authorization": f"Bearer {token}"}\n'
        "# A long read timeout: answers may stream for a while (SSE).\n"
        "http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300))\n"
        f'async with Client(streamable_http_client("{slot_url}", http_client=http)) as client:\n'
        "    tools = await client.list_tools()\n"
        '    result = await client.call_tool("<tool>", {})'
    )


def _client_authentication(data: GuideInput, slot_url: str) -> list[str]:
    """How a client proves who it is here (nothing when the gateway asks no authentication)."""
    auth = data.info["security"].get("auth") or {}
    if not any(auth.values()):
        return []
    lines = [
        "## Authentication",
        "",
        "Every client request needs a token in the `Authorization` header (never in the URL): "
        "`Authorization: Bearer <token>`. Without one the answer is HTTP 401 with a `WWW-Authenticate` header; "
        "a token without the scopes an endpoint needs gets 403 `insufficient_scope`. A session belongs to the "
        "caller that opened it. The gateway never passes a client's token on to a provider.",
        "",
    ]
    if auth.get("static_tokens"):
        lines.append(
            f"- Static tokens ({auth['static_tokens']} configured): an operator creates one with "
            "`mcp-gateway token create NAME --scope <scope>` and hands it over once. From another machine they "
            + (
                "work because the listener serves TLS."
                if data.info.get("tls")
                else "work only once TLS is configured; until then only from this machine."
            )
        )
    if auth.get("oauth"):
        lines.append(
            f"- OAuth 2.1 access tokens from `{auth['oauth']}`, whose audience (`aud`, RFC 8707 `resource`) is the "
            f"endpoint's own URL, e.g. `{slot_url}`. Clients discover the authorization server from the RFC 9728 "
            'metadata named in the 401\'s `WWW-Authenticate: Bearer resource_metadata="..."`.'
        )
    if auth.get("hmac_keys"):
        lines.append(f"- Signed requests (HMAC-SHA256, {auth['hmac_keys']} keys), used by `mcp-gateway stdio`.")
    required = (data.config.get("auth") or {}).get("required_scopes") or {}
    if required:
        rules = ", ".join(f"`{key}`: {' '.join(scopes) or '(none)'}" for key, scopes in required.items())
        lines.append(f"- Scopes required (exact slot name first, else the first matching pattern): {rules}.")
    lines.append("- `/metrics` needs the scope `metrics`.")
    lines.append("")
    return lines


def page_connect_client(data: GuideInput) -> str:
    info = data.info
    urls = info["urls"]
    slot = example_slot(data)
    slot_url = urls["client"].replace("<slot>", slot_path(slot))
    versions = info["protocol_versions"]
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": versions["session"][-1],
            "capabilities": {},
            "clientInfo": {"name": "curl", "version": "0"},
        },
    }
    auth = info["security"].get("auth") or {}
    authenticated = any(auth.values())
    lines = header(data, "Connect a client")
    lines += [
        "Every slot is an MCP server at its own URL, spoken over **MCP Streamable HTTP**:",
        "",
        f"- one slot: `{urls['client']}`, e.g. `{slot_url}`",
        f"- every opted-in slot at once: `{urls['all']}` (tools named `<slot>-<tool>`; the list changes as "
        "providers come and go and clients get `notifications/tools/list_changed`)",
        f"- this gateway itself: `{urls['broker']}`",
        f"- tool groups: `{urls['mcp']}` (every enabled group, tools named "
        f"`<slot>{info['groups']['separator']}<tool>` as the original MCP bridge named them, plus `guidance` and "
        f"`search` to find the right tool) and `{urls['mcp']}/<group>` (one group); `{urls['groups']}` and "
        f"`{urls['mcp_servers']}` list groups and slots as JSON",
        "",
        "Both protocol eras work on the same URL: the session era "
        f"({', '.join(versions['session'])}: `initialize`, then the `Mcp-Session-Id` header) and the stateless "
        f"era ({', '.join(versions['stateless'])}: no initialize, version and capabilities in `_meta` and "
        "headers). The `MCP-Protocol-Version` header picks the era. Older clients can use the legacy HTTP+SSE "
        f"transport (`{urls['sse']}`, session era) and WebSocket clients `{urls['client_websocket']}` (one "
        "JSON-RPC message per text frame, `initialize` first).",
        "",
        "The gateway answers `initialize` itself from what the provider told it, so a client can connect while "
        'its provider is away; calls then fail with `Provider "<slot>" not connected` until it is back.',
        "",
        *_client_authentication(data, slot_url),
        "## Python (official SDK)",
        "",
        code(_python_client(slot_url, authenticated), "python"),
        "",
        "## From a shell",
        "",
        code(
            ("export MCP_GATEWAY_TOKEN=<token>   # or --token-file FILE on each command\n" if authenticated else "")
            + f"mcp-gateway slots --url {info['url']}\n"
            f"mcp-gateway call {shlex.quote(slot)} <tool> key=value --url {info['url']}\n"
            f"npx @modelcontextprotocol/inspector --cli {slot_url} --transport http --method tools/list",
            "sh",
        ),
        "",
        "Raw HTTP, session era (keep the `Mcp-Session-Id` response header for later requests, end with DELETE):",
        "",
        code(
            f"curl -i {slot_url} -H 'Content-Type: application/json' "
            "-H 'Accept: application/json, text/event-stream' \\\n"
            + ('  -H "Authorization: Bearer $MCP_GATEWAY_TOKEN" \\\n' if authenticated else "")
            + f"  -d '{json_text(initialize)}'",
            "sh",
        ),
        "",
        "## Browsers",
        "",
    ]
    origins = info["security"]["allowed_origins"]
    if origins:
        lines.append(
            "Requests with an `Origin` header are accepted from: " + ", ".join(f"`{o}`" for o in origins) + "."
        )
    else:
        lines.append(
            "No browser origin is allowed: a request with an `Origin` header gets HTTP 403 "
            "`origin_not_allowed`. Add the client's origin to `allowed_origins` to use a browser client."
        )
    lines += ["", "## Slots now", "", *slots_table(data)]
    return "\n".join(lines)


def page_host_config(data: GuideInput) -> str:
    info = data.info
    urls = info["urls"]
    slot = example_slot(data)
    slot_url = urls["client"].replace("<slot>", slot_path(slot))
    lines = header(data, "Configure an MCP host")
    lines += [
        "Give the host one entry per slot it should see, or one entry for `_all`. The URLs are this gateway's.",
        "",
        "## VS Code (`.vscode/mcp.json`)",
        "",
        code(
            pretty(
                {"servers": {slot: {"type": "http", "url": slot_url}, "plant": {"type": "http", "url": urls["all"]}}}
            ),
            "json",
        ),
        "",
        "## Cursor (`~/.cursor/mcp.json`) and other hosts with an `mcpServers` map of URLs",
        "",
        code(pretty({"mcpServers": {slot: {"url": slot_url}, "gateway": {"url": urls["broker"]}}}), "json"),
        "",
        "## Claude Code",
        "",
        code(f"claude mcp add --transport http {shlex.quote(slot)} {slot_url}", "sh"),
        "",
        "## Hosts that only launch commands (stdio)",
        "",
        "Some hosts can only start an MCP server as a child process and talk to it over stdin/stdout. "
        "`mcp-gateway stdio` is that child: installed on the host's machine, it relays to this gateway "
        "(`--slot` one slot, without it `_all`; a token in `MCP_GATEWAY_TOKEN` when the gateway asks for one, "
        "`--ca-file` for a self-signed TLS certificate):",
        "",
        code(
            pretty(
                {
                    "mcpServers": {
                        slot: {"command": "mcp-gateway", "args": ["stdio", "--slot", slot, "--url", info["url"]]},
                        "plant": {"command": "mcp-gateway", "args": ["stdio", "--url", info["url"]]},
                    }
                }
            ),
            "json",
        ),
        "",
        "## Which entry to add",
        "",
        f"- One device: `{urls['client']}` with its slot name.",
        f"- Everything that opted in, in one list: `{urls['all']}`.",
        f"- Ask the gateway what is wrong: `{urls['broker']}` (tools `broker_diagnose`, `provider_status`).",
        "",
        *slots_table(data),
    ]
    return "\n".join(lines)


def page_deploy(data: GuideInput) -> str:
    info = data.info
    urls = info["urls"]
    limits = data.config["limits"]
    lines = header(data, "Deploy and operate")
    lines += [
        "## Run",
        "",
        code(
            "mcp-gateway config check --config /etc/mcp-gateway/gateway.toml\n"
            "mcp-gateway run --config /etc/mcp-gateway/gateway.toml",
            "sh",
        ),
        "",
        "`run` takes `--host`, `--port`, `--insecure-lan` and `--log-level`. Settings come from defaults, then "
        "the TOML file (`--config` or `$MCP_GATEWAY_CONFIG`), then environment variables `MCP_GATEWAY_<KEY>` "
        "(nested keys joined with `__`, e.g. `MCP_GATEWAY_LIMITS__MAX_SESSIONS=2048`), then flags. An unknown "
        "key or an invalid value stops the gateway with a message naming it. `mcp-gateway config show` prints "
        "the effective configuration.",
        "",
        "## Security posture",
        "",
    ]
    if info["security"]["loopback_only"]:
        lines.append(
            f"Bound to `{info['host']}` (loopback): only this machine can connect. To serve boards on "
            "the network, bind a LAN address; without client and provider authentication that needs `--insecure-lan`."
        )
    elif info["insecure_lan"]:
        lines.append(
            f"**Bound to `{info['host']}` with `--insecure-lan`: {info['warnings'][0]}.** Every log line says so. "
            "Configure what is off (`[auth]` for clients, `[providers.auth]` for providers), restrict the network "
            "with a firewall, or bind 127.0.0.1 behind an authenticating reverse proxy."
        )
    else:
        lines.append(f"Bound to `{info['host']}`.")
    lines += [
        "",
        "## Health, readiness, metrics",
        "",
        f'- `{urls["healthz"]}`: 200 `{{"status":"alive"}}` while the process runs.',
        f'- `{urls["readyz"]}`: 200 `{{"status":"ready"}}` once listening with its configuration loaded, '
        "503 while starting or stopping.",
        f"- `{urls['metrics']}`: Prometheus text format (names start with `mcpgw_`; see docs/operations.md).",
        "",
        code(
            "scrape_configs:\n"
            "  - job_name: mcp-gateway\n"
            "    static_configs:\n"
            f'      - targets: ["{host_port(info["url"])}"]',
            "yaml",
        ),
        "",
        "## As a systemd service",
        "",
        code(
            "[Unit]\n"
            "Description=mcp-gateway\n"
            "After=network-online.target\n"
            "Wants=network-online.target\n\n"
            "[Service]\n"
            "Type=notify\n"
            "ExecStart=/usr/local/bin/mcp-gateway run --config /etc/mcp-gateway/mcp-gateway.toml\n"
            "ExecReload=/bin/kill -HUP $MAINPID\n"
            "WatchdogSec=30\n"
            "Restart=on-failure\n\n"
            "[Install]\n"
            "WantedBy=multi-user.target",
            "ini",
        ),
        "",
        "The gateway says `READY=1` once it listens and its upstreams made a first attempt, and pings the "
        "watchdog from its event loop. The appliance's hardened unit is `image/systemd/mcp-gateway.service` "
        '(docs/operations.md, "systemd").',
        "",
        "## Logs and shutdown",
        "",
        "Logs go to stderr: readable text on a terminal, one JSON object per line otherwise "
        "(`logging.format`). At most one warning per slot per kind of fault; counters carry the rest.",
        "",
        "SIGTERM or SIGINT: the gateway stops accepting, answers every pending request with "
        '`Provider "<slot>" disconnected: the gateway is shutting down`, closes provider links with 1001 '
        "`Gateway shutting down`, ends client streams, and exits 0.",
        "",
        "## Bounds in force",
        "",
        "| Limit | Value |",
        "|---|---|",
        *[f"| `limits.{key}` | {value} |" for key, value in limits.items()],
        "",
    ]
    lines += effective_configuration(data)
    return "\n".join(lines)
