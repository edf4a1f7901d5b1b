"""mcp-broker's wire for providers' governance: method names, codes, reason codes, identifiers and the
resource paths a provider sends (docs/governance-providers.md)."""

from __future__ import annotations

import re
import secrets
from typing import Any

from gateway.core import errors, jsonrpc
from gateway.policy.rules.paths import PatternError, check_path

DECLARE = "broker/authorization/declare"
AUTHORIZE = "broker/authorize"
AUDIT_RESULT = "broker/audit/result"
BUDGET_RESERVE = "broker/budget/reserve"
BUDGET_SETTLE = "broker/budget/settle"

NO_DECLARATION = -32003
"""mcp-broker's code for a broker/authorize from a provider without an accepted declaration."""

DOMAIN = re.compile(r"[a-z][a-z0-9-]{0,62}")
RESERVED_DOMAINS = frozenset({"mcp", "broker", "tool"})
"""The families of the gateway's own capabilities (mcp.*, broker.*, tool.*): no provider declares them."""
CAPABILITY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")
REF = re.compile(r"cr_[A-Za-z0-9_-]{8,64}")
CORRELATION_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
TRACE_ID = re.compile(r"[0-9a-f]{32}")
RESULTS = ("success", "failure", "refused")
MAX_REPORT_TEXT = 256
"""Characters of a result's nativeStatus or errorCode."""

# Reason codes of a decision, as mcp-broker words them (a provider may match on them).
ROLE_GRANT = "role-grant"
EXPLICIT_DENY = "explicit-deny"
NO_MATCHING_GRANT = "no-matching-grant"
UNDECLARED_CAPABILITY = "undeclared-capability"
UNDECLARED_RESOURCE = "undeclared-resource"
EMPTY_LIMITS = "empty-limits"
AUDIT_UNAVAILABLE = "audit-unavailable"


def new_id(prefix: str, nbytes: int) -> str:
    """An unguessable identifier: `prefix` and `nbytes` random bytes, URL-safe."""
    return prefix + secrets.token_urlsafe(nbytes)


def invalid(message: str, data: Any = None) -> errors.RpcError:
    return errors.RpcError(jsonrpc.INVALID_PARAMS, message, data)


def provider_path(value: object, label: str, max_length: int) -> str | errors.RpcError:
    """An exact resource path a provider sent ("/site1/line2/valve-3"; one final "/" is dropped), or the
    problem with it (as an RpcError whose message is the words)."""
    if not isinstance(value, str) or not value:
        return invalid(f"{label} must be a non-empty string")
    if len(value) > max_length:
        return invalid(f"{label} is longer than {max_length} characters")
    path = value[:-1] if len(value) > 1 and value.endswith("/") else value
    if "%2f" in path.lower():
        return invalid(f'{label} "{value}" holds an encoded "/" (%2F): one resource would have two spellings')
    try:
        return check_path(path)
    except PatternError as exc:
        return invalid(f"{label}: {exc}")


def within(namespace: str, path: str) -> bool:
    """`path` is `namespace` itself or lies below it."""
    return path == namespace or path.startswith(namespace.rstrip("/") + "/")
