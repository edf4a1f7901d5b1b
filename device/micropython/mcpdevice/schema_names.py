"""The tool names mcpdevice.schema_index leaves to this module, loaded only for them: a name with JSON
escapes (as json.dump writes a non-ASCII name), one longer than MCP's bound, or one not in UTF-8."""

from mcpdevice.schema_index import _RAW_MAX, MAX_NAME

_SHOWN = 40  # characters of a long name an error quotes


def _pairs(text):
    """A surrogate pair as the one character JSON means (MicroPython's json leaves two)."""
    out = []
    for char in text:
        code = ord(char)
        if 0xDC00 <= code < 0xE000 and out and 0xD800 <= ord(out[-1]) < 0xDC00:
            char = chr(0x10000 + ((ord(out.pop()) - 0xD800) << 10) + code - 0xDC00)
        out.append(char)
    return "".join(out)


def read(path, start, raw):
    """The tool's name as JSON reads it; ValueError naming the file and the tool when it is no valid name."""
    name = None
    if len(raw) <= _RAW_MAX:  # else cut while scanning, and longer than MAX_NAME in any case
        try:
            name = raw.decode()
            if "\\" in name:  # json is loaded already (the dispatcher imports it)
                import json

                name = _pairs(json.loads('"' + name + '"'))
        except ValueError:  # UnicodeError too
            raise ValueError("%s: the name of the tool at byte %d is no JSON string in UTF-8" % (path, start)) from None
        if len(name) <= MAX_NAME:
            return name
    else:
        for end in range(_SHOWN, _SHOWN - 4, -1):  # the cut may fall inside a UTF-8 character
            try:
                name = raw[:end].decode()
                break
            except ValueError:
                name = ""
    raise ValueError(
        "%s: tool %s... has a name longer than %d characters, the most MCP allows" % (path, name[:_SHOWN], MAX_NAME)
    )
