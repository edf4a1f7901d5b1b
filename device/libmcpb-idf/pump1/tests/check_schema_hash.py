#!/usr/bin/env python3
"""The C pump's tools/list, hashed by the gateway's own function, against the schema file (docs/pump-1.md).

    check_schema_hash.py PUMP1_DUMP     (run with the project's .venv Python: it imports gateway.core)

Runs pump1-dump, which pages through the compiled firmware's tools/list answers; collects the tools;
computes their canonical hash with gateway.core.schema_hash.tools_hash; and checks that it equals
the hash of device/schemas/pump-1.json, the hash the firmware puts in its hello
(mcpb_pump1_schema_hash) and the MicroPython firmware's SCHEMA_HASH. Exit 0: all equal; 1: not, or
the gateway's hashing function cannot be imported (a check that cannot run fails, never skips).
"""

import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", "..", ".."))
SCHEMA = os.path.join(REPO, "device", "schemas", "pump-1.json")
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "device", "micropython"))


def main(dump):
    try:
        from gateway.core.schema_hash import tools_hash
    except ImportError as exc:
        print("FAILED: the gateway's hashing function cannot be imported (%s); run with the .venv Python" % exc)
        return 1
    from pump1.schema_hash import SCHEMA_HASH

    pages = subprocess.run([dump], check=True, capture_output=True, text=True).stdout.splitlines()
    tools = []
    for number, page in enumerate(pages):
        answer = json.loads(page)
        result = answer["result"]
        tools.extend(result["tools"])
        expected_next = str(len(tools)) if number < len(pages) - 1 else None
        if result.get("nextCursor") != expected_next:
            print("page %d: nextCursor %r, expected %r" % (number, result.get("nextCursor"), expected_next))
            return 1
    with open(SCHEMA, "rb") as f:
        file_hash = tools_hash(json.load(f))
    listed_hash = tools_hash(tools)
    hello_hash = subprocess.run([dump, "--hash"], check=True, capture_output=True, text=True).stdout.strip()
    print("tools listed by the C firmware: %d in %d pages" % (len(tools), len(pages)))
    print("hash of the C firmware's tools/list: %s" % listed_hash)
    print("hash of device/schemas/pump-1.json:  %s" % file_hash)
    print("hash in the C firmware's hello:      %s" % hello_hash)
    print("MicroPython SCHEMA_HASH:             %s" % SCHEMA_HASH)
    if not re.fullmatch(r"[0-9a-f]{16}", hello_hash):
        print("the hello's hash is not 16 hex digits")
        return 1
    if len({listed_hash, file_hash, hello_hash, SCHEMA_HASH}) != 1:
        print("MISMATCH")
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
