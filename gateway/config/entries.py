"""The allowed_hosts and allowed_origins lists checked entry by entry: every malformed entry is named in
one error, and an entry no request can match (NeverMatches: a zone id, an IPv6 origin without brackets)
loads as written, is ignored by the Host and Origin checks, and is warned of by `config check` and at
the start of `run` (config_warnings), as are mcp-broker's MCP_BROKER_* variables (foreign_env.py) and
bounds that load but leave a part next to unusable (limits_warnings, mqtt_warnings)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from gateway.config.foreign_env import foreign_env_warnings, named_strings
from gateway.config.hosts import NeverMatches, check_allowed_host
from gateway.config.limits import LimitsConfig, limits_warnings
from gateway.config.mqtt import MqttConfig, mqtt_warnings
from gateway.config.origins import check_origin_entry


class _Lists(Protocol):
    """What config_warnings reads of a GatewayConfig (model.py imports this module)."""

    allowed_hosts: list[str]
    allowed_origins: list[str]
    limits: LimitsConfig
    mqtt: MqttConfig

    def model_dump(self) -> dict[str, Any]: ...


def check_entries(entries: Iterable[str], check: Callable[[str], str]) -> list[str]:
    """Each entry as `check` writes it (one that never matches: as written, without surrounding spaces),
    or one ValueError naming every malformed entry."""
    kept: list[str] = []
    errors: list[str] = []
    for entry in entries:
        try:
            kept.append(check(entry))
        except NeverMatches:
            kept.append(entry.strip())
        except ValueError as exc:
            errors.append(str(exc))
    if len(errors) == 1:
        raise ValueError(errors[0])
    if errors:
        raise ValueError(
            f"{len(errors)} entries are malformed: " + "; ".join(f"({n}) {e}" for n, e in enumerate(errors, 1))
        )
    return kept


def entry_warnings(entries: Iterable[str], check: Callable[[str], str]) -> list[str]:
    """Why each entry that never matches a request is ignored."""
    warnings: list[str] = []
    for entry in entries:
        try:
            check(entry)
        except NeverMatches as exc:
            warnings.append(str(exc))
    return warnings


def config_warnings(config: _Lists, environ: Mapping[str, str] | None = None) -> list[str]:
    """What loads but does nothing or next to nothing: allowed_hosts and allowed_origins entries no
    request can match (each message names the entry and what to write instead), a max_body_bytes no
    initialize fits in, a broker's max_backlog not above its max_instances, and MCP_BROKER_* variables
    set in `environ` (default: this process's) that the configuration does not name."""
    environ = os.environ if environ is None else environ
    return [
        *entry_warnings(config.allowed_hosts, check_allowed_host),
        *entry_warnings(config.allowed_origins, check_origin_entry),
        *limits_warnings(config.limits),
        *mqtt_warnings(config.mqtt),
        *foreign_env_warnings(environ, named_strings(config.model_dump())),
    ]
