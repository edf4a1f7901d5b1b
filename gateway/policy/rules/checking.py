"""Checking a policy: every mistake found and listed at once (PolicyError), each naming where it is."""

from __future__ import annotations

import codecs
import re
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from gateway.config.files import MAX_POLICY_FILE_BYTES, FileRefused, read_regular_file
from gateway.config.policy import PolicyConfig
from gateway.core.names import BROKER_SLOT
from gateway.policy.rules.capabilities import (
    TOOL_CONTROL,
    TOOL_PREFIX,
    TOOLS_CALL,
    capability_error,
    tool_pattern_warning,
)
from gateway.policy.rules.declared import declared_limit_problems
from gateway.policy.rules.execution_checks import execution_limit_problems
from gateway.policy.rules.model import ENTRY_MODELS, SECTIONS, Entry, PolicyDocument, Role
from gateway.policy.rules.paths import BROKER_PATH, PatternError, check_path, compile_pattern
from gateway.policy.rules.subjects import subject_error

_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")
_SLOT_PLACEHOLDER = "{slot}"
_LIMIT_KEYS = frozenset({"min", "max", "allowed", "action"})
POLICY_RELOAD_TOOL = "broker_policy_reload"
_HOLDS_POLICY_RELOAD = frozenset({TOOLS_CALL, TOOL_CONTROL, TOOL_PREFIX + POLICY_RELOAD_TOOL})
"""The capabilities a call of broker_policy_reload asks for (a control tool): a [[confirm]] naming one holds it."""
# pydantic's words for the mistakes a person makes in a policy file, said the way the file is written.
_MESSAGES = {
    "missing": "missing (required)",
    "model_type": "should be a table",
    "too_short": "needs at least one entry",
    "string_too_short": "must not be empty",
}

Location = tuple[str | int, ...]


class PolicyError(Exception):
    """A policy that cannot be used: `errors` lists every mistake, each starting with where it is."""

    def __init__(self, errors: Sequence[str], source: str = "") -> None:
        self.errors = list(errors)
        self.source = source
        if len(self.errors) == 1:  # one mistake reads as one line: "policy file p.toml: not found"
            text = self.errors[0]
        else:
            text = f"{len(self.errors)} errors:" + "".join(f"\n  {error}" for error in self.errors)
        super().__init__(f"{source}: {text}" if source else text)


def where(*parts: str | int) -> str:
    """A location as the file spells it: assign[2].role, roles.operator.inherits[0], resources."pump 1"."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            key = part if _PLAIN_KEY.fullmatch(part) else f'"{part}"'
            text += f".{key}" if text else key
    return text


def read_policy_file(path: str | Path) -> dict[str, Any]:
    """The TOML of a policy file; PolicyError naming the file when it cannot be read."""
    source = f"policy file {path}"
    skipped = 0
    try:
        raw = read_regular_file(path, "policy file", MAX_POLICY_FILE_BYTES)
        # One leading byte order mark skipped, as in the configuration (Windows editors write one).
        skipped = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0
        return tomllib.loads(raw[skipped:].decode("utf-8"))
    except FileNotFoundError as exc:
        # A relative path names a file from wherever the command runs (a service's WorkingDirectory=, say).
        where = (
            ""
            if Path(path).is_absolute()
            else f" (a relative path is read from the working directory: here {Path(path).absolute()})"
        )
        raise PolicyError([f"not found{where}"], source) from exc
    except FileRefused as exc:  # a FIFO (opened without waiting for a writer), a device, over the bound
        raise PolicyError([exc.reason], source) from exc
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError([f"invalid TOML: {exc}"], source) from exc
    except UnicodeDecodeError as exc:
        raise PolicyError([f"not UTF-8 text (byte {exc.start + skipped}); TOML files are UTF-8"], source) from exc
    except OSError as exc:  # not readable, a directory, ...
        raise PolicyError([f"not readable ({exc.strerror or exc})"], source) from exc


def check_policy_config(config: PolicyConfig) -> PolicyDocument:
    """The checked policy of a [policy] section: its named file, or its inline keys."""
    if config.file is not None:
        return check_policy(read_policy_file(config.file), source=f"policy file {config.file}")
    return check_policy(config.inline(), prefix="policy")


@dataclass
class Parsed:
    """One entry (a role, an [[assign]], ...): its model when it is valid, and its keys that are."""

    location: Location
    model: Entry | None
    fields: dict[str, Any]
    """The keys that passed (with their defaults when the whole entry did), for the checks across entries."""
    failed: frozenset[str] = frozenset()
    """The keys that did not."""


@dataclass
class Errors:
    """Mistakes with their locations, listed in the file's order (section, then entry) whatever found them."""

    data: Mapping[str, Any]
    prefix: str
    found: list[tuple[tuple[int, int], str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def warn(self, location: Location, message: str) -> None:
        """Something that loads but is likely not what the author meant (shown by `policy check`, logged)."""
        parts = (self.prefix, *location) if self.prefix else location
        self.warnings.append(f"{where(*parts)}: {message}")

    def add(self, location: Location, message: str) -> None:
        parts = (self.prefix, *location) if self.prefix else location
        self.found.append((self._rank(location), f"{where(*parts)}: {message}"))

    def _rank(self, location: Location) -> tuple[int, int]:
        section = location[0]
        rank = SECTIONS.index(section) if section in SECTIONS else -1
        if len(location) < 2:
            return rank, -1
        entry = location[1]
        if isinstance(entry, int):
            return rank, entry
        keys = self.data.get(str(section))
        return rank, list(keys).index(entry) if isinstance(keys, Mapping) and entry in keys else -1

    def listed(self) -> list[str]:
        return [message for _, message in sorted(self.found, key=lambda item: item[0])]


def check_policy(data: Mapping[str, Any], *, prefix: str = "", source: str = "") -> PolicyDocument:
    """Check a policy's keys; PolicyError lists every mistake. `prefix` starts each location ("policy")."""
    errors = Errors(data, prefix)
    for key in data:
        if key not in SECTIONS:
            errors.add((str(key),), f"unknown key (keys: {', '.join(SECTIONS)})")
    roles = _roles(data.get("roles", {}), errors)
    sections = {name: _entries(data.get(name, []), name, errors) for name in ENTRY_MODELS}
    resources = _resources(data.get("resources", {}), errors)

    role_names = ", ".join(sorted(roles)) or "none defined"
    for role in roles.values():
        for index, parent in enumerate(role.fields.get("inherits", ())):
            if parent not in roles:
                errors.add((*role.location, "inherits", index), f'unknown role "{parent}" (roles: {role_names})')
        _capabilities(role, errors)
    for cycle in _cycles({name: role.fields.get("inherits", []) for name, role in roles.items()}):
        errors.add(("roles", cycle[0], "inherits"), f"inheritance cycle {' -> '.join(cycle)}")
    for entry in sections["assign"]:
        named = entry.fields.get("role")
        if named is not None and named not in roles:
            errors.add((*entry.location, "role"), f'unknown role "{named}" (roles: {role_names})')
    for entry in (*sections["assign"], *sections["deny"], *sections["confirm"]):
        _principal(entry, errors)
    for entry in (*sections["deny"], *sections["confirm"]):
        _capabilities(entry, errors)
    for entry in (*sections["assign"], *sections["deny"], *sections["limits"], *sections["confirm"]):
        _patterns(entry, errors)
    for entry in sections["limits"]:
        tool = entry.fields.get("tool")
        warning = tool_pattern_warning(f"tool = {tool}", tool) if isinstance(tool, str) else None
        if warning is not None:
            errors.warn((*entry.location, "tool"), warning)
        if not _LIMIT_KEYS & entry.failed:  # a bound that is no number cannot be compared
            for problem in _limit_problems(entry.fields):
                errors.add(entry.location, problem)
    for entry in sections["resource_patterns"]:
        if "path" in entry.fields:
            _mapped_path(entry.fields["path"], (*entry.location, "path"), errors)
    for entry in sections["execution_limits"]:
        _match_capability(entry, errors)
    limits = [(entry.location, entry.fields, entry.failed) for entry in sections["execution_limits"]]
    for location, problem in execution_limit_problems(limits):
        errors.add(location, problem)
    for entry in sections["declared_limits"]:
        _patterns(entry, errors)
        for key, problem in declared_limit_problems(entry.fields, entry.failed):
            errors.add((*entry.location, key) if key else entry.location, problem)
    for entry in sections["confirm"]:
        _holds_policy_reload(entry, resources.get(BROKER_SLOT, BROKER_PATH), errors)

    if errors.found:
        raise PolicyError(errors.listed(), source)

    def valid(name: str) -> tuple[Any, ...]:
        return tuple(entry.model for entry in sections[name])

    return PolicyDocument(
        roles={name: role.model for name, role in roles.items() if isinstance(role.model, Role)},
        assign=valid("assign"),
        deny=valid("deny"),
        limits=valid("limits"),
        confirm=valid("confirm"),
        resources=resources,
        resource_patterns=valid("resource_patterns"),
        execution_limits=valid("execution_limits"),
        declared_limits=valid("declared_limits"),
        warnings=tuple(errors.warnings),
    )


def _parse(model: type[Entry], body: Any, location: Location, errors: Errors) -> Parsed:
    """An entry validated on its own, so one bad entry hides nothing wrong in the others."""
    try:
        parsed = model.model_validate(body)
    except ValidationError as exc:
        failed: set[Any] = set()
        for error in exc.errors():
            loc = tuple(part for part in error["loc"] if isinstance(part, str | int))
            failed.update(loc[:1])
            kind = error["type"]
            if kind == "extra_forbidden":
                message = f"unknown key (keys: {', '.join(_keys_at(model, loc))})"
            else:
                message = _MESSAGES.get(kind) or error["msg"][0].lower() + error["msg"][1:]
                if kind == "literal_error":  # name what was written: limits[0].missing "maybe"
                    message += f", not {_written(error.get('input'))}"
            errors.add((*location, *loc), message)
        good = body if isinstance(body, Mapping) else {}
        fields = {key: value for key, value in good.items() if key in model.model_fields and key not in failed}
        return Parsed(location, None, fields, frozenset(str(key) for key in failed))
    return Parsed(location, parsed, {name: getattr(parsed, name) for name in model.model_fields})


def _written(value: Any) -> str:
    """A value as the policy file spells it, cut short: "maybe", 1, true."""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = f'"{value}"' if isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


def _keys_at(model: type[BaseModel], loc: Location) -> list[str]:
    """The keys of the table holding `loc`'s last key: a nested table's own ([[execution_limits]] match)."""
    for part in loc[:-1]:
        declared = model.model_fields.get(part) if isinstance(part, str) else None
        kinds = (declared.annotation, *get_args(declared.annotation)) if declared is not None else ()
        nested = [kind for kind in kinds if _is_model(kind)]
        if not nested:
            break
        model = nested[0]
    return list(model.model_fields)


def _is_model(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def _roles(value: Any, errors: Errors) -> dict[str, Parsed]:
    if not isinstance(value, Mapping):
        errors.add(("roles",), "a table of roles, [roles.<name>]")
        return {}
    return {name: _parse(Role, body, ("roles", name), errors) for name, body in value.items()}


def _entries(value: Any, section: str, errors: Errors) -> list[Parsed]:
    if not isinstance(value, list):
        errors.add((section,), f"an array of tables, [[{section}]]")
        return []
    model = ENTRY_MODELS[section]
    return [_parse(model, body, (section, index), errors) for index, body in enumerate(value)]


def _resources(value: Any, errors: Errors) -> dict[str, str]:
    if not isinstance(value, Mapping):
        errors.add(("resources",), 'a table of slot names and paths, "pump-1" = "/site1/line2/pump-1"')
        return {}
    resources: dict[str, str] = {}
    for slot, path in value.items():
        if not isinstance(path, str):
            errors.add(("resources", slot), f'a path string, e.g. "/site1/line2/{slot}"')
            continue
        try:
            resources[slot] = check_path(path)
        except PatternError as exc:
            errors.add(("resources", slot), str(exc))
    return resources


def _capabilities(entry: Parsed, errors: Errors) -> None:
    for index, capability in enumerate(entry.fields.get("capabilities", ())):
        problem = capability_error(capability)
        if problem is not None:
            errors.add((*entry.location, "capabilities", index), problem)
        elif capability.startswith(TOOL_PREFIX):
            warning = tool_pattern_warning(capability, capability[len(TOOL_PREFIX) :])
            if warning is not None:
                errors.warn((*entry.location, "capabilities", index), warning)


def _match_capability(entry: Parsed, errors: Errors) -> None:
    match = entry.fields.get("match")  # a LimitMatch when the entry is valid, else the raw table
    capability = match.get("capability") if isinstance(match, Mapping) else getattr(match, "capability", None)
    if isinstance(capability, str) and capability.startswith(TOOL_PREFIX):
        warning = tool_pattern_warning(capability, capability[len(TOOL_PREFIX) :])
        if warning is not None:
            errors.warn((*entry.location, "match", "capability"), warning)


def _principal(entry: Parsed, errors: Errors) -> None:
    principal = entry.fields.get("principal")
    problem = subject_error(principal) if isinstance(principal, str) else None
    if problem is not None:
        errors.add((*entry.location, "principal"), problem)


def _holds_policy_reload(entry: Parsed, broker: str, errors: Errors) -> None:
    """Warn of a [[confirm]] that holds broker_policy_reload (the gateway's own tools on `broker`): a reload
    asked for then waits for a person's approval. broker_approvals and broker_approve are never held."""
    held = sorted(_HOLDS_POLICY_RELOAD.intersection(entry.fields.get("capabilities", ())))
    if not held:
        return
    for pattern in entry.fields.get("resources", ()):
        try:
            covers = compile_pattern(pattern).matches(broker)
        except PatternError:
            continue  # named as a mistake by _patterns
        if covers:
            errors.warn(
                entry.location,
                f'covers {POLICY_RELOAD_TOOL} on {broker} ({", ".join(held)} on "{pattern}"): `mcp-gateway policy '
                "reload` then waits for a person's approval (`mcp-gateway approve`) before the policy is loaded "
                "again; SIGHUP (systemctl reload mcp-gateway) still reloads it without one",
            )
            return


def _patterns(entry: Parsed, errors: Errors) -> None:
    for index, pattern in enumerate(entry.fields.get("resources", ())):
        try:
            compile_pattern(pattern)
        except PatternError as exc:
            errors.add((*entry.location, "resources", index), str(exc))


def _mapped_path(path: str, location: Location, errors: Errors) -> None:
    sample = path.replace(_SLOT_PLACEHOLDER, "slot")
    if "{" in sample or "}" in sample:
        errors.add(location, f'"{path}": the only placeholder is {_SLOT_PLACEHOLDER}')
        return
    try:
        check_path(sample)
    except PatternError as exc:
        errors.add(location, str(exc))


def _limit_problems(limit: Mapping[str, Any]) -> Iterator[str]:
    low, high, allowed = limit.get("min"), limit.get("max"), limit.get("allowed")
    if low is not None and high is not None and low > high:
        yield f"min {low:g} is above max {high:g}"
    if limit.get("action", "refuse") == "clamp":
        if low is None and high is None:
            yield 'action "clamp" needs min or max to clamp to'
        if allowed is not None:
            yield 'action "clamp" cannot go with allowed (a value not allowed has nothing to clamp to); use "refuse"'
    elif low is None and high is None and allowed is None:
        yield "sets no limit: give min, max or allowed"


def _cycles(inherits: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """Each inheritance cycle once, from its alphabetically first role: ["a", "b", "a"]."""
    found: dict[tuple[str, ...], list[str]] = {}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            loop = path[path.index(name) :]
            first = loop.index(min(loop))
            cycle = loop[first:] + loop[:first]
            found.setdefault(tuple(cycle), [*cycle, cycle[0]])
            return
        if name in done or name not in inherits:
            return
        for parent in inherits[name]:
            visit(parent, [*path, name])
        done.add(name)

    for name in sorted(inherits):
        visit(name, [])
    return [found[key] for key in sorted(found)]
