"""A small MCP client for technicians (`mcp-gateway slots`, `tools`, `call`), on aiohttp.

It speaks the stateless era (2026-07-28) to `/<slot>/mcp` of a running gateway: one POST per request,
no session, so a command works also while `limits.max_sessions` is full, and costs no initialize or
DELETE. A server that does not speak that era (_refuses_stateless_era) is spoken to in the session era:
initialize, the requests, DELETE.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import unicodedata
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import orjson

from gateway import __version__
from gateway.client_answers import (
    EXCERPT_CHARS,
    MAX_ANSWER_BYTES,
    MAX_ANSWER_BYTES_LIMIT,
    bounded_body,
    last_response_event,
)
from gateway.client_answers import GatewayCallError as GatewayCallError  # noqa: PLC0414 (re-exported: the CLI, flash)
from gateway.core import eras, stateless
from gateway.core.governed import CLAMPED_META_KEY
from gateway.core.jsonrpc import HEADER_MISMATCH, INVALID_PARAMS, METHOD_NOT_FOUND, UNSUPPORTED_PROTOCOL_VERSION
from gateway.core.names import BROKER_SLOT
from gateway.core.policy_interface import REFUSED_META_KEY
from gateway.core.terminal_text import terminal_text as terminal_text  # noqa: PLC0414 (re-exported: the CLI, flash)
from gateway.core.versions import LATEST_HANDSHAKE
from gateway.tls_probe import speaks_tls

if TYPE_CHECKING:
    import aiohttp


TOKEN_VARIABLE = "MCP_GATEWAY_TOKEN"
"""Where the commands read a client token when --token-file is not given (gateway.config.ENV_CLIENT_TOKEN,
which this module may not import)."""


_OBSERVE_TOOLS = frozenset(
    {"broker_info", "providers_list", "provider_status", "broker_diagnose", "broker_guide", "broker_approvals"}
)
"""The `_broker` tools that are read-only (tool.observe under a policy); the others are actions (tool.control)."""
_POLICY_ONLY_TOOLS = frozenset({"broker_approvals", "broker_approve", "broker_audit_recent"})
"""The governance `_broker` tools (gateway/core/broker/governed_tools.py), listed only with a [policy]."""
_LISTED_WITH_A_POLICY = _POLICY_ONLY_TOOLS | {"broker_policy_reload"}
"""Those and `policy reload`'s tool (POLICY_RELOAD in gateway/core/broker/server.py): the ones the hint
says exist only on a gateway with a [policy]."""


def broker_tool_hint(tool: str) -> str:
    """Why a `_broker` tool an operator command calls may be reported unknown, and what grants it.

    The gateway hides a tool a caller may not call (so names cannot be probed): to the command that is
    the same answer as a tool that does not exist, so it names both causes (docs/governance.md)."""
    if tool == "broker_audit_recent":
        grant = "broker.audit.read"
    else:
        grant = f"tool:{tool} or {'tool.observe' if tool in _OBSERVE_TOOLS else 'tool.control'}"
    policy_only = " exists only on a gateway with a [policy] and" if tool in _LISTED_WITH_A_POLICY else ""
    return (
        f"{tool}{policy_only} is hidden from a caller the policy does not grant it: this token may lack {grant} "
        f"on /_system/broker (docs/governance.md), or the gateway is older than this mcp-gateway"
    )


INTEGER_RANGE = (-(1 << 63), (1 << 64) - 1)
"""The integers a request carries exactly: the gateway reads JSON with orjson, which turns one beyond
64 bits into a float (99999999999999999999999 into 1e+23)."""


def parse_arguments(pairs: list[str]) -> dict[str, Any]:
    """`key=value` pairs; a value that parses as JSON is taken as JSON (numbers, booleans, objects), any other
    as text (so `01200`, not JSON, is the string "01200"). A key given twice is refused, not the last kept,
    and so is an integer outside INTEGER_RANGE, which would arrive as another number."""
    arguments: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"argument {pair!r} is not key=value")
        if key in arguments:
            raise ValueError(f"argument {key!r} is given twice; give each argument once")
        try:
            orjson.loads(text)
        except orjson.JSONDecodeError:
            arguments[key] = text
            continue
        # JSON: read again with the json module, whose integers are exact, to refuse one out of range.
        try:
            arguments[key] = json.loads(text, parse_int=functools.partial(_exact_integer, key))
        except RecursionError:
            raise ValueError(f"argument {key!r} is JSON nested too deeply for the command to read") from None
    return arguments


def _exact_integer(key: str, digits: str) -> int:
    value = int(digits)
    low, high = INTEGER_RANGE
    if not low <= value <= high:
        raise ValueError(
            f"argument {key!r}: the integer {digits} is outside {low}..{high}, the integers a call carries "
            f"exactly; to send it as text, quote it: {key}='\"{digits}\"'"
        )
    return value


CLAMP_NOTE = "The gateway clamped arguments to the operator's limits: "
"""How the gateway's note on a clamped call starts (gateway/core/governed.py, `with_clamped`)."""


def gateway_notes(result: dict[str, Any]) -> list[str]:
    """What the gateway itself says of a tool result, beside the device's answer: the arguments it
    clamped to the operator's limits (`_meta["io.github.mcp-gateway/clamped"]`), as its text item says."""
    meta = result.get("_meta")
    clamped = meta.get(CLAMPED_META_KEY) if isinstance(meta, dict) else None
    if not isinstance(clamped, list) or not clamped:
        return []
    return [CLAMP_NOTE + "; ".join(str(entry) for entry in clamped)]


def gateway_refusal(result: dict[str, Any]) -> str | None:
    """The text of a tool error the gateway answered itself without forwarding the call (arguments the
    schema or a limit refuses, a call waiting for an approval, a person who declined:
    `_meta["io.github.mcp-gateway/refused"]`); None for any other result."""
    meta = result.get("_meta")
    if result.get("isError") is not True or not isinstance(meta, dict) or REFUSED_META_KEY not in meta:
        return None
    content = result.get("content")
    texts = [
        str(block.get("text", ""))
        for block in (content if isinstance(content, list) else [])
        if isinstance(block, dict) and block.get("type") == "text"
    ]
    return " ".join(texts) or "the gateway refused the call"


GATEWAY_META_PREFIX = "io.github.mcp-gateway/"
"""How the `_meta` keys the gateway adds to a result start (gateway/core/governed.py, `CLAMPED_META_KEY`)."""


def device_answer(result: dict[str, Any]) -> dict[str, Any]:
    """The result as the device sent it: without the gateway's note items (see `gateway_notes`) and the
    gateway's `_meta` keys (a `_meta` left empty goes too)."""
    notes = gateway_notes(result)
    answer = dict(result)
    content = result.get("content")
    if notes and isinstance(content, list):
        answer["content"] = [
            block
            for block in content
            if not (isinstance(block, dict) and block.get("type") == "text" and block.get("text") in notes)
        ]
    meta = result.get("_meta")
    if isinstance(meta, dict):
        own = {key: value for key, value in meta.items() if not str(key).startswith(GATEWAY_META_PREFIX)}
        if own:
            answer["_meta"] = own
        else:
            del answer["_meta"]
    return answer


def render_result(result: dict[str, Any]) -> str:
    """The device's answer: its structuredContent, else its text items, else the whole result as JSON;
    the gateway's own notes (see `gateway_notes`) and `_meta` keys are left out, for the command to print
    the notes apart. What does not print is escaped (`terminal_text`): the JSON stays the same JSON, the
    text its lines."""
    return terminal_text(_result_text(result), lines=True)


def _result_text(result: dict[str, Any]) -> str:
    if "structuredContent" in result:
        return orjson.dumps(result["structuredContent"], option=orjson.OPT_INDENT_2).decode()
    answer = device_answer(result)
    content = answer.get("content")
    texts = [
        _shown_text(block.get("text", ""))
        for block in (content if isinstance(content, list) else [])
        if isinstance(block, dict) and block.get("type") == "text"
    ]
    return "\n".join(texts) if texts else orjson.dumps(answer, option=orjson.OPT_INDENT_2).decode()


def _shown_text(text: Any) -> str:
    """A text item's `text`; as JSON when a provider put another value there (a number, null, an object)."""
    return text if isinstance(text, str) else orjson.dumps(text).decode()


def never_held(entry: dict[str, Any]) -> bool:
    """A slot no provider has held since the gateway started, neither declared nor a configured upstream.

    That is a name a client asked for (often a mistyped one): the gateway keeps it, and counts it, until
    it is pruned, but it stands for no device. An entry without `connects` (an older gateway) is listed."""
    return (
        not entry.get("connected")
        and entry.get("connects") == 0
        and not entry.get("declared")
        and entry.get("upstream") is None
    )


def listed_slots(result: dict[str, Any], show_all: bool = False) -> tuple[list[dict[str, Any]], str | None]:
    """The providers_list entries `mcp-gateway slots` lists (without `show_all`, not the names only asked
    for), and the note counting those left out (None when none is)."""
    providers: list[dict[str, Any]] = (result.get("structuredContent") or {}).get("providers", [])
    listed = [entry for entry in providers if show_all or not never_held(entry)]
    asked = len(providers) - len(listed)
    names = "name" if asked == 1 else "names"
    return listed, (f"{asked} {names} asked for with no provider (see mcp-gateway slots --all)" if asked else None)


def slot_cell(name: str) -> str:
    """A slot name as the table shows it: as it is, or as a JSON string when it holds a space, a quote or
    a character that does not print (`"pompe à eau"`), so that it stays one whitespace-separated field."""
    plain = name.isprintable() and not any(char.isspace() or char in "\"'\\" for char in name)
    return name if plain and name else orjson.dumps(name).decode()


def display_width(text: str) -> int:
    """The terminal columns `text` takes: two for a wide East Asian character (CJK, full-width forms),
    none for a combining mark or a format character, one for the rest."""
    width = 0
    for char in text:
        if unicodedata.category(char) in ("Mn", "Me", "Cf"):
            continue
        width += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return width


def padded(text: str, width: int) -> str:
    """`text` with spaces after it up to `width` terminal columns."""
    return text + " " * max(0, width - display_width(text))


def name_cell(name: str) -> str:
    """A name from a provider (a tool's, an argument's) as one field: as it is, or as a JSON string with
    what does not print escaped when it holds a space, a quote or a character that does not print."""
    return terminal_text(slot_cell(name))


def slots_table(listed: list[dict[str, Any]], shown: Callable[[str], str] = str) -> str:
    """The `mcp-gateway slots` table of `listed`; the SLOT column as wide as its longest name (24 at least)
    as `shown` writes it (escaped for a stdout that cannot encode it), in terminal columns."""
    if not listed:
        return "no slots yet"
    cells = [shown(slot_cell(str(entry.get("name", "")))) for entry in listed]
    width = max(24, *(display_width(cell) for cell in cells))
    # STATE as wide as its longest word, "initializing".
    lines = [f"{'SLOT':{width}} {'STATE':12} {'TRANSPORT':14} {'TOOLS':>5} {'PENDING':>7}"]
    for cell, entry in zip(cells, listed, strict=True):
        state = entry.get("state", "connected") if entry.get("connected") else "empty"
        lines.append(
            f"{padded(cell, width)} {state:12} {entry.get('transport', '-') or '-':14} "
            f"{entry.get('tools', 0):>5} {entry.get('pending', 0):>7}"
        )
    return "\n".join(lines)


def _argument(name: str, schema: Any, required: bool) -> str:
    """`name=INTEGER 300..2900`, `name=on|off`; in brackets when the tool can do without it."""
    shape = "VALUE"
    if isinstance(schema, dict):
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            shape = "|".join(orjson.dumps(value).decode().strip('"') for value in schema["enum"])
        elif isinstance(schema.get("type"), str):
            shape = schema["type"].upper()
            low, high = schema.get("minimum"), schema.get("maximum")
            if low is not None or high is not None:
                shape += f" {'' if low is None else low}..{'' if high is None else high}"
    text = f"{name_cell(name)}={terminal_text(shape)}"
    return text if required else f"[{text}]"


def _first_sentence(text: str) -> str:
    """Up to the first ". " or ideographic full stop, exclamation or question mark (no space follows those)
    of the first paragraph."""
    paragraph = " ".join(text.split("\n\n", 1)[0].split())
    ends = [end for end in (paragraph.find(". "), *(paragraph.find(mark) for mark in "\u3002\uff01\uff1f")) if end >= 0]
    return paragraph[: min(ends) + 1] if ends else paragraph


def render_tools(tools: list[dict[str, Any]], full: bool = False, width: int | None = 100) -> str:
    """The `mcp-gateway tools` listing: each tool's name and arguments as `call` takes them, then its
    description (the first sentence, or all of it with `full`), indented, and wrapped at `width` (None:
    one line each). A name, an argument or a description that holds a character that does not print
    shows it escaped (`name_cell`, `terminal_text`)."""
    import textwrap

    if not tools:
        return "no tools"
    lines: list[str] = []
    for tool in tools:
        schema = tool.get("inputSchema")
        properties: dict[str, Any] = {}
        required: list[Any] = []
        if isinstance(schema, dict):
            properties = schema["properties"] if isinstance(schema.get("properties"), dict) else {}
            required = schema["required"] if isinstance(schema.get("required"), list) else []
        # Required arguments first, each group in the schema's order; one required but not among the
        # properties is listed too (any value), as the tool cannot be called without it.
        unlisted = [name for name in required if isinstance(name, str) and name not in properties]
        names = sorted([*properties, *dict.fromkeys(unlisted)], key=lambda name: name not in required)
        arguments = (_argument(str(n), properties.get(n), n in required) for n in names)
        lines.append(" ".join([name_cell(str(tool.get("name"))), *arguments]))
        description = str(tool.get("description") or "")
        if description:
            shown = terminal_text(" ".join(description.split()) if full else _first_sentence(description))
            if width is None:
                lines.append(f"    {shown}")
            else:
                lines += textwrap.wrap(shown, width=max(width, 40), initial_indent="    ", subsequent_indent="    ")
    return "\n".join(lines)


CLIENT_INFO = {"name": "mcp-gateway-cli", "version": __version__}


DEFAULT_TIMEOUT_S = 60.0
"""How long a command waits for the gateway to connect, and then for each next byte of an answer (the
commands' --timeout, docs/configuration.md): four times the gateway's default SSE keepalive interval
(limits.sse_keepalive_s, 15 s), which a gateway still carrying out a call sends, so a long call is
waited for as long as the gateway keeps it (its request_timeout_ms ends it), a silent peer is not."""


MAX_TOOLS_PAGES = 64
"""The most tools/list pages a command follows: the gateway's own bound on a provider's pages
(providers.max_tools_pages, 64 by default)."""


class GatewayClient:
    def __init__(
        self,
        base_url: str,
        slot: str,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        token: str | None = None,
        timeout_flag: str | None = None,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        answer_flag: str | None = None,
    ) -> None:
        import aiohttp  # here, not at the top: the CLI imports this module for GatewayCallError alone

        self.url = f"{base_url.rstrip('/')}/{quote(slot, safe='')}/mcp"
        self.slot = slot
        self.token = token
        """A client token for a gateway with [auth]: sent as Authorization: Bearer, only to this URL."""
        self.timeout_s = timeout_s or None
        """The longest silence waited for: connecting, then between two reads of an answer (None: no limit)."""
        self.timeout_flag = timeout_flag
        """The command's option that sets `timeout_s`, which a timeout names (None: the command has none)."""
        self.max_answer_bytes = max_answer_bytes
        """The largest answer read: a JSON body, or one event of an event stream."""
        self.answer_flag = answer_flag
        """The command's option that sets `max_answer_bytes`, which a refusal names (None: it has none)."""
        self.timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.timeout_s, sock_read=self.timeout_s)
        self.stateless = True
        """False once the server refused the stateless era: the session era from then on."""
        self.session_id: str | None = None
        self._http: aiohttp.ClientSession | None = None
        self._next_id = 0
        self._last_status = 0

    async def __aenter__(self) -> GatewayClient:
        import aiohttp

        self._http = aiohttp.ClientSession(timeout=self.timeout)
        return self

    async def _initialize(self) -> None:
        """The session era's handshake, for a server without the stateless era."""
        params = {"protocolVersion": LATEST_HANDSHAKE, "capabilities": {}, "clientInfo": CLIENT_INFO}
        await self.request("initialize", params)
        await self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        import aiohttp

        assert self._http is not None
        if self.session_id is not None:
            with contextlib.suppress(aiohttp.ClientError):
                await self._http.delete(self.url, headers=self._headers())
        await self._http.close()

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
            headers["MCP-Protocol-Version"] = LATEST_HANDSHAKE
        return headers

    def _stateless_message(self, method: str, params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        """The request with the stateless era's `_meta`, and its routing headers."""
        params = {**params, "_meta": eras.envelope({}, CLIENT_INFO)}
        headers = {"MCP-Protocol-Version": eras.MODERN_ERA, "Mcp-Method": stateless.encode_header_value(method)}
        name_key = stateless.NAME_PARAM.get(method)
        name = params.get(name_key) if name_key is not None else None
        if isinstance(name, str):
            headers["Mcp-Name"] = stateless.encode_header_value(name)
        self._next_id += 1
        return {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params}, headers

    async def _post(
        self, message: dict[str, Any], extra_headers: dict[str, str] | None = None
    ) -> dict[str, Any] | None:
        import aiohttp

        assert self._http is not None
        headers = {**self._headers(), **(extra_headers or {})}
        try:
            # A redirect is not followed: the commands speak to the gateway at --url, not wherever it points.
            post = self._http.post(self.url, data=orjson.dumps(message), headers=headers, allow_redirects=False)
            async with post as response:
                self._last_status = response.status
                if 300 <= response.status < 400:
                    # The server's words, on the operator's terminal: escaped like a provider's.
                    where = terminal_text(response.headers.get("Location", "nowhere"))
                    raise GatewayCallError(
                        f"HTTP {response.status} from {self.url}: a redirect to {where}, which the command does not "
                        "follow; give --url (or $MCP_GATEWAY_URL) the gateway's own address"
                    )
                if "Mcp-Session-Id" in response.headers:
                    self.session_id = response.headers["Mcp-Session-Id"]
                if response.status == 202:
                    return None
                content_type = response.headers.get("Content-Type", "")
                too_large = functools.partial(self._too_large, message)
                if content_type.startswith("text/event-stream"):
                    return await last_response_event(response, self.url, self.max_answer_bytes, too_large)
                body = await bounded_body(response, self.max_answer_bytes, too_large)
                try:
                    decoded: dict[str, Any] = orjson.loads(body)
                except orjson.JSONDecodeError:
                    raise GatewayCallError(_not_json(self.url, response.status, content_type, body)) from None
                error = decoded.get("error") if isinstance(decoded, dict) else None
                if response.status >= 400 and not isinstance(error, dict):
                    # Not a JSON-RPC error: a refusal before routing (authentication, origin, limits).
                    hint = f"\n{self._token_hint()}" if response.status == 401 else ""
                    if isinstance(error, str):
                        raise GatewayCallError(
                            f"HTTP {response.status} {terminal_text(error)}: "
                            f"{terminal_text(str(decoded.get('error_description', '')))}{hint}"
                        )
                    raise GatewayCallError(f"HTTP {response.status}: {decoded}{hint}")
                if not isinstance(decoded, dict):
                    raise GatewayCallError(_not_a_message(self.url, response.status, decoded))
                return decoded
        except TimeoutError as exc:  # aiohttp's connect and read limits; before ClientConnectionError, also one
            raise GatewayCallError(self._no_answer(message, exc)) from exc
        except aiohttp.ServerDisconnectedError as exc:  # the request went out: the gateway may have acted on it
            raise GatewayCallError(self._disconnected(message)) from exc
        except aiohttp.ClientOSError as exc:
            if exc.errno == errno.ECONNRESET and self.url.startswith("http://"):
                raise GatewayCallError(self._disconnected(message)) from exc
            raise GatewayCallError(_unreachable(self.url, exc)) from exc
        except aiohttp.ClientConnectionError as exc:
            raise GatewayCallError(_unreachable(self.url, exc)) from exc
        except aiohttp.ClientPayloadError as exc:  # the answer began, then its connection ended
            raise GatewayCallError(self._broke_off(message, exc)) from exc
        except aiohttp.ClientResponseError as exc:
            if not _is_tls_alert(exc) or not self.url.startswith("http://"):
                raise
            raise GatewayCallError(_plain_http_to_tls(self.url)) from exc

    def _too_large(self, message: dict[str, Any]) -> GatewayCallError:
        """An answer past `max_answer_bytes`: how to ask for less (a listing: one slot or a tool group
        instead of _all) and the option that reads more."""
        flag = self.answer_flag or "MAX_ANSWER_BYTES"
        limit = f"{self.max_answer_bytes} bytes ({flag})"
        text = f"the answer from {self.url} is larger than {limit}, the most the command reads"
        if message.get("method") == "tools/list":
            text += "; list one slot or a tool group instead of _all"
        if self.answer_flag:
            text += f"; raise {self.answer_flag} (at most {MAX_ANSWER_BYTES_LIMIT})"
        return GatewayCallError(text)

    def _disconnected(self, message: dict[str, Any]) -> str:
        """A connection ended before any answer. Over http:// that is also how a TLS listener ends a
        plain-HTTP request it never read: when the port answers a TLS handshake, that is said, and
        nothing was carried out; when that cannot be told, the hint to use https:// is added."""
        if self.url.startswith("http://") and speaks_tls(self.url, min(TLS_PROBE_TIMEOUT_S, self.timeout_s or 1e9)):
            return _plain_http_to_tls(self.url)
        text = f"the gateway at {self.url} closed the connection before it answered"
        if self._calls_a_device(message):
            text += "; the call may have reached the device"
        if self.url.startswith("http://"):
            text += f"; {TLS_HINT}"
        return text

    def _broke_off(self, message: dict[str, Any], exc: Exception) -> str:
        """An answer cut off mid-way (the gateway stopped, the network failed): as the stdio bridge says
        it, a tool call may have been carried out all the same."""
        text = f"the answer from the gateway at {self.url} broke off ({terminal_text(str(exc))})"
        if self._calls_a_device(message):
            text += "; the call may have reached the device: check its effect before calling it again"
        return text

    def _no_answer(self, message: dict[str, Any], exc: TimeoutError) -> str:
        """A timeout in words (aiohttp's own is an empty message): what waited, how long, and what may still
        happen to a tool call the gateway did take."""
        import aiohttp

        limit = f"within {self.timeout_s:g} s" + (f" ({self.timeout_flag})" if self.timeout_flag else "")
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            return f"cannot reach the gateway at {self.url}: no connection {limit}"
        text = f"no answer from the gateway at {self.url} {limit}"
        if self._calls_a_device(message):
            text += "; the call may still be carried out by the device"
        return text

    def _calls_a_device(self, message: dict[str, Any]) -> bool:
        """Whether `message` is a tool call a device may carry out (not one of the gateway's own tools)."""
        return message.get("method") == "tools/call" and self.slot != BROKER_SLOT

    def _token_hint(self) -> str:
        """The line added to a 401: how the commands are given a token (the gateway's words name only
        the Authorization header)."""
        if self.token:
            return (
                f"The client token sent (from --token-file FILE, else the environment variable {TOKEN_VARIABLE}) "
                "was refused: give one this gateway accepts."
            )
        return (
            "No client token was sent: give one with --token-file FILE (a file holding it) or in the "
            f"environment variable {TOKEN_VARIABLE}."
        )

    async def request(
        self, method: str, params: dict[str, Any], extra_headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        answer: dict[str, Any] | None
        if self.stateless:
            message, headers = self._stateless_message(method, params)
            answer = await self._post(message, {**headers, **(extra_headers or {})})
            if not _refuses_stateless_era(self._last_status, answer):
                result = _result_of(method, answer, self.url)
                if eras.is_input_required(result):
                    raise GatewayCallError(
                        f"{method}: the server asks for the caller's input (elicitation, sampling or roots), "
                        "which mcp-gateway's commands cannot give; use an MCP client that can"
                    )
                # What a command prints is the result, without the era's own keys (resultType, serverInfo).
                return eras.for_session_client(result)
            self.stateless = False
            self.session_id = None  # a 2025 SDK puts a throw-away session id on its refusal
            await self._initialize()
        self._next_id += 1
        answer = await self._post({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        return _result_of(method, answer, self.url)

    async def list_tools(self) -> list[dict[str, Any]]:
        """Every tool the slot lists, page after page: at most MAX_TOOLS_PAGES pages, and a cursor that
        comes back (a listing that would never end) is refused."""
        listed: list[dict[str, Any]] = []
        params: dict[str, Any] = {}
        seen: set[str] = set()
        for _ in range(MAX_TOOLS_PAGES):
            result = await self.request("tools/list", params)
            tools = result.get("tools")
            listed.extend(tool for tool in (tools if isinstance(tools, list) else []) if isinstance(tool, dict))
            cursor = result.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                return listed
            if cursor in seen:
                raise GatewayCallError(
                    f"the tools/list of {self.url} gives the cursor {_json_excerpt(cursor)} a second time: "
                    "a listing that never ends (no gateway sends one)"
                )
            seen.add(cursor)
            params = {"cursor": cursor}
        raise GatewayCallError(
            f"the tools/list of {self.url} goes on past {MAX_TOOLS_PAGES} pages (MAX_TOOLS_PAGES), the most "
            "a command reads (the gateway lists a slot's tools in one page)"
        )

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        params = {"name": name, "arguments": arguments}
        try:
            try:
                return await self.request("tools/call", params)
            except GatewayCallError as exc:
                if exc.code != HEADER_MISMATCH or not self.stateless:
                    raise
                # The tool mirrors arguments into Mcp-Param-* headers (its inputSchema's x-mcp-header):
                # they come from its listed schema, read only for such a tool.
                schema = next(
                    (tool.get("inputSchema") for tool in await self.list_tools() if tool.get("name") == name), None
                )
                return await self.request("tools/call", params, stateless.param_headers(schema, arguments))
        except GatewayCallError as exc:
            if exc.code != INVALID_PARAMS or not str(exc).startswith("Unknown tool:"):
                raise
            # The operator commands call _broker tools by name; "unknown" there is rarely a typo.
            if self.slot == BROKER_SLOT:
                raise GatewayCallError(f"{exc}; {broker_tool_hint(name)}", exc.code, exc.error) from None
            # The gateway's own answer (_all, a tool group) says "call tools/list": the command that does.
            if "call tools/list" in str(exc):
                hint = f"mcp-gateway tools {self.slot} lists them, with their arguments"
                raise GatewayCallError(f"{exc}; {hint}", exc.code, exc.error) from None
            raise


def _refuses_stateless_era(status: int, answer: dict[str, Any] | None) -> bool:
    """A server without the 2026-07-28 era: -32022; -32601 for a method every server has (the commands
    send tools/list and tools/call only), from one that reads the era's requests as unknown; or the 2025
    SDKs' HTTP 400 for a version they do not know or a request without a session. The gateway's own 400s
    (bad arguments, headers) say neither."""
    error = answer.get("error") if answer is not None else None
    if not isinstance(error, dict):
        return False
    if error.get("code") in (UNSUPPORTED_PROTOCOL_VERSION, METHOD_NOT_FOUND):
        return True
    message = str(error.get("message", "")).lower()
    return status == 400 and ("protocol version" in message or "session" in message)


def _result_of(method: str, answer: dict[str, Any] | None, url: str = "the server") -> dict[str, Any]:
    """The result of `answer`; a GatewayCallError for its JSON-RPC error, or naming `url` and what is
    wrong for an answer that holds neither a result object nor an error object."""
    if answer is None:
        raise GatewayCallError(f"no answer to {method}")
    if "error" in answer:
        error = answer["error"]
        if not isinstance(error, dict):
            raise GatewayCallError(
                f"the answer from {url} to {method} holds an error that is not a JSON-RPC error object: "
                f"{_json_excerpt(error)}"
            )
        code = error.get("code")
        message = terminal_text(str(error.get("message")))  # a provider's words, on the operator's terminal
        # A code is an integer; any other value is shown as JSON, escaped like the message.
        shown = code if isinstance(code, int) else _json_excerpt(code)
        raise GatewayCallError(f"{message} (code {shown})", code if isinstance(code, int) else None, error)
    result = answer.get("result")
    if not isinstance(result, dict):
        raise GatewayCallError(f"the answer from {url} to {method} holds no result object: {_json_excerpt(answer)}")
    return result


def _json_excerpt(value: Any) -> str:
    """`value` as JSON, cut to EXCERPT_CHARS, with what does not print escaped."""
    text = orjson.dumps(value).decode()
    return terminal_text(text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…")


def _not_a_message(url: str, status: int, decoded: Any) -> str:
    """A JSON answer that is no JSON-RPC message (an array, a number): no gateway sends one."""
    return f"HTTP {status} from {url}: JSON that is not a JSON-RPC message (an object): {_json_excerpt(decoded)}"


TLS_PROBE_TIMEOUT_S = 2.0
"""Longest wait, after a connection to an http:// URL ended with no answer, for a fresh connection to
the same port to answer a TLS handshake (`speaks_tls`); the command's --timeout when shorter."""

TLS_HINT = "if the gateway serves TLS ([tls] in its configuration), use https://"

UNTRUSTED_CA_HINT = (
    "the commands trust the system's CAs: for a gateway with a CA of its own, name it in the environment "
    "variable SSL_CERT_FILE (`mcp-gateway tls self-signed` prints its path: ca.pem in its --dir), e.g. "
    "SSL_CERT_FILE=/etc/mcp-gateway/tls/ca.pem"
)


def _is_tls_alert(exc: Exception) -> bool:
    """An answer that begins with a TLS alert record (0x15 0x03) where an HTTP status line was expected:
    a TLS listener's refusal of a plain-HTTP request, which aiohttp reports as a bad status line."""
    return "\\x15\\x03" in str(getattr(exc, "message", ""))


def _plain_http_to_tls(url: str) -> str:
    https = "https://" + url.removeprefix("http://").rsplit("/", 2)[0]
    return (
        f"the gateway at {url} serves TLS ([tls] in its configuration) and dropped this plain-HTTP request "
        f"unread, so nothing was carried out: use https://, --url {https}"
    )


def certificate_hint(error: str, trust_hint: str) -> str:
    """A certificate verification failure (`error`, the TLS library's text) in words that say what to do:
    a certificate for another name needs a --url with one it holds; an untrusted one, `trust_hint`."""
    if "mismatch" in error:  # OpenSSL's "Hostname mismatch" / "IP address mismatch"
        return (
            f"the gateway's certificate is not for the host in the URL ({error}): use a name or address it "
            "holds (`mcp-gateway tls self-signed --host/--ip` sets them)"
        )
    return f"the gateway's certificate is not trusted ({error}); {trust_hint}"


def _unreachable(url: str, exc: Exception) -> str:
    """Why the gateway at `url` could not be reached, in words of ours where aiohttp's run an IPv6
    address and its port together (`::1:3000`): `[::1]:3000: Connection refused`."""
    import aiohttp

    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return f"cannot reach the gateway at {url}: {certificate_hint(str(exc), UNTRUSTED_CA_HINT)}"
    if type(exc) is not aiohttp.ClientConnectorError:  # other TLS failures and the rest: aiohttp's text says it
        text = f"cannot reach the gateway at {url}: {exc}"
        if "WRONG_VERSION_NUMBER" in str(exc) and url.startswith("https://"):
            text += "; if the gateway serves no TLS (no [tls] in its configuration), use http://"
        return text
    error = exc.os_error
    reason = os.strerror(error.errno) if error.errno and error.errno > 0 else (error.strerror or str(error))
    where = f"[{exc.host}]:{exc.port}" if ":" in exc.host else f"{exc.host}:{exc.port}"
    text = f"cannot reach the gateway at {url}: cannot connect to {where}: {reason}"
    if error.errno == errno.ECONNREFUSED:
        # Nothing listens there: the usual causes are a gateway not started, or one on another address.
        text += ". Is `mcp-gateway run` running there? Point elsewhere with --url (or $MCP_GATEWAY_URL)"
    if "%25" in exc.host:
        text += (
            "; the zone id of a link-local address is read as written, not decoded from %25 (RFC 6874): "
            "write it after a bare %, e.g. --url 'http://[fe80::1%eth0]:3000'"
        )
    return text


def _not_json(url: str, status: int, content_type: str, body: bytes) -> str:
    """An answer no gateway gives: a web page or plain text, from something else at that address."""
    media = content_type.partition(";")[0].strip() or "no Content-Type"
    if media in ("text/html", "application/xhtml+xml"):
        return (
            f"HTTP {status} from {url}: a web page ({media}), not an MCP answer; is --url (or "
            "$MCP_GATEWAY_URL) the gateway's address?"
        )
    text = terminal_text(" ".join(body[:200].decode(errors="replace").split()))
    return f"HTTP {status} from {url} ({terminal_text(media)}), not JSON: {text}"
