"""`mcp-gateway audit`: read the audit trail of governed calls, filtered, as a table, JSON lines or CSV."""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from gateway.cli.columns import aligned
from gateway.cli.common import Commands, whole_number
from gateway.client import name_cell, terminal_text

DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
TABLE_COLUMNS = ("time", "id", "principal", "via", "slot", "tool", "effect", "status", "ms", "rules")
CELL_CHARS = 40
TABLE_LIMIT = 1000
"""The table shows the newest this many records unless --limit says otherwise."""
ENV_AUDIT_PATH = "MCP_GATEWAY_AUDIT__PATH"
DAMAGED = "damaged"
"""A record's key naming its columns whose stored JSON cannot be read (gateway/policy/audit/reading.py)."""
MAX_PRINCIPAL_CHARS = 512
"""Longest --principal: a subject's kind and an access token's longest subject (256 characters) fit in it."""
DAMAGED_IDS_SHOWN = 20
"""The note on stderr names at most this many damaged records by id, and counts the rest."""
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""A csv cell starting with one of these is a formula to a spreadsheet (OWASP, CSV injection)."""
TEXT_MARK = "'"
"""Put before such a text cell in csv so that a spreadsheet shows it as text; also before a text cell that
starts with it already, so that removing one leading mark always gives the stored text back."""


def time_flag(text: str, now_ms: int | None = None) -> int:
    """--since/--until: an ISO 8601 time (local unless it names a zone) or a duration back from now
    ("90s", "15m", "1h", "2d", "1w", "1h30m"); unix ms."""
    now = now_ms if now_ms is not None else int(datetime.now(UTC).timestamp() * 1000)
    value = text.strip()
    if value and DURATION_PART.sub("", value) == "":
        return now - int(sum(float(amount) * UNIT_MS[unit] for amount, unit in DURATION_PART.findall(value)))
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO time (2026-05-09T14:00, 2026-05-09T12:00Z) or a duration (90s, 15m, 1h, 2d), got {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time, as the operator reads the clock
    return int(moment.timestamp() * 1000)


def trail_path(args: argparse.Namespace, environ: Mapping[str, str]) -> Path:
    """--path, else [audit] path of --config / $MCP_GATEWAY_CONFIG (read as plain TOML: the secrets the
    configuration names need not exist in this shell) and $MCP_GATEWAY_AUDIT__PATH, else the default."""
    from pydantic import ValidationError

    from gateway.config import ENV_CONFIG_FILE, AuditConfig, ConfigError, read_toml
    from gateway.policy.audit import audit_path

    if args.path:
        return Path(args.path).expanduser()
    table: Any = {}
    name = args.config or environ.get(ENV_CONFIG_FILE)
    if name:
        table = read_toml(Path(name)).get("audit", {})
    if environ.get(ENV_AUDIT_PATH) and isinstance(table, dict):
        table = {**table, "path": environ[ENV_AUDIT_PATH]}
    try:
        config = AuditConfig.model_validate(table)
    except ValidationError as exc:
        raise ConfigError(f"[audit] in {name or 'the environment'}: {exc.errors()[0]['msg']}") from None
    return audit_path(config, environ)


def iso_time(ms: int | None) -> str | None:
    """UTC, to the millisecond: the form jsonl and csv carry."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def local_time(ms: int) -> str:
    """Local time to the millisecond with its UTC offset, so an hour repeated when the clocks go back
    reads unambiguously: 2026-12-04 19:49:36.865-05:00."""
    return datetime.fromtimestamp(ms / 1000).astimezone().isoformat(sep=" ", timespec="milliseconds")


def _cell(value: Any) -> str:
    # Escaped before it is cut, so that the cut counts what the terminal shows.
    text = "-" if value is None or value == "" else terminal_text(str(value))
    return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…"


def _name(value: str | None) -> str | None:
    """A slot's or tool's name as one field (a JSON string when it holds a space or a quote), so that a
    name cannot pass for the columns after it."""
    return None if value is None or value == "" else name_cell(value)


def status_cell(record: dict[str, Any]) -> str | None:
    """How the call ended; for a call cancelled while the device was answering, what it answered after the
    cancel too ("cancelled, then ok", "cancelled, then tool-error: <text>")."""
    status: str | None = record["status"]
    after = record.get("after_cancel")
    if after is None:
        return status
    error = record.get("after_cancel_error")
    return f"{status}, then {after}" + (f": {error}" if error else "")


def _listed(record: dict[str, Any], column: str) -> str | None:
    """A list column as comma-separated text; "(damaged)" when its stored JSON cannot be read."""
    value = record[column]
    if value is None:
        return "(damaged)" if column in record.get(DAMAGED, ()) else None
    return ",".join(str(item) for item in value) if isinstance(value, list) else str(value)


def render_table(records: Sequence[dict[str, Any]]) -> str:
    """One line per decision: who, where, what, the effect and how the call ended. What a caller or a
    provider wrote (a tool's name, a subject, an error's text) is shown with what does not print escaped
    (gateway.client.terminal_text): it can neither act on the terminal nor start a line of its own."""
    lines = [
        [
            local_time(record["time_ms"]),
            str(record["id"]),
            _listed(record, "principal"),
            record["transport"],
            _name(record["slot"]),
            _name(record["tool"]),
            record["effect"],
            status_cell(record),
            None if record["latency_ms"] is None else f"{record['latency_ms']:.1f}",
            _listed(record, "rules"),
        ]
        for record in records
    ]
    return aligned(TABLE_COLUMNS, [[_cell(value) for value in line] for line in lines])


def write_jsonl(records: Iterable[dict[str, Any]], out: TextIO) -> None:
    import orjson

    for record in records:
        out.write(orjson.dumps({"time": iso_time(record["time_ms"]), **record}).decode() + "\n")


def spreadsheet_text(value: Any) -> Any:
    """A csv cell as a spreadsheet cannot run it: text that starts like a formula (FORMULA_STARTS) or with
    TEXT_MARK gets TEXT_MARK before it. Numbers stay numbers (a negative one is no formula)."""
    if isinstance(value, str) and value.startswith((*FORMULA_STARTS, TEXT_MARK)):
        return TEXT_MARK + value
    return value


def _csv_cell(value: Any, dumps: Callable[[Any], bytes]) -> Any:
    """A csv cell: lists and objects as JSON text, text marked as text where it starts like a formula
    (spreadsheet_text, judged on the stored text), and in both what does not print escaped as the table
    escapes it (terminal_text; a text's newlines and tabs stay, in a quoted cell), since an export is
    also read on a terminal. Numbers stay numbers."""
    if isinstance(value, list | dict):
        return terminal_text(dumps(value).decode())
    marked = spreadsheet_text(value)
    return terminal_text(marked, lines=True) if isinstance(marked, str) else marked


class _LineFeedRows:
    """Rows the csv module ends with CRLF, the terminator for which it quotes a cell holding a carriage
    return (a bare one ends the row in a spreadsheet), handed on ending in a newline as every line of
    the export does."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def write(self, row: str) -> int:
        return self.out.write(row.removesuffix("\r\n") + "\n")


def write_csv(records: Iterable[dict[str, Any]], out: TextIO) -> None:
    """Every column; lists and objects (principal, arguments, rules, constraints) as JSON text; the last
    column, `damaged`, is empty for a whole record. A text cell that a spreadsheet would read as a
    formula is marked as text (spreadsheet_text); jsonl carries the stored text as it is."""
    import csv

    import orjson

    writer: Any = None
    for record in records:
        row = {"time": iso_time(record["time_ms"]), **record}
        row = {key: _csv_cell(value, orjson.dumps) for key, value in row.items()}
        if writer is None:
            fields = list(row) if DAMAGED in row else [*row, DAMAGED]
            writer = csv.DictWriter(_LineFeedRows(out), fieldnames=fields, lineterminator="\r\n")
            writer.writeheader()
        writer.writerow(row)


def write_table(records: Iterable[dict[str, Any]], out: TextIO) -> None:
    table = render_table(list(records))
    out.write(table + "\n")


WRITERS = {"table": write_table, "jsonl": write_jsonl, "csv": write_csv}


class DamagedRecords:
    """The records of one output whose stored JSON cannot be read, for one note on stderr at its end."""

    def __init__(self) -> None:
        self.count = 0
        self.ids: list[int] = []

    def watch(self, records: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for record in records:
            if record.get(DAMAGED):
                self.count += 1
                if len(self.ids) < DAMAGED_IDS_SHOWN:
                    self.ids.append(record["id"])
            yield record

    def note(self, path: Path) -> str | None:
        if not self.count:
            return None
        ids = ", ".join(str(number) for number in self.ids)
        more = f" and {self.count - len(self.ids)} more" if self.count > len(self.ids) else ""
        one = self.count == 1
        counted = (
            f"1 record of {path} (id {ids}) holds" if one else f"{self.count} records of {path} (ids {ids}{more}) hold"
        )
        return (
            f"mcp-gateway audit: {counted} "
            f'JSON that cannot be read: those columns are shown as null and named under "{DAMAGED}" '
            "(a write cut short by a power loss, or a failing storage card); the other records are whole and the "
            "gateway writes on. To start a trail without them, stop the gateway and move the file aside with its "
            "-wal and -shm files, keeping them as the record (docs/governance-audit.md, A damaged trail)"
        )


def relative_trail_hint(path: Path, remedy: str) -> str:
    """Where a relative [audit] `path` was looked for, and `remedy`: `audit` and `backup` say it alike."""
    # As `run` reads it (docs/governance-audit.md): from the working directory, not the config's.
    return (
        f"a relative [audit] path is read from the working directory, as mcp-gateway run reads it: here "
        f"{path.absolute()}; {remedy}"
    )


SYSTEMD_TRAIL_HINT = (
    "under systemd the gateway writes $STATE_DIRECTORY/audit.db, /var/lib/mcp-gateway/audit.db with the "
    "shipped unit: pass --path FILE"
)
"""The trail a gateway finds through its service's environment, which this shell lacks."""


def _names_a_trail(args: argparse.Namespace, environ: Mapping[str, str]) -> bool:
    """Whether --config / $MCP_GATEWAY_CONFIG has an [audit] path or $MCP_GATEWAY_AUDIT__PATH is set."""
    from gateway.config import ENV_CONFIG_FILE, read_toml

    if environ.get(ENV_AUDIT_PATH):
        return True
    name = args.config or environ.get(ENV_CONFIG_FILE)
    table = read_toml(Path(name)).get("audit", {}) if name else {}
    return isinstance(table, dict) and bool(table.get("path"))


def _present(path: Path) -> bool:
    """Whether `path` exists, taking a directory this user may not enter as holding it: its error says so."""
    try:
        return path.exists()
    except PermissionError:
        return True


def _missing_hint(args: argparse.Namespace, path: Path) -> str:
    """What to pass when the trail read does not exist; never the option that was given."""
    import os

    from gateway.config import ENV_CONFIG_FILE

    if args.path or _present(path):
        return ""
    if not path.is_absolute():
        return f" ({relative_trail_hint(path, 'run this where the gateway runs, or pass --path FILE')})"
    if _names_a_trail(args, os.environ):
        return " (pass --path FILE to read another trail)"
    # No [audit] path anywhere: this shell's default location, not necessarily the running gateway's.
    if args.config or os.environ.get(ENV_CONFIG_FILE):
        return f" (the configuration names no [audit] path; {SYSTEMD_TRAIL_HINT})"
    return f" ({SYSTEMD_TRAIL_HINT}, or --config FILE when the gateway's configuration names an [audit] path)"


def _pattern_too_long(args: argparse.Namespace) -> str | None:
    """Why --slot, --tool or --principal is refused for its length, or None: SQLite refuses a long GLOB
    pattern as too complex, which would read as a trail that cannot be read. The bound of --slot and --tool
    is the one of _broker's broker_audit_recent; the value itself is never echoed."""
    from gateway.core.broker.governed_tools import MAX_PATTERN

    for flag, value, most in (
        ("--slot", args.slot, MAX_PATTERN),
        ("--tool", args.tool, MAX_PATTERN),
        ("--principal", args.principal, MAX_PRINCIPAL_CHARS),
    ):
        if value is not None and len(value) > most:
            return f"{flag} is {len(value)} characters long; it takes a name or pattern of at most {most} characters"
    return None


def cmd_audit(args: argparse.Namespace) -> int:
    """Print the audit trail's decisions with their results, oldest first: every matching one as jsonl or
    csv, the newest TABLE_LIMIT as a table; --limit N keeps the newest N, and a cut is said on stderr."""
    import os

    from gateway.policy.audit import AuditReadError, read_records
    from gateway.policy.audit.reading import Filters, stream_records
    from gateway.policy.audit.records import EFFECTS

    if args.effect is not None and args.effect not in EFFECTS:
        print(f"mcp-gateway audit: --effect {args.effect!r} is none of {', '.join(EFFECTS)}", file=sys.stderr)
        return 2
    too_long = _pattern_too_long(args)
    if too_long is not None:
        print(f"mcp-gateway audit: {too_long}", file=sys.stderr)
        return 2
    if args.since is not None and args.until is not None and args.since >= args.until:
        # Nothing lies between them: say so rather than print an empty table.
        print("mcp-gateway audit: --since must be earlier than --until", file=sys.stderr)
        return 2
    path = trail_path(args, os.environ)
    limit = args.limit if args.limit is not None else TABLE_LIMIT if args.format == "table" else None
    filters = Filters(args.since, args.until, args.principal, args.slot, args.tool, args.effect)
    cut = False
    damaged = DamagedRecords()
    try:
        records: Iterable[dict[str, Any]]
        if limit is None:
            records = stream_records(path, filters)
        else:
            # One more than asked for: whether the output is cut is then known, not guessed.
            fetched = read_records(path, **dataclasses.asdict(filters), limit=limit + 1)
            cut = len(fetched) > limit
            records = fetched[1:] if cut else fetched
        WRITERS[args.format](damaged.watch(records), sys.stdout)
    except AuditReadError as exc:
        print(f"mcp-gateway audit: {exc}{_missing_hint(args, path)}", file=sys.stderr)
        return 2  # a trail missing or unusable: the file the command was given (docs/cli.md)
    finally:
        note = damaged.note(path)
        if note is not None:
            print(note, file=sys.stderr)
    if cut:
        shown = "the newest matching record is" if limit == 1 else f"the newest {limit} matching records are"
        more = "a larger --limit" if args.limit is not None else "--limit N"
        print(f"mcp-gateway audit: only {shown} shown; {more} for more", file=sys.stderr)
    return 0


def add_audit(commands: Commands) -> None:
    audit = commands.add_parser(
        "audit",
        help="read the audit trail of governed calls",
        description="Print the audit trail's decisions with their results, oldest first: every matching one as "
        f"jsonl or csv, the newest {TABLE_LIMIT} as a table. Reads the file while the gateway writes it.",
    )
    audit.add_argument("--since", type=time_flag, metavar="TIME", help="from TIME: ISO 8601, or a duration ago: 1h, 2d")
    audit.add_argument("--until", type=time_flag, metavar="TIME", help="before TIME (same forms as --since)")
    audit.add_argument("--principal", metavar="P", help="one of the caller's subjects, e.g. token:agent-1 (* allowed)")
    audit.add_argument("--slot", metavar="S", help="the slot, e.g. pump-1 or 'pump-*'")
    audit.add_argument("--tool", metavar="T", help="the tool's name (* allowed)")
    audit.add_argument(
        "--effect", metavar="E", help="the decision's effect: allow, clamp, deny, ... (a wrong one lists them all)"
    )
    audit.add_argument(
        "--limit",
        type=whole_number(1),
        metavar="N",
        help=f"the newest N records (default: all for jsonl and csv, {TABLE_LIMIT} for the table)",
    )
    audit.add_argument("--format", choices=tuple(WRITERS), default="table", help="output format (default table)")
    where = audit.add_mutually_exclusive_group()
    where.add_argument("--path", metavar="FILE", help="the audit database to read")
    where.add_argument(
        "--config",
        metavar="FILE",
        help="read the [audit] path of this gateway configuration (default: $MCP_GATEWAY_CONFIG, else the "
        "default location: $STATE_DIRECTORY/audit.db, $XDG_STATE_HOME/mcp-gateway/audit.db or "
        "~/.local/state/mcp-gateway/audit.db)",
    )
    audit.set_defaults(func=cmd_audit)
