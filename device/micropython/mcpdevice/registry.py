"""The tool registry: which tools the device publishes, served straight from its schema file."""

# The schema file (the `tools` array, docs/pump-1.md) stays the single source of truth and stays out of
# RAM: mcpdevice.schema_index finds each tool's bytes once at boot; `tools/list` then reads one tool
# at a time and drops the file's insignificant whitespace on the way, without building JSON objects.
# MicroPython and CPython both run it.
#
# API: ToolRegistry(path, names, spans)   usually from mcpdevice.schema_index.load(path, budget)
#      .names                  tool names in file order
#      .page(first, budget) -> (list of ToolText, next index or None)
#                              as many tools from index `first` as fit in `budget` bytes (at least one)
#      ToolText: len() is the tool's compact size; .chunks() yields its compact JSON in pieces,
#                read from the file only while the answer is being sent
#      minify(raw, out) -> int     append `raw` without whitespace outside strings to bytearray `out`;
#                                  returns the state to pass on when a tool spans several reads

_QUOTE = b'"'
_BACKSLASH = b"\\"
_CHUNK = 256  # the largest block a tools/list answer needs while the heap is broken up


def minify(raw, out, inside=0):
    """`inside`: 0 outside a string, 1 inside one, 2 inside right after an unpaired backslash."""
    parts = raw.split(_QUOTE)
    last = len(parts) - 1
    for index, part in enumerate(parts):
        if inside:
            out.extend(part)
            run = len(part) - len(part.rstrip(_BACKSLASH))
            if run == len(part) and inside == 2:
                run += 1  # the backslash run began in the previous read
            escaped = run % 2
            if index < last:
                out.extend(_QUOTE)
                inside = 1 if escaped else 0  # an escaped quote does not end the string
            else:
                inside = 2 if escaped else 1
        else:
            out.extend(b"".join(part.split()))
            if index < last:
                out.extend(_QUOTE)
                inside = 1
    return inside


class ToolText:
    """One tool's compact JSON, produced in small pieces from the file when it is sent."""

    def __init__(self, path, start, end, size):
        self.path = path
        self.start = start
        self.end = end
        self.size = size

    def __len__(self):
        return self.size

    def chunks(self):
        at = self.start
        inside = 0
        made = 0
        while at < self.end:
            # Reopened per read: a send that fails halfway leaves no file open behind.
            with open(self.path, "rb") as f:
                f.seek(at)
                raw = f.read(min(_CHUNK, self.end - at))
            if not raw:
                break
            at += len(raw)
            out = bytearray()
            inside = minify(raw, out, inside)
            made += len(out)
            yield out
        if made != self.size:
            raise OSError("schema file %s changed since boot" % self.path)


class ToolRegistry:
    def __init__(self, path, names, spans):
        self.path = path
        self.names = names
        self._spans = spans  # (start, end, compact size) per tool

    def page(self, first, budget):
        tools = []
        used = 0
        index = first
        count = len(self._spans)
        while index < count:
            start, end, size = self._spans[index]
            if tools and used + size + 1 > budget:  # and a comma
                break
            tools.append(ToolText(self.path, start, end, size))
            used += size + 1
            index += 1
        return tools, (index if index < count else None)
