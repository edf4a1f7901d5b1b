"""The C core's formatter takes fewer conversions than printf, whose attribute checks its calls.

mcpb_format is declared with printf's format attribute, so the compiler checks its arguments, but
mcpb_vformat prints only %s, %d, %u, %ld and %lu (and %j and %P where no attribute applies): a %llu, %x
or %% would compile and print wrong. This reads every call in the component's sources and names
the conversions it cannot print.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

COMPONENT = Path(__file__).resolve().parents[2] / "device" / "libmcpb-idf"

# function name -> (index of the format argument, the conversions it prints)
FORMATTERS = {
    "mcpb_format": (2, {"s", "d", "u", "ld", "lu"}),
    "mcpb__log": (2, {"s", "d", "u", "ld", "lu"}),
    "mcpb_format_fit": (2, {"s", "j", "P", "d", "u", "ld", "lu"}),
    "error_answer": (4, {"s", "d", "u", "ld", "lu"}),
}
CALL = re.compile(r"\b(" + "|".join(FORMATTERS) + r")\s*\(")
LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')


def arguments(source: str, open_at: int) -> list[str]:
    """The top-level arguments of the call whose "(" is at open_at."""
    depth, start, found, in_string = 0, open_at + 1, [], False
    at = open_at
    while at < len(source):
        c = source[at]
        if in_string:
            if c == "\\":
                at += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                found.append(source[start:at])
                return found
        elif c == "," and depth == 1:
            found.append(source[start:at])
            start = at + 1
        at += 1
    raise AssertionError(f"unclosed call at {open_at}")


def conversions(fmt: str) -> list[str]:
    """The conversions of a format string, each as written after its %."""
    found, at = [], 0
    while (at := fmt.find("%", at)) >= 0:
        end = at + 1
        while end < len(fmt) and not fmt[end].isalpha() and fmt[end] != "%":
            end += 1  # flags, widths, precisions: none is supported, so they are kept to be named
        while end < len(fmt) and fmt[end] == "l":
            end += 1
        found.append(fmt[at + 1 : end + 1])
        at = end + 1
    return found


def format_calls() -> list[tuple[str, str, str]]:
    """(where, function, format) for every call whose format is written as literals."""
    calls = []
    for path in sorted(COMPONENT.rglob("*.c")):
        source = path.read_text()
        for match in CALL.finditer(source):
            name = match.group(1)
            if source[: match.start()].rstrip().endswith(("size_t", "void", "static")):
                continue  # the definition, not a call
            args = arguments(source, match.end() - 1)
            index = FORMATTERS[name][0]
            literals = LITERAL.findall(args[index]) if len(args) > index else []
            if literals:
                line = source.count("\n", 0, match.start()) + 1
                where = f"{path.relative_to(COMPONENT)}:{line}"
                calls.append((where, name, "".join(literals)))
    return calls


def test_the_sources_have_formatted_calls_to_check() -> None:
    names = {name for _, name, _ in format_calls()}
    assert names == set(FORMATTERS), names


@pytest.mark.parametrize(("where", "name", "fmt"), format_calls(), ids=lambda v: str(v)[:40])
def test_every_conversion_is_one_the_formatter_prints(where: str, name: str, fmt: str) -> None:
    unsupported = [c for c in conversions(fmt) if c not in FORMATTERS[name][1]]
    assert not unsupported, f"{where}: {name} cannot print %{', %'.join(unsupported)} in {fmt!r}"


def test_the_check_names_what_the_formatter_cannot_print() -> None:
    assert conversions("%llu %x %% %5d %s %lu %j") == ["llu", "x", "%", "5d", "s", "lu", "j"]
