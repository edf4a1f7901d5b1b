/* Builders and spotters for the core's own JSON-RPC messages (see mcpb/messages.h). */
#include "mcpb/messages.h"

#include <string.h>

#include "mcpb/json_scan.h"

#define PUT_RAW(text) mcpb_json_put_raw(out, out_cap, &n, text, sizeof(text) - 1)

static const char *or_empty(const char *text)
{
    return text != NULL ? text : "";
}

size_t mcpb_register_frame(char *out, size_t out_cap, const mcpb_hello_t *hello, const char *slot, int aggregate)
{
    /* each piece: its literal, then its value as a JSON string when it has one */
    static const char *const literal[] = {
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/register\",\"params\":{\"hello\":{\"device_id\":",
        ",\"firmware\":{\"name\":", ",\"version\":", "}", ",\"schema\":", "}", ",\"slot\":",
        ",\"aggregate\":true", "}}"};
    const char *value[9] = {NULL};
    size_t n = 0, i;
    int bad = 0;
    value[0] = or_empty(hello->device_id);
    value[1] = or_empty(hello->firmware_name);
    value[2] = or_empty(hello->firmware_version);
    value[4] = hello->schema != NULL && hello->schema[0] != '\0' ? hello->schema : NULL;
    value[6] = slot;
    for (i = 0; i < 9; i++) {
        if ((i == 4 || i == 6) && value[i] == NULL) {
            continue;
        }
        if (i == 7 && !aggregate) {
            continue;
        }
        bad |= mcpb_json_put_raw(out, out_cap, &n, literal[i], strlen(literal[i]));
        if (value[i] != NULL) {
            bad |= mcpb_json_put_string(out, out_cap, &n, value[i]);
        }
    }
    return bad ? 0 : n;
}

size_t mcpb_envelope_prefix(char *out, size_t out_cap, const char *slot)
{
    size_t n = 0;
    int bad = PUT_RAW("{\"provider\":");
    bad |= mcpb_json_put_string(out, out_cap, &n, slot);
    bad |= PUT_RAW(",\"payload\":");
    return bad ? 0 : n;
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

int mcpb_is_register_request(const char *message, size_t len)
{
    size_t at, value_len;
    return member_is(message, len, "method", "\"broker/register\"") &&
           mcpb_json_member(message, len, "id", &at, &value_len) == 0;
}

int mcpb_refusal_in(const char *message, size_t len, char *reason, size_t reason_cap)
{
    size_t error_at, error_len, at, value_len;
    if (!member_is(message, len, "id", "null") ||
        mcpb_json_member(message, len, "error", &error_at, &error_len) != 1) {
        return 0;
    }
    if (reason_cap > 0) {
        reason[0] = '\0';
        if (mcpb_json_member(message + error_at, error_len, "message", &at, &value_len) == 1 &&
            message[error_at + at] == '"' &&
            mcpb_json_string(message + error_at + at, value_len, reason, reason_cap) < 0) {
            /* longer than reason_cap: keep what fits, raw */
            size_t keep = value_len - 2 < reason_cap - 1 ? value_len - 2 : reason_cap - 1;
            memcpy(reason, message + error_at + at + 1, keep);
            reason[keep] = '\0';
        }
    }
    return 1;
}

size_t mcpb_too_large_answer(char *out, size_t out_cap, const char *head, size_t head_len,
                             unsigned long long size, size_t frame_max)
{
    char id[MCPB_SLOT_MAX + 4];
    size_t n;
    if (mcpb_json_id_in(head, head_len, id, sizeof(id)) == 0) {
        strcpy(id, "null");
    }
    n = mcpb_format(out, out_cap,
                 "{\"jsonrpc\":\"2.0\",\"id\":%s,\"error\":{\"code\":-32600,\"message\":\"Request too large: "
                 "%llu bytes; this device accepts frames of at most %lu bytes\"}}",
                 id, size, (unsigned long)frame_max);
    return n < out_cap ? n : 0;
}
