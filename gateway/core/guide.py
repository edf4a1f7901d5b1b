"""The `broker_guide` pages: Markdown written from the running configuration and live state.

Pure: the JSON of broker_info and providers_list, the current problems and the masked configuration
in, one Markdown page out. URLs, paths, limits and slot names are this gateway's real ones, so a
page can be pasted into a device sketch or a client config as it stands.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson

from gateway.core.diagnose import MQTT_ANONYMOUS_FIX, Problem, mqtt_anonymous_summary
from gateway.core.jsonrpc import JsonObject

TOPICS: dict[str, str] = {
    "index": "What this gateway is, its addresses, its slots, and where to read on",
    "publish-provider": "Connect a board or an MCP server as a provider (WebSocket paths, register frame, rules)",
    "connect-client": "Call a slot, _all or _broker from an MCP client (URLs, both protocol eras, examples)",
    "host-config": "Configuration snippets for MCP hosts (IDEs, agents) and hosts that only launch commands",
    "deploy": "Run, configure, secure, monitor and stop the gateway",
    "troubleshooting": "Every close code, close reason and error text the gateway sends, with its fix",
}


@dataclass(frozen=True)
class GuideInput:
    info: JsonObject  # broker_info
    providers: Sequence[JsonObject]  # providers_list()["providers"]
    problems: Sequence[Problem]
    config: JsonObject  # masked effective configuration


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def _pretty(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


def _code(text: str, language: str = "") -> str:
    return f"```{language}\n{text}\n```"


def _slot_path(name: str) -> str:
    return quote(name, safe="")


def _example_slot(data: GuideInput, *, free: bool = False) -> str:
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


def _takeover_rule(policy: str, probe_ms: int) -> str:
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


def _header(data: GuideInput, title: str) -> list[str]:
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


def _slots_table(data: GuideInput, *, for_providers: bool = False) -> list[str]:
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


def _effective_configuration(data: GuideInput) -> list[str]:
    return [
        "## Effective configuration",
        "",
        "Defaults, then the config file, then `MCP_GATEWAY_*` environment variables, then command-line flags "
        "(secrets masked):",
        "",
        _code(_pretty(data.config), "json"),
        "",
    ]


# -- pages ------------------------------------------------------------------------------------


def page_index(data: GuideInput) -> str:
    info = data.info
    urls = info["urls"]
    lines = _header(data, "mcp-gateway guide")
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
        *_slots_table(data),
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
        lines += [f"- **{p.severity}** `{p.id}`{_for(p)}: {p.summary}" for p in worst]
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
    lines += _effective_configuration(data)
    return "\n".join(lines)


def _for(problem: Problem) -> str:
    return f" (slot `{problem.slot}`)" if problem.slot else ""


def _discovery_note(info: JsonObject) -> list[str]:
    """How a board finds this gateway without a configured address: mDNS, when it is advertised."""
    mdns = info.get("mdns") or {}
    lines = ["## Finding the gateway", ""]
    if mdns.get("state") == "advertising":
        scheme = "wss" if info["tls"] else "ws"
        host = str(mdns["host"]).rstrip(".")
        lines += [
            f"This gateway advertises itself with mDNS as **{mdns['instance']}** (`_mcp-broker._tcp` and "
            f"`_mcp._tcp`, port {mdns['port']}, addresses {', '.join(mdns['addresses'])}). A board can dial "
            f"`{scheme}://{host}:{mdns['port']}/provider/<slot>` where its network stack resolves `.local` names, "
            "or browse `_mcp-broker._tcp` and read the TXT keys (`provider`, `providers`, `tls`, `pauth`). "
            "`mcp-gateway discover` lists it from any machine on the network. See docs/discovery.md.",
            "",
        ]
    else:
        reason = mdns.get("reason") or "mDNS is off (`[mdns] enabled = true`, or `run --mdns`, turns it on)"
        lines += [
            f"Boards cannot find this gateway by browsing: {reason}. Give each board the gateway's address "
            f"(`{info['urls']['provider']}` with a network address or name in place of the host).",
            "",
        ]
    return lines


def _provider_auth_note(mode: str) -> list[str]:
    """How a provider proves who it is here, when [providers.auth] asks it to (nothing otherwise)."""
    if mode == "none":
        return []
    which = (
        "the shared provider secret"
        if mode == "shared"
        else "its own secret, whose identity lists the slot names it may publish"
    )
    return [
        "## Provider secret",
        "",
        f"This gateway admits providers with {which}: send `X-Provider-Token: <secret>` (or "
        "`Authorization: Bearer <secret>`) on the WebSocket upgrade. Without it the upgrade gets HTTP 401; a "
        "name the identity may not publish gets HTTP 403 (or, on `/providers`, an error envelope -32001 "
        "`Provider registration forbidden`). pump-1 boards: `provider_token` in config.json; Python: "
        "`Publisher(..., token=secret)`.",
        "",
    ]


def _mqtt_section(data: GuideInput, slot: str) -> list[str]:
    """Boards and MCP over MQTT servers reaching this gateway through its brokers (docs/mqtt-broker.md)."""
    brokers: list[JsonObject] = list(data.info.get("mqtt") or [])
    lines = ["## Over MQTT", ""]
    if not brokers:
        return [
            *lines,
            "This gateway connects to no MQTT broker. Boards that speak MQTT (`umqtt.simple`) and MCP over MQTT "
            "servers reach it once `[[mqtt.brokers]]` names a broker (or `mcp-gateway run --mqtt mqtt://HOST:PORT`); "
            "see docs/mqtt-broker.md.",
            "",
        ]
    for broker in brokers:
        state = "connected" if broker.get("connected") else f"not connected ({broker.get('last_error') or 'yet'})"
        lines += [f"Broker `{broker['broker']}`: {state}.", ""]
        anonymous = broker.get("anonymous_clients") or {}
        if anonymous.get("accepted") is True:
            lines += [
                f"**This broker {mqtt_anonymous_summary(anonymous.get('board_topics_open'))}** "
                f"(`mqtt.broker_anonymous`). {MQTT_ANONYMOUS_FIX}",
                "",
            ]
        elif anonymous.get("accepted") is False:
            lines += [
                "This broker refuses clients without a username and password. Its ACL is the security boundary "
                "for these boards: anyone it lets publish on a board's topics can drive that board.",
                "",
            ]
        plain = broker.get("plain")
        if isinstance(plain, dict):
            prefix = plain["topic_prefix"]
            status = {
                "jsonrpc": "2.0",
                "method": "notifications/register",
                "params": {"slot": slot, "aggregate": True, "hello": {"device_id": "a4:cf:12:34:56:78"}},
            }
            lines += [
                f"Plain profile (MQTT 3.1.1 or 5, QoS 1): publish this **retained** on `{prefix}/{slot}/status` "
                f"with a last will of an **empty retained** message on the same topic, subscribe to "
                f"`{prefix}/{slot}/down` and answer every request there on `{prefix}/{slot}/up`, one JSON-RPC "
                "message per MQTT message:",
                "",
                _code(_json(status), "json"),
                "",
                "An empty status detaches the slot at once; publish the status again on every reconnect. Answer a "
                "repeated request id from a cache of your last answers instead of acting twice (QoS 1 redelivers). "
                "With the appliance's broker the board's MQTT username is its slot name.",
                "",
            ]
        mcp = broker.get("mcp")
        if isinstance(mcp, dict):
            filters = ", ".join(f"`$mcp-server/presence/+/{name_filter}`" for name_filter in mcp["server_filters"])
            lines += [
                f"MCP over MQTT ({mcp['spec']}, MQTT 5): the gateway discovers servers on {filters} and bridges each "
                "server-name into a slot (its last level unless `slot_naming` says otherwise). Publish "
                "`notifications/server/online` retained on `$mcp-server/presence/<server-id>/<server-name>` with an "
                "empty retained will there; the gateway's `initialize` arrives on "
                "`$mcp-server/<server-id>/<server-name>` and names its client id in the `MCP-MQTT-CLIENT-ID` user "
                "property.",
                "",
            ]
    return lines


def _serial_section(data: GuideInput, slot: str) -> list[str]:
    """Boards on a UART or USB cable: the ports, hot-plug, and what a board sends (docs/device-serial.md)."""
    serial: JsonObject = data.info.get("serial") or {}
    ports: list[JsonObject] = list(serial.get("ports") or [])
    hotplug: JsonObject = serial.get("hotplug") or {}
    settings: JsonObject = (data.config.get("serial") or {}).get("hotplug") or {}
    lines = ["## Over a serial line", ""]
    if not ports and not hotplug.get("enabled"):
        return [
            *lines,
            "This gateway serves no serial port. A board on a UART or USB cable reaches it once `[[serial.ports]]` "
            "names the port (or `mcp-gateway run --serial /dev/ttyUSB0@115200`), or once `[serial.hotplug]` "
            "`enabled = true` opens USB boards as they are plugged in; see docs/device-serial.md.",
            "",
        ]
    if ports:
        lines += ["| Port | Source | Baud | State | Slots allowed | Slots now |", "|---|---|---|---|---|---|"]
        for port in ports:
            allowed = ", ".join(f"`{pattern}`" for pattern in port.get("slots_allowed") or [])
            now = ", ".join(f"`{name}`" for name in port.get("slots") or []) or "-"
            state = str(port.get("state"))
            if port.get("last_error") and state != "open":
                state += f" ({port['last_error']})"
            lines.append(f"| `{port['path']}` | {port['source']} | {port['baud']} | {state} | {allowed} | {now} |")
        lines.append("")
    if hotplug.get("enabled"):
        devices = ", ".join(f"`{entry}`" for entry in hotplug.get("vid_pid") or [])
        allowed = ", ".join(f"`{pattern}`" for pattern in settings.get("slots") or ["*"])
        lines += [
            f"USB hot-plug is on (events from `{hotplug.get('backend')}`): a USB serial device with VID:PID {devices} "
            f"is opened at {settings.get('baud')} baud as it is plugged in, and let go as it is pulled out; a board "
            f"on it may publish {allowed}.",
            "",
        ]
    else:
        lines += ["USB hot-plug is off (`[serial.hotplug] enabled = true` turns it on).", ""]
    baud = ports[0]["baud"] if ports else settings.get("baud")
    register = {
        "jsonrpc": "2.0",
        "method": "notifications/register",
        "params": {"slot": slot, "aggregate": True, "hello": {"device_id": "a4:cf:12:34:56:78"}},
    }
    board = {"transport": "serial", "slot": slot, "serial": {"uart": 2, "baud": baud, "tx": 17, "rx": 16}}
    lines += [
        "Wiring: the board's TX to the adapter's RX, RX to TX, GND to GND, 3.3 V logic; DTR and RTS stay "
        "unconnected (the gateway never asserts them, so opening a port never resets a board). On an ESP32 keep "
        "the data off UART0, which carries the REPL and the boot log: UART2 on GPIO17 (tx) and GPIO16 (rx). "
        f"Both ends at {baud} baud.",
        "",
        "Every message is one frame, COBS of the JSON and its CRC-32 (little endian), ending in `0x00` (WIRE.md "
        "§4). A serial line has no URL, so the board names its slot in its first frame, and sends it again "
        'whenever the gateway sends `{"jsonrpc":"2.0","method":"broker/register"}`:',
        "",
        _code(_json(register), "json"),
        "",
        "Several slots on one board: envelopes, as on `/providers`. Heartbeats are JSON-RPC `ping` requests. A "
        "refusal comes back as an error with `id` null. pump-1 on MicroPython, `config.json`:",
        "",
        _code(_json(board), "json"),
        "",
        "Wiring, UARTs, baud rates and the frame format with worked examples: docs/device-serial.md.",
        "",
    ]
    return lines


def page_publish_provider(data: GuideInput) -> str:
    info = data.info
    urls = info["urls"]
    config = data.config
    limits = config["limits"]
    providers = config["providers"]
    slot = _example_slot(data, free=True)
    provider_base = urls["provider"].removesuffix("<slot>")
    register = {
        "jsonrpc": "2.0",
        "method": "notifications/register",
        "params": {
            "aggregate": True,
            "hello": {"device_id": "a4:cf:12:34:56:78", "firmware": "pump1 1.0.0", "schema": "<tools/list hash>"},
        },
    }
    lines = _header(data, "Publish a provider")
    lines += [
        "A provider is an MCP server that connects **out** to the gateway over WebSocket. The gateway then opens "
        "the MCP session with it and serves it to every client under its slot name.",
        "",
        "## One slot per WebSocket: `/provider/<slot>`",
        "",
        f"Connect to `{provider_base}<slot>`, the slot name percent-encoded, e.g. "
        f"`{provider_base}{_slot_path(slot)}`. Every text frame carries one JSON-RPC 2.0 message, no envelope. "
        "Slot names are 1 to 64 bytes of UTF-8; names starting with `_` are reserved."
        + (
            " Only the slots declared in the configuration are accepted here."
            if config["slots"]["only_declared"]
            else ""
        ),
        "",
        "To join `_all` and describe the device, send this as the **first** frame (it is consumed, not "
        "forwarded; without it the slot stays out of `_all`):",
        "",
        _code(_json(register), "json"),
        "",
        "`hello` is optional: `device_id` (stable, e.g. the MAC), `firmware` (name and version), `schema` (hash "
        'of the tool list; a change makes the gateway re-list), and `"ids": "numeric"` for a board that '
        "needs integer request ids. `provider_status` shows it.",
        "",
        f"The gateway's `initialize` waits for the first frame, at most {providers['register_wait_ms']} ms "
        "(`providers.register_wait_ms`), so the hello applies from the very first request: send the register "
        "frame at once, or nothing and get `initialize` after that wait.",
        "",
        *_provider_auth_note(info["security"].get("provider_auth", "none")),
        *_discovery_note(info),
        "## Many slots per WebSocket: `/providers`",
        "",
        f"Connect to `{urls['providers']}`. Every frame, both ways, is an envelope "
        '`{"provider":"<slot>","payload":<JSON-RPC>}`. Register each slot with one envelope (or just start '
        "sending; a name is claimed the first time it appears):",
        "",
        _code(
            _json(
                {
                    "provider": slot,
                    "payload": {"jsonrpc": "2.0", "method": "notifications/register", "params": {"aggregate": True}},
                }
            ),
            "json",
        ),
        "",
        'A refused slot gets an error envelope with `"id": null` (code -32000, or -32001 when the name is not '
        "declared); the socket stays open for its other slots.",
        "",
        "## What the gateway expects",
        "",
        f"- On connect it sends `initialize`, then `notifications/initialized`, then `tools/list` (following "
        f"`nextCursor`, at most {providers['max_tools_pages']} pages). Both answers are due within "
        f"{providers['initialize_timeout_ms']} ms (`providers.initialize_timeout_ms`), else the link is closed "
        "with 1008.",
        f'- Request ids are gateway-owned: `"brk-<n>"` strings (id style `{providers["id_style"]}` by '
        'default), or integers for slots with `id_style = "numeric"` or a hello with `"ids": "numeric"`. '
        "Echo each id exactly, type included.",
        f"- Every request must be answered within {providers['request_timeout_ms']} ms "
        "(`providers.request_timeout_ms`, per slot and per tool under `[slots.declared.<slot>]`); after that "
        "the client gets an error and the provider a `notifications/cancelled`.",
        f"- Heartbeat: a WebSocket ping every {providers['heartbeat_interval_s']:g} s. Answer with a pong (most "
        "WebSocket libraries do it for you); a provider that has not answered by the next sweep is dropped with "
        "1008.",
        f"- Messages larger than {limits['max_frame_bytes']} bytes (`limits.max_frame_bytes`) close the link "
        f"with 1009. At most {limits['max_pending_per_slot']} requests are in flight towards one slot.",
        "- Send `notifications/tools/list_changed` when the tool list changes; the gateway re-lists and tells "
        "clients. Requests the provider sends: `ping` is answered `{}`; `sampling/createMessage`, "
        "`elicitation/create` and `roots/list` go to the client whose request caused them (name it with "
        '`_meta["io.github.mcp-gateway/relatedRequest"]` = the gateway id of that request when several are '
        "pending), if it declared the capability; anything else gets -32601.",
        f"- A second provider for a held slot {_takeover_rule(providers['takeover'], providers['takeover_probe_ms'])}.",
        "",
        *_mqtt_section(data, slot),
        *_serial_section(data, slot),
        "## From Python (an SDK server)",
        "",
        _code(
            "import asyncio\n\n"
            "from mcp.server.mcpserver import MCPServer\n\n"
            "from gateway.publish import Publisher\n\n"
            'server = MCPServer("pump")\n\n\n'
            "@server.tool()\n"
            "def read_flow() -> float:\n"
            '    """Current flow in l/min."""\n'
            "    return 12.5\n\n\n"
            f'asyncio.run(Publisher(server, "{info["url"]}", "{slot}", aggregate=True).run())',
            "python",
        ),
        "",
        "`Publisher` reconnects with jittered back-off; `MultiplexedPublisher({slot: server, ...}, url)` "
        "publishes several servers over `/providers`.",
        "",
        "## Slots on this gateway",
        "",
        *_slots_table(data, for_providers=True),
    ]
    return "\n".join(lines)


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
    slot = _example_slot(data)
    slot_url = urls["client"].replace("<slot>", _slot_path(slot))
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
    lines = _header(data, "Connect a client")
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
        _code(_python_client(slot_url, authenticated), "python"),
        "",
        "## From a shell",
        "",
        _code(
            ("export MCP_GATEWAY_TOKEN=<token>   # or --token-file FILE on each command\n" if authenticated else "")
            + f"mcp-gateway slots --url {info['url']}\n"
            f"mcp-gateway call {shlex.quote(slot)} <tool> key=value --url {info['url']}\n"
            f"npx @modelcontextprotocol/inspector --cli {slot_url} --transport http --method tools/list",
            "sh",
        ),
        "",
        "Raw HTTP, session era (keep the `Mcp-Session-Id` response header for later requests, end with DELETE):",
        "",
        _code(
            f"curl -i {slot_url} -H 'Content-Type: application/json' "
            "-H 'Accept: application/json, text/event-stream' \\\n"
            + ('  -H "Authorization: Bearer $MCP_GATEWAY_TOKEN" \\\n' if authenticated else "")
            + f"  -d '{_json(initialize)}'",
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
    lines += ["", "## Slots now", "", *_slots_table(data)]
    return "\n".join(lines)


def page_host_config(data: GuideInput) -> str:
    info = data.info
    urls = info["urls"]
    slot = _example_slot(data)
    slot_url = urls["client"].replace("<slot>", _slot_path(slot))
    lines = _header(data, "Configure an MCP host")
    lines += [
        "Give the host one entry per slot it should see, or one entry for `_all`. The URLs are this gateway's.",
        "",
        "## VS Code (`.vscode/mcp.json`)",
        "",
        _code(
            _pretty(
                {"servers": {slot: {"type": "http", "url": slot_url}, "plant": {"type": "http", "url": urls["all"]}}}
            ),
            "json",
        ),
        "",
        "## Cursor (`~/.cursor/mcp.json`) and other hosts with an `mcpServers` map of URLs",
        "",
        _code(_pretty({"mcpServers": {slot: {"url": slot_url}, "gateway": {"url": urls["broker"]}}}), "json"),
        "",
        "## Claude Code",
        "",
        _code(f"claude mcp add --transport http {shlex.quote(slot)} {slot_url}", "sh"),
        "",
        "## Hosts that only launch commands (stdio)",
        "",
        "Some hosts can only start an MCP server as a child process and talk to it over stdin/stdout. A "
        "`mcp-gateway stdio` bridge for them is planned but is not part of this version. Until it is, use a host "
        "that speaks Streamable HTTP (any of the above), or a third-party stdio-to-HTTP bridge (for example the "
        f"npm package `mcp-remote`) pointed at the slot URL `{slot_url}`.",
        "",
        "## Which entry to add",
        "",
        f"- One device: `{urls['client']}` with its slot name.",
        f"- Everything that opted in, in one list: `{urls['all']}`.",
        f"- Ask the gateway what is wrong: `{urls['broker']}` (tools `broker_diagnose`, `provider_status`).",
        "",
        *_slots_table(data),
    ]
    return "\n".join(lines)


def page_deploy(data: GuideInput) -> str:
    info = data.info
    urls = info["urls"]
    limits = data.config["limits"]
    lines = _header(data, "Deploy and operate")
    lines += [
        "## Run",
        "",
        _code(
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
        _code(
            "scrape_configs:\n"
            "  - job_name: mcp-gateway\n"
            "    static_configs:\n"
            f'      - targets: ["{_host_port(info["url"])}"]',
            "yaml",
        ),
        "",
        "## As a systemd service",
        "",
        _code(
            "[Unit]\n"
            "Description=mcp-gateway\n"
            "After=network-online.target\n"
            "Wants=network-online.target\n\n"
            "[Service]\n"
            "ExecStart=/usr/local/bin/mcp-gateway run --config /etc/mcp-gateway/gateway.toml\n"
            "Restart=on-failure\n\n"
            "[Install]\n"
            "WantedBy=multi-user.target",
            "ini",
        ),
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
    lines += _effective_configuration(data)
    return "\n".join(lines)


def _host_port(url: str) -> str:
    rest = url.split("://", 1)[-1]
    return rest.split("/", 1)[0]


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
        "close 1008 (error envelope -32000 on /providers)",
        '`Provider "<slot>" is managed by a stdio upstream` / `... by a remote upstream`',
        "The gateway itself runs or reaches this slot's server ([[upstreams.stdio]] / --stdio, "
        "[[upstreams.remote]] / --remote): give the device another slot name, or remove the upstream from the "
        "configuration.",
    ),
    (
        "close 1008",
        "`Replaced: this link missed its heartbeat and a new provider claimed the slot` / `Replaced by a newer "
        "connection of the same provider identity`",
        "Expected after a reboot or network change; if the old link was actually alive, two devices share a slot name.",
    ),
    (
        "close 1008",
        "`No answer to heartbeat ping within {heartbeat}s; reconnect`",
        "The provider did not answer WebSocket pings. Keep servicing the socket while working; check Wi-Fi; "
        "raise `providers.heartbeat_interval_s` for sleepy devices.",
    ),
    (
        "close 1008",
        "`Provider must answer initialize and tools/list: <reason>`",
        "Answer `initialize` and `tools/list` within {init_timeout} ms (`providers.initialize_timeout_ms`); the "
        "reason says which failed.",
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
        "per-tool `tool_timeouts_ms` for slow tools.",
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
        "-32603 on subscriptions/listen",
        "`Subscription limit reached ({max_subscriptions}); raise limits.max_subscriptions`",
        "Close unused listen streams, or raise `limits.max_subscriptions`.",
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
        "init_timeout": providers["initialize_timeout_ms"],
        "max_frame": limits["max_frame_bytes"],
        "max_pending_slot": limits["max_pending_per_slot"],
        "max_pending_client": limits["max_pending_per_client"],
        "idle": f"{limits['session_idle_timeout_s']:g}",
        "max_sessions": limits["max_sessions"],
        "max_body": limits["max_body_bytes"],
        "max_subscriptions": limits["max_subscriptions"],
        "notification_queue": limits["notification_queue"],
    }

    def table(rows: list[tuple[str, str, str]], first: str) -> list[str]:
        out = [f"| {first} | Text | Fix |", "|---|---|---|"]
        out += [f"| {a} | {b.format(**values)} | {c.format(**values)} |" for a, b, c in rows]
        return [*out, ""]

    lines = _header(data, "Troubleshooting")
    lines += ["## Findings now", ""]
    if data.problems:
        for problem in data.problems:
            lines.append(f"- **{problem.severity}** `{problem.id}`{_for(problem)}: {problem.summary}.  ")
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
