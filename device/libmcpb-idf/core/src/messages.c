/* Builders and spotters for the core's own JSON-RPC messages (see mcpb/messages.h). */
#include "mcpb/messages.h"

#include <stdarg.h>
#include <string.h>

#include "client_internal.h"
#include "mcpb/json_scan.h"

static const char *or_empty(const char *text)
{
    return text != NULL ? text : "";
}

size_t mcpb_register_frame(char *out, size_t out_cap, const mcpb_hello_t *hello, const char *slot, int aggregate)
{
    const char *schema = hello->schema != NULL && hello->schema[0] != '\0' ? hello->schema : NULL;
    return mcpb_format_fit(out, out_cap,
                           "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/register\",\"params\":{\"hello\":{"
                           "\"device_id\":%j,\"firmware\":{\"name\":%j,\"version\":%j}%s%j}%s%j%s}}",
                           or_empty(hello->device_id), or_empty(hello->firmware_name),
                           or_empty(hello->firmware_version), schema != NULL ? ",\"schema\":" : "", schema,
                           slot != NULL ? ",\"slot\":" : "", slot, aggregate ? ",\"aggregate\":true" : "");
}

size_t mcpb_envelope_prefix(char *out, size_t out_cap, const char *slot)
{
    return mcpb_format_fit(out, out_cap, "{\"provider\":%j,\"payload\":", slot);
}

int mcpb_envelope_parse(const char *message, size_t len, char slot[MCPB_SLOT_MAX + 1], size_t *payload_at,
                        size_t *payload_len)
{
    size_t at, value_len;
    if (mcpb_json_member(message, len, "provider", &at, &value_len) != 1 || message[at] != '"' ||
        mcpb_json_string(message + at, value_len, slot, MCPB_SLOT_MAX + 1) <= 0) {
        return -1;
    }
    if (mcpb_json_member(message, len, "payload", payload_at, payload_len) != 1) {
        return -1;
    }
    return 0;
}

/* 1 when member `key` is the string literal `literal` (quotes included) as written. */
static int member_is(const char *message, size_t len, const char *key, const char *literal)
{
    size_t at, value_len;
    return mcpb_json_member(message, len, key, &at, &value_len) == 1 && value_len == strlen(literal) &&
           memcmp(message + at, literal, value_len) == 0;
}

/* Before mcpb_is_register_request: the literals go with the first function that uses them, and a
 * /providers build keeps this one alone. */
int mcpb_refusal_in(const char *message, size_t len, char *reason, size_t reason_cap)
{
    size_t error_at, error_len, at, value_len;
    if (mcpb_json_member(message, len, "id", &at, &value_len) != 1 || value_len != 4 ||
        memcmp(message + at, "null", 4) != 0 || mcpb_json_member(message, len, "error", &error_at, &error_len) != 1) {
        return 0;
    }
    if (reason_cap > 0) {
        reason[0] = '\0';
        if (mcpb_json_member(message + error_at, error_len, "message", &at, &value_len) == 1) {
            mcpb__json_text(message + error_at + at, reason, reason_cap); /* longer: what fits */
        }
    }
    return 1;
}

/* The code points gateway/core/names.py refuses, as first code points and lengths less one, merged
 * across unassigned gaps the gateway refuses too (U+2065, U+FFF0-FFF8): plane 0, then plane 1 (its
 * low 16 bits). Private use and the surrogates before it, the noncharacters U+xFFFE-xFFFF and
 * planes 4 to 16 are spans of their own in refused_code_point. */
#define PLANE_0_RANGES 15
static const uint16_t refused_from[] = {
    0x0080, 0x00AD, 0x0600, 0x061C, 0x06DD, 0x070F, 0x0890, 0x08E2, 0x180E, 0x200B, 0x2028, 0x2060,
    0xFDD0, 0xFEFF, 0xFFF0, /* plane 1 */ 0x10BD, 0x10CD, 0x3430, 0xBCA0, 0xD173,
};
static const uint8_t refused_span[] = {
    0x1F, 0, 5, 0, 0, 0, 1, 0, 0, 4, 6, 0xF, 0x1F, 0, 0xB, /* plane 1 */ 0, 0, 0xF, 3, 7,
};

static int refused_code_point(uint32_t cp)
{
    size_t i = cp < 0x10000u ? 0 : PLANE_0_RANGES;
    size_t end = cp < 0x10000u ? PLANE_0_RANGES : sizeof(refused_span);
    /* surrogates and private use; noncharacters; planes 4 to 16 but the variation selectors */
    if (cp - 0xD800u < 0x2100u || (cp & 0xFFFEu) == 0xFFFEu || (cp >= 0x40000u && cp - 0xE0100u > 0xEFu)) {
        return 1;
    }
    for (; cp < 0x20000u && i < end; i++) {
        if ((cp & 0xFFFFu) - refused_from[i] <= refused_span[i]) {
            return 1;
        }
    }
    return 0;
}

/* The code point at *at, moving past it; NOT_NAME_CHAR for a control (C0, DEL, C1) or bytes no UTF-8
 * text holds (a continuation byte as a lead, C0, C1, F5 to FF, a lead byte without its continuation
 * bytes, an overlong 3- or 4-byte form). Surrogates and code points past U+10FFFF pass here. */
#define NOT_NAME_CHAR 0xFFFFFFFFu
static uint32_t name_char(const unsigned char **at)
{
    const unsigned char *s = *at;
    unsigned c = *s++, more, n;
    uint32_t cp;
    if (c < 0x20 || c == 0x7F || c - 0x80u < 0x42u || c > 0xF4u) {
        return NOT_NAME_CHAR;
    }
    more = (c >= 0xC0) + (c >= 0xE0) + (c >= 0xF0);
    cp = c & (0x7Fu >> more);
    for (n = more; n > 0; n--) {
        if ((*s & 0xC0) != 0x80) {
            return NOT_NAME_CHAR;
        }
        cp = cp << 6 | (*s++ & 0x3Fu);
    }
    *at = s;
    /* an overlong form (2-byte ones start with C0 or C1, refused above), a C1 control */
    return cp < (1u << (5 * more + 1)) || cp - 0x80u < 0x20u ? NOT_NAME_CHAR : cp;
}

int mcpb_name_utf8_ok(const char *name)
{
    const unsigned char *s = (const unsigned char *)name;
    while (*s != 0) {
        if (name_char(&s) == NOT_NAME_CHAR) {
            return 0;
        }
    }
    return 1;
}

int mcpb_name_ok(const char *name)
{
    const unsigned char *s = (const unsigned char *)name;
    while (*s != 0) {
        uint32_t cp = name_char(&s);
        if (cp == NOT_NAME_CHAR || refused_code_point(cp)) {
            return 0;
        }
    }
    return 1;
}

int mcpb_is_register_request(const char *message, size_t len)
{
    size_t at, value_len;
    return member_is(message, len, "method", "\"broker/register\"") &&
           mcpb_json_member(message, len, "id", &at, &value_len) == 0;
}

/* An error answer under the id in the request's first bytes (null when none is there): the id's
 * part, then `error` formatted with its arguments. Its length, 0 when it does not fit. */
static size_t error_answer(char *out, size_t out_cap, const char *head, size_t head_len, const char *error, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
static size_t error_answer(char *out, size_t out_cap, const char *head, size_t head_len, const char *error, ...)
{
    char id[MCPB_HEAD_BYTES + 16]; /* any id the window refuse_oversize searches can hold */
    va_list args;
    size_t n = mcpb_format(out, out_cap, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"error\":{\"code\":-3260",
                           mcpb_json_id_in(head, head_len, id, sizeof(id)) > 0 ? id : "null");
    if (n >= out_cap) {
        return 0;
    }
    va_start(args, error);
    n += mcpb_vformat(out + n, out_cap - n, error, args);
    va_end(args);
    return n < out_cap ? n : 0;
}

size_t mcpb_too_large_answer(char *out, size_t out_cap, const char *head, size_t head_len,
                             uint32_t size, size_t frame_max)
{
    return error_answer(out, out_cap, head, head_len,
                        "0,\"message\":\"Request too large: %lu bytes; this device accepts frames of at most %lu "
                        "bytes\"}}",
                        (unsigned long)size, (unsigned long)frame_max);
}

size_t mcpb_too_large_response(char *out, size_t out_cap, const char *request, size_t len)
{
    return error_answer(out, out_cap, request, len, "3,\"message\":\"Response too large\"}}");
}
