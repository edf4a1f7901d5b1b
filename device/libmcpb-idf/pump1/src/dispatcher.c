/*
 * One JSON-RPC message in, at most one answer out: mcpb_pump1_handle and mcpb_pump1_oversize,
 * the rules of device/micropython/mcpdevice/dispatcher.py.
 */
#include <string.h>

#include "json_out.h"
#include "json_scan.h"
#include "mcpb_pump1.h"
#include "pump1_schema.h"
#include "pump_controller.h"
#include "rpc_answer.h"

/* the next cursor is one digit */
typedef char pump1_tools_fit_one_digit[PUMP1_TOOL_COUNT <= 10 ? 1 : -1];

#define ENVELOPE 96 /* '{"jsonrpc":"2.0","id":,"result":{"tools":[' plus '],"nextCursor":"NN"}}' */

/* packed, the newest first; an empty one ends them */
static const char protocol_versions[] = "2025-11-25\0" "2025-06-18\0" "2025-03-26\0" "2024-11-05\0";

/* Neither absent nor null. */
static int given(json_kind_t kind)
{
    return kind != JSON_ABSENT && kind != JSON_NULL;
}

/* -- ping and initialize ------------------------------------------------------------------------ */

static void empty_result(const mcpb_pump1_t *pump, const void *context, json_out_t *out)
{
    (void)pump;
    (void)context;
    p1_json_out_text(out, "{}");
}

static void initialize_result(const mcpb_pump1_t *pump, const void *context, json_out_t *out)
{
    json_sink_t text; /* escapes into the string bodies that the quotes below open and close */
    p1_json_sink_init(&text, out, 1);
    /* the protocol versions and the name need no escaping */
    p1_pump_out_text(out, P1_INITIALIZE_HEAD);
    p1_json_out_text(out, (const char *)context);
    p1_pump_out_text(out, P1_INITIALIZE_SERVER);
    p1_json_sink_text(&text, pump->config.firmware_version);
    p1_pump_out_text(out, P1_INITIALIZE_INSTRUCTIONS);
    p1_json_sink_text(&text, pump1_instructions);
    p1_json_out_text(out, "\"}");
}

static void initialize(mcpb_pump1_t *pump, json_span_t id, json_span_t params, json_out_t *out)
{
    json_span_t asked = p1_json_get(params, "protocolVersion");
    const char *version = protocol_versions, *known;
    for (known = protocol_versions; *known != '\0'; known += strlen(known) + 1) {
        if (p1_json_string_is(asked, known)) {
            version = known;
        }
    }
    p1_rpc_result(pump, id, initialize_result, version, out);
}

/* -- tools/list --------------------------------------------------------------------------------- */

/* A string cursor's tool index, or 0 when it names none: ASCII digits, 0 < value < count (a value
 * above 0 has a digit). */
static int cursor_index(json_span_t cursor)
{
    size_t at = 0;
    uint32_t cp;
    long value = 0;
    while (p1_json_next_char(cursor, &at, &cp)) {
        if (cp < '0' || cp > '9') {
            return 0;
        }
        if (value < PUMP1_TOOL_COUNT) {
            value = value * 10 + (long)(cp - '0');
        }
    }
    return value > 0 && value < PUMP1_TOOL_COUNT ? (int)value : 0;
}

/* A page of tools from the cursor's: as many as fit the frame, at least one (mcpdevice.registry.page),
 * sent whole even past the frame cap as the MicroPython dispatcher sends it. Returns NULL, or the
 * error text (invalid params, quoting the cursor) that dispatch() answers with. */
static const char *tools_list(mcpb_pump1_t *pump, json_span_t id, json_span_t cursor, json_out_t *out)
{
    json_kind_t kind = p1_json_kind(cursor);
    char tail[] = "0\"}}"; /* the next cursor (one digit: fewer than ten tools), then the closing braces */
    int first = 0, index;
    long budget, used = 0;
    if (given(kind)) {
        first = kind == JSON_STRING ? cursor_index(cursor) : 0;
        if (first == 0) {
            return P1_UNKNOWN_CURSOR;
        }
    }
    p1_rpc_result_head(out, id);
    p1_pump_out_text(out, P1_TOOLS_HEAD);
    budget = (long)pump->config.frame_max - ENVELOPE - (long)out->len; /* out holds the head alone */
    for (index = first; index < PUMP1_TOOL_COUNT; index++) {
        long size = (long)pump1_tools[index].size;
        if (index > first) {
            if (used + size + 1 > budget) {
                break;
            }
            p1_json_out_text(out, ",");
        }
        p1_json_out_bytes(out, pump1_tools[index].json, pump1_tools[index].size);
        used += size + 1;
    }
    p1_json_out_text(out, "]");
    if (index < PUMP1_TOOL_COUNT) {
        p1_pump_out_text(out, P1_TOOLS_NEXT_CURSOR);
        tail[0] = (char)(tail[0] + index);
    }
    p1_json_out_text(out, index < PUMP1_TOOL_COUNT ? tail : tail + 2);
    return NULL;
}

/* -- tools/call --------------------------------------------------------------------------------- */

static uint64_t fingerprint(const char *bytes, size_t n)
{
    uint64_t hash = 0xcbf29ce484222325ull; /* FNV-1a */
    size_t i;
    for (i = 0; i < n; i++) {
        hash ^= (unsigned char)bytes[i];
        hash *= 0x100000001b3ull;
    }
    return hash ^ (uint64_t)n;
}

/* The tool's index in the schema file (pump1_schema.h), or -1 when `name` names none (or is no string). */
static int tool_index(json_span_t name)
{
    int i;
    for (i = 0; i < PUMP1_TOOL_COUNT; i++) {
        if (p1_json_string_is(name, pump1_tools[i].name)) {
            return i;
        }
    }
    return -1;
}

/*
 * The cache keeps an answer as it went out, with two savings: the id is not kept apart (it is the
 * answer's, right after ANSWER_HEAD), and a status result, whose text is the escaped
 * structuredContent (results.ok), keeps that JSON once: the escaped copy is left out and written
 * again on a repeat.
 */
static const char ANSWER_HEAD[] = "{\"jsonrpc\":\"2.0\",\"id\":";
static const char TEXT_TAIL[] = "\"}],\"structuredContent\":"; /* also call_result's: one copy */
#define HEAD_LEN (sizeof ANSWER_HEAD - 1)
#define TAIL_LEN (sizeof TEXT_TAIL - 1)

/* The CallToolResult (tools.py): the status as JSON text and as structuredContent, or the refusal
 * as an isError text. */
static void call_result(const mcpb_pump1_t *pump, const void *context, json_out_t *out)
{
    const pump_refusal_t *refusal = (const pump_refusal_t *)context;
    json_sink_t raw, text;
    pump_text_args_t args = {NULL, {NULL, 0}, 0, 0};
    args.pump = pump;
    args.value = refusal->value;
    p1_json_sink_init(&raw, out, 0);
    p1_json_sink_init(&text, out, 1);
    p1_pump_out_text(out, P1_CALL_HEAD);
    if (refusal->text != NULL) {
        p1_pump_write_text(&text, refusal->text, &args);
        p1_pump_out_text(out, P1_CALL_REFUSED);
        return;
    }
    p1_pump_write_text(&text, P1_STATUS, &args); /* the status object of the outputSchema */
    p1_json_out_text(out, TEXT_TAIL);
    p1_pump_write_text(&raw, P1_STATUS, &args);
    p1_json_out_text(out, "}");
}

/* json.dumps' escaping of the ASCII bytes s[0..n), as the result's text carries the status. */
static void escape_bytes(json_out_t *out, const char *s, size_t n)
{
    json_sink_t sink;
    p1_json_sink_init(&sink, out, 1);
    while (n-- > 0) {
        p1_json_sink_char(&sink, (uint32_t)(unsigned char)*s++);
    }
}

/* Keeps answer[0..n) in the entry, folded when it is a status result: 1, or 0 when it does not fit. */
static int keep(mcpb_pump1_cache_entry_t *entry, const char *answer, size_t n, int status)
{
    size_t at = status ? n : 0, text_at = 0, kept;
    json_out_t measure;
    /* from the right, the first TEXT_TAIL ends the text: everything else in the answer is escaped
       or is the status, which holds no such bytes (an error instead has none) */
    while (at > TAIL_LEN && memcmp(answer + at - TAIL_LEN, TEXT_TAIL, TAIL_LEN) != 0) {
        at--;
    }
    if (at > TAIL_LEN) {
        at -= TAIL_LEN;
        p1_json_out_init(&measure, NULL, 0);
        escape_bytes(&measure, answer + at + TAIL_LEN, n - 2 - at - TAIL_LEN);
        text_at = at - measure.len;
    } else {
        at = 0;
    }
    kept = text_at + n - at;
    if (kept > sizeof entry->answer) {
        return 0;
    }
    memmove(entry->answer, answer, text_at);
    memmove(entry->answer + text_at, answer + at, n - at);
    entry->text_at = (uint16_t)text_at;
    entry->answer_len = (uint16_t)kept;
    return 1;
}

static void replay(const mcpb_pump1_cache_entry_t *e, json_out_t *out)
{
    size_t at = e->text_at;
    p1_json_out_bytes(out, e->answer, at);
    if (at > 0) {
        escape_bytes(out, e->answer + at + TAIL_LEN, e->answer_len - 2 - at - TAIL_LEN);
    }
    p1_json_out_bytes(out, e->answer + at, e->answer_len - at);
}

static int same_id(const mcpb_pump1_cache_entry_t *e, const char *id, size_t id_len)
{
    return e->id_len == id_len && memcmp(e->answer + HEAD_LEN, id, id_len) == 0;
}

static void remember(mcpb_pump1_t *pump, const char *id, size_t id_len, uint64_t print, const pump_refusal_t *call,
                     json_span_t id_span, const json_out_t *out)
{
    mcpb_pump1_cache_entry_t *entry;
    const char *answer = out->buf;
    size_t i, kept = 0;
    for (i = 0; i < pump->cache_used; i++) { /* an id answered anew replaces its old answer */
        mcpb_pump1_cache_entry_t *e = &pump->cache[i];
        if (!same_id(e, id, id_len)) {
            if (kept != i) {
                pump->cache[kept] = *e;
            }
            kept++;
        }
    }
    pump->cache_used = kept;
    if (id_len > MCPB_PUMP1_CACHE_ID_MAX) {
        return;
    }
    if (pump->cache_used == MCPB_PUMP1_CACHE_SIZE) {
        memmove(&pump->cache[0], &pump->cache[1], sizeof pump->cache[0] * (MCPB_PUMP1_CACHE_SIZE - 1));
        pump->cache_used--;
    }
    entry = &pump->cache[pump->cache_used];
    if (!p1_json_out_fits(out)) { /* the caller's buffer was too small: write the same answer again */
        json_out_t again;
        uint32_t errors = pump->counts.errors; /* the answer was counted when it was made */
        p1_json_out_init(&again, entry->answer, sizeof entry->answer);
        p1_rpc_result(pump, id_span, call_result, call, &again);
        pump->counts.errors = errors;
        if (!p1_json_out_fits(&again)) {
            return;
        }
        answer = entry->answer;
    }
    if (!keep(entry, answer, out->len, call->text == NULL)) {
        return; /* a larger answer is sent but not kept */
    }
    entry->fingerprint = print;
    entry->id_len = (uint16_t)id_len;
    pump->cache_used++;
}

/* \013 (T_NUMBER) is the longest id a command takes */
static const char ID_TOO_LONG[] =
    "Invalid Request: id too long for the answer to fit the frame; nothing was done. "
    "Use an id of at most \013 bytes";

/* Returns NULL, or the error text (invalid params; *quoted: what it quotes) that dispatch() answers with. */
static const char *tools_call(mcpb_pump1_t *pump, json_span_t id, json_span_t params, const char *in, size_t in_len,
                              json_span_t *quoted, json_out_t *out)
{
    char id_text[MCPB_PUMP1_CACHE_ID_MAX];
    json_out_t id_out;
    json_sink_t raw;
    uint64_t print = fingerprint(in, in_len);
    json_span_t name = p1_json_get(params, "name"), arguments = p1_json_get(params, "arguments");
    json_kind_t kind = p1_json_kind(arguments);
    pump_refusal_t call;
    size_t i;
    int tool;
    p1_json_out_init(&id_out, id_text, sizeof id_text);
    p1_json_sink_init(&raw, &id_out, 0);
    p1_json_sink_id(&raw, id);
    for (i = 0; i < pump->cache_used && p1_json_out_fits(&id_out); i++) {
        const mcpb_pump1_cache_entry_t *e = &pump->cache[i];
        if (e->fingerprint == print && same_id(e, id_text, id_out.len)) {
            pump->counts.duplicates++; /* a redelivery: the same answer, nothing done twice */
            replay(e, out);
            return NULL;
        }
    }
    tool = tool_index(name); /* -1 for a name that is no string, too: p1_json_string_is says no */
    if (tool < 0) {
        *quoted = name;
        return P1_UNKNOWN_TOOL;
    }
    if (given(kind) && kind != JSON_OBJECT) {
        return P1_ARGUMENTS_NOT_OBJECT;
    }
    /* A command whose answer could not fit the frame is refused before it acts: acting and then
       answering -32603 would tell the caller it failed, and a retry would act again. */
    if (tool != TOOL_GET_STATUS && id_out.len > pump->config.frame_max - MCPB_PUMP1_COMMAND_ANSWER_MAX) {
        p1_rpc_error(pump, id, RPC_INVALID_REQUEST, ID_TOO_LONG, NULL,
                     (unsigned long)(pump->config.frame_max - MCPB_PUMP1_COMMAND_ANSWER_MAX), out);
        return NULL;
    }
    call.text = p1_pump_call(pump, tool, arguments, &call.value);
    p1_rpc_result(pump, id, call_result, &call, out);
    remember(pump, id_text, p1_json_out_fits(&id_out) ? id_out.len : MCPB_PUMP1_CACHE_ID_MAX + 1, print, &call, id,
             out);
    return NULL;
}

/* -- the message -------------------------------------------------------------------------------- */

static void dispatch(mcpb_pump1_t *pump, const char *in, size_t in_len, json_out_t *out)
{
    /* the members a request is read by, in one walk (a repeated key: the last, as in a dict) */
    static const char names[] = "method\0id\0params\0jsonrpc\0result\0error"; /* packed: no pointers */
    static const char methods[] = "tools/call\0tools/list\0ping\0initialize"; /* the cases below */
    const char *name;
    json_span_t root, key, value, id = {NULL, 0}, quoted = {NULL, 0};
    json_span_t m[6] = {{NULL, 0}, {NULL, 0}, {NULL, 0}, {NULL, 0}, {NULL, 0}, {NULL, 0}};
    json_kind_t method_kind, id_kind, params_kind;
    const char *text = NULL;
    int code = RPC_INVALID_REQUEST, object;
    size_t at = 0, i;
    if (!p1_json_parse(in, in_len, &root)) {
        p1_rpc_error(pump, id, RPC_PARSE_ERROR, P1_PARSE_ERROR, NULL, (unsigned long)in_len, out);
        return;
    }
    object = p1_json_kind(root) == JSON_OBJECT;
    while (object && p1_json_next_member(root, &at, &key, &value)) {
        for (i = 0, name = names; i < 6; i++, name += strlen(name) + 1) {
            if (p1_json_string_is(key, name)) {
                m[i] = value;
            }
        }
    }
    method_kind = p1_json_kind(m[0]);
    id_kind = p1_json_kind(m[1]);
    params_kind = p1_json_kind(m[2]);
    /* the checks of dispatcher.handle, in its order; then the method's own errors: one error answer
       for all of them, from code, text and what it quotes */
    if (!object) {
        text = P1_NOT_AN_OBJECT;
    } else if (!given(method_kind) && (m[4].n > 0 || m[5].n > 0)) {
        return; /* an answer to a request of ours; the device sends none that it waits for */
    } else if (id_kind == JSON_ABSENT && method_kind == JSON_STRING) {
        return; /* a notification */
    } else if (id_kind != JSON_STRING && id_kind != JSON_INT) {
        text = P1_BAD_ID;
    } else {
        id = m[1];
        if (method_kind != JSON_STRING || !p1_json_string_is(m[3], "2.0")) {
            text = P1_NO_METHOD;
        } else if (given(params_kind) && params_kind != JSON_OBJECT) {
            text = P1_PARAMS_NOT_OBJECT;
            code = RPC_INVALID_PARAMS;
        }
    }
    if (text == NULL) {
        pump->counts.requests++;
        code = RPC_INVALID_PARAMS;
        for (i = 0, name = methods; i < 4 && !p1_json_string_is(m[0], name); i++, name += strlen(name) + 1) {
        }
        switch (i) {
        case 0:
            text = tools_call(pump, id, m[2], in, in_len, &quoted, out);
            break;
        case 1:
            quoted = p1_json_get(m[2], "cursor");
            text = tools_list(pump, id, quoted, out);
            break;
        case 2:
            p1_rpc_result(pump, id, empty_result, NULL, out);
            break;
        case 3:
            initialize(pump, id, m[2], out);
            break;
        default:
            text = P1_UNKNOWN_METHOD;
            code = RPC_METHOD_NOT_FOUND;
            quoted = m[0];
            break;
        }
    }
    if (text != NULL) {
        p1_rpc_error(pump, id, code, text, &quoted, 0, out);
    }
}

/* The answer's length, 0 for none, minus the bytes needed when they did not fit. */
static int finish(const json_out_t *out)
{
    if (out->len > 0x7FFFFFFF) {
        return -0x7FFFFFFF;
    }
    return p1_json_out_fits(out) ? (int)out->len : -(int)out->len;
}

int mcpb_pump1_handle(void *pump_object, const char *in, size_t in_len, char *out_buf, size_t out_cap)
{
    mcpb_pump1_t *pump = (mcpb_pump1_t *)pump_object;
    json_out_t out;
    p1_json_out_init(&out, out_buf, out_cap);
    p1_pump_heard(pump); /* every message counts as contact, as the provider's on_heard */
    dispatch(pump, in, in_len, &out);
    return finish(&out);
}

/* The request id in the first bytes of a message, or absent (dispatcher._id_in). */
static json_span_t id_in(const char *head, size_t n)
{
    json_span_t none = {NULL, 0}, id;
    size_t at = 0, end;
    while (at + 4 <= n && memcmp(head + at, "\"id\"", 4) != 0) {
        at++;
    }
    for (at += 4; at < n && head[at] != '\0' && strchr(" \t\n\r\v\f", head[at]) != NULL; at++) {
    }
    if (at >= n || head[at] != ':') {
        return none;
    }
    for (at++; at < n && head[at] != '\0' && strchr(" \t\n\r\v\f", head[at]) != NULL; at++) {
    }
    end = at;
    if (at < n && head[at] == '"') {
        for (end = at + 1; end < n && head[end] != '"'; end++) {
        }
        end++; /* past n when there is no closing quote: nothing */
    } else {
        while (end < n && head[end] != '\0' && strchr("-0123456789", head[end]) != NULL) {
            end++;
        }
        /* cut off by the end of the head, a fraction, or not JSON */
        if (end >= n || head[end] == '\0' || strchr(" \t\r\n,}", head[end]) == NULL) {
            return none;
        }
    }
    if (end > n || !p1_json_parse(head + at, end - at, &id) ||
        (p1_json_kind(id) != JSON_STRING && p1_json_kind(id) != JSON_INT)) {
        return none;
    }
    return id;
}

int mcpb_pump1_oversize(void *pump_object, size_t size, const char *head, size_t head_len, char *out_buf,
                        size_t out_cap)
{
    mcpb_pump1_t *pump = (mcpb_pump1_t *)pump_object;
    json_out_t out;
    p1_json_out_init(&out, out_buf, out_cap);
    p1_pump_heard(pump);
    p1_rpc_error(pump, id_in(head, head_len), RPC_INVALID_REQUEST, P1_REQUEST_TOO_LARGE, NULL, (unsigned long)size,
                 &out);
    return finish(&out);
}
