"""Loading: defaults < TOML file < MCP_GATEWAY_* environment < flags, then MCP_GROUP_* toggles; ConfigError."""

from __future__ import annotations

import codecs
import contextlib
import copy
import os
import re
import stat
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, get_args

import orjson
from pydantic import BaseModel, ValidationError

from gateway.config.base import CLIENT_SIDE_ENV, ENV_CONFIG_FILE, ENV_PREFIX, MAX_CONFIG_INTEGER
from gateway.config.files import FileRefused, read_regular_file
from gateway.config.groups import GROUP_ENV_PREFIX, group_env_name
from gateway.config.model import GatewayConfig


class ConfigError(Exception):
    """The configuration cannot be used; the message names the key or the file."""


def _describe(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def _merge(base: dict[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


INTEGER_TEXT = re.compile(r"\s*-?(?:0|[1-9][0-9]*)\s*")
MAX_INTEGER_DIGITS = 1000
"""The longest integer an environment value is read as (Python reads at most 4300 digits): far past
every setting's bound, so a longer one is refused by its length alone."""


def _env_value(name: str, text: str) -> Any:
    """Environment values are JSON when they parse as JSON (numbers, booleans, lists), else strings.

    An integer stays an integer however large: orjson reads one past 64 bits as a float (and one past
    a double's range not at all), and the setting's bound, not "a number with a fraction", is what to say."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        value = text
    if isinstance(value, int) or not INTEGER_TEXT.fullmatch(text):
        return value
    digits = text.strip()
    if len(digits.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise ConfigError(
            f"environment variable {name}: an integer of {len(digits.lstrip('-'))} digits; no setting takes one "
            f"past {MAX_CONFIG_INTEGER} (the largest 64-bit integer)"
        )
    return int(digits)


def _known_path(path: list[str]) -> bool:
    model: type[BaseModel] | None = GatewayConfig
    for index, part in enumerate(path):
        if model is None:
            return False
        field = model.model_fields.get(part)
        if field is None:
            return False
        annotation = field.annotation
        # An optional section (`X | None`, e.g. providers.auth.shared_secret) is walked like X.
        optional = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(optional) == 1 and isinstance(optional[0], type) and issubclass(optional[0], BaseModel):
            annotation = optional[0]
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
        elif index < len(path) - 1:
            # dict-valued fields (slots.declared.<name>...) accept any key below them
            return part in {"declared", "tool_timeouts_ms"}
        else:
            model = None
    return True


def env_overrides(environ: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Turn MCP_GATEWAY_A__B=value into {"a": {"b": value}}; unknown names are an error."""
    overrides: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name, text in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX) or name in CLIENT_SIDE_ENV:
            continue
        path = [part.lower() for part in name[len(ENV_PREFIX) :].split("__")]
        if not all(path) or not _known_path(path):
            raise ConfigError(
                f"environment variable {name}: no such setting {'.'.join(path)!r}; "
                "see docs/configuration.md for the names"
            )
        node = overrides
        for depth, part in enumerate(path[:-1], start=1):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                # MCP_GATEWAY_LIMITS=5 next to MCP_GATEWAY_LIMITS__MAX_SLOTS=3: no table to set a key in.
                above = ".".join(path[:depth])
                raise ConfigError(
                    f"environment variable {name}: {sources.get(above, above)} already sets {above!r} to a value "
                    "that is not a table, so no key can be set inside it; remove one of the two"
                )
            node = child
        node[path[-1]] = _env_value(name, text)
        sources[".".join(path)] = f"environment variable {name}"
    return overrides, sources


UTF8_BOM = codecs.BOM_UTF8
MAX_CONFIG_FILE_BYTES = 1 << 20
"""The largest configuration file: 1 MiB. A full one with every section and a hundred upstreams is
tens of KiB; tokens, secrets and policies go in files of their own (gateway/config/files.py)."""


def read_toml(path: Path) -> dict[str, Any]:
    """The TOML file at `path` as data; ConfigError naming the file when it cannot be read or parsed.

    Read as the files settings name are (read_regular_file): a regular file of at most
    MAX_CONFIG_FILE_BYTES, so /dev/zero, a FIFO or a huge file is refused by name instead of hanging
    or exhausting memory (a reload reads the file while the gateway serves). One leading UTF-8 byte
    order mark is skipped: Windows editors (Notepad, older Visual Studio) write one, TOML editors
    accept it, and it is no character of the configuration."""
    skipped = 0
    try:
        raw = read_regular_file(path, "config file", MAX_CONFIG_FILE_BYTES)
        skipped = len(UTF8_BOM) if raw.startswith(UTF8_BOM) else 0
        text = raw[skipped:].decode("utf-8")
        return tomllib.loads(text)
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path}: not found") from exc
    except PermissionError as exc:
        raise ConfigError(f"config file {path}: not readable ({exc.strerror})") from exc
    except FileRefused as exc:  # a device, a FIFO, a socket, over the bound
        pipe = ""
        with contextlib.suppress(OSError):
            if stat.S_ISFIFO(os.stat(path).st_mode):
                pipe = (
                    "; process substitution and pipes are not accepted for the configuration: the gateway "
                    "reads it again at reload"
                )
        raise ConfigError(f"config file {path}: {exc.reason}{pipe}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: invalid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:
        # TOML is UTF-8: a file in another encoding (Latin-1, UTF-16) is named as such, at its byte.
        offset = exc.start + skipped
        raise ConfigError(f"config file {path}: not UTF-8 text (byte {offset}); TOML files are UTF-8") from exc
    except OSError as exc:  # a directory, a name too long, ...
        raise ConfigError(f"config file {path}: not readable ({exc.strerror or exc})") from exc


def load_config(
    path: str | Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
    reloading: bool = False,
) -> GatewayConfig:
    """Build the effective configuration: defaults < file < environment < flags. `reloading`: for a
    running gateway's reload, where an MCP_GROUP_* variable naming no group is a warning (apply_group_toggles).

    Every layer's own values must be valid: a value a later layer overrides is checked too (alone,
    with the defaults around it), so a broken file does not pass while a flag happens to mask it."""
    environ = os.environ if environ is None else environ
    if path is None and environ.get(ENV_CONFIG_FILE):
        path = environ[ENV_CONFIG_FILE]
    sources: dict[str, str] = {}
    file_data: dict[str, Any] = {}
    if path is not None:
        file_data = read_toml(Path(path))
        file_label = f"config file {path}"
    else:
        file_label = "defaults"
    env_data, env_sources = env_overrides(environ)
    sources.update(env_sources)
    # What each lower layer set that a later one replaced: its path -> the layer that replaced it.
    file_overridden = {
        replaced: _origin_of(".".join(replaced), env_sources, "the environment")
        for replaced in _replaced_paths(file_data, env_data)
    }
    env_overridden: dict[tuple[str, ...], str] = {}
    data = copy.deepcopy(_merge(file_data, env_data))  # the flags below must not write into file_data
    for key, value in (flags or {}).items():
        if value is None:
            continue
        label = f"command-line flag for {key}"
        before = _list_length(data, key.split(".")) if isinstance(value, list) else None
        replaced = _set_flag(data, key.split("."), value)
        if replaced is not None:
            (env_overridden if _holds(env_data, replaced) else file_overridden)[replaced] = label
        if before is None:
            sources[key] = label
        else:  # a repeatable flag adds entries after those of the file and environment: only its own are its
            for index in range(before, before + len(value)):
                sources[f"{key}.{index}"] = label
    try:
        config = GatewayConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = _error_key(first)
        origin = _origin_of(key, sources, file_label)
        raise ConfigError(_error_message(first, origin, env_sources, env_data, environ)) from exc
    _check_overridden(file_data, file_overridden, lambda _key: file_label, env_sources, env_data, environ)
    _check_overridden(
        env_data,
        env_overridden,
        lambda key: _origin_of(key, env_sources, "environment"),
        env_sources,
        env_data,
        environ,
    )
    if config.policy is not None:
        _check_policy(config, sources, file_label)
    apply_group_toggles(config, environ, reloading=reloading)
    return config


def _error_key(error: Mapping[str, Any]) -> str:
    """The dotted key an error is about: where it was found, or for a rule of the top level (found at
    no key) the setting the rule names (gateway/config/base.py, rule_error)."""
    return _describe(error["loc"]) or str((error.get("ctx") or {}).get("setting", ""))


VALIDATOR_PREFIXES = ("Value error, ", "Assertion failed, ")
"""What pydantic writes before a validator's own message: noise to a reader of a configuration error."""
TABLE_ERRORS = frozenset({"model_type", "model_attributes_type", "dict_type"})


def _wording(error: Mapping[str, Any]) -> str:
    """The error's message in the configuration's terms: a validator's message without pydantic's
    prefix, and a table given another value as `a table ([section])`, not pydantic's class name."""
    message = str(error["msg"])
    for prefix in VALIDATOR_PREFIXES:
        message = message.removeprefix(prefix)
    if error["type"] in TABLE_ERRORS:
        loc = error["loc"]
        names = ".".join(str(part) for part in loc if not isinstance(part, int))
        header = f"[[{names}]]" if loc and isinstance(loc[-1], int) else f"[{names}]"
        message = f"Input should be a table ({header}){_kind_given(error.get('input'))}"
    return message


def _kind_given(value: Any) -> str:
    """What was given instead of a table, by its kind only (its text could be a misplaced secret)."""
    if isinstance(value, bool):
        return f", not the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return ", not a number"
    if isinstance(value, str):
        return ", not text"
    if isinstance(value, list):
        return ", not a list"
    return ""


def _error_message(
    error: Mapping[str, Any],
    origin: str,
    env_sources: Mapping[str, str],
    env_data: Mapping[str, Any],
    environ: Mapping[str, str],
) -> str:
    key = _error_key(error)
    if error["type"] == "extra_forbidden":
        return f"{origin}: unknown setting {key!r}; see docs/configuration.md"
    if not key:  # a rule of the whole configuration that names no setting: its message says what
        return f"{origin}: {_wording(error)}"
    from_environment = origin.startswith(ENV_SOURCE_PREFIX)
    source = env_sources.get(key)
    hint = (
        _env_list_hint(error, source, env_data)
        or _env_text_hint(error, source, environ)
        or _given_type(error, from_environment)
    )
    return f"{origin}: setting {key!r}: {_wording(error)}{hint}"


def _check_overridden(
    layer: dict[str, Any],
    overridden: Mapping[tuple[str, ...], str],
    origin: Callable[[str], str],
    env_sources: Mapping[str, str],
    env_data: Mapping[str, Any],
    environ: Mapping[str, str],
) -> None:
    """ConfigError for the first invalid value `layer` sets at a path a later layer overrides.

    The layer is validated on its own (the defaults fill the rest) and only errors at or below an
    overridden path count: the rest of the layer is in the merged configuration, validated there, and
    a layer that is incomplete on its own (completed by a later one) is not an error."""
    if not overridden:
        return
    try:
        GatewayConfig.model_validate(layer)
    except ValidationError as exc:
        for error in exc.errors():
            loc = tuple(str(part) for part in error["loc"])
            by = next((label for path, label in overridden.items() if loc[: len(path)] == path), None)
            if by is None:
                continue
            message = _error_message(error, origin(_error_key(error)), env_sources, env_data, environ)
            raise ConfigError(f"{message} (the {by} overrides it, but this value must be valid too)") from exc


def _replaced_paths(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """The paths where _merge(base, overlay) replaces a value of `base` (tables merge, the rest replaces)."""
    replaced: list[tuple[str, ...]] = []
    for key, value in overlay.items():
        if key not in base:
            continue
        if isinstance(value, Mapping) and isinstance(base[key], dict):
            replaced += [(key, *below) for below in _replaced_paths(base[key], value)]
        else:
            replaced.append((key,))
    return replaced


def _set_flag(data: dict[str, Any], parts: list[str], value: Any) -> tuple[str, ...] | None:
    """Set the flag at `parts` in `data`; the path of the value it replaced, if any.

    A repeatable flag (--stdio NAME=COMMAND) adds to the entries of the file and environment: that
    replaces nothing. A value that is not a table where the flag's key needs one is replaced by one."""
    node = data
    replaced: tuple[str, ...] | None = None
    for depth, part in enumerate(parts[:-1], start=1):
        child = node.get(part)
        if not isinstance(child, dict):
            if part in node and replaced is None:
                replaced = tuple(parts[:depth])
            child = node[part] = {}
        node = child
    last = parts[-1]
    existing = node.get(last)
    if isinstance(value, list) and isinstance(existing, list):
        node[last] = [*existing, *value]
        return replaced
    if replaced is None and last in node:
        replaced = tuple(parts)
    node[last] = value
    return replaced


def _holds(layer: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    """Whether `layer` sets a value at `path`."""
    node: Any = layer
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


LIST_ERRORS = frozenset({"list_type", "tuple_type", "set_type", "frozen_set_type"})
ENV_SOURCE_PREFIX = "environment variable "


def _env_list_hint(error: Mapping[str, Any], source: str | None, env_data: Mapping[str, Any]) -> str:
    """A list-valued setting given as plain text by an environment variable: the JSON list to write.

    `http://localhost:*` is not JSON, so it is read as text (one string), never split or wrapped: a
    list is written as JSON, and the error shows that form, built from what was given."""
    if error["type"] not in LIST_ERRORS or source is None or not source.startswith(ENV_SOURCE_PREFIX):
        return ""
    name = source.removeprefix(ENV_SOURCE_PREFIX)
    value: Any = env_data
    for part in error["loc"]:
        value = value.get(str(part)) if isinstance(value, Mapping) else None
    if isinstance(value, str) and _list_of_text(error["loc"]):
        # Commas suggest several items: each becomes one, so the example is what was meant.
        items = [item.strip() for item in value.split(",")] if "," in value else [value]
        example = "[" + ", ".join(orjson.dumps(item).decode() for item in items) + "]"
    else:
        example = "[...]"
    return f"; {name} takes a JSON list, e.g. {name}='{example}'"


MAX_SHOWN_VALUE_CHARS = 64
"""The longest environment value a hint repeats; a longer one is shown as "..."."""


def _env_text_hint(error: Mapping[str, Any], source: str | None, environ: Mapping[str, str]) -> str:
    """A text setting given by an environment variable whose value reads as JSON (8080, 0.5, true, null):
    the JSON string to write instead, e.g. MCP_GATEWAY_HOST='"8080"'. The value repeated is a number, a
    boolean or null of at most MAX_SHOWN_VALUE_CHARS characters, not a misplaced secret's text."""
    if error["type"] != "string_type" or source is None or not source.startswith(ENV_SOURCE_PREFIX):
        return ""
    value = error.get("input")
    if isinstance(value, bool):
        kind = f"the boolean {str(value).lower()}"
    elif isinstance(value, int | float):
        kind = "a number"
    elif value is None:
        kind = "null"
    else:  # a list or a table: no text was meant
        return ""
    name = source.removeprefix(ENV_SOURCE_PREFIX)
    text = environ.get(name, "").strip()
    shown = orjson.dumps(text).decode() if len(text) <= MAX_SHOWN_VALUE_CHARS else '"..."'
    return (
        f", not {kind}: an environment value that parses as JSON is read as JSON; to give it as text, "
        f"quote it as a JSON string: {name}='{shown}'"
    )


SCALAR_TYPE_ERRORS = frozenset({"int_type", "float_type", "bool_type"})


def _given_type(error: Mapping[str, Any], from_environment: bool) -> str:
    """What was given instead of a number or a boolean, by its kind only (the text could be a misplaced
    secret): `port = true` and `enabled = "yes"` are refused, never converted (Section is strict)."""
    if error["type"] not in SCALAR_TYPE_ERRORS:
        return ""
    value = error.get("input")
    wanted = "true or false" if error["type"] == "bool_type" else "the number"
    if isinstance(value, bool):
        return f", not the boolean {str(value).lower()}"
    if isinstance(value, str):
        # An environment value is text when it is not JSON (yes, Infinity); in the file, text is quoted.
        return f", not text: give {wanted}" if from_environment else f", not text: write {wanted} without quotes"
    if isinstance(value, float):
        return ", not a number with a fraction"
    if isinstance(value, int) and error["type"] == "float_type":  # past a double's range (about 1.8e308)
        return ", not an integer that large: a number with a fraction holds at most about 1.8e308"
    if isinstance(value, int):
        return f", not the number {value}: write true or false"
    if isinstance(value, list):
        return ", not a list"
    if isinstance(value, dict):
        return ", not a table"
    return ""


def _list_of_text(loc: tuple[int | str, ...]) -> bool:
    """Whether the setting at `loc` is a list of strings (not of tables, say), so the example can hold them."""
    model: type[BaseModel] = GatewayConfig
    annotation: Any = None
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None:
            return False
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
    return get_args(annotation) == (str,)


def _check_policy(config: GatewayConfig, sources: Mapping[str, str], file_label: str) -> None:
    """[policy]'s content (roles, capabilities, patterns, limits; its file when it names one), every
    mistake listed at once, checked by the policy layer's own rules so `run` would see the same."""
    from gateway.policy.rules.checking import PolicyError, check_policy_config

    assert config.policy is not None
    try:
        check_policy_config(config.policy)
    except PolicyError as exc:
        key = "policy.file" if config.policy.file is not None else "policy"
        raise ConfigError(f"{_origin_of(key, sources, file_label)}: setting {key!r}: {exc}") from exc


GROUP_TOGGLE_VALUES = {"true": True, "false": False}


def apply_group_toggles(config: GatewayConfig, environ: Mapping[str, str], *, reloading: bool = False) -> None:
    """MCP_GROUP_<NAME>=true|false turns [groups.<name>] on or off.

    Fails closed like MCP_GATEWAY_*: a value other than true or false, or a variable naming no
    configured group (a typo would otherwise leave a group silently in its default state), stops
    the gateway with a message naming the variable. At a reload (`reloading`) such a variable is a group
    the file removed or renamed since the start (a running process's environment does not change): it is
    ignored, with a warning among `config.warnings()`, which the reload reports and logs."""
    by_variable = {group_env_name(name): name for name in config.groups}
    for variable, text in sorted(environ.items()):
        if not variable.startswith(GROUP_ENV_PREFIX):
            continue
        name = by_variable.get(variable)
        known = ", ".join(sorted(by_variable)) or "none: no [groups.<name>] is configured"
        if name is None and reloading:
            config._ignored_toggles.append(
                f"environment variable {variable}: no such group in the configuration loaded now; ignored "
                f"(toggles of the configured groups: {known}). A restart with it set fails: define the group "
                "again under [groups.<name>], or remove the variable"
            )
            continue
        if name is None:
            raise ConfigError(
                f"environment variable {variable}: no such group; toggles of the configured groups: {known}. "
                "Fix the name, define the group under [groups.<name>], or remove the variable (a running "
                "gateway keeps the environment it started with: that takes a restart)"
            )
        value = GROUP_TOGGLE_VALUES.get(text.strip().lower())
        if value is None:
            raise ConfigError(f"environment variable {variable}: {text[:40]!r} is not true or false")
        group = config.groups[name]
        group.enabled = value
        group._enabled_by = f"environment variable {variable}"


def _list_length(data: Mapping[str, Any], parts: list[str]) -> int | None:
    """The length of the list at `parts` in `data` (0 where nothing is set), None for any other value."""
    node: Any = data
    for part in parts:
        if not isinstance(node, Mapping) or part not in node:
            return 0
        node = node[part]
    return len(node) if isinstance(node, list) else None


def _origin_of(key: str, sources: Mapping[str, str], file_label: str) -> str:
    # The most specific source wins: a flag's own entry of a list the environment also set.
    matching = [candidate for candidate in sources if key == candidate or key.startswith(candidate + ".")]
    if matching:
        return sources[max(matching, key=len)]
    # A validator on a parent (slots.declared checks its names) reports the parent's key; blame the
    # override below it rather than a file (or "defaults") that may not mention it at all.
    for candidate, label in sources.items():
        if candidate.startswith(key + "."):
            return label
    return file_label
