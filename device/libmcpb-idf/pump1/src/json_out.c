/* Writing JSON as CPython's json.dumps writes it (json_out.h). */
#include "json_out.h"

#include <string.h>

#include "json_number.h"

void p1_json_out_bytes(json_out_t *out, const char *bytes, size_t n)
{
    if (out->len <= out->cap && n <= out->cap - out->len) {
        memcpy(out->buf + out->len, bytes, n);
    }
    out->len += n;
}

void p1_json_out_text(json_out_t *out, const char *text)
{
    p1_json_out_bytes(out, text, strlen(text));
}

/* The text json.dumps (ensure_ascii) writes for one code point inside a string. */
static size_t escape_char(uint32_t cp, char text[13])
{
    static const char hex[] = "0123456789abcdef";
    static const char special[] = "\"\\\n\r\t\b\f";
    static const char letter[] = "\"\\nrtbf";
    const char *hit = cp < 0x80 ? memchr(special, (int)cp, sizeof special - 1) : NULL; /* the NUL is no match */
    int i;
    if (hit != NULL) {
        text[0] = '\\';
        text[1] = letter[hit - special];
        return 2;
    }
    if (cp >= 0x20 && cp <= 0x7E) {
        text[0] = (char)cp;
        return 1;
    }
    if (cp > 0xFFFF) {
        uint32_t v = cp - 0x10000;
        size_t len = escape_char(0xD800 + (v >> 10), text);
        return len + escape_char(0xDC00 + (v & 0x3FF), text + len);
    }
    text[0] = '\\';
    text[1] = 'u';
    for (i = 0; i < 4; i++) {
        text[2 + i] = hex[(cp >> (12 - 4 * i)) & 0xF];
    }
    return 6;
}

static size_t utf8_encode(uint32_t cp, char text[4])
{
    size_t len = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4, i;
    for (i = len - 1; i > 0; i--) {
        text[i] = (char)(0x80 | (cp & 0x3F));
        cp >>= 6;
    }
    text[0] = (char)(len == 1 ? cp : ((0xFFu << (8 - len)) & 0xFFu) | cp);
    return len;
}

void p1_json_sink_char(json_sink_t *sink, uint32_t cp)
{
    char text[13];
    size_t len;
    if (sink->count++ >= sink->limit) {
        return;
    }
    len = sink->escape ? escape_char(cp, text) : utf8_encode(cp, text);
    p1_json_out_bytes(sink->out, text, len);
}

void p1_json_sink_text(json_sink_t *sink, const char *ascii)
{
    while (*ascii != '\0') {
        p1_json_sink_char(sink, (uint32_t)(unsigned char)*ascii++);
    }
}

void p1_json_sink_unsigned(json_sink_t *sink, unsigned long value)
{
    char text[24];
    size_t at = sizeof text - 1;
    text[at] = '\0';
    do {
        text[--at] = (char)('0' + value % 10);
        value /= 10;
    } while (value > 0);
    p1_json_sink_text(sink, text + at);
}

void p1_json_sink_int(json_sink_t *sink, long value)
{
    unsigned long magnitude = (unsigned long)value;
    if (value < 0) {
        p1_json_sink_char(sink, '-');
        magnitude = 0ul - magnitude;
    }
    p1_json_sink_unsigned(sink, magnitude);
}

/* One code point as json.dumps writes it inside a string, offered to the sink character by character. */
static void sink_escaped(json_sink_t *sink, uint32_t cp)
{
    char text[13];
    size_t len = escape_char(cp, text), i;
    for (i = 0; i < len; i++) {
        p1_json_sink_char(sink, (uint32_t)(unsigned char)text[i]);
    }
}

void p1_json_sink_string_text(json_sink_t *sink, json_span_t string)
{
    size_t at = 0;
    uint32_t cp;
    while (p1_json_next_char(string, &at, &cp)) {
        p1_json_sink_char(sink, cp);
    }
}

static void sink_quoted_span(json_sink_t *sink, json_span_t string)
{
    size_t at = 0;
    uint32_t cp;
    p1_json_sink_char(sink, '"');
    while (p1_json_next_char(string, &at, &cp)) {
        sink_escaped(sink, cp);
    }
    p1_json_sink_char(sink, '"');
}

/* An int token (or true, false, null) as written, but for "-0": int("-0") is 0, its sign goes. */
static void sink_int_token(json_sink_t *sink, json_span_t number)
{
    size_t i = number.n == 2 && memcmp(number.p, "-0", 2) == 0;
    for (; i < number.n; i++) {
        p1_json_sink_char(sink, (uint32_t)(unsigned char)number.p[i]);
    }
}

void p1_json_sink_dumps(json_sink_t *sink, json_span_t value)
{
    json_span_t key, item, other_key, other_value;
    json_kind_t kind = p1_json_kind(value);
    int object = kind == JSON_OBJECT, seen;
    size_t at = 0, other;
    const char *sep = "";
    switch (kind) {
    case JSON_OBJECT:
    case JSON_ARRAY:
        break;
    case JSON_STRING:
        sink_quoted_span(sink, value);
        return;
    case JSON_FLOAT:
        p1_json_number_float(sink, value, 1);
        return;
    case JSON_ABSENT:
        p1_json_sink_text(sink, "null");
        return;
    default: /* an int, true, false or null: as written */
        sink_int_token(sink, value);
        return;
    }
    /* a container's span starts and ends with its brackets */
    p1_json_sink_char(sink, (uint32_t)(unsigned char)value.p[0]);
    while (p1_json_next_member(value, &at, object ? &key : NULL, &item)) {
        if (object) {
            /* a dict keeps the first place of a repeated key and its last value */
            seen = 0;
            other = 0;
            while (p1_json_next_member(value, &other, &other_key, &other_value)) {
                if (p1_json_strings_equal(key, other_key)) {
                    seen = seen || other_key.p < key.p;
                    item = other_value;
                }
            }
            if (seen) {
                continue;
            }
        }
        p1_json_sink_text(sink, sep);
        sep = ", ";
        if (object) {
            sink_quoted_span(sink, key);
            p1_json_sink_text(sink, ": ");
        }
        p1_json_sink_dumps(sink, item);
    }
    p1_json_sink_char(sink, (uint32_t)(unsigned char)value.p[value.n - 1]);
}

void p1_json_sink_id(json_sink_t *sink, json_span_t id)
{
    json_kind_t kind = p1_json_kind(id);
    if (kind != JSON_STRING && kind != JSON_INT) {
        id.n = 0; /* json.dumps writes an absent (None) id as null */
    }
    p1_json_sink_dumps(sink, id);
}
