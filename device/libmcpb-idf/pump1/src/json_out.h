/*
 * Writing JSON the way CPython's json.dumps writes it (ensure_ascii): a bounded buffer that keeps
 * counting past its end, so that one pass both writes and measures, and a text sink that takes
 * code points and either writes them as they are or escapes them into the body of a JSON string.
 */
#ifndef MCPB_PUMP1_JSON_OUT_H
#define MCPB_PUMP1_JSON_OUT_H

#include <stddef.h>
#include <stdint.h>

#include "json_scan.h"

typedef struct json_out {
    char *buf;      /* may be NULL: count only */
    size_t cap;
    size_t len;     /* bytes written, or that would have been written */
} json_out_t;

/* The initialisers and the check are inline: their few stores and a compare take less room than
 * a call's argument set-up at each of their many call sites. */
static inline void p1_json_out_init(json_out_t *out, char *buf, size_t cap)
{
    out->buf = buf;
    out->cap = buf == NULL ? 0 : cap;
    out->len = 0;
}

void p1_json_out_bytes(json_out_t *out, const char *bytes, size_t n);
void p1_json_out_text(json_out_t *out, const char *text);

static inline int p1_json_out_fits(const json_out_t *out)
{
    return out->len <= out->cap;
}

typedef struct json_sink {
    json_out_t *out;
    int escape;     /* 1: escape into a JSON string body; 0: write code points as they are */
    size_t limit;   /* code points taken at most; the rest is dropped */
    size_t count;   /* code points offered so far */
} json_sink_t;

static inline void p1_json_sink_init(json_sink_t *sink, json_out_t *out, int escape)
{
    sink->out = out;
    sink->escape = escape;
    sink->limit = (size_t)-1;
    sink->count = 0;
}

void p1_json_sink_char(json_sink_t *sink, uint32_t cp);
void p1_json_sink_text(json_sink_t *sink, const char *ascii);
void p1_json_sink_int(json_sink_t *sink, long value);
void p1_json_sink_unsigned(json_sink_t *sink, unsigned long value);

/* The decoded text of a string value, unquoted. */
void p1_json_sink_string_text(json_sink_t *sink, json_span_t string);

/* json.dumps(value) with default separators (", " and ": ") of any value read from a message. */
void p1_json_sink_dumps(json_sink_t *sink, json_span_t value);

/* json.dumps(request id) with compact output: a string quoted, an integer as Python prints it. */
void p1_json_sink_id(json_sink_t *sink, json_span_t id);

#endif
