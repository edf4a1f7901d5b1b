"""Tools' inputSchemas compiled once (fastjsonschema), and a failed validation put in words an agent acts on.

fastjsonschema turns a schema into a Python function once; a call then costs about a microsecond.
`SchemaCache` keys the compiled function by the schema's content (its canonical JSON, hashed), so a
thousand pumps listing the same tools share one function, and remembers the schemas it could not
compile (and why) so that a bad one is not compiled again at every call.

What a provider lists is not trusted:
- a `$ref` that points outside the schema itself is refused: nothing is ever fetched (no network,
  no file); fastjsonschema would otherwise open the URL with urllib;
- `default` is not applied (the arguments forwarded are the caller's own, never filled in) and
  `format` is an annotation, as JSON Schema 2019-09 and later say, not an assertion;
- a schema that does not compile (wrong types, an unknown draft's keywords in the wrong shape, too
  deep, a remote `$ref`) is no error of the call: the call is checked against the operator limits
  only, and `SchemaCache.error(tool)` says why;
- its patterns (`pattern`, `patternProperties`) are matched within limits.max_pattern_ms per check
  (gateway/policy/patterns.py): fastjsonschema's own code generator is used with its regular
  expressions swapped for bounded ones, and with its one match at compile time (a required name
  against `patternProperties`) bounded the same way;
- its recursion is bounded by the same limits.max_pattern_ms: a definition reached through `$ref`
  that refers to itself from two branches (`oneOf`, `anyOf`, `allOf`) checks the same value twice
  at every level of nesting, 2^depth times, so 263 bytes of arguments would hold the event loop for
  minutes. fastjsonschema makes one function per `$ref` target and calls it by its global name, so
  each one called is wrapped with a counter (`_RefCalls`) that reads the thread's CPU time every
  CHECK_EVERY entries and raises SchemaCheckTimeout once the check has taken longer: the call is
  refused. Only work through `$ref` is bounded so (nothing else can repeat itself 2^depth times): a
  schema without `$ref` costs nothing more, one with it under 0.1 µs per entry. The bound is on the
  check's time, whatever makes it long: an argument of tens of thousands of `$ref`'d items (25 000
  rows take 50 ms here) needs a higher limits.max_pattern_ms;
- compiling is not cheap for every schema (`re` compiles a case-insensitive class of wide ranges in
  milliseconds, and a schema can repeat it thousands of times), so a governed call has its schema
  compiled off the event loop (`SchemaCache.ready`), on one thread shared by every schema, within
  limits.max_schema_compile_ms; a schema not compiled in time (or not started, with more than
  limits.max_schema_compiles_waiting already waiting) is treated as one that does not compile
  until its compile ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from hashlib import blake2b
from queue import SimpleQueue
from time import monotonic, thread_time
from types import CodeType, FunctionType
from typing import Any

import fastjsonschema
import orjson
import regex
from fastjsonschema import JsonSchemaDefinitionException, JsonSchemaValueException
from fastjsonschema.draft04 import CodeGeneratorDraft04
from fastjsonschema.ref_resolver import RefResolver

from gateway.core.json_words import json_type
from gateway.policy.patterns import DEFAULT_MAX_PATTERN_MS, BoundedPattern, PatternBudget, PatternTimeout, any_match

log = logging.getLogger("gateway.policy.schemas")

Validator = Callable[[Any], Any]
DEFAULT_MAX_ENTRIES = 4096
DEFAULT_MAX_COMPILE_MS = 3000
"""limits.max_schema_compile_ms by default: a real schema compiles in about a millisecond."""
DEFAULT_MAX_COMPILES_WAITING = 4
"""limits.max_schema_compiles_waiting by default."""
DEFAULT_MAX_CODE_BYTES = 1 << 20
"""limits.max_schema_code_bytes by default: Python compiles this much in about 0.2 s, holding the GIL
(so the event loop) all along; pump-1's set_speed makes 2 KB."""
SHOWN_CHARS = 60
"""A value longer than this (as JSON) is cut in messages: the caller sent it, it needs no echo in full."""
CHECK_EVERY = 256
"""`$ref`'d functions entered between two readings of the thread's CPU time: a reading costs about 2 µs,
an entry some tenths of a µs at least, so the readings add a few % at most and the bound is overrun by
a fraction of a millisecond."""


@dataclass(frozen=True, slots=True)
class CompiledSchema:
    """One inputSchema as the cache holds it: its validator, or why there is none."""

    validator: Validator | None
    error: str | None = None
    """Why the tool's arguments are not checked against its inputSchema (None: they are)."""
    pending: bool = False
    """Not compiled yet (past limits.max_schema_compile_ms, or not started): checked by limits only until it is."""


NO_SCHEMA = CompiledSchema(None, "the tool lists no inputSchema")
UNLISTED = CompiledSchema(None, "the provider does not list the tool")


class RemoteRefRefused(fastjsonschema.JsonSchemaDefinitionException):
    pass


class SchemaCheckTimeout(Exception):
    """A check through `$ref`'d functions took longer than limits.max_pattern_ms: the call is refused.

    No JsonSchemaValueException: the `try` of each `oneOf`/`anyOf` branch in fastjsonschema's code
    catches those (a failed branch) and would try the next branch instead of stopping."""

    def __init__(self, path: str | None, limit_ms: float) -> None:
        super().__init__(f"the recursive check took longer than {limit_ms:g} ms (at {path or 'the arguments'})")
        self.path = path
        """The argument path being checked when the bound was found spent ("filter.c.c"); None for the whole."""
        self.limit_ms = limit_ms


class _RefCalls:
    """The entries into the `$ref`'d functions of one check, and its time; one per compiled schema,
    started at each check (a check runs to its end without yielding, so two never share it)."""

    __slots__ = ("budget", "cpu_start", "left")

    def __init__(self, budget: PatternBudget) -> None:
        self.budget = budget
        """The bound (limits.max_pattern_ms); the pattern matches of the check take from it too."""
        self.left = CHECK_EVERY
        self.cpu_start: float | None = None

    def start(self, cpu_start: float | None) -> None:
        """A check begins; `cpu_start` is the thread's CPU time now, or None to read it at the first
        CHECK_EVERY entries (a reading costs more than the whole check of most arguments)."""
        self.left = CHECK_EVERY
        self.cpu_start = cpu_start

    def counted(self, validate: Callable[[Any, Any, Any], Any]) -> Callable[[Any, Any, Any], Any]:
        """`validate` (a generated function, always called with its three arguments) counting its calls."""

        def counted(data: Any, custom_formats: Any, name_prefix: Any) -> Any:
            self.left -= 1
            if self.left <= 0:
                self.spent(name_prefix)
            return validate(data, custom_formats, name_prefix)

        return counted

    def spent(self, name_prefix: Any) -> None:
        """Every CHECK_EVERY entries: SchemaCheckTimeout when the check has had its time."""
        self.left = CHECK_EVERY
        if self.cpu_start is None:
            self.cpu_start = thread_time()
        elif thread_time() - self.cpu_start > self.budget.limit_s:
            path = argument_path(name_prefix) if isinstance(name_prefix, str) else None
            raise SchemaCheckTimeout(path, self.budget.limit_ms)


def _called_by_name(functions: dict[str, FunctionType]) -> list[str]:
    """The generated functions that generated code calls (by their global name): each `$ref`'s target,
    the root's too when a `$ref` points at "#". Read from the bytecode's global names, which the
    provider's strings (in the code as constants) cannot add to."""
    names: set[str] = set()
    pending: list[CodeType] = [function.__code__ for function in functions.values()]
    while pending:
        code = pending.pop()
        names.update(code.co_names)
        pending.extend(const for const in code.co_consts if isinstance(const, CodeType))
    return [name for name in functions if name in names]


class _LocalRefsOnly(Mapping[str, Callable[[str], Any]]):
    """fastjsonschema's `handlers` (URI scheme -> fetcher): one for every scheme, and it refuses.

    fastjsonschema asks `scheme in handlers` for each `$ref` it cannot resolve inside the schema and
    opens the URI with urllib when the answer is no; here the answer is always yes, and the fetch fails."""

    def __contains__(self, scheme: object) -> bool:
        return True

    def __getitem__(self, scheme: str) -> Callable[[str], Any]:
        return _refuse_remote

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def _refuse_remote(uri: str) -> Any:
    raise RemoteRefRefused(f"$ref {shown(uri)} points outside the schema; the gateway fetches no schema")


LOCAL_REFS_ONLY = _LocalRefsOnly()


class _BoundedRequired(CodeGeneratorDraft04):
    """fastjsonschema's generator with its one compile-time match bounded: with `additionalProperties`
    false, each required name that `properties` lacks must match a `patternProperties` pattern, which
    fastjsonschema checks with an unbounded `re.search` of the provider's pattern against the
    provider's name. Done here within the budget; the code generated is the same."""

    pattern_budget: PatternBudget

    def generate_required(self) -> None:
        definition = self._definition
        if not isinstance(definition, dict) or definition.get("additionalProperties", True):
            super().generate_required()  # type: ignore[no-untyped-call]
            return
        patterns = definition.get("patternProperties", {})
        properties = definition.get("properties", {})
        required = definition.get("required")
        if not isinstance(patterns, dict):
            raise JsonSchemaDefinitionException(f"{self._variable}: patternProperties must be an object")
        if isinstance(required, list | tuple):
            impossible = [
                name
                for name in required
                if name not in properties and not any_match(patterns, name, self.pattern_budget)
            ]
            if impossible:
                raise JsonSchemaDefinitionException(
                    f"{self._variable}: items {impossible} are required but not allowed"
                )
        self._definition = {key: value for key, value in definition.items() if key != "additionalProperties"}
        try:
            super().generate_required()  # type: ignore[no-untyped-call]
        finally:
            self._definition = definition


_GENERATORS: dict[type[CodeGeneratorDraft04], type[CodeGeneratorDraft04]] = {}


def _generator_class(schema: dict[str, Any]) -> type[CodeGeneratorDraft04]:
    """fastjsonschema's generator for the schema's draft, with the bounded compile-time match."""
    draft = fastjsonschema._get_code_generator_class(schema)
    found = _GENERATORS.get(draft)
    if found is None:
        found = _GENERATORS[draft] = type(f"Bounded{draft.__name__}", (_BoundedRequired, draft), {})
    return found


def generated_validator(
    schema: dict[str, Any], budget: PatternBudget, max_code_bytes: int = DEFAULT_MAX_CODE_BYTES
) -> Validator:
    """fastjsonschema.compile, with every pattern matched within `budget` (started afresh at each check),
    and the functions that `$ref`s call counted, so the check ends at the budget's bound (`_RefCalls`).

    Code longer than `max_code_bytes` is refused before Python compiles it: that compile holds the GIL
    (every thread, the event loop's too) from start to end, about 0.2 s per MB."""
    resolver = RefResolver.from_schema(schema, handlers=LOCAL_REFS_ONLY, store={})
    generator = _generator_class(schema)(schema, resolver=resolver, use_default=False, use_formats=False)
    assert isinstance(generator, _BoundedRequired)
    generator.pattern_budget = budget
    budget.start()
    state = generator.global_state  # generates the code; the compile-time matches take from `budget` together
    patterns: dict[str, Any] = state["REGEX_PATTERNS"]
    for written, compiled in patterns.items():
        # fastjsonschema compiled each with `re` (its syntax decides what compiles); `regex` matches it.
        patterns[written] = BoundedPattern(written, compiled.pattern, budget)
    code = generator.func_code
    if len(code) > max_code_bytes:
        raise JsonSchemaDefinitionException(
            f"its validator would be {len(code)} characters of code, more than limits.max_schema_code_bytes "
            f"({max_code_bytes})"
        )
    exec(code, state)  # as fastjsonschema.compile does: the provider's strings stay strings
    validate: Validator = state[resolver.get_scope_name()]
    functions = {
        name: value for name, value in state.items() if isinstance(value, FunctionType) and value.__globals__ is state
    }
    recursive = _called_by_name(functions)
    if recursive:  # a schema without `$ref` has nothing to count, and costs nothing more
        calls = _RefCalls(budget)
        for name in recursive:
            state[name] = calls.counted(functions[name])

        def counting(data: Any) -> Any:
            if patterns:
                budget.start()
                calls.start(budget.cpu_start)
            else:
                calls.start(None)
            return validate(data)

        return counting
    if not patterns:
        return validate

    def bounded(data: Any) -> Any:
        budget.start()
        return validate(data)

    return bounded


def compile_schema(
    schema: Any, max_pattern_ms: float = DEFAULT_MAX_PATTERN_MS, max_code_bytes: int = DEFAULT_MAX_CODE_BYTES
) -> CompiledSchema:
    """A validator for `schema` (a fresh copy of it: fastjsonschema rewrites `$ref`s in place), or why not.

    Its patterns' matches take at most `max_pattern_ms` per check (and as much for the compile);
    past it the validator raises PatternTimeout. A check through its `$ref`s takes at most as long
    (its CPU time, patterns included); past it the validator raises SchemaCheckTimeout."""
    if not isinstance(schema, dict):
        return CompiledSchema(None, f"the inputSchema is {json_type(schema)}, not an object")
    try:
        validator = generated_validator(
            orjson.loads(orjson.dumps(schema)), PatternBudget(max_pattern_ms), max_code_bytes
        )
    except RemoteRefRefused as exc:
        return CompiledSchema(None, f"remote reference refused: {exc}")
    except PatternTimeout as exc:
        return CompiledSchema(
            None,
            f"the inputSchema does not compile: matching its patternProperties pattern {shown(exc.pattern)} "
            f"against its required name {shown(exc.subject)} took longer than limits.max_pattern_ms "
            f"({number(exc.limit_ms)} ms)",
        )
    except Exception as exc:  # a provider's schema may break the compiler in any way: none stops the call
        return CompiledSchema(None, f"the inputSchema does not compile: {type(exc).__name__}: {exc}"[:300])
    return CompiledSchema(validator)


class _CompileThread:
    """One daemon thread that compiles schemas in turn: a flood of distinct schemas queues here
    instead of adding threads, and a compile that runs for minutes never holds the process at exit."""

    def __init__(self) -> None:
        self._jobs: SimpleQueue[tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], Callable[[], Any]]] = (
            SimpleQueue()
        )
        self._thread: threading.Thread | None = None

    def submit(self, job: Callable[[], Any]) -> asyncio.Future[Any]:
        """`job()`'s result, computed on the thread, as a future of the running loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="schema-compile", daemon=True)
            self._thread.start()
        self._jobs.put((loop, future, job))
        return future

    def _run(self) -> None:
        while True:
            loop, future, job = self._jobs.get()
            try:
                outcome: tuple[bool, Any] = (True, job())
            except BaseException as exc:  # handed to the loop, whatever it is
                outcome = (False, exc)
            with contextlib.suppress(RuntimeError):  # the loop that asked is closed: the result goes nowhere
                loop.call_soon_threadsafe(_settle, future, outcome)


def _settle(future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if future.done():
        return
    if outcome[0]:
        future.set_result(outcome[1])
    else:
        future.set_exception(outcome[1])


@dataclass(slots=True)
class _Compiling:
    future: asyncio.Future[Any]
    deadline: float
    """monotonic() past which calls stop waiting for it."""
    late: bool = False
    """Past its deadline (logged once)."""


class SchemaCache:
    """Compiled inputSchemas, keyed by content and bounded (least recently used goes first).

    Two levels, each holding at most `max_entries`:
    - by content: the schema's canonical JSON (orjson, keys sorted) hashed with blake2b (128 bits),
      least recently used dropped first; equal schemas from a thousand pumps share one compile;
    - by object: the schema dict itself, held while it is there, so its id cannot pass to another
      object; first in, first out. A call whose tool list the cache has seen costs a dict lookup
      instead of serializing and hashing its schema. The gateway replaces a provider's tool list
      and never edits one in place, so a held schema's content does not change under it."""

    def __init__(
        self,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_pattern_ms: float = DEFAULT_MAX_PATTERN_MS,
        max_compile_ms: float = DEFAULT_MAX_COMPILE_MS,
        max_compiles_waiting: int = DEFAULT_MAX_COMPILES_WAITING,
        max_code_bytes: int = DEFAULT_MAX_CODE_BYTES,
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        if not max_pattern_ms > 0:
            raise ValueError("max_pattern_ms must be above 0")
        if not max_compile_ms > 0:
            raise ValueError("max_compile_ms must be above 0")
        if max_compiles_waiting < 0:
            raise ValueError("max_compiles_waiting must be at least 0")
        self.max_entries = max_entries
        self.max_pattern_ms = max_pattern_ms
        """limits.max_pattern_ms: how long the pattern matches of one check may take together."""
        self.max_compile_ms = max_compile_ms
        """limits.max_schema_compile_ms: how long a governed call waits for its schema's compile."""
        self.max_compiles_waiting = max_compiles_waiting
        self.max_code_bytes = max_code_bytes
        """limits.max_schema_code_bytes: the longest validator code compiled."""
        """limits.max_schema_compiles_waiting: compiles queued behind the one running, at most."""
        self.compiles = 0
        """How many schemas were compiled (or tried): equal schemas count once while cached."""
        self._by_content: OrderedDict[bytes, CompiledSchema] = OrderedDict()
        self._by_object: dict[int, tuple[object, bytes | None, CompiledSchema]] = {}
        self._compiling: dict[bytes, _Compiling] = {}
        self._thread = _CompileThread()

    @property
    def size(self) -> int:
        """How many distinct schemas it holds (compiled or failed)."""
        return len(self._by_content)

    def validator(self, tool: Mapping[str, Any] | None) -> Validator | None:
        """The compiled inputSchema of `tool` (as its provider lists it); None when it cannot be checked."""
        return self.entry(tool).validator

    def error(self, tool: Mapping[str, Any] | None) -> str | None:
        """Why `tool`'s arguments are not checked against its inputSchema; None when they are."""
        return self.entry(tool).error

    def entry(self, tool: Mapping[str, Any] | None) -> CompiledSchema:
        """`tool`'s compiled inputSchema, compiled here (on the caller's thread) when not cached:
        on the event loop, `await ready(tool)` first (unless `cached(tool)`)."""
        if tool is None:
            return UNLISTED
        schema = tool.get("inputSchema")
        if schema is None:
            return NO_SCHEMA
        held = self._held(schema)
        if held is not None:
            self._used(held[1], held[2])
            return held[2]
        key, entry = self._by_key(schema, tool)
        self._hold(schema, key, entry)
        return entry

    def cached(self, tool: Mapping[str, Any] | None) -> bool:
        """Whether `entry(tool)` answers from the cache (a dict lookup, no compile)."""
        if tool is None:
            return True
        schema = tool.get("inputSchema")
        if schema is None:
            return True
        held = self._held(schema)
        return held is not None and not held[2].pending

    async def ready(self, tool: Mapping[str, Any]) -> None:
        """Have `tool`'s inputSchema compiled on the compile thread, waiting for it at most
        max_compile_ms; `entry(tool)` then answers without compiling: the schema's validator, or a
        `pending` entry (checked by the operator limits only) while it is not compiled."""
        schema = tool.get("inputSchema")
        if schema is None:
            return
        held = self._by_object.get(id(schema))
        if held is not None and held[0] is schema:
            key = held[1]
        else:
            try:
                key = blake2b(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS), digest_size=16).digest()
            except (orjson.JSONEncodeError, TypeError):
                self.entry(tool)  # not JSON: fails at once, nothing to compile
                return
        if key is None:
            return
        entry = self._by_content.get(key)
        if entry is not None:
            self._hold(schema, key, entry)
            return
        compiling = self._compiling.get(key)
        if compiling is None:
            if len(self._compiling) > self.max_compiles_waiting:  # one compiles, the others wait
                self._hold(schema, key, self._pending(tool, self._queue_full()))
                return
            self.compiles += 1
            compiling = self._compiling[key] = _Compiling(
                self._thread.submit(
                    partial(compile_schema, schema, self.max_pattern_ms, max_code_bytes=self.max_code_bytes)
                ),
                monotonic() + self.max_compile_ms / 1000,
            )
            compiling.future.add_done_callback(partial(self._compiled, key, tool.get("name")))
        left = compiling.deadline - monotonic()
        if left > 0 and not compiling.future.done():
            with contextlib.suppress(TimeoutError):  # at the bound the call goes on without it
                await asyncio.wait_for(asyncio.shield(compiling.future), left)
        if compiling.future.done():
            self._hold(schema, key, self._outcome(compiling.future))
            return
        error = (
            f"the inputSchema took longer than limits.max_schema_compile_ms ({number(self.max_compile_ms)} ms) to "
            "compile; it goes on compiling, and calls are checked against it once it has"
        )
        self._hold(schema, key, self._pending(tool, error, logged=compiling.late))
        compiling.late = True

    def _queue_full(self) -> str:
        return (
            f"the inputSchema is not compiled now: {len(self._compiling)} other inputSchemas are being compiled or "
            f"waiting (limits.max_schema_compiles_waiting = {self.max_compiles_waiting})"
        )

    def _pending(self, tool: Mapping[str, Any], error: str, *, logged: bool = False) -> CompiledSchema:
        entry = CompiledSchema(None, error, pending=True)
        return entry if logged else self._failed(entry, tool)

    @staticmethod
    def _outcome(future: asyncio.Future[Any]) -> CompiledSchema:
        exc = future.exception()
        if exc is None:
            result: CompiledSchema = future.result()
            return result
        return CompiledSchema(None, f"the inputSchema does not compile: {type(exc).__name__}: {exc}"[:300])

    def _compiled(self, key: bytes, name: object, future: asyncio.Future[Any]) -> None:
        """A compile on the thread ended: cached, and the schemas held as pending get it."""
        compiling = self._compiling.pop(key, None)
        if future.cancelled():
            return
        entry = self._outcome(future)
        if entry.error is not None:
            self._failed(entry, {"name": name})
        elif compiling is not None and compiling.late:
            log.warning("tool %s: its inputSchema is compiled now; its calls are checked against it", shown(name))
        self._used(key, entry)
        for held_id, (schema, held_key, held) in list(self._by_object.items()):
            if held_key == key and held.pending:
                self._by_object[held_id] = (schema, key, entry)

    def _hold(self, schema: object, key: bytes | None, entry: CompiledSchema) -> None:
        held = self._by_object.get(id(schema))
        if (held is None or held[0] is not schema) and len(self._by_object) >= self.max_entries:
            # first in, first out: a dropped object costs one key
            del self._by_object[next(iter(self._by_object))]
        self._by_object[id(schema)] = (schema, key, entry)

    def _by_key(self, schema: Any, tool: Mapping[str, Any]) -> tuple[bytes | None, CompiledSchema]:
        try:
            key = blake2b(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS), digest_size=16).digest()
        except (orjson.JSONEncodeError, TypeError) as exc:
            self.compiles += 1
            return None, self._failed(CompiledSchema(None, f"the inputSchema is not JSON: {exc}"), tool)
        entry = self._by_content.get(key)
        if entry is not None:
            self._by_content.move_to_end(key)
            return key, entry
        self.compiles += 1
        entry = compile_schema(schema, self.max_pattern_ms, max_code_bytes=self.max_code_bytes)
        if entry.error is not None:
            self._failed(entry, tool)
        self._used(key, entry)
        return key, entry

    def _held(self, schema: object) -> tuple[object, bytes | None, CompiledSchema] | None:
        """The cache's entry for this very schema object (its id alone may be a freed object's)."""
        held = self._by_object.get(id(schema))
        return held if held is not None and held[0] is schema else None

    def _used(self, key: bytes | None, entry: CompiledSchema) -> None:
        """`key` becomes the most recently used (back in the cache if it had been dropped meanwhile)."""
        if key is None or entry.pending:
            return
        try:
            self._by_content.move_to_end(key)
        except KeyError:
            self._by_content[key] = entry
            if len(self._by_content) > self.max_entries:
                self._by_content.popitem(last=False)

    @staticmethod
    def _failed(entry: CompiledSchema, tool: Mapping[str, Any]) -> CompiledSchema:
        log.warning(
            "tool %s: %s; its calls are checked against the operator limits only", shown(tool.get("name")), entry.error
        )
        return entry


# --- A failed validation, in words --------------------------------------------------------------------

TYPE_WORDS = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "boolean": "true or false",
    "object": "an object",
    "array": "an array",
    "null": "null",
}


def number(value: float) -> str:
    """A bound as people write it: 2000, not 2000.0; NaN and infinities by name."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        if value.is_integer() and abs(value) < 2**53:
            return str(int(value))
    return repr(value)


def shown(value: Any) -> str:
    """`value` as JSON, cut at SHOWN_CHARS: "speed_rpm", 2500, true, [1, 2]."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return number(value)
    try:
        text = orjson.dumps(value).decode()
    except (orjson.JSONEncodeError, TypeError):
        text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def listed(values: Any) -> str:
    if not isinstance(values, list | tuple):
        return shown(values)
    text = ", ".join(shown(value) for value in values[:10])
    return text + (", …" if len(values) > 10 else "")


def argument_path(name: str | None) -> str | None:
    """fastjsonschema's "data.config.mode" or "data.items[2]" -> "config.mode", "items[2]"; None for the whole."""
    if not name or name == "data":
        return None
    if name.startswith("data."):
        return name[5:]
    return name[4:] if name.startswith("data") else name


def _joined(parent: str | None, child: str) -> str:
    return f"{parent}.{child}" if parent else child


def _unknown_keys(exc: JsonSchemaValueException, max_pattern_ms: float) -> list[str]:
    """The keys `additionalProperties: false` refused: neither in `properties` nor matching a pattern
    (matched within `max_pattern_ms`; past it, or for a pattern that does not compile, none is named)."""
    definition = exc.definition if isinstance(exc.definition, dict) else {}
    known = definition.get("properties") or {}
    patterns = list(definition.get("patternProperties") or {})
    value = exc.value if isinstance(exc.value, dict) else {}
    budget = PatternBudget(max_pattern_ms)
    unknown = []
    for key in value:
        if key in known:
            continue
        try:
            if any_match(patterns, key, budget):
                continue
        except (PatternTimeout, regex.error, TypeError):
            return []
        unknown.append(key)
    return unknown


def explain(exc: JsonSchemaValueException, max_pattern_ms: float = DEFAULT_MAX_PATTERN_MS) -> tuple[str | None, str]:
    """(the argument's path, what is wrong with it) for a failed validation: ("speed_rpm", "must be <= 2900").

    `max_pattern_ms` bounds the pattern matches that find which argument `additionalProperties` refused."""
    path = argument_path(exc.name)
    rule = exc.rule or ""
    expected = exc.rule_definition
    definition = exc.definition if isinstance(exc.definition, dict) else {}
    if rule == "required" and isinstance(exc.value, dict):
        missing = [_joined(path, str(key)) for key in (expected or ()) if key not in exc.value]
        if missing:
            others = ", ".join(f'"{name}"' for name in missing[1:])
            also = f" (so {'is' if len(missing) == 2 else 'are'} {others})" if others else ""
            return missing[0], f"is required{also}"
    if rule == "additionalProperties" and definition.get("additionalProperties") is False:
        unknown = _unknown_keys(exc, max_pattern_ms)
        if unknown:
            known = ", ".join(str(key) for key in (definition.get("properties") or {}))
            takes = f"only {known}" if known else "no arguments"
            where = "this tool" if path is None else f'"{path}"'
            return _joined(path, unknown[0]), f"is not one {where} takes; it takes {takes}"
    if rule == "type":
        types = expected if isinstance(expected, list) else [expected]
        words = " or ".join(TYPE_WORDS.get(str(kind), str(kind)) for kind in types)
        return path, f"must be {words}, not {json_type(exc.value)}"
    exclusive = bool(definition.get("exclusiveMaximum" if rule == "maximum" else "exclusiveMinimum"))
    phrase = {
        "maximum": f"must be {'<' if exclusive else '<='} {shown(expected)}",
        "minimum": f"must be {'>' if exclusive else '>='} {shown(expected)}",
        "exclusiveMaximum": f"must be < {shown(expected)}",
        "exclusiveMinimum": f"must be > {shown(expected)}",
        "multipleOf": f"must be a multiple of {shown(expected)}",
        "enum": f"must be one of {listed(expected)}",
        "const": f"must be {shown(expected)}",
        "minLength": f"must be at least {shown(expected)} characters long",
        "maxLength": f"must be at most {shown(expected)} characters long",
        "pattern": f"must match the pattern {shown(expected)}",
        "minItems": f"must have at least {shown(expected)} items",
        "maxItems": f"must have at most {shown(expected)} items",
        "uniqueItems": "must not repeat an item",
        "minProperties": f"must have at least {shown(expected)} entries",
        "maxProperties": f"must have at most {shown(expected)} entries",
    }.get(rule)
    if phrase is not None:
        return path, phrase
    # anyOf, oneOf, not, if/then, dependencies, ...: fastjsonschema's own words, without its "data.x"
    name = exc.name or ""
    return path, exc.message[len(name) :].strip() if name and exc.message.startswith(name) else exc.message
