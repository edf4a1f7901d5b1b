"""The records the trail keeps (a decision, a result) and how their values are stored: masked, JSON, text."""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import orjson

from gateway.core.secret_keys import MASK, MAX_DEPTH, TOO_DEEP, is_secret_key, mask_secrets
from gateway.policy.schemas import shown

MAX_ARGUMENTS_BYTES = 16_384
"""[audit] max_arguments_bytes by default: larger arguments are stored as a marker (stored_arguments)."""
MAX_REFUSED_ARGUMENTS_BYTES = 1024
"""[audit] max_refused_arguments_bytes by default: the bound for a decision whose call is not forwarded, so
that a caller's refused calls cannot fill the file (and prune the forwarded writes before them) 16 KiB at a time."""
TRUNCATED_KEY = "io.github.mcp-gateway/truncated"
"""The key that marks arguments stored as their size and hash instead of whole."""
MAX_MARKER_KEYS = 64
MAX_MARKER_KEY_CHARS = 128
"""A marker names at most this many of the arguments' top-level keys, each cut to this many characters."""
MAX_MARKER_VALUE_CHARS = 64
"""A top-level string value of at most this many characters is kept in a marker's "values"; a longer one is not."""
MAX_ERROR_CHARS = 1024
"""[audit] max_error_chars by default: a result's error text is stored cut to this many characters."""
MAX_CALLS_WITH_SECRETS = 4096
"""Forwarded calls whose secret argument values the trail holds until their result is stored (CallSecrets);
past it the oldest is forgotten. Far above the calls in flight at once (max_pending_per_slot per slot)."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


Effect = Literal[
    "allow",
    "clamp",
    "allow-with-constraints",
    "deny",
    "refuse-arguments",
    "refuse-limit",
    "wait-confirmation",
    "refuse-confirmation",
    "declined",
]
"""Every decision a record may hold: the first three let the call go on (`allow-with-constraints`: a
declaring provider's broker/authorize allowed it within limits), the others did not. The one list:
DecisionRecord.effect is typed by it, so a writer of another effect fails the type check."""
EFFECTS: tuple[str, ...] = get_args(Effect)
FORWARDED_EFFECTS = frozenset({"allow", "clamp", "allow-with-constraints"})
"""The effects of a decision whose call goes on, and so gets a result."""


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
    effect: Effect
    """What was decided (EFFECTS)."""
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
    secrets: Mapping[str, Any] = field(default_factory=dict)
    """The call's secret argument values (secret_values): the provider's error text may quote them, and
    is stored without them."""


@dataclass(frozen=True, slots=True)
class AnswerAfterCancel:
    """What the device answered to a call whose result is "cancelled", when its answer came after the
    gateway's cancel: "ok", "tool-error" or "error", and the text of a failure."""

    decision_id: int
    status: str
    error: str | None = None
    time_ms: int = field(default_factory=now_ms)
    secrets: Mapping[str, Any] = field(default_factory=dict)
    """As ResultRecord.secrets."""


def masked_keys(value: Any, depth: int = 0) -> dict[str, None]:
    """The keys whose values mask_secrets replaces, at any depth, each once, in the order met (a dict
    used as an ordered set); none under a masked value, whose whole value is hidden."""
    found: dict[str, None] = {}
    if depth >= MAX_DEPTH:
        return found
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and is_secret_key(key):
                found[key] = None
            else:
                found.update(masked_keys(item, depth + 1))
    elif isinstance(value, list | tuple):
        for item in value:
            found.update(masked_keys(item, depth + 1))
    return found


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
            if isinstance(key, str) and is_secret_key(key):
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


def mask_text(text: str, secrets: Mapping[str, Any]) -> str:
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


def mask_in(value: Any, secrets: Mapping[str, Any], depth: int = 0) -> Any:
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


def stored_arguments(arguments: Any, max_bytes: int) -> str | None:
    """The arguments column: the arguments as JSON with secrets masked; when their JSON is larger than
    `max_bytes`, a marker of at most `max_bytes` that still proves what was sent: {TRUNCATED_KEY: true,
    "bytes": N, "sha256": the hex SHA-256 of that JSON (compact, keys in the order sent), "keys": the
    top-level keys, "values": the top-level values that are small scalars (marker_value)}."""
    if arguments is None:
        return None
    try:
        judged = orjson.dumps(arguments, option=orjson.OPT_NON_STR_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        return to_json(mask_secrets(arguments))  # stored as its description, which to_json bounds
    if len(judged) <= max_bytes:
        return to_json(mask_secrets(arguments))
    marker: dict[str, Any] = {TRUNCATED_KEY: True, "bytes": len(judged), "sha256": hashlib.sha256(judged).hexdigest()}
    if not isinstance(arguments, dict):
        return to_json(marker)
    shown_keys: dict[str, Any] = {}  # the key as the marker shows it -> the key as sent
    for key in list(arguments)[:MAX_MARKER_KEYS]:
        shown_keys.setdefault(cut_text(text(key), MAX_MARKER_KEY_CHARS) or "", key)
    # The keys in the order sent, as many as fit in max_bytes: the last-listed are left out first.
    room = max_bytes - len(_compact(marker)) - len(',"keys":[]')
    keys: list[str] = []
    for shown_key in shown_keys:
        cost = len(_compact(shown_key)) + (1 if keys else 0)
        if cost > room:
            break
        keys.append(shown_key)
        room -= cost
    marker["keys"] = keys
    # Then the small values, the largest left out first (a number always fits before a padded string).
    room -= len(',"values":{}') - 1  # the first value needs no comma: each below counts one
    candidates = []
    for order, shown_key in enumerate(keys):
        value = marker_value(shown_keys[shown_key], arguments[shown_keys[shown_key]])
        if value is not _LEFT_OUT:
            candidates.append((len(_compact(shown_key)) + 2 + len(_compact(value)), order, shown_key, value))
    kept = []
    for cost, order, shown_key, value in sorted(candidates):
        if cost > room:
            break
        kept.append((order, shown_key, value))
        room -= cost
    values = {shown_key: value for _, shown_key, value in sorted(kept)}
    if values:
        marker["values"] = values
    return to_json(marker)


_LEFT_OUT = object()


def marker_value(key: Any, value: Any) -> Any:
    """What a marker's "values" keeps of a top-level argument: a number, a boolean, null or a string of
    at most MAX_MARKER_VALUE_CHARS characters as sent ("***" under a secret-looking key); _LEFT_OUT for
    anything else (an object, an array, a longer string), which only the hash proves."""
    if value is None or isinstance(value, bool | int | float):
        small = True
    else:
        small = isinstance(value, str) and len(value) <= MAX_MARKER_VALUE_CHARS
    if not small:
        return _LEFT_OUT
    if isinstance(key, str) and is_secret_key(key):
        return MASK
    return text(value) if isinstance(value, str) else value


def _compact(value: Any) -> bytes:
    """The JSON to_json stores for `value`, to count a marker's bytes before it is built."""
    return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS)


def arguments_bound(effect: str, max_arguments_bytes: int, max_refused_arguments_bytes: int) -> int:
    """The size up to which a decision's arguments are stored whole: a forwarded call's up to
    max_arguments_bytes; a refused one's (any other effect: it reached no device) up to the smaller bound."""
    if effect in FORWARDED_EFFECTS:
        return max_arguments_bytes
    return min(max_arguments_bytes, max_refused_arguments_bytes)


def decision_row(
    record: DecisionRecord,
    max_arguments_bytes: int = MAX_ARGUMENTS_BYTES,
    max_refused_arguments_bytes: int = MAX_REFUSED_ARGUMENTS_BYTES,
) -> tuple[Any, ...]:
    """The decisions table's columns after id, in order (store.DECISION_COLUMNS)."""
    bound = arguments_bound(record.effect, max_arguments_bytes, max_refused_arguments_bytes)
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
        stored_arguments(record.arguments, bound),
        text(record.effect),
        to_json([text(rule) for rule in record.rules]),
        to_json(mask_in(record.constraints, secrets)),
        optional_text(None if record.reason is None else mask_text(record.reason, secrets)),
        optional_text(record.confirmed_by),
        None if record.confirmed_ms is None else int(record.confirmed_ms),
        optional_text(record.trace_id),
    )


def cut_text(value: str | None, max_chars: int) -> str | None:
    """`value` cut to `max_chars` characters, marked with "…" when it was longer."""
    if value is None or len(value) <= max_chars:
        return value
    return value[: max_chars - 1] + "…"


def stored_error(error: str | None, secrets: Mapping[str, Any], max_chars: int) -> str | None:
    """The error column: a provider's or the gateway's text without the call's secret values (a device's
    error may quote the password it was given), then cut to `max_chars` (masked first, so a cut cannot
    leave the start of a secret that masking would no longer recognise)."""
    if error is None:
        return None
    return text(cut_text(mask_text(error, secrets), max_chars))


def result_row(record: ResultRecord, max_error_chars: int = MAX_ERROR_CHARS) -> tuple[Any, ...]:
    """The results table's columns, in order (store.INSERT_RESULT); the error masked and cut to `max_error_chars`."""
    return (
        int(record.decision_id),
        int(record.time_ms),
        text(record.status),
        float(record.latency_ms),
        stored_error(record.error, record.secrets, max_error_chars),
    )


def answer_after_cancel_row(record: AnswerAfterCancel, max_error_chars: int = MAX_ERROR_CHARS) -> tuple[Any, ...]:
    """The answers_after_cancel table's columns, in order (store.INSERT_ANSWER_AFTER_CANCEL)."""
    return (
        int(record.decision_id),
        int(record.time_ms),
        text(record.status),
        stored_error(record.error, record.secrets, max_error_chars),
    )


class CallSecrets:
    """The secret argument values of forwarded calls, by decision id, from their decision until their
    result is stored: a result carries only the decision's id, and its error text is masked with them.
    A call whose result is "cancelled" keeps them for the device's answer after the cancel. Bounded:
    past `max_calls` the oldest call's are forgotten (its error would be stored as it came)."""

    def __init__(self, max_calls: int = MAX_CALLS_WITH_SECRETS) -> None:
        self.max_calls = max_calls
        self._by_decision: OrderedDict[int, dict[str, Any]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_decision)

    def remember(self, decision_id: int, record: DecisionRecord) -> None:
        """Keep the secrets of `record`'s arguments if its call goes on and it has any (most have none)."""
        if record.effect not in FORWARDED_EFFECTS:
            return  # a refusal gets no result
        secrets = secret_values(record.arguments)
        if not secrets:
            return
        self._by_decision[decision_id] = secrets
        while len(self._by_decision) > self.max_calls:
            self._by_decision.popitem(last=False)

    def for_result(self, decision_id: int, status: str) -> dict[str, Any]:
        """The secrets for the result of `decision_id`; forgotten unless it was cancelled."""
        if status == "cancelled":
            return self._by_decision.get(decision_id, {})
        return self._by_decision.pop(decision_id, {})

    def for_answer_after_cancel(self, decision_id: int) -> dict[str, Any]:
        return self._by_decision.pop(decision_id, {})
