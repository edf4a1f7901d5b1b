"""`broker/authorization/declare` checked whole: a declaration describes a domain's capabilities and
resources and grants nothing; one problem refuses all of it, and every problem is listed at once."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.config.declarations import DeclarationsConfig
from gateway.policy.declarations.limits import ResourceLimits, parse_limits
from gateway.policy.declarations.wire import CAPABILITY_NAME, DOMAIN, RESERVED_DOMAINS, provider_path, within
from gateway.policy.provider_auth import SHARED_IDENTITY

KEYS = ("version", "domain", "namespace", "capabilities", "resources", "protects", "resultsRequired", "budgetUnits")
RIGHTS_KEYS = ("assignments", "roles", "denies")
"""Keys that would grant rights: named in the refusal, since refusing them is the point."""
RESOURCE_KEYS = ("resource", "resourcePath", "effect", "limits")
MAX_VERSION_LENGTH = 128
MAX_BUDGET_UNITS = 32
MAX_DOMAIN_LENGTH = 63
MAX_LISTED_ERRORS = 20
"""Problems a refusal lists (the rest are counted): one per key of a frame would echo the frame tenfold."""
MAX_ERROR_CHARS = 300
"""Characters of one listed problem: it may quote a key or value the provider sent."""
MQTT_TRANSPORTS = frozenset({"mqtt", "mqtt-mcp"})
BUDGET_UNIT = re.compile(r"[a-z][a-z0-9._-]{0,63}")


@dataclass(frozen=True)
class DeclaredResource:
    resource: str
    """The provider's own identifier ("uns://plant/valve-3"); never interpreted, recorded in the audit."""
    path: str
    """Where the policy looks it up: inside the declaration's namespace."""
    effect: str | None = None
    limits: ResourceLimits | None = None


@dataclass(frozen=True)
class Declaration:
    """An accepted declaration, held by the identity that sent it."""

    identity: str
    version: str
    domain: str
    namespace: str
    capabilities: frozenset[str]
    resources: Mapping[str, DeclaredResource]
    results_required: frozenset[str]
    budget_units: tuple[str, ...] = ()
    slot: str = ""
    """The slot it was declared on."""
    policy_version: str = ""
    accepted_ms: int = 0

    paths: Mapping[str, DeclaredResource] = field(init=False, repr=False, compare=False)
    """The declared resources by resourcePath (each path is declared at most once)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "paths", {resource.path: resource for resource in self.resources.values()})


@dataclass(frozen=True)
class DeclareContext:
    """What the check needs beyond the frame: who sent it, where its slot lives, who owns which domain."""

    identity: str | None
    slot: str
    slot_path: str
    """The slot's resource path in the policy in force: the namespace must lie within it."""
    owner_of: Callable[[str], str | None]
    room: bool
    """False when this identity holds no declaration yet and max_declarations are held."""
    bounds: DeclarationsConfig = field(default_factory=DeclarationsConfig)
    transport: str = "websocket"
    """The provider's way in (LinkInfo.transport): a refusal for want of an identity says what fits it."""


def identity_problem(identity: str | None, transport: str = "websocket") -> str | None:
    """Why a provider with this identity, come in over `transport`, may not declare at all, or None."""
    if identity is None and transport in MQTT_TRANSPORTS:
        return (
            "the provider comes in over MQTT, which carries no provider identity to the gateway "
            "([providers.auth] applies to WebSocket providers only): only a provider on a WebSocket with an identity "
            '([providers.auth] mode = "identities") or on a serial port may declare an authorization domain'
        )
    if identity is None and transport == "loopback":
        return (
            "the provider runs inside the gateway's own process (attach_loopback), which gives it no identity of "
            "its own: only a provider on a WebSocket with an identity "
            '([providers.auth] mode = "identities") or on a serial port may declare an authorization domain'
        )
    if identity is None:
        return (
            "the provider has no identity of its own: only a provider that authenticates as an identity "
            '([providers.auth] mode = "identities") or comes in on a serial port may declare an authorization domain'
        )
    if identity == SHARED_IDENTITY:
        return (
            "the provider authenticated with the shared secret, which every provider holding it shares, so the "
            "declaration would belong to none of them; give it an identity of its own "
            '([providers.auth] mode = "identities")'
        )
    return None


def check_declaration(params: object, context: DeclareContext) -> Declaration | list[str]:
    """The declaration `params` describes, or every problem with it."""
    problem = identity_problem(context.identity, context.transport)
    if problem is not None:
        return [problem]
    assert context.identity is not None
    if not isinstance(params, Mapping):
        return ["params must be an object"]
    errors: list[str] = []
    bounds = context.bounds
    for key in params:
        if key in RIGHTS_KEYS:
            errors.append(
                f'"{key}" is not accepted: a declaration describes resources and capabilities and grants no right; '
                "the gateway's operator assigns roles in [policy]"
            )
        elif key not in KEYS and key != "_meta":
            errors.append(f'unknown key "{key}" (keys: {", ".join(KEYS)})')
    if not context.room:
        errors.append(
            f"the gateway holds declarations of {bounds.max_declarations} provider identities already "
            "([providers.declarations] max_declarations)"
        )
    version = params.get("version")
    if not isinstance(version, str) or not 0 < len(version) <= MAX_VERSION_LENGTH:
        errors.append(f"version must be a non-empty string of at most {MAX_VERSION_LENGTH} characters")
    domain = _domain(params.get("domain"), context, errors)
    namespace = _namespace(params.get("namespace"), context, errors)
    capabilities = _capabilities(params.get("capabilities"), domain, bounds, errors)
    resources = _resources(params.get("resources"), namespace, bounds, errors)
    protects = params.get("protects")
    if protects is not None and protects != []:
        errors.append("protects: this gateway has no protected slots; send no protects (or an empty list)")
    units = params.get("budgetUnits", [])
    if (
        not isinstance(units, list)
        or len(units) > MAX_BUDGET_UNITS
        or not all(isinstance(unit, str) and BUDGET_UNIT.fullmatch(unit) for unit in units)
    ):
        errors.append(f'budgetUnits must be at most {MAX_BUDGET_UNITS} units (lowercase names, e.g. "kwh")')
    required = _results_required(params.get("resultsRequired"), capabilities, errors)
    if errors or domain is None or namespace is None or not isinstance(version, str):
        return errors or ["the declaration is incomplete"]
    return Declaration(
        identity=context.identity,
        version=version,
        domain=domain,
        namespace=namespace,
        capabilities=frozenset(capabilities),
        resources=resources,
        results_required=required,
        budget_units=tuple(units) if isinstance(units, list) else (),
        slot=context.slot,
    )


def _domain(value: object, context: DeclareContext, errors: list[str]) -> str | None:
    if isinstance(value, str) and len(value) > MAX_DOMAIN_LENGTH:
        errors.append(f"domain is {len(value)} characters long; a domain has at most {MAX_DOMAIN_LENGTH} characters")
        return None
    if not isinstance(value, str) or not DOMAIN.fullmatch(value):
        errors.append('domain must be lowercase letters, digits and "-", starting with a letter (e.g. "scada")')
        return None
    if value in RESERVED_DOMAINS:
        errors.append(f'domain "{value}" is reserved for the gateway\'s own capabilities')
        return None
    owner = context.owner_of(value)
    if owner is not None and owner != context.identity:
        errors.append(f'domain "{value}" is already declared by provider "{owner}"; a domain has one owner')
        return None
    return value


def _namespace(value: object, context: DeclareContext, errors: list[str]) -> str | None:
    if not isinstance(value, Mapping):
        errors.append('namespace must be an object: {"resource": "/<path>"}')
        return None
    for key in value:
        if key != "resource":
            errors.append(f'namespace: unknown key "{key}"')
    path = provider_path(value.get("resource"), "namespace.resource", context.bounds.max_identifier_length)
    if not isinstance(path, str):
        errors.append(path.message)
        return None
    if path == "/":
        errors.append('namespace.resource cannot be "/": declare the subtree this provider serves')
        return None
    if not within(context.slot_path, path):
        errors.append(
            f'namespace.resource "{path}" is outside slot "{context.slot}", which the policy places at '
            f'"{context.slot_path}": declare that path or one below it (or map the slot with [policy] resources)'
        )
        return None
    return path


def _capabilities(value: object, domain: str | None, bounds: DeclarationsConfig, errors: list[str]) -> list[str]:
    found: list[str] = []
    if not isinstance(value, list) or not value:
        errors.append("capabilities must be a non-empty array")
        return found
    if len(value) > bounds.max_capabilities:
        errors.append(f"capabilities: at most {bounds.max_capabilities} entries")
        return found
    for capability in value:
        if not isinstance(capability, str):
            errors.append(f"capability {capability!r} must be a string")
            continue
        head, dot, name = capability.partition(".")
        if not dot or not CAPABILITY_NAME.fullmatch(name) or len(capability) > bounds.max_identifier_length:
            errors.append(f'capability "{capability}" is malformed: write "<domain>.<name>", e.g. "scada.write"')
            continue
        if domain is not None and head != domain:
            errors.append(
                f'capability "{capability}" is outside the declared domain: a "{domain}" provider declares only '
                f'"{domain}.<name>"'
            )
            continue
        if capability in found:
            errors.append(f'capability "{capability}" is listed twice')
            continue
        found.append(capability)
    return found


def _resources(
    value: object, namespace: str | None, bounds: DeclarationsConfig, errors: list[str]
) -> dict[str, DeclaredResource]:
    resources: dict[str, DeclaredResource] = {}
    paths: dict[str, str] = {}
    if value is None:
        return resources
    if not isinstance(value, list):
        errors.append("resources must be an array")
        return resources
    if len(value) > bounds.max_resources:
        errors.append(f"resources: at most {bounds.max_resources} entries")
        return resources
    for index, raw in enumerate(value):
        label = f"resources[{index}]"
        if not isinstance(raw, Mapping):
            errors.append(f"{label} must be an object")
            continue
        for key in raw:
            if key not in RESOURCE_KEYS:
                errors.append(f'{label}: unknown key "{key}" (keys: {", ".join(RESOURCE_KEYS)})')
        native = raw.get("resource")
        if not isinstance(native, str) or not 0 < len(native) <= bounds.max_identifier_length:
            errors.append(
                f"{label}.resource must be a non-empty string of at most {bounds.max_identifier_length} characters"
            )
            continue
        path = provider_path(raw.get("resourcePath"), f"{label}.resourcePath", bounds.max_identifier_length)
        if not isinstance(path, str):
            errors.append(path.message)
            continue
        if namespace is not None and not within(namespace, path):
            errors.append(f'{label}.resourcePath "{path}" is outside the declared namespace "{namespace}"')
            continue
        effect = raw.get("effect")
        if effect is not None and (not isinstance(effect, str) or not effect):
            errors.append(f"{label}.effect must be a non-empty string")
        limits = (
            parse_limits(raw["limits"], f"{label}.limits", errors, bounds.max_allowed_values)
            if raw.get("limits") is not None
            else None
        )
        if native in resources:
            errors.append(f'{label}.resource "{native}" is declared twice')
            continue
        holder = paths.get(path)
        if holder is not None:
            # One path, one set of limits: a check naming either identifier would get different ones.
            errors.append(f'{label}.resourcePath "{path}" is already the path of resource "{holder}"')
            continue
        paths[path] = native
        resources[native] = DeclaredResource(native, path, effect if isinstance(effect, str) else None, limits)
    return resources


def _results_required(value: object, capabilities: list[str], errors: list[str]) -> frozenset[str]:
    if value is None:
        return frozenset()
    if not isinstance(value, list):
        errors.append("resultsRequired must be an array of declared capabilities")
        return frozenset()
    required: set[str] = set()
    for capability in value:
        if not isinstance(capability, str) or capability not in capabilities:
            errors.append(f"resultsRequired: {capability!r} is not one of the declared capabilities")
            continue
        required.add(capability)
    return frozenset(required)


def listed(problems: list[str]) -> list[str]:
    """The problems a refusal shows: the first MAX_LISTED_ERRORS, each cut to MAX_ERROR_CHARS, then how many more."""
    shown = [
        problem if len(problem) <= MAX_ERROR_CHARS else problem[: MAX_ERROR_CHARS - 3] + "..."
        for problem in problems[:MAX_LISTED_ERRORS]
    ]
    if len(problems) > MAX_LISTED_ERRORS:
        shown.append(f"and {len(problems) - MAX_LISTED_ERRORS} more")
    return shown


def describe(declaration: Declaration) -> dict[str, Any]:
    """A declaration as the diagnosis shows it."""
    return {
        "identity": declaration.identity,
        "domain": declaration.domain,
        "version": declaration.version,
        "namespace": declaration.namespace,
        "policyVersion": declaration.policy_version,
        "accepted_ms": declaration.accepted_ms,
        "declared_on": declaration.slot,
        "capabilities": sorted(declaration.capabilities),
        "resources": len(declaration.resources),
        "results_required": sorted(declaration.results_required),
    }
