#!/usr/bin/env python3
"""Generate src/pump_texts.{h,c}: pump-1's texts and the JSON around its answers' values, packed.

The texts are those of device/micropython/pump1/tools.py, controller.py and mcpdevice/dispatcher.py,
word for word: refusals, fault texts, error messages, the status object and the answers' JSON. A
{NAME} of VALUES stands for a value that src/pump_refusal.c writes in its place (one byte below 0x20
in the packed text). The texts are packed by byte-pair encoding: a byte from 0x80 up stands for the
two bytes of its entry in p1_text_pairs, each of which may stand for a pair in turn (the texts are
ASCII, so such bytes are free). p1_pump_write_text unpacks them as it writes.

    python3 generate_texts.py            write the two files
    python3 generate_texts.py --check    exit 1 when the checked-in files differ from a fresh generation
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUTPUTS = ("pump_texts.h", "pump_texts.c")


def server_name():
    """MCPB_PUMP1_SERVER_NAME of include/mcpb_pump1.h, serverInfo.name."""
    with open(os.path.join(HERE, "include", "mcpb_pump1.h"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("#define MCPB_PUMP1_SERVER_NAME "):
                return line.split('"')[1]
    raise ValueError("no MCPB_PUMP1_SERVER_NAME in include/mcpb_pump1.h")


SERVER_NAME = server_name()

# The values, in the order of their codes (1, 2, ...): what src/pump_refusal.c writes for each.
VALUES = [
    ("FAULT_CODE", "the pump's fault code"),
    ("FAULT_TEXT", "the pump's fault text"),
    ("STATE", "the pump's state"),
    ("SENSORS", 'the sensors that read nothing valid, joined by " and "'),
    ("TEMP", 'the motor temperature, "%.1f"'),
    ("FLOW", 'the flow expected at the pump\'s speed, "%.0f"'),
    ("DUMPS", "json.dumps(args->value)"),
    ("STRING", "the text of the string args->value"),
    ("REPR", "repr() of the float args->value"),
    ("INT", '"%d" of the whole number args->value'),
    ("NUMBER", "args->number"),
    ("TOOLS", 'the tools\' names, joined by ", "'),
    ("FRAME_MAX", "the pump's frame cap"),
    ("SPEED", "the pump's speed, rounded to whole rpm"),
    ("SETPOINT", "the pump's setpoint"),
    ("FLOW_LPM", "the flow reading, round(max(0, flow), 1), or null"),
    ("PRESSURE_BAR", "the pressure reading, round(max(0, pressure), 2), or null"),
    ("MOTOR_TEMP_C", "the temperature reading, round(temp, 1), or null"),
    ("RUN_HOURS", "the hours run, round(hours, 3)"),
    ("FAULT", "the status's fault member: P1_STATUS_NO_FAULT or P1_STATUS_FAULT"),
    ("UPTIME", "the seconds since the pump started"),
]

# (name, text, what it quotes or says); a list is one text per entry, the k-th picked by p1_text_nth.
TEXTS = [
    # the tools' refusals (tools.py)
    ("P1_UNKNOWN_ARGUMENT_SPEED", "Unknown argument {STRING}: this tool takes only speed_rpm.", "value: the key"),
    ("P1_UNKNOWN_ARGUMENT_NONE", "Unknown argument {STRING}: this tool takes no arguments.", "value: the key"),
    ("P1_SPEED_NOT_NUMBER", "speed_rpm must be a whole number of rpm between 300 and 2900, got {DUMPS}",
     "value: what was given (absent: null)"),
    ("P1_SPEED_NOT_WHOLE", "speed_rpm must be a whole number of rpm between 300 and 2900, got {REPR}",
     "value: a float token"),
    ("P1_SPEED_OUT_OF_RANGE", "speed_rpm {INT} is out of range: this pump runs between 300 and 2900 rpm.",
     "value: a whole number"),
    ("P1_IN_FAULT", "The pump is in fault {FAULT_CODE}: {FAULT_TEXT}", ""),
    ("P1_NOT_RUNNING",
     "The pump is {STATE}; set_speed only changes a running pump. Call start with speed_rpm to run it.", ""),
    ("P1_SPEED_MISSING", "set_speed needs speed_rpm, the new speed in rpm (300 to 2900).", ""),
    ("P1_OVERTEMP_UNREADABLE",
     "The overtemp fault cannot be reset: the motor temperature sensor reads nothing valid.", ""),
    ("P1_OVERTEMP_PERSISTS",
     "The overtemp fault persists: the motor is at {TEMP} C, above the reset limit of 85 C. "
     "Let it cool, then call reset_fault again.", ""),
    ("P1_SENSOR_PERSISTS",
     "The sensor_failure fault persists: sensor {SENSORS} still reads nothing valid. "
     "Check its wiring, then call reset_fault again.", ""),
    ("P1_DRY_RUN_PERSISTS",
     "The dry_run fault persists: the pump still has no water on its suction side. "
     "Prime it and check the suction side, then call reset_fault again.", ""),
    # the fault texts (controller.py), written into the pump's fault_text when a fault latches
    ("P1_LINK_LOST_TEXT",
     "No request or ping from the gateway for {NUMBER} s while the motor turned, so the device stopped it. "
     "Check the network and the gateway, then call reset_fault and start.", "number: the dead-man in seconds"),
    ("P1_SENSOR_FAILURE_TEXT",
     "Sensor {SENSORS} reads nothing valid (open or shorted loop), so the device stopped the pump. "
     "Check the sensor wiring, then call reset_fault.", ""),
    ("P1_OVERTEMP_TEXT",
     "Motor temperature {TEMP} C is above the trip limit of 95 C, so the drive stopped the pump. "
     "Let the motor cool below 85 C, then call reset_fault.", ""),
    ("P1_DRY_RUN_TEXT",
     "Flow stayed below 20% of the expected {FLOW} L/min while running: the pump is running dry. "
     "Check priming and the suction side, then call reset_fault.", ""),
    # the dispatcher's error messages (dispatcher.py)
    ("P1_PARSE_ERROR", "Parse error: the frame is not valid JSON ({NUMBER} bytes)", "number: the frame's size"),
    ("P1_REQUEST_TOO_LARGE",
     "Request too large: {NUMBER} bytes; this device accepts frames of at most {FRAME_MAX} bytes",
     "number: the size"),
    ("P1_RESPONSE_TOO_LARGE", "Response too large: {NUMBER} bytes", "number: the answer's size"),
    ("P1_NOT_AN_OBJECT", "Invalid Request: send one JSON-RPC object per frame, no batches", ""),
    ("P1_BAD_ID", "Invalid Request: id must be a string or an integer", ""),
    ("P1_NO_METHOD", 'Invalid Request: needs "jsonrpc":"2.0" and a method', ""),
    ("P1_PARAMS_NOT_OBJECT", "Invalid params: params must be an object", ""),
    ("P1_ARGUMENTS_NOT_OBJECT", "Invalid params: arguments must be an object", ""),
    ("P1_UNKNOWN_CURSOR", "Invalid params: unknown cursor {DUMPS}", "value: the cursor"),
    ("P1_UNKNOWN_TOOL", "Unknown tool: {DUMPS}. This device offers {TOOLS}", "value: the name"),
    ("P1_UNKNOWN_METHOD",
     "Method not found: {STRING}. This device answers initialize, ping, tools/list and tools/call",
     "value: the method (a string)"),
    # names, by the pump's enums (src/pump_controller.h) and its reading's valid bits
    ("P1_FAULT_CODES", ["", "link_lost", "sensor_failure", "overtemp", "dry_run"], "by enum pump_fault"),
    ("P1_STATE_NAMES", ["stopped", "starting", "running", "stopping", "fault"], "by enum pump_state"),
    ("P1_SENSOR_NAMES", ["flow", "pressure", "temperature"], "by bit of the reading's valid"),
    # the answers' JSON around their values (dispatcher.py, tools.py)
    ("P1_RPC_HEAD", '{"jsonrpc":"2.0","id":', ""),
    ("P1_RPC_RESULT", ',"result":', ""),
    ("P1_RPC_ERROR", ',"error":{"code":', ""),
    ("P1_RPC_MESSAGE", ',"message":"', ""),
    ("P1_INITIALIZE_HEAD", '{"protocolVersion":"', ""),
    ("P1_INITIALIZE_SERVER",
     '","capabilities":{"tools":{"listChanged":false}},"serverInfo":{"name":"%s","version":"' % SERVER_NAME, ""),
    ("P1_INITIALIZE_INSTRUCTIONS", '"},"instructions":"', ""),
    ("P1_TOOLS_HEAD", '{"tools":[', ""),
    ("P1_TOOLS_NEXT_CURSOR", ',"nextCursor":"', ""),
    ("P1_CALL_HEAD", '{"content":[{"type":"text","text":"', ""),
    ("P1_CALL_REFUSED", '"}],"isError":true}', ""),
    # the status object (controller.py status()), compact JSON
    ("P1_STATUS",
     '{"state":"{STATE}","speed_rpm":{SPEED},"setpoint_rpm":{SETPOINT},"flow_lpm":{FLOW_LPM},'
     '"pressure_bar":{PRESSURE_BAR},"motor_temp_c":{MOTOR_TEMP_C},"run_hours":{RUN_HOURS}{FAULT},'
     '"uptime_s":{UPTIME}}', ""),
    ("P1_STATUS_NO_FAULT", ',"fault":null', ""),
    ("P1_STATUS_FAULT", ',"fault":{"code":"{FAULT_CODE}","text":"{FAULT_TEXT}"}', ""),
]

FIRST_PAIR = 0x80


def encode(text):
    """The bytes of a text: ASCII, with each {NAME} as its value's code."""
    out = []
    at = 0
    codes = {name: i + 1 for i, (name, _) in enumerate(VALUES)}
    while at < len(text):
        name = text[at + 1 : text.find("}", at)] if text[at] == "{" else ""
        if name in codes:  # else a brace of JSON
            out.append(codes[name])
            at += len(name) + 2
            continue
        if not " " <= text[at] <= "~":
            raise ValueError("non-ASCII or control character in %r" % text)
        out.append(ord(text[at]))
        at += 1
    return out


def pack(sequences):
    """Byte-pair encoding: the most frequent pair of bytes (never a value code) becomes the next
    free byte, again and again, while a pair is worth its two bytes in the table. Ties go to the
    smaller pair, so that the output depends on the texts alone."""
    pairs = []
    while FIRST_PAIR + len(pairs) <= 0xFF:
        counts = {}
        for seq in sequences:
            for a, b in zip(seq, seq[1:]):
                if a >= 0x20 and b >= 0x20:
                    counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        if counts[best] < 3:  # a pair seen twice saves two bytes and costs two in the table
            break
        code = FIRST_PAIR + len(pairs)
        pairs.append(best)
        packed = []
        for seq in sequences:
            out = []
            i = 0
            while i < len(seq):
                if i + 1 < len(seq) and (seq[i], seq[i + 1]) == best:
                    out.append(code)
                    i += 2
                else:
                    out.append(seq[i])
                    i += 1
            packed.append(out)
        sequences = packed
    return pairs, sequences


def unpack(seq, pairs):
    out = []
    for byte in seq:
        if byte >= FIRST_PAIR:
            out.extend(unpack(pairs[byte - FIRST_PAIR], pairs))
        else:
            out.append(byte)
    return out


def c_bytes(seq, indent="    "):
    """A C99 string literal of the bytes, in lines of at most ~100 characters (octal escapes, which
    never run into a following digit past three; '?' escaped against trigraphs)."""
    lines = []
    line = ""
    for byte in seq:
        char = chr(byte)
        if byte < 0x20 or byte > 0x7E:
            piece = "\\%03o" % byte
        else:
            piece = {"\\": "\\\\", '"': '\\"', "?": "\\?"}.get(char, char)
        if len(line) + len(piece) > 94:
            lines.append(line)
            line = ""
        line += piece
    lines.append(line)
    return "\n".join('%s"%s"' % (indent, part) for part in lines)


def c_comment(text):
    return text.replace("*/", "* /")


def generate():
    sequences = []
    for _, text, _ in TEXTS:
        entries = text if isinstance(text, list) else [text]
        sequences.append([byte for entry in entries for byte in encode(entry) + [0]][:-1])
    pairs, packed = pack(sequences)
    for seq, original in zip(packed, sequences):
        assert unpack(seq, pairs) == original
    header = [
        "/* Generated by generate_texts.py; do not edit. */",
        "#ifndef MCPB_PUMP1_TEXTS_H",
        "#define MCPB_PUMP1_TEXTS_H",
        "",
        "/* The values a text's bytes below 0x20 stand for (src/pump_refusal.c writes them). */",
        "enum pump_text_value {",
    ]
    for i, (name, what) in enumerate(VALUES):
        header.append("    %-21s /* %s */" % ("T_%s = %d," % (name, i + 1), c_comment(what)))
    header += [
        "};",
        "",
        "/* A byte b >= P1_TEXT_FIRST_PAIR stands for the two bytes at p1_text_pairs[2 * (b - P1_TEXT_FIRST_PAIR)]. */",
        "#define P1_TEXT_FIRST_PAIR 0x%02X" % FIRST_PAIR,
        "extern const unsigned char p1_text_pairs[%d];" % (2 * len(pairs)),
        "",
    ]
    source = [
        "/* Generated by generate_texts.py; do not edit. */",
        '#include "pump_texts.h"',
        "",
        "const unsigned char p1_text_pairs[%d] = {" % (2 * len(pairs)),
    ]
    for i in range(0, len(pairs), 8):
        row = pairs[i : i + 8]
        source.append("    " + " ".join("0x%02x, 0x%02x," % pair for pair in row))
    source += ["};", ""]
    for (name, text, note), seq in zip(TEXTS, packed):
        entries = text if isinstance(text, list) else [text]
        comment = " | ".join(entries)
        header.append("extern const char %s[];%s" % (name, " /* %s */" % c_comment(note) if note else ""))
        source.append("/* %s */" % c_comment(comment))
        source.append("const char %s[] =\n%s;" % (name, c_bytes(seq)))
    header += ["", "#endif", ""]
    source.append("")
    return {"pump_texts.h": "\n".join(header), "pump_texts.c": "\n".join(source)}


def main():
    check = sys.argv[1:] == ["--check"]
    if sys.argv[1:] and not check:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    files = generate()
    stale = []
    for name in OUTPUTS:
        path = os.path.join(HERE, "src", name)
        if check:
            try:
                with open(path, encoding="utf-8") as f:
                    current = f.read()
            except FileNotFoundError:
                current = None
            if current != files[name]:
                stale.append(path)
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(files[name])
    if stale:
        print("generate_texts.py: %s differ from a fresh generation; run python3 %s"
              % (", ".join(stale), os.path.relpath(__file__)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
