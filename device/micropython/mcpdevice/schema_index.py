"""Boot-time indexing of a schema file (the `tools` array) for mcpdevice.registry."""

# Needed once: pump1.build unloads it as soon as the schema is indexed. One pass over the file in small reads finds
# the bytes of each tool object, its name, and its compact size (what mcpdevice.registry.minify
# keeps), without ever holding a whole tool: a board has no room to parse the schema, and does not
# need to, because CI checks the file (its canonical hash is pinned in the firmware).
#
# API: load(path, max_tool_bytes) -> mcpdevice.registry.ToolRegistry
#      raises ValueError naming the problem: not a JSON array of objects, a tool without a name or
#      inputSchema, a name that is not a JSON string (in UTF-8) or is longer than MAX_NAME characters,
#      a duplicate name, or a tool too large for one frame.

from mcpdevice.registry import ToolRegistry

_QUOTE = 0x22
_BACKSLASH = 0x5C
_COLON = 0x3A
_OPEN = b"{["
_CLOSE = b"}]"
_SPACE = b" \t\r\n"
MAX_NAME = 128  # characters: the longest tool name MCP allows, and the gateway's bound too
_RAW_MAX = 12 * MAX_NAME  # one character takes at most 12 bytes of the file (two \uXXXX escapes)
_KEY_MAX = 12  # enough to tell "name" and "inputSchema" from any other key


def _scan(path):
    """[(start, end, compact size, name, has inputSchema)] for each object in the top-level array."""
    tools = []
    depth = 0
    in_string = escaped = False
    offset = start = size = 0
    text = bytearray()  # the current string, when it sits directly in a tool object
    limit = _KEY_MAX  # how much of it to keep: a name whole (up to one byte past _RAW_MAX), else a key's length
    last = name = None
    expect_name = has_input = False
    with open(path, "rb") as f:
        while True:
            chunk = f.read(512)
            if not chunk:
                break
            for byte in chunk:
                if depth >= 2 and (in_string or byte not in _SPACE):
                    size += 1
                if in_string:
                    if escaped:
                        escaped = False
                    elif byte == _BACKSLASH:
                        escaped = True
                    elif byte == _QUOTE:
                        in_string = False
                        if depth == 2:
                            last = bytes(text)
                            if expect_name:
                                name, expect_name = last, False
                    if in_string and depth == 2 and len(text) <= limit:
                        text.append(byte)
                elif expect_name and byte != _QUOTE and byte not in _SPACE:
                    raise ValueError("%s: the name of the tool at byte %d is not a string" % (path, offset))
                elif byte == _QUOTE:
                    in_string = True
                    text = bytearray()
                    limit = _RAW_MAX if expect_name else _KEY_MAX
                elif byte == _COLON and depth == 2:
                    expect_name = last == b"name"
                    has_input = has_input or last == b"inputSchema"
                elif byte in _OPEN:
                    if depth == 0 and byte != 0x5B:
                        raise ValueError("%s: expected a JSON array of tools" % path)
                    if depth == 1:
                        if byte != 0x7B:
                            raise ValueError("%s: every tool must be a JSON object" % path)
                        start, size, name, has_input = offset, 1, None, False
                    depth += 1
                elif byte in _CLOSE:
                    depth -= 1
                    if depth == 1:
                        tools.append((start, offset + 1, size, name, has_input))
                    elif depth < 0:
                        raise ValueError("%s: unbalanced brackets at byte %d" % (path, offset))
                elif depth == 0 and byte not in _SPACE:
                    raise ValueError("%s: expected a JSON array of tools" % path)
                offset += 1
    if depth != 0 or in_string:
        raise ValueError("%s: not a complete JSON array" % path)
    return tools


def _name(path, start, raw):
    """The tool's name; an escaped, over-long or not UTF-8 name is read by mcpdevice.schema_names, loaded
    only then (its code would cost every board's boot heap for names most files never hold)."""
    try:
        name = raw.decode()
    except ValueError:  # UnicodeError too
        name = None
    if name is not None and "\\" not in name and len(name) <= MAX_NAME:
        return name
    from mcpdevice import schema_names

    return schema_names.read(path, start, raw)


def load(path, max_tool_bytes):
    names = []
    spans = []
    for start, end, size, raw_name, has_input in _scan(path):
        if not raw_name:
            raise ValueError("%s: the tool at byte %d has no name" % (path, start))
        name = _name(path, start, raw_name)
        if not has_input:
            raise ValueError("%s: tool %s has no inputSchema" % (path, name))
        if name in names:
            raise ValueError("%s: tool %s appears twice" % (path, name))
        if size > max_tool_bytes:
            raise ValueError(
                "%s: tool %s takes %d bytes, more than one frame can carry (%d); raise frame_max_bytes"
                % (path, name, size, max_tool_bytes)
            )
        names.append(name)
        spans.append((start, end, size))
    if not names:
        raise ValueError("%s: no tools" % path)
    return ToolRegistry(path, names, spans)
