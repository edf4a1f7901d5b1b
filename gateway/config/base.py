"""What every section shares: the Section base, bounded numbers, protocol choices, env names, host and URL checks."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

ENV_PREFIX = "MCP_GATEWAY_"
ENV_CONFIG_FILE = "MCP_GATEWAY_CONFIG"
ENV_CLIENT_TOKEN = "MCP_GATEWAY_TOKEN"
"""The bearer token `mcp-gateway stdio` sends: a client-side variable, not a gateway setting, so a shell
that sets it for the bridge can still run the gateway."""
ENV_CLIENT_URL = "MCP_GATEWAY_URL"
ENV_SIM_CONTROL_URL = "MCP_GATEWAY_SIM_CONTROL"
"""Where client commands find the gateway and the simulator's control endpoint: client-side too, not settings."""
CLIENT_SIDE_ENV = frozenset({ENV_CONFIG_FILE, ENV_CLIENT_TOKEN, ENV_CLIENT_URL, ENV_SIM_CONTROL_URL})
DEFAULT_PORT = 3000  # mcp-broker's port, so boards flashed for it connect unchanged

TakeoverPolicy = Literal["liveness", "reject", "always"]
IdStyle = Literal["brk", "numeric"]
ProviderEra = Literal["auto", "session"]
"""The protocol era spoken to a provider: auto (server/discover first, 2026-07-28 to a provider that
answers it, else initialize) or session (initialize only); see docs/protocol.md."""

PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]

MIN_TIMEOUT_S = 0.1
"""The shortest timeout or grace a duration setting may name (docs/configuration.md): below it every
connection, handshake or child would fail at once, or a timer would fire in a loop."""
MIN_RETRY_S = 0.05
"""The shortest first (and longest) wait of a retry back-off: a link that keeps failing is retried
at most 20 times a second instead of as fast as the event loop turns."""

MAX_DURATION_S = 30 * 86_400
"""The longest any duration setting may be (30 days; its name ends in _s or _ms). Far above any sane
timeout, interval or retention, and safe for everything that takes one: socket timeouts (at most about
9.2e9 s), MQTT's 4-byte expiry, int conversions to milliseconds, timers."""
MAX_DAYS = 36_500
"""The longest a setting counted in days (its name ends in _days) may be: 100 years, far inside what a
millisecond timestamp in SQLite holds."""
MAX_CONFIG_INTEGER = (1 << 63) - 1
"""The largest integer any setting takes, also one without a bound of its own: TOML's integers are
64-bit, and C code beneath (aiohttp's parser, sockets, SQLite) takes no larger one."""


def duration_ceiling(name: str) -> tuple[float, str] | None:
    """The largest value of the setting `name` if it is a duration (by its unit suffix), with that
    bound in words; None for other settings. A rate (`_per_s`) is not a duration."""
    if name.endswith("_per_s"):
        return None
    if name.endswith("_ms"):
        return MAX_DURATION_S * 1000, "30 days"
    if name.endswith("_s"):
        return MAX_DURATION_S, "30 days"
    if name.endswith("_days"):
        return MAX_DAYS, "100 years"
    return None


def check_duration(value: object, ceiling: tuple[float, str]) -> None:
    """PydanticCustomError for a duration over its ceiling; a table of them (tool_timeouts_ms) entry by entry."""
    entries = value.items() if isinstance(value, dict) else [(None, value)]
    limit, words = ceiling
    for entry, item in entries:
        if isinstance(item, int | float) and not isinstance(item, bool) and item > limit:
            where = "" if entry is None else f"entry {str(entry)[:64]!r}: "
            raise PydanticCustomError(
                "less_than_equal",
                "{where}Input should be less than or equal to {le} ({words}: the longest a duration setting may be)",
                {"where": where, "le": int(limit), "words": words},
            )


def check_integer(value: object) -> None:
    """PydanticCustomError for an integer past 64 bits (TOML's range), in a setting or in a list or
    table of them: Python reads any length, so TOML and the environment hand over
    99999999999999999999 as it is."""
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else [value]
    for item in items:
        if (
            isinstance(item, int)
            and not isinstance(item, bool)
            and not -MAX_CONFIG_INTEGER - 1 <= item <= MAX_CONFIG_INTEGER
        ):
            bound, kind = (MAX_CONFIG_INTEGER, "less") if item > 0 else (-MAX_CONFIG_INTEGER - 1, "greater")
            raise PydanticCustomError(
                f"{kind}_than_equal",
                f"Input should be {kind} than or equal to {{bound}} (integers in the configuration are 64-bit)",
                {"bound": bound},
            )


def rule_error(setting: str, message: str) -> PydanticCustomError:
    """The error of a rule the whole configuration checks (a validator of GatewayConfig, whose errors
    have no key of their own): it carries the dotted key of the setting to change, so the loader names
    that key and where it came from."""
    return PydanticCustomError("config_rule", "{message}", {"message": message, "setting": setting})


class Section(BaseModel):
    # Strict: TOML, the environment's JSON and the flags all give typed values, so a value of another
    # type is a mistake to name, not one to convert: `port = true` is not port 1 (a bool is an int in
    # Python), `enabled = "yes"` is not true, `port = "3000"` is not a number. No inf or nan either: a
    # bound or an interval must be a finite number.
    model_config = ConfigDict(extra="forbid", validate_default=True, strict=True, allow_inf_nan=False)

    @field_validator("*")
    @classmethod
    def _bounded_duration(cls, value: object, info: ValidationInfo) -> object:
        # Every duration, by its name, in every section (present and future): a finite value the
        # config check accepts must also be one every timer, socket and conversion that uses it takes.
        # Likewise every integer, whatever its setting: one past 64 bits is no value C code takes.
        ceiling = duration_ceiling(info.field_name or "")
        if ceiling is not None:
            check_duration(value, ceiling)
        check_integer(value)
        return value


def masked_url(url: str) -> str:
    """`url` as a message may quote it: the password of its userinfo replaced by `***`.

    A userinfo without a password is masked whole: a lone user name is often a token. Works on any
    text, however malformed (the URL being quoted is usually the one that was rejected)."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        return url
    authority_end = min((index for index in map(rest.find, "/?#") if index >= 0), default=len(rest))
    userinfo, at, host = rest[:authority_end].rpartition("@")
    if not at:
        return url
    user, colon, _ = userinfo.partition(":")
    shown = f"{user}:***" if colon else "***"
    return f"{scheme}://{shown}@{host}{rest[authority_end:]}"


def masked_url_and_query(url: str) -> str:
    """`url` masked as masked_url does, and every query value and the fragment replaced by `***` too (an
    api_key=... is a credential as much as a password). Text that is not a URL is returned as it is."""
    shown = masked_url(url)
    head, question, rest = shown.partition("?")
    if not question or "://" not in head:
        return shown
    query, hashmark, fragment = rest.partition("#")
    parts = []
    for part in query.split("&"):
        name, equals, value = part.partition("=")
        parts.append(f"{name}=***" if equals and value else part if equals or not part else "***")
    return f"{head}?{'&'.join(parts)}{hashmark}{'***' if fragment else ''}"


def is_loopback_host(host: str) -> bool:
    if host.lower() == "localhost":  # host names are case-insensitive (RFC 4343)
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_file(path: str) -> bool:
    """Path.is_file, but False for a name the system refuses (too long, a NUL) instead of an exception."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False
