"""The reload plan: every difference between the running and the new configuration is either applied by
the part that owns its key or refuses the whole reload, named; parts prepare their changes (building
whatever can fail: TLS contexts, policies, verifiers, token files) before anything is swapped."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from gateway.config import GatewayConfig, bind_shown, lan_sides_text
from gateway.reload.context import Context, Prepared
from gateway.reload.diff import (
    changed_paths,
    covers,
    owner,
    reread_secret_files,
    restart_reason,
    restart_refusal,
    restart_text,
    same_settings,
    value_at,
)
from gateway.reload.parts import auth, groups, limits, log_level, mdns, policy, providers, telemetry, tls, upstreams
from gateway.reload.report import Refused


@dataclass(frozen=True)
class Part:
    name: str
    owns: tuple[str, ...]
    prepare: Callable[[GatewayConfig, GatewayConfig, Context], Prepared | None]


PARTS: tuple[Part, ...] = (
    # TLS first: its swap is the only one that reads files, and may still refuse before any other swap.
    Part("tls", tls.OWNS, tls.prepare),
    Part("logging", log_level.OWNS, log_level.prepare),
    Part("limits", limits.OWNS, limits.prepare),
    Part("auth", auth.OWNS, auth.prepare),
    Part("providers.auth", providers.OWNS, providers.prepare),
    Part("groups", groups.OWNS, groups.prepare),
    Part("policy", policy.OWNS, policy.prepare),
    Part("upstreams", upstreams.OWNS, upstreams.prepare),
    Part("mdns", mdns.OWNS, mdns.prepare),
    Part("telemetry", telemetry.OWNS, telemetry.prepare),
)
OWNED: tuple[str, ...] = tuple(prefix for part in PARTS for prefix in part.owns)
CHECKS: tuple[Callable[[GatewayConfig, GatewayConfig, Context], list[str]], ...] = (
    # What a start reads from files whose names did not change: a file a start would refuse refuses the
    # reload (Refused); one that changed but is used only after a restart is a warning.
    tls.client_ca_check,
)
SECRET_AT_RESTART: dict[str, str] = {"mqtt": "the MQTT connection uses the new {secret} after a restart"}
"""What a secret file read again means for a key only a restart applies, by prefix (else the reason)."""


@dataclass
class Plan:
    config: GatewayConfig
    """The configuration to put in force: the new one, with the keys awaiting_restart put back."""
    prepared: list[Prepared] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """What the reload leaves to a restart without refusing it (a secret file of [mqtt] rotated)."""


def awaiting_restart(old: GatewayConfig, new: GatewayConfig) -> tuple[GatewayConfig, list[str]]:
    """A key only a restart applies whose settings are equal and only a secret file it names says something
    else (a rotated MQTT password file) does not refuse the reload, so the rest of it can apply: that key
    is kept as running (the connection goes on with the secret it has), with a warning naming the file.
    Every reload warns again until a restart (pure)."""
    warnings: list[str] = []
    for path in changed_paths(old, new):
        before, after = value_at(old, path), value_at(new, path)
        files = reread_secret_files(before, after, path) if owner(path, OWNED) is None else []
        if not files or not same_settings(before, after):
            continue
        new = _put_back(new, old, path)
        for key, file in files:
            secret = key.rsplit(".", 1)[-1].replace("_", " ")
            matches = [prefix for prefix in SECRET_AT_RESTART if covers(prefix, path)]
            then = (
                SECRET_AT_RESTART[max(matches, key=len)].format(secret=secret)
                if matches
                else f"the new {secret} is used after a restart ({restart_reason(path)})"
            )
            warnings.append(f"{key}: the {secret} file {file} changed; {then}")
    return new, warnings


def _put_back(new: Any, old: Any, path: str) -> Any:
    """`new` with the value at the dotted `path` taken from `old`."""
    head, _, rest = path.partition(".")
    value = getattr(old, head) if not rest else _put_back(getattr(new, head), getattr(old, head), rest)
    return new.model_copy(update={head: value})


def unowned_refusals(old: GatewayConfig, new: GatewayConfig) -> list[str]:
    """Every changed key no part applies at run time, and what the new configuration may not do however
    it is applied (pure: the unit tests call it without a gateway)."""
    found = [restart_refusal(path, old, new) for path in changed_paths(old, new) if owner(path, OWNED) is None]
    if new.lan_open_sides and not new.insecure_lan:
        what, risk = lan_sides_text(new.lan_open_sides)
        found.append(
            f"refusing to listen on {bind_shown(new.host)} without {what}: anyone on the network could {risk}; "
            "configure it, or keep what the running configuration has"
        )
    elif new.insecure_lan_open != old.insecure_lan_open:
        found.append(
            f"insecure_lan: the sides left open would change ({', '.join(old.insecure_lan_open) or 'none'} -> "
            f"{', '.join(new.insecure_lan_open) or 'none'}): needs a restart (every log line names them from start)"
        )
    return found


def unvalidated_refusals(old: GatewayConfig, raw: Mapping[str, Any], overridden: Collection[str] = ()) -> list[str]:
    """For a file that does not validate: each key it sets that only a restart applies, read from the parsed
    file, whose value differs from the running one, so the refusal names it beside the validation error
    instead of one reload later (pure). Left out, to the validation error: a key an environment variable or
    a flag in `overridden` sets (they win over the file), a key a part applies at run time, and a value that
    does not validate on its own (a wrong type is named by the error already)."""
    found: list[str] = []
    _unvalidated(old, raw, "", tuple(overridden), found)
    return found


def _unvalidated(
    model: BaseModel, raw: Mapping[str, Any], prefix: str, overridden: tuple[str, ...], found: list[str]
) -> None:
    fields = type(model).model_fields
    for key, value in raw.items():
        path = prefix + key
        if key not in fields or owner(path, OWNED) is not None:
            continue
        if any(covers(other, path) for other in overridden):
            continue
        before = getattr(model, key)
        if isinstance(before, BaseModel) and isinstance(value, Mapping):
            # Into the table: an override of one of its keys leaves the others to compare.
            _unvalidated(before, value, path + ".", overridden, found)
            continue
        if any(covers(path, other) for other in overridden):
            continue  # an override sets part of this value (a table the file gives as another type)
        try:
            # The key's own validation, on a copy: the value as the model would hold it (defaults, coercions).
            after = getattr(type(model).__pydantic_validator__.validate_assignment(model.model_copy(), key, value), key)
        except (ValueError, TypeError):
            continue
        if after != before:
            found.append(restart_text(path, before, after))


def build_plan(old: GatewayConfig, new: GatewayConfig, context: Context) -> Plan:
    """Every refusal at once, or every part's prepared change (none swapped yet)."""
    new, warnings = awaiting_restart(old, new)
    plan = Plan(new, refusals=unowned_refusals(old, new), warnings=warnings)
    for check in CHECKS:
        try:
            plan.warnings += check(old, new, context)
        except Refused as exc:
            plan.refusals += exc.reasons
    for part in PARTS:
        try:
            prepared = part.prepare(old, new, context)
        except Refused as exc:
            plan.refusals += exc.reasons
            continue
        if prepared is not None:
            plan.prepared.append(prepared)
    if plan.refusals:
        plan.prepared = []
    return plan
