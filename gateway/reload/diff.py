"""Comparing two configurations: which keys differ, and how each is said in a report or a refusal (pure).

`changed_paths` walks the sections and names the deepest key that differs ("limits.rate.per_slot.burst");
a list or a table of entries ([[upstreams.stdio]], [groups.*]) is one key, and its part says what
changed inside it. A key no part applies at run time is refused by `restart_refusal`, with its values
when they are plain and not secret: `port 3000 -> 3001 needs a restart (the listener is bound to it)`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from gateway.config import masked_url

RESTART_REASONS: dict[str, str] = {
    "host": "the listener is bound to it",
    "port": "the listener is bound to it",
    "insecure_lan": "the bind is checked once, when the listener binds",
    "public_url": "clients, access-token audiences and the guides were given it",
    "allowed_origins": "the entry gate is built at start",
    "allowed_hosts": "the entry gate is built at start",
    "session_answers": "the client endpoints are built at start",
    "event_loop": "the event loop is chosen at start",
    "limits": "it is built into the sessions, streams and parsers at start",
    "limits.connections": "it is set on the listener when it binds",
    "providers": "it is fixed into each provider session as it connects",
    "providers.declarations": "the providers' broker is built at start",
    "slots": "slot settings are fixed when the slots are made at start",
    "tls.client_ca_file": "trusted client CAs cannot be taken out of the live TLS context",
    "upstreams": "it is read when the upstream starts",
    "mqtt": "MQTT broker connections are not reconfigured at run time",
    "serial": "serial ports and hot-plug are not reconfigured at run time",
    "audit": "the audit trail's database is open and its writer running",
    "telemetry": "this gateway has no run-time hook for [telemetry]",
    "systemd": "it is read once, when the service starts",
    "groups_separator": "tool names at /mcp never change meaning while the gateway runs",
    "logging.format": "the log handler is set up at start",
}
"""Why a key cannot change at run time, by the longest dotted prefix that matches."""
DEFAULT_REASON = "it is read only at start"
SECRET_PARTS = ("secret", "token", "password", "sha256", "key", "env", "header", "credential")
"""A key whose last part holds one of these is never shown with its value."""
MAX_SHOWN_CHARS = 80


def changed_paths(old: BaseModel, new: BaseModel, prefix: str = "") -> list[str]:
    """The dotted keys whose values differ, deepest first found; a model whose own fields are equal but
    whose private state is not (a secret read from a file) is named itself."""
    found: list[str] = []
    for name in type(old).model_fields:
        before, after = getattr(old, name), getattr(new, name)
        if before == after:
            continue
        path = prefix + name
        if isinstance(before, BaseModel) and type(before) is type(after):
            found.extend(changed_paths(before, after, path + ".") or [path])
        else:
            found.append(path)
    return found


def same_settings(old: Any, new: Any) -> bool:
    """Equal as the file, the environment and the flags set them: what a model read from the files they name
    (a secret, held as private state) is left out."""
    if isinstance(old, BaseModel) and isinstance(new, BaseModel):
        fields = type(old).model_fields
        return type(old) is type(new) and all(same_settings(getattr(old, name), getattr(new, name)) for name in fields)
    if isinstance(old, list) and isinstance(new, list):
        return len(old) == len(new) and all(same_settings(a, b) for a, b in zip(old, new, strict=True))
    if isinstance(old, dict) and isinstance(new, dict):
        return old.keys() == new.keys() and all(same_settings(old[key], new[key]) for key in old)
    return bool(old == new)


def reread_secret_files(old: Any, new: Any, path: str) -> list[tuple[str, str]]:
    """(key, file) of each secret under `path` whose file says something else than when `old` was loaded:
    a model with a `file` key whose settings are equal but whose private state (the secret read) is not."""
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [
            found
            for i, (a, b) in enumerate(zip(old, new, strict=True))
            for found in reread_secret_files(a, b, f"{path}[{i}]")
        ]
    if not (isinstance(old, BaseModel) and type(old) is type(new)) or old == new:
        return []
    fields = type(old).model_fields
    inner = [
        found
        for name in fields
        for found in reread_secret_files(getattr(old, name), getattr(new, name), f"{path}.{name}")
    ]
    file = getattr(old, "file", None)
    if (
        not inner
        and "file" in fields
        and isinstance(file, str)
        and all(getattr(old, n) == getattr(new, n) for n in fields)
    ):
        return [(path, file)]
    return inner


def covers(prefix: str, path: str) -> bool:
    return path == prefix or path.startswith(prefix + ".")


def value_at(model: Any, path: str) -> Any:
    for part in path.split("."):
        model = getattr(model, part, None)
    return model


def shown(path: str, value: Any) -> str | None:
    """The value as a report shows it; None when it is not plain, or its key may hold a secret."""
    last = path.rsplit(".", 1)[-1]
    if any(word in last for word in SECRET_PARTS):
        return None
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str) and "://" in value:
        value = masked_url(value)  # a URL's user and password never reach a log line
    if isinstance(value, str) and len(value) <= MAX_SHOWN_CHARS and value.isprintable():
        return f'"{value}"'
    return None


def change_text(path: str, old: Any, new: Any) -> str:
    """`path 1 -> 2`, or `path changed` when a value may not be shown."""
    before, after = shown(path, old), shown(path, new)
    if before is None or after is None:
        return f"{path} changed"
    return f"{path} {before} -> {after}"


def restart_reason(path: str) -> str:
    matches = [prefix for prefix in RESTART_REASONS if covers(prefix, path)]
    return RESTART_REASONS[max(matches, key=len)] if matches else DEFAULT_REASON


def restart_refusal(path: str, old: BaseModel, new: BaseModel) -> str:
    """The refusal of a change no part applies at run time, naming the key and why it needs a restart."""
    return restart_text(path, value_at(old, path), value_at(new, path))


def restart_text(path: str, before: Any, after: Any) -> str:
    """`path before -> after needs a restart (why)`, the values left out where they may not be shown."""
    text = change_text(path, before, after)
    joint = ", which" if text.endswith(" changed") else ""
    return f"{text}{joint} needs a restart ({restart_reason(path)})"


def owner(path: str, owned: Iterable[str]) -> str | None:
    """The owned prefix that covers `path`, the longest when several do."""
    matches = [prefix for prefix in owned if covers(prefix, path)]
    return max(matches, key=len) if matches else None


def keyed_changes(label: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> str | None:
    """`label: added a, b; removed c; changed d` for two tables of entries by name; None when equal."""
    added = sorted(after.keys() - before.keys())
    removed = sorted(before.keys() - after.keys())
    changed = sorted(key for key in before.keys() & after.keys() if before[key] != after[key])
    said = [
        f"{verb} {', '.join(names)}" for verb, names in (("added", added), ("removed", removed), ("changed", changed))
    ]
    kept = [text for text, names in zip(said, (added, removed, changed), strict=True) if names]
    return f"{label}: {'; '.join(kept)}" if kept else None


def scalar_changes(label: str, old: BaseModel | None, new: BaseModel | None) -> list[str]:
    """One `key old -> new` per key that differs inside two versions of a section."""
    if old is None or new is None or type(old) is not type(new):
        return [f"{label} changed"] if old != new else []
    paths = changed_paths(old, new)
    return [change_text(f"{label}.{path}", value_at(old, path), value_at(new, path)) for path in paths]
