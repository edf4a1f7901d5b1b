"""The records the trail keeps (a decision, a result) and how their values are stored: masked, JSON, text."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.policy.schemas import shown

SECRET_KEY = re.compile(r"password|passwd|secret|token|api[-_]?key|authorization|credential", re.IGNORECASE)
"""An argument key whose value is never stored: matched anywhere in the key ("db_password", "X-Api-Key")."""
MASK = "***"
MAX_DEPTH = 64
"""Deeper than this, a value is stored as a marker: the gateway bounds nesting long before, this guards the walk."""
TOO_DEEP = "<nested too deep>"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


EFFECTS = (
    "allow",
    "clamp",
    "deny",
    "refuse-arguments",
    "refuse-limit",
    "wait-confirmation",
    "refuse-confirmation",
    "declined",
)
"""Every decision a record may hold: the first two forwarded the call, the others did not."""


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """One decision about one request, recorded before the request is forwarded (or refused)."""

    principal: Collection[str]
    """The caller's subject strings ("token:agent-1", "group:operators", "anonymous")."""
    transport: str
    """The way in: "streamable-http", "sse", "websocket", "stdio", ..."""
    slot: str
    resource: str
    """The slot's resource path ("/site1/line2/pump-1")."""
    capability: str
    """What was asked ("tool.control", "mcp.tools.call", ...)."""
    effect: str
    """What was decided: "allow", "clamp" (forwarded); "deny", "refuse-arguments", "refuse-limit",
    "wait-confirmation", "refuse-confirmation", "declined" (not forwarded)."""
    tool: str | None = None
    arguments: Any = None
    """The call's arguments as the caller sent them: secret-looking keys are masked when stored."""
    rules: Sequence[str] = ()
    """The ids of the rules that decided ("assign[0]", "deny[1]", "default")."""
    constraints: Any = None
    """Constraints applied or values clamped (any JSON value, e.g. ["speed_rpm 2500 -> 2000 (policy limits[0])"])."""
    client_id: str | None = None
    reason: str | None = None
    """The words the caller was given, for a refusal."""
    confirmed_by: str | None = None
    confirmed_ms: int | None = None
    trace_id: str | None = None
    time_ms: int = field(default_factory=now_ms)


@dataclass(frozen=True, slots=True)
class ResultRecord:
    """How a forwarded call ended: "ok", "error", "tool-error", "timeout", "cancelled", ..."""

    decision_id: int
    status: str
    latency_ms: float
    error: str | None = None
    time_ms: int = field(default_factory=now_ms)


def mask_secrets(value: Any, depth: int = 0) -> Any:
    """`value` with the value of every secret-looking key replaced by "***", at any depth."""
    if depth >= MAX_DEPTH:
        return TOO_DEEP
    if isinstance(value, dict):
        return {
            key: MASK if isinstance(key, str) and SECRET_KEY.search(key) else mask_secrets(item, depth + 1)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [mask_secrets(item, depth + 1) for item in value]
    return value


MIN_MASKED_CHARS = 4
"""A secret value shorter than this is masked where a refusal names its argument, not wherever it occurs
(masking "1" everywhere would garble the text)."""


def secret_values(value: Any, depth: int = 0) -> dict[str, Any]:
    """Every value under a secret-looking key at any depth, by the key it is under (the last one seen)."""
    found: dict[str, Any] = {}
    if depth >= MAX_DEPTH:
        return found
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and SECRET_KEY.search(key) is not None:
                found[key] = item
            found.update(secret_values(item, depth + 1))
    elif isinstance(value, list | tuple):
        for item in value:
            found.update(secret_values(item, depth + 1))
    return found


def _forms(value: Any, depth: int = 0) -> set[str]:
    """How a value may be written in a message: as the refusal shows it, as JSON, as text; its parts too."""
    forms = {shown(value), str(value)}
    with contextlib.suppress(TypeError, orjson.JSONEncodeError):
        forms.add(orjson.dumps(value).decode())
    if depth < MAX_DEPTH:
        parts = value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else ()
        for part in parts:
            forms |= _forms(part, depth + 1)
    return forms


def mask_text(text: str, secrets: dict[str, Any]) -> str:
    """`text` (a refusal's reason) without the `secrets` (secret_values of the arguments) in it: the value
    in `Argument "api_token" = "..."` whatever its length, and any other copy of one of 4 characters or more."""
    if not secrets:
        return text
    for key, value in secrets.items():
        named = f'Argument "{key}" = '
        text = text.replace(named + shown(value), named + MASK)
    forms = set().union(*(_forms(value) for value in secrets.values()))
    for form in sorted((form for form in forms if len(form) >= MIN_MASKED_CHARS), key=len, reverse=True):
        text = text.replace(form, MASK)
    return text


def mask_in(value: Any, secrets: dict[str, Any], depth: int = 0) -> Any:
    """`value` (a record's constraints) with mask_text applied to every string in it."""
    if not secrets:
        return value
    if isinstance(value, str):
        return mask_text(value, secrets)
    if depth >= MAX_DEPTH:
        return TOO_DEEP
    if isinstance(value, dict):
        return {key: mask_in(item, secrets, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [mask_in(item, secrets, depth + 1) for item in value]
    return value


def to_json(value: Any) -> str | None:
    """JSON text for a column (None stays NULL); a value JSON cannot hold is stored as its description."""
    if value is None:
        return None
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except (TypeError, orjson.JSONEncodeError) as exc:
        # e.g. a lone surrogate in a string: the record is kept, saying what could not be stored.
        return orjson.dumps({"unstorable": text(repr(value)[:1000]), "why": str(exc)}).decode()


def text(value: Any) -> str:
    """A string SQLite accepts: lone surrogates (from escaped JSON) would fail the whole batch."""
    string = str(value)
    if string.isascii():
        return string
    return string.encode("utf-8", "backslashreplace").decode("utf-8")


def optional_text(value: Any) -> str | None:
    return None if value is None else text(value)


def decision_row(record: DecisionRecord) -> tuple[Any, ...]:
    """The decisions table's columns after id, in order (store.DECISION_COLUMNS)."""
    secrets = secret_values(record.arguments)  # kept out of the reason and the constraints too
    return (
        int(record.time_ms),
        to_json(sorted(text(subject) for subject in record.principal)),
        optional_text(record.client_id),
        text(record.transport),
        text(record.slot),
        text(record.resource),
        optional_text(record.tool),
        text(record.capability),
        to_json(mask_secrets(record.arguments)),
        text(record.effect),
        to_json([text(rule) for rule in record.rules]),
        to_json(mask_in(record.constraints, secrets)),
        optional_text(None if record.reason is None else mask_text(record.reason, secrets)),
        optional_text(record.confirmed_by),
        None if record.confirmed_ms is None else int(record.confirmed_ms),
        optional_text(record.trace_id),
    )


def result_row(record: ResultRecord) -> tuple[Any, ...]:
    """The results table's columns, in order (store.INSERT_RESULT)."""
    return (
        int(record.decision_id),
        int(record.time_ms),
        text(record.status),
        float(record.latency_ms),
        optional_text(record.error),
    )
