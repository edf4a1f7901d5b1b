"""The `publish-provider` page: how a board, a stdio or remote server, an MQTT or serial device
becomes a slot of this gateway, with its URLs and credentials.
"""

from __future__ import annotations

from gateway.core.broker.diagnose_links import MQTT_ANONYMOUS_FIX, mqtt_anonymous_summary
from gateway.core.broker.guide_text import (
    GuideInput,
    code,
    example_slot,
    header,
    json_text,
    slot_path,
    slots_table,
    takeover_rule,
)
from gateway.core.jsonrpc import JsonObject


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
                code(json_text(status), "json"),
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
        "Every message is one frame, COBS of the JSON and its CRC-32 (little endian), ending in `0x00` "
        '(docs/protocol-serial-mqtt.md, "Frames"). A serial line has no URL, so the board names its slot in its '
        'first frame, and sends it again whenever the gateway sends `{"jsonrpc":"2.0","method":"broker/register"}`:',
        "",
        code(json_text(register), "json"),
        "",
        "Several slots on one board: envelopes, as on `/providers`. Heartbeats are JSON-RPC `ping` requests. A "
        "refusal comes back as an error with `id` null. pump-1 on MicroPython, `config.json`:",
        "",
        code(json_text(board), "json"),
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
    slot = example_slot(data, free=True)
    provider_base = urls["provider"].removesuffix("<slot>")
    register = {
        "jsonrpc": "2.0",
        "method": "notifications/register",
        "params": {
            "aggregate": True,
            "hello": {"device_id": "a4:cf:12:34:56:78", "firmware": "pump1 1.0.0", "schema": "<tools/list hash>"},
        },
    }
    lines = header(data, "Publish a provider")
    lines += [
        "A provider is an MCP server that connects **out** to the gateway over WebSocket. The gateway then opens "
        "the MCP session with it and serves it to every client under its slot name.",
        "",
        "## One slot per WebSocket: `/provider/<slot>`",
        "",
        f"Connect to `{provider_base}<slot>`, the slot name percent-encoded, e.g. "
        f"`{provider_base}{slot_path(slot)}`. Every text frame carries one JSON-RPC 2.0 message, no envelope. "
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
        code(json_text(register), "json"),
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
        code(
            json_text(
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
        f"- A second provider for a held slot {takeover_rule(providers['takeover'], providers['takeover_probe_ms'])}.",
        "",
        *_mqtt_section(data, slot),
        *_serial_section(data, slot),
        "## From Python (an SDK server)",
        "",
        code(
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
        *slots_table(data, for_providers=True),
    ]
    return "\n".join(lines)
