"""`mcp-gateway slots`, `tools`, `call` and `schema-hash`: a technician's questions to a running gateway."""

from __future__ import annotations

import argparse
import asyncio
import codecs
import io
import os
import stat
import sys
from typing import TYPE_CHECKING

import orjson

from gateway.cli.common import (
    Commands,
    _read_credential_file,
    client_token_from_env,
    gateway_answer_option,
    gateway_timeout_option,
    gateway_url_option,
)
from gateway.cli.parsing import intermixed
from gateway.client import GatewayCallError
from gateway.config import ConfigError
from gateway.config.files import FileRefused, read_regular_file

SCHEMA_FILE_MAX_BYTES = 8 << 20
"""schema-hash FILE reads at most 8 MiB: eight times a slot's default tools/list bound
(limits.max_tool_list_bytes_per_slot), so /dev/zero or an endless pipe ends in a named refusal."""

if TYPE_CHECKING:
    from gateway.client import GatewayClient


def _client_token(args: argparse.Namespace) -> str | None:
    """The client token for slots/call/schema-hash: --token-file, else $MCP_GATEWAY_TOKEN, else none."""

    from gateway.client import TOKEN_VARIABLE

    try:
        if getattr(args, "token_file", None):
            where = f"--token-file {args.token_file}"
            token: str | None = _read_credential_file(args.token_file, "--token-file")
        else:
            where = f"${TOKEN_VARIABLE}"
            token = client_token_from_env()
        _refuse_unprintable(token, where)
        return token
    except ValueError as exc:
        raise ConfigError(str(exc)) from None  # named on the command line or in the environment: usage, exit 2


def _refuse_unprintable(token: str | None, where: str) -> None:
    """ValueError naming `where` (never the token) for a token holding a character that does not print
    (a control character, DEL, a format character): no gateway issues one, and an HTTP header cannot
    carry a control character."""
    bad = next((char for char in token or "" if not char.isprintable()), None)
    if bad is not None:
        raise ValueError(
            f"{where} holds a character that does not print (U+{ord(bad):04X}), which a token never holds: "
            "give the token alone, as the gateway issued it"
        )


def gateway_client(args: argparse.Namespace, slot: str) -> GatewayClient:
    """A client of `slot` at the command's --url, with its token, its --timeout and --max-answer-bytes."""
    from gateway.client import DEFAULT_TIMEOUT_S, GatewayClient
    from gateway.client_answers import MAX_ANSWER_BYTES

    flag = "--timeout" if hasattr(args, "timeout") else None
    timeout_s = getattr(args, "timeout", DEFAULT_TIMEOUT_S)
    answer_flag = "--max-answer-bytes" if hasattr(args, "max_answer_bytes") else None
    return GatewayClient(
        args.url,
        slot,
        timeout_s=timeout_s,
        token=_client_token(args),
        timeout_flag=flag,
        max_answer_bytes=getattr(args, "max_answer_bytes", MAX_ANSWER_BYTES),
        answer_flag=answer_flag,
    )


JSON_ESCAPE = "mcp-gateway-json-escape"
"""The codec error handler that writes a character as JSON's \\uXXXX escape (a surrogate pair past U+FFFF)."""


def _json_escape(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    escaped = []
    for char in error.object[error.start : error.end]:
        code = ord(char)
        if code > 0xFFFF:
            code -= 0x10000
            escaped.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            escaped.append(f"\\u{code:04x}")
    return "".join(escaped), error.end


codecs.register_error(JSON_ESCAPE, _json_escape)


def escape_unencodable_output() -> None:
    """What stdout cannot encode (an ASCII locale, a slot named `pompe à eau`) is written as JSON's escape
    (`\\u00e0`), not a UnicodeEncodeError that loses the whole answer: `--json` output, the JSON a call
    prints and a quoted slot name in the table stay valid JSON."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors=JSON_ESCAPE)


def as_written(text: str) -> str:
    """`text` as stdout writes it (escaped where it cannot encode it), so that columns count what shows."""
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    return text.encode(encoding, errors=JSON_ESCAPE).decode(encoding)


def cmd_slots(args: argparse.Namespace) -> int:
    from gateway.client import listed_slots, slots_table, terminal_text

    if refused_as_not_utf8("slots", [("--url", args.url)]):
        return 2
    escape_unencodable_output()

    async def go() -> int:
        async with gateway_client(args, "_broker") as client:
            result = await client.call_tool("providers_list", {})
        listed, note = listed_slots(result, show_all=args.all)
        if args.json:  # the same JSON, with what does not print escaped in its strings (a provider's words)
            sys.stdout.write(
                terminal_text(orjson.dumps(listed, option=orjson.OPT_INDENT_2).decode(), lines=True) + "\n"
            )
        else:
            sys.stdout.write(slots_table(listed, as_written) + "\n")
        if note:  # on stderr: stdout stays the slots, for scripts
            sys.stdout.flush()
            print(f"mcp-gateway slots: {note}", file=sys.stderr)
        return 0

    return asyncio.run(go())


def refused_as_not_utf8(command: str, named: list[tuple[str, str | None]]) -> bool:
    """Whether one of `named` (what it is, the text given) holds bytes that are no UTF-8 (a Latin-1
    terminal, a script in another encoding): no URL, JSON or tool name can carry them. The first one
    is named on stderr."""
    from gateway.cli.process import not_utf8
    from gateway.client import terminal_text

    for what, text in named:
        shown = not_utf8(text or "")
        if shown is not None:
            print(
                f"mcp-gateway {command}: {what} {terminal_text(shown)} is not UTF-8 (the bytes shown as \\x..): "
                "give it in UTF-8",
                file=sys.stderr,
            )
            return True
    return False


def cmd_call(args: argparse.Namespace) -> int:
    from gateway.client import gateway_notes, gateway_refusal, parse_arguments, render_result, terminal_text

    given = [("the slot", args.slot), ("the tool", args.tool), ("--url", args.url)]
    if refused_as_not_utf8("call", [*given, *(("the argument", pair) for pair in args.arguments)]):
        return 2
    try:
        arguments = parse_arguments(args.arguments)
    except ValueError as exc:
        print(f"mcp-gateway call: {exc}", file=sys.stderr)
        return 2

    escape_unencodable_output()

    async def go() -> int:
        async with gateway_client(args, args.slot) as client:
            result = await client.call_tool(args.tool, arguments)
        refusal = gateway_refusal(result)
        if refusal is not None:  # the device was never asked: nothing of its on stdout
            print(f"mcp-gateway call: {terminal_text(refusal)}", file=sys.stderr)
            return 1
        sys.stdout.write(render_result(result) + "\n")
        for note in gateway_notes(result):  # on stderr: stdout stays the device's answer, for scripts
            print(f"mcp-gateway call: {terminal_text(note)}", file=sys.stderr)
        return 1 if result.get("isError") else 0

    return asyncio.run(go())


def _read_schema_file(path: str) -> bytes:
    """The schema file's bytes, at most SCHEMA_FILE_MAX_BYTES: a regular file or a character device through
    the configuration's bounded reader, a pipe (`... | schema-hash /dev/stdin`) until its writer closes it.
    FileRefused past the bound or for any other kind of file; the OSError of stat, open or read as it is."""
    if stat.S_ISFIFO(os.stat(path).st_mode):
        with open(path, "rb") as pipe:  # blocking: the read returns at the bound or at the writer's end
            data = pipe.read(SCHEMA_FILE_MAX_BYTES + 1)
        if len(data) > SCHEMA_FILE_MAX_BYTES:
            raise FileRefused("schema file", path, f"larger than {SCHEMA_FILE_MAX_BYTES} bytes, the bound for it")
        return data
    return read_regular_file(path, "schema file", SCHEMA_FILE_MAX_BYTES, devices=True)


def cmd_schema_hash(args: argparse.Namespace) -> int:
    """The canonical tools hash (docs/pump-1.md, "Schema hash") of a schema file, or of what a live slot lists."""
    from gateway.core.schema_hash import tools_hash

    if (args.file is None) == (args.slot is None):
        print("mcp-gateway schema-hash: give either a schema FILE or --slot SLOT", file=sys.stderr)
        return 2
    if refused_as_not_utf8("schema-hash", [("--slot", args.slot), ("--url", args.url)]):
        return 2
    if args.file is not None:
        try:
            document = orjson.loads(_read_schema_file(args.file))
        except FileNotFoundError:
            # `schema-hash pump-1` reads a file named pump-1; a live slot is named with --slot. Exit 2
            # as for any file named that cannot be read. A path or a .json name is no slot's: no hint.
            looks_like_a_file = "/" in args.file or args.file.endswith(".json")
            hint = "" if looks_like_a_file else f" (to hash the tools a live slot lists, use --slot {args.file})"
            print(f"mcp-gateway schema-hash: no such file: {args.file}{hint}", file=sys.stderr)
            return 2
        except IsADirectoryError:
            print(f"mcp-gateway schema-hash: {args.file} is a directory; give the schema file", file=sys.stderr)
            return 2
        except FileRefused as exc:  # a device, a socket, or more than SCHEMA_FILE_MAX_BYTES
            print(f"mcp-gateway schema-hash: {args.file}: {exc.reason}", file=sys.stderr)
            return 2
        except OSError as exc:
            print(f"mcp-gateway schema-hash: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        except orjson.JSONDecodeError as exc:
            print(f"mcp-gateway schema-hash: {args.file} is not valid JSON: {exc}", file=sys.stderr)
            return 2
        # The schema file is the tools array; a saved tools/list result ({"tools": [...]}) works too.
        tools = document.get("tools") if isinstance(document, dict) else document
        if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
            print(f"mcp-gateway schema-hash: {args.file} holds no array of tool objects", file=sys.stderr)
            return 2
        print(tools_hash(tools))
        return 0

    async def go() -> int:
        # The board's own list, as the gateway hashes it against the board's hello: a [policy] may hide
        # some of its tools from this client's tools/list.
        try:
            async with gateway_client(args, "_broker") as broker:
                result = await broker.call_tool("provider_status", {"name": args.slot})
        except GatewayCallError as exc:
            if exc.code is None:  # unreachable, silent or refused at the door: the slot would be too
                raise
            result = None  # _broker's status is not this client's to read: hash what it may see
        status = result.get("structuredContent") if result and not result.get("isError") else None
        board_hash = status.get("tools_hash") if isinstance(status, dict) else None
        if isinstance(board_hash, str):
            print(board_hash)
            return 0
        async with gateway_client(args, args.slot) as client:
            listed = await client.list_tools()
        print(tools_hash(listed))
        if result is None:
            print(
                "mcp-gateway schema-hash: the hash of the tools this client may see: a [policy] that hides some "
                "makes it differ from the board's (a client granted provider_status on /_system/broker gets the "
                "board's own)",
                file=sys.stderr,
            )
        return 0

    return asyncio.run(go())


def cmd_tools(args: argparse.Namespace) -> int:
    """What a slot offers, as `call` takes it: names, arguments, descriptions (or the tools as JSON)."""
    import shutil

    from gateway.client import render_tools, terminal_text

    if refused_as_not_utf8("tools", [("the slot", args.slot), ("--url", args.url)]):
        return 2
    escape_unencodable_output()

    async def go() -> int:
        async with gateway_client(args, args.slot) as client:
            tools = await client.list_tools()
        if args.json:  # the same JSON, with what does not print escaped in its strings
            sys.stdout.write(terminal_text(orjson.dumps(tools, option=orjson.OPT_INDENT_2).decode(), lines=True) + "\n")
        else:
            # Wrapped to a terminal's width; into a pipe or a file, each description is one line.
            width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
            sys.stdout.write(render_tools(tools, full=args.full, width=width) + "\n")
        return 0

    return asyncio.run(go())


def add_calls(commands: Commands) -> None:
    token_help = "a file holding a client token, for a gateway with [auth] (default: $MCP_GATEWAY_TOKEN, if set)"
    slots = commands.add_parser("slots", help="list the slots of a running gateway")
    gateway_url_option(slots)
    slots.add_argument("--token-file", metavar="FILE", help=token_help)
    gateway_timeout_option(slots)
    gateway_answer_option(slots)
    slots.add_argument(
        "--all",
        action="store_true",
        help="also list the names clients asked for that never had a provider and are not declared or configured "
        "(by default only counted, on stderr)",
    )
    slots.add_argument(
        "--json", action="store_true", help="the slots listed, as one JSON array of providers_list's entries"
    )
    slots.set_defaults(func=cmd_slots)

    tools = commands.add_parser(
        "tools", help="list the tools of a slot of a running gateway, with their arguments as call takes them"
    )
    tools.add_argument("slot", help="the slot, e.g. pump-1, or _all, _broker (mcp-gateway slots lists them)")
    tools.add_argument("--full", action="store_true", help="each description whole, not its first sentence")
    tools.add_argument("--json", action="store_true", help="the tools as the slot lists them (tools/list), as JSON")
    gateway_url_option(tools)
    tools.add_argument("--token-file", metavar="FILE", help=token_help)
    gateway_timeout_option(tools)
    gateway_answer_option(tools)
    tools.set_defaults(func=cmd_tools)

    call = commands.add_parser("call", help="call a tool on a slot of a running gateway")
    intermixed(call)  # `call SLOT TOOL a=1 --timeout 5 b=2`: options among the key=value arguments
    call.add_argument("slot", help="the slot to call, e.g. pump-1 (mcp-gateway slots lists them)")
    call.add_argument("tool", help="the tool's name, as mcp-gateway tools SLOT lists it, e.g. get_status")
    # A default keeps argparse from reporting key=value as required when tool is missing too.
    call.add_argument(
        "arguments",
        nargs="*",
        default=[],
        metavar="key=value",
        help="the tool's arguments, each name once; a value that parses as JSON is JSON (1200, true, "
        '\'{"a": 1}\'), any other is text (01200 is the string "01200")',
    )
    gateway_url_option(call)
    call.add_argument("--token-file", metavar="FILE", help=token_help)
    gateway_timeout_option(call)
    gateway_answer_option(call)
    call.set_defaults(func=cmd_call)

    schema_hash = commands.add_parser(
        "schema-hash", help="canonical hash of a tools schema file, or of the tools a live slot lists"
    )
    schema_hash.add_argument("file", nargs="?", help="schema file: the tools array (e.g. device/schemas/pump-1.json)")
    schema_hash.add_argument("--slot", help="hash the tools/list of this slot on a running gateway instead")
    gateway_url_option(schema_hash, "with --slot: the gateway's base URL")
    schema_hash.add_argument("--token-file", metavar="FILE", help=token_help)
    gateway_timeout_option(schema_hash)
    gateway_answer_option(schema_hash)
    schema_hash.set_defaults(func=cmd_schema_hash)
