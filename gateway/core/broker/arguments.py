"""`_broker` tool arguments checked against the tool's own inputSchema, one table for every tool.

The schemas here use a small part of JSON Schema (type, enum, minLength, maxLength, minimum, maximum,
required, additionalProperties false), and this checks exactly that part, so what a tool lists is what
it takes. A bad value is a tool error naming the argument and what it takes; the value itself is never
echoed (it may be megabytes), only its type or length.
"""

from __future__ import annotations

from typing import Any

from gateway.core import errors, jsonrpc
from gateway.core.broker.results import BadArguments
from gateway.core.jsonrpc import JsonObject

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}
_JSON_NAMES = {str: "a string", bool: "a boolean", int: "an integer", float: "a number", dict: "an object"}


def json_type(value: object) -> str:
    """What a JSON value is, in words, for a message that must not repeat the value."""
    if value is None:
        return "null"
    if isinstance(value, list):
        return "an array"
    return _JSON_NAMES.get(type(value), type(value).__name__)


def check(name: str, schema: JsonObject, arguments: object) -> dict[str, Any]:
    """`arguments` of the tool `name` as `schema` (its inputSchema) takes them; raises BadArguments
    (a tool error) for a bad argument, -32602 for arguments that are not an object."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise errors.RpcError(jsonrpc.INVALID_PARAMS, f'{name}: "arguments" must be an object')
    properties: dict[str, JsonObject] = schema.get("properties") or {}
    unexpected = sorted(set(arguments) - set(properties))
    if unexpected and schema.get("additionalProperties") is False:
        allowed = ", ".join(sorted(properties)) or "none"
        shown = ", ".join(key[:64] for key in unexpected[:8])
        raise BadArguments(f"{name}: unexpected argument(s) {shown}; allowed: {allowed}")
    for key in schema.get("required") or []:
        if key not in arguments:
            raise BadArguments(f'{name} needs "{key}": {_takes(properties[key])}', argument=key)
    for key, value in arguments.items():
        spec = properties.get(key)
        if spec is not None and not _fits(spec, value):
            problem = f"is {json_type(value)}" if not _right_type(spec, value) else _length_or_range(spec, value)
            # An enum's values also under the argument's name in the plural (topic: topics), for programs.
            listed = {f"{key}s": list(spec["enum"])} if "enum" in spec else {}
            raise BadArguments(f'{name}: "{key}" {problem}; it takes {_takes(spec)}', argument=key, **listed)
    return arguments


def _right_type(spec: JsonObject, value: object) -> bool:
    if "enum" in spec:
        return any(type(value) is type(option) for option in spec["enum"])
    kind = spec.get("type")
    if not isinstance(kind, str):
        return True
    if isinstance(value, bool) and kind != "boolean":
        return False
    return isinstance(value, _TYPES[kind])


def _fits(spec: JsonObject, value: object) -> bool:
    if not _right_type(spec, value):
        return False
    if "enum" in spec:
        return any(value == option for option in spec["enum"])
    if isinstance(value, str):
        return bool(spec.get("minLength", 0) <= len(value) <= spec.get("maxLength", len(value)))
    if isinstance(value, int | float) and not isinstance(value, bool):
        return bool(spec.get("minimum", value) <= value <= spec.get("maximum", value))
    return True


def _length_or_range(spec: JsonObject, value: object) -> str:
    if "enum" in spec:
        return "is none of the values listed"
    if isinstance(value, str):
        return f"is {len(value)} characters long"
    return "is out of range"


def _takes(spec: JsonObject) -> str:
    """What an argument takes, from its schema: the values of an enum, else its type and bounds."""
    if "enum" in spec:
        return "one of " + ", ".join(str(option) for option in spec["enum"])
    kind = str(spec.get("type", "any value"))
    bounds = []
    if "minLength" in spec:
        bounds.append(f"at least {spec['minLength']} characters")
    if "maxLength" in spec:
        bounds.append(f"at most {spec['maxLength']} characters")
    if "minimum" in spec and "maximum" in spec:
        bounds.append(f"from {spec['minimum']} to {spec['maximum']}")
    words = f"a {kind}" if kind != "integer" else "an integer"
    if bounds:
        words += " of " + " and ".join(bounds) if kind == "string" else " " + ", ".join(bounds)
    description = spec.get("description")
    return f"{words} ({description})" if description else words
