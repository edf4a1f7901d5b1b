/*
 * Reading one JSON text in place, the way CPython's json.loads reads it: a validating pass, then
 * lookups that walk the validated bytes. Nothing is copied and no token array is kept, so the
 * memory needed does not grow with the message.
 */
#ifndef MCPB_PUMP1_JSON_SCAN_H
#define MCPB_PUMP1_JSON_SCAN_H

#include <stddef.h>
#include <stdint.h>

/* Keeps a small helper out of line where GCC's -Os copies it into each caller: fewer bytes
 * (scripts/size-c measures them). */
#if defined(__GNUC__)
#define P1_NOINLINE __attribute__((noinline))
#else
#define P1_NOINLINE
#endif

/* One value inside the text; n == 0 means "absent". */
typedef struct json_span {
    const char *p;
    size_t n;
} json_span_t;

typedef enum json_kind {
    JSON_ABSENT,
    JSON_OBJECT,
    JSON_ARRAY,
    JSON_STRING,
    JSON_TRUE,
    JSON_FALSE,
    JSON_NULL,
    JSON_INT,      /* a number without fraction or exponent: a Python int */
    JSON_FLOAT     /* any other number, NaN and Infinity included (CPython accepts them) */
} json_kind_t;

/* Nesting deeper than this is refused (CPython refuses nesting near its recursion limit): what
 * reads a value back (json_sink_dumps) recurses, and a board task has a few KB of stack. */
#define JSON_MAX_DEPTH 16

/* 1 and the top-level value when `text` is one JSON value (UTF-8, an optional BOM), else 0. */
int p1_json_parse(const char *text, size_t len, json_span_t *root);

json_kind_t p1_json_kind(json_span_t value);

/* The member `key` of an object (the last one when it repeats, as in a Python dict), or absent. */
json_span_t p1_json_get(json_span_t object, const char *key);

/* Walks the members of an object, or with key NULL the items of an array: *at starts at 0;
 * returns 0 after the last one. */
int p1_json_next_member(json_span_t container, size_t *at, json_span_t *key, json_span_t *value);

/*
 * The code points of a string value, one per call: *at starts at 0; returns 0 at the end.
 * \u escapes of a surrogate pair give one code point, as CPython decodes them.
 */
int p1_json_next_char(json_span_t string, size_t *at, uint32_t *cp);

/* The string value equals the C string (compared after decoding escapes). */
int p1_json_string_is(json_span_t string, const char *text);

/* Two string values decode to the same text. */
int p1_json_strings_equal(json_span_t a, json_span_t b);

#endif
