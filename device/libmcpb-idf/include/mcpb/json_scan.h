/* Just enough JSON for the core: find a top-level member, read and write strings, spot an id.
 * A scanner, not a validator: the message handler validates what it is given. */
#ifndef MCPB_JSON_SCAN_H
#define MCPB_JSON_SCAN_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MCPB_JSON_MAX_DEPTH 64
/* One literal for every hex digit the core writes (a JSON \u escape, a percent-encoded byte): the
 * linker keeps one copy of it. */
#define MCPB_HEX_DIGITS "0123456789ABCDEF"

/* The end of the JSON value starting at json[at] (after whitespace), or 0 when it is malformed,
 * truncated or nested deeper than MCPB_JSON_MAX_DEPTH. */
size_t mcpb_json_skip_value(const char *json, size_t len, size_t at);

/* The value of member `key` of the top-level object: 1 and its span, 0 when absent, -1 when
 * the text is not an object the scanner can walk. Keys are compared as written (no escapes). */
int mcpb_json_member(const char *json, size_t len, const char *key, size_t *value_at, size_t *value_len);

/* Decodes the JSON string literal json[0..len) (quotes included) into out, NUL-terminated:
 * its length, or -1 when malformed or when out_cap is too small. A \u0000 escape counts as
 * malformed: a NUL inside would cut the text short for strcmp ("open\u0000x" is not "open"). */
int mcpb_json_string(const char *json, size_t len, char *out, size_t out_cap);

/* Writes `text` as a JSON string literal (quotes, escapes) at out[*at]; 0 on success, -1 when it
 * does not fit (then *at is unchanged). */
int mcpb_json_put_string(char *out, size_t out_cap, size_t *at, const char *text);

/* Appends raw text at out[*at]; 0 on success, -1 when it does not fit. */
int mcpb_json_put_raw(char *out, size_t out_cap, size_t *at, const char *text, size_t len);

/* The request id in the first bytes of a message (a string or an integer, as written), copied into
 * out NUL-terminated; its length, or 0 when no whole id is there. */
size_t mcpb_json_id_in(const char *head, size_t len, char *out, size_t out_cap);

/* A small snprintf, so that the core needs no printf: %s, and %d and %u, also with l; no ll, flags,
 * widths or precisions. Writes at most cap - 1 bytes and a NUL (when cap > 0); returns the whole text's length.
 * mcpb_vformat also takes %j, a string written as a JSON string literal, and %P, a string
 * percent-encoded as one URL path segment (RFC 3986's unreserved bytes kept; a build without
 * MCPB_WITH_WEBSOCKET writes it as %s); a NULL string writes nothing. mcpb_format cannot take them (its
 * arguments are checked as printf's, which also lets through what it cannot print:
 * tests/device_c/test_c_format_strings.py checks every call's conversions); mcpb_format_fit can. */
size_t mcpb_vformat(char *out, size_t cap, const char *format, va_list args);
size_t mcpb_format(char *out, size_t cap, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* mcpb_vformat with its arguments, unchecked: the length, 0 when the text does not fit with its NUL. */
size_t mcpb_format_fit(char *out, size_t out_cap, const char *format, ...);

#ifdef __cplusplus
}
#endif

#endif
