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
