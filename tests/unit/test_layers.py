"""The house rules of docs/architecture.md, checked on the source: which layer may import which, no
import cycles, no transport library in the core, no module over 800 lines.

Every import counts, as the code writes it: at the top, inside functions and under TYPE_CHECKING. A
second cycle check takes only the imports outside functions (TYPE_CHECKING ones too, to be safe), with
the packages each runs the __init__ of.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

GATEWAY = Path(__file__).resolve().parents[2] / "gateway"
ROOT = "gateway"

ALLOWED: dict[str, frozenset[str]] = {
    # A part of gateway/ (its first segment) -> the parts it may import besides itself.
    "core": frozenset({ROOT, "config", "telemetry", "event_loop"}),
    "policy": frozenset({ROOT, "core", "config", "telemetry", "http_answers", "http_body", "devices"}),
    "northbound": frozenset(
        {ROOT, "policy", "core", "config", "telemetry", "http_answers", "websocket_limits", "tls_probe"}
    ),
    "southbound": frozenset({ROOT, "policy", "core", "config", "telemetry", "websocket_limits", "http_body"}),
    "publish": frozenset({ROOT, "core"}),
    "discovery": frozenset({ROOT, "core", "config", "telemetry"}),
    "telemetry": frozenset({ROOT, "config"}),
    "config": frozenset({ROOT}),
    "http_answers": frozenset({ROOT, "core"}),
    "http_body": frozenset({ROOT}),
    "websocket_limits": frozenset({ROOT, "core", "policy", "telemetry", "http_answers"}),
    "event_loop": frozenset({ROOT}),
    "logs": frozenset({ROOT, "core", "config", "service"}),
    "service": frozenset({ROOT, "config"}),
    "client": frozenset({ROOT, "core", "tls_probe", "client_answers"}),
    "client_answers": frozenset({ROOT, "core"}),  # gateway/client.py's answer reading, the same layer
    "tls_probe": frozenset({ROOT}),
    "devices": frozenset({ROOT, "flash"}),  # flash/port.py: who holds the password file's lock, named
    "provision": frozenset({ROOT, "flash"}),  # flash/port.py: one diagnosis of a serial port
    "flash": frozenset({ROOT, "client"}),
    # The composition root and the command line build everything: app, cli, entry, listener; reload
    # rebuilds parts of what app built (gateway/reload/).
}
COMPOSITION = frozenset({"app", "cli", "entry", "listener", "reload"})
CONFIG_MAY_USE = frozenset(
    {
        "gateway.core.names",
        "gateway.core.jsonrpc",
        "gateway.core.secret_keys",
        "gateway.southbound.mqtt.topics",
        "gateway.policy.rules.checking",
    }
)
"""Pure rule modules the configuration validates with (slot names, nesting depth, secret names, MQTT
topics, the [policy] checks), so a bad value fails at load with the same words the running gateway would use."""
TRANSPORT_LIBRARIES = frozenset(
    {"aiohttp", "multidict", "yarl", "paho", "serial", "cobs", "pyudev", "zeroconf", "websockets", "httpx"}
)
MAX_MODULE_LINES = 800


def module_name(path: Path) -> str:
    parts = list(path.relative_to(GATEWAY.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(module: str, source: str, is_package: bool, *, at_import: bool = False) -> set[str]:
    """Every module `source` imports (absolute names; `from a import b` counts as a and a.b); with
    `at_import`, only those imported when the module itself is (not inside a function)."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in _nodes(ast.parse(source), at_import):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _nodes(tree: ast.AST, at_import: bool) -> Iterator[ast.AST]:
    """Every node of `tree`; with `at_import`, none inside a function (run later, if ever)."""
    if not at_import:
        yield from ast.walk(tree)
        return
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        todo.extend(
            child
            for child in ast.iter_child_nodes(node)
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
        )


def import_graph(*, at_import: bool = False) -> dict[str, set[str]]:
    """Module -> the gateway modules it imports. With `at_import`, only those it imports when it is
    imported itself, and the packages above them: importing a.b.c runs a/__init__.py and
    a/b/__init__.py first (except the importer's own packages, already being imported when it runs)."""
    paths = {module_name(path): path for path in GATEWAY.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        imported = imports_of(module, path.read_text(), path.name == "__init__.py", at_import=at_import)
        if at_import:
            imported |= {package for name in imported for package in packages_above(name)}
            imported -= set(packages_above(module))
        graph[module] = {name for name in imported if name in paths and name != module}
    return graph


def packages_above(module: str) -> list[str]:
    """a.b.c -> [a, a.b]."""
    parts = module.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph.get(start, ())))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def part(module: str) -> str:
    segments = module.split(".")
    return segments[1] if len(segments) > 1 else ROOT


def config_may_use(name: str) -> bool:
    """One of CONFIG_MAY_USE, or a package on the way to one (`from a.b import c` imports a.b too)."""
    return any(allowed == name or allowed.startswith(f"{name}.") for allowed in CONFIG_MAY_USE)


def upward_imports(graph: Mapping[str, Iterable[str]]) -> list[str]:
    """Each import that breaks ALLOWED, as "importer -> imported"."""
    wrong = []
    for module, imported in sorted(graph.items()):
        mine = part(module)
        if mine in COMPOSITION or mine == ROOT:
            continue
        allowed = ALLOWED.get(mine)
        for name in sorted(imported):
            theirs = part(name)
            if theirs == mine or (mine == "config" and config_may_use(name)):
                continue
            if allowed is None or theirs not in allowed:
                wrong.append(f"{module} -> {name}")
    return wrong


def transport_imports() -> list[str]:
    wrong = []
    for path in sorted((GATEWAY / "core").rglob("*.py")):
        module = module_name(path)
        for name in sorted(imports_of(module, path.read_text(), path.name == "__init__.py")):
            if name.split(".")[0] in TRANSPORT_LIBRARIES:
                wrong.append(f"{module} -> {name}")
    return wrong


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_no_cycle_through_a_package_at_import_time() -> None:
    # A module imported first whose import reaches back to it through a package's __init__ fails
    # with "partially initialized module", though the order the gateway happens to import in works.
    assert cycles(import_graph(at_import=True)) == []


def test_each_layer_imports_only_what_it_stands_on() -> None:
    graph = import_graph()
    assert {part(module) for module in graph} <= {ROOT, *ALLOWED, *COMPOSITION}, "a new part of gateway/ needs a rule"
    assert upward_imports(graph) == []


def test_the_core_imports_no_transport_library() -> None:
    assert transport_imports() == []


def test_no_module_is_over_800_lines() -> None:
    long = {
        str(path.relative_to(GATEWAY.parent)): lines
        for path in GATEWAY.rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_the_checks_catch_a_cycle_and_an_upward_import() -> None:
    graph = {
        "gateway.core.a": {"gateway.core.b"},
        "gateway.core.b": {"gateway.core.c"},
        "gateway.core.c": {"gateway.core.a", "gateway.policy.rate_limit"},
        "gateway.policy.rate_limit": {"gateway.core.a"},
        "gateway.config.mqtt": {"gateway.southbound.mqtt.topics", "gateway.southbound.mqtt.client"},
    }
    assert cycles(graph) == [["gateway.core.a", "gateway.core.b", "gateway.core.c", "gateway.policy.rate_limit"]]
    assert upward_imports(graph) == [
        "gateway.config.mqtt -> gateway.southbound.mqtt.client",
        "gateway.core.c -> gateway.policy.rate_limit",
    ]


def test_relative_and_function_level_imports_count() -> None:
    source = (
        "def f():\n    from . import b\n    from ..policy import x\n"
        "if TYPE_CHECKING:\n    import gateway.northbound.sse\n"
    )
    assert imports_of("gateway.core.a", source, is_package=False) == {
        "gateway.core",
        "gateway.core.b",
        "gateway.policy",
        "gateway.policy.x",
        "gateway.northbound.sse",
    }
