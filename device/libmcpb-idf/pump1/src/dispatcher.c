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
#include "pump_tools.h"
#include "rpc_answer.h"

#define ENVELOPE 96 /* '{"jsonrpc":"2.0","id":,"result":{"tools":[' plus '],"nextCursor":"NN"}}' */

static const char *const protocol_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};
static const json_span_t NULL_ID = {NULL, 0};

typedef struct quoted_message {
    const char *before;
    json_span_t value;
    const char *after;
    int dumps;              /* 1: json.dumps(value); 0: the string's text */
} quoted_message_t;

static void quoted(json_sink_t *sink, const void *context)
{
    const quoted_message_t *m = (const quoted_message_t *)context;
    p1_json_sink_text(sink, m->before);
    if (m->dumps) {
        p1_json_sink_dumps(sink, m->value);
    } else {
        p1_json_sink_string_text(sink, m->value);
    }
    p1_json_sink_text(sink, m->after);
}

static void sized(json_sink_t *sink, const void *context)
{
    const size_t *sizes = (const size_t *)context; /* what, size, frame_max */
    if (sizes[0] == 0) {
        p1_json_sink_text(sink, "Parse error: the frame is not valid JSON (");
        p1_json_sink_unsigned(sink, (unsigned long)sizes[1]);
        p1_json_sink_text(sink, " bytes)");
        return;
    }
    p1_json_sink_text(sink, "Request too large: ");
    p1_json_sink_unsigned(sink, (unsigned long)sizes[1]);
    p1_json_sink_text(sink, " bytes; this device accepts frames of at most ");
    p1_json_sink_unsigned(sink, (unsigned long)sizes[2]);
    p1_json_sink_text(sink, " bytes");
}

static void unknown_tool(json_sink_t *sink, const void *context)
{
    int i;
    p1_json_sink_text(sink, "Unknown tool: ");
    p1_json_sink_dumps(sink, *(const json_span_t *)context);
    p1_json_sink_text(sink, ". This device offers ");
    for (i = 0; i < PUMP1_TOOL_COUNT; i++) {
        p1_json_sink_text(sink, i == 0 ? "" : ", ");
        p1_json_sink_text(sink, pump1_tools[i].name);
    }
}

static void fixed_error(mcpb_pump1_t *pump, json_span_t id, int code, const char *text, json_out_t *out)
{
    p1_rpc_error(pump, id, code, p1_rpc_text_message, text, out);
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
    json_sink_t raw;
    p1_json_sink_init(&raw, out, 0);
    p1_json_out_text(out, "{\"protocolVersion\":");
    p1_json_sink_quoted(&raw, (const char *)context);
    p1_json_out_text(out, ",\"capabilities\":{\"tools\":{\"listChanged\":false}},\"serverInfo\":{\"name\":");
    p1_json_sink_quoted(&raw, MCPB_PUMP1_SERVER_NAME);
    p1_json_out_text(out, ",\"version\":");
    p1_json_sink_quoted(&raw, pump->config.firmware_version);
    p1_json_out_text(out, "},\"instructions\":");
    p1_json_sink_quoted(&raw, pump1_instructions);
    p1_json_out_text(out, "}");
}

static void initialize(mcpb_pump1_t *pump, json_span_t id, json_span_t params, json_out_t *out)
{
    json_span_t asked = p1_json_get(params, "protocolVersion");
    const char *version = protocol_versions[0];
    size_t i;
    for (i = 0; i < sizeof protocol_versions / sizeof protocol_versions[0]; i++) {
        if (p1_json_string_is(asked, protocol_versions[i])) {
            version = protocol_versions[i];
        }
    }
    pump->cache_used = 0; /* a new gateway session numbers its requests afresh */
    p1_rpc_result(pump, id, initialize_result, version, out);
}

/* -- tools/list --------------------------------------------------------------------------------- */

/* The cursor's tool index, or 0 when it names none: a string of ASCII digits, 0 < value < count. */
static int cursor_index(json_span_t cursor)
{
    size_t at = 0, digits = 0;
    uint32_t cp;
    long value = 0;
    if (p1_json_kind(cursor) != JSON_STRING) {
        return 0;
    }
    while (p1_json_next_char(cursor, &at, &cp)) {
        if (cp < '0' || cp > '9') {
            return 0;
        }
        digits++;
        if (value < PUMP1_TOOL_COUNT) {
            value = value * 10 + (long)(cp - '0');
        }
    }
    return digits > 0 && value > 0 && value < PUMP1_TOOL_COUNT ? (int)value : 0;
}

static void tools_list(mcpb_pump1_t *pump, json_span_t id, json_span_t cursor, json_out_t *out)
{
    json_out_t head;
    json_sink_t raw;
    long budget, used = 0;
    int first = 0, index;
    json_kind_t kind = p1_json_kind(cursor);
    if (kind != JSON_ABSENT && kind != JSON_NULL) {
        first = cursor_index(cursor);
        if (first == 0) {
            quoted_message_t m = {"Invalid params: unknown cursor ", {NULL, 0}, "", 1};
            m.value = cursor;
            p1_rpc_error(pump, id, RPC_INVALID_PARAMS, quoted, &m, out);
            return;
        }
    }
    p1_json_out_init(&head, NULL, 0);
    p1_json_sink_init(&raw, &head, 0);
    p1_json_out_text(&head, "{\"jsonrpc\":\"2.0\",\"id\":");
    p1_json_sink_id(&raw, id);
    p1_json_out_text(&head, ",\"result\":{\"tools\":[");
    budget = (long)pump->config.frame_max - ENVELOPE - (long)head.len;
    p1_json_sink_init(&raw, out, 0);
    p1_json_out_text(out, "{\"jsonrpc\":\"2.0\",\"id\":");
    p1_json_sink_id(&raw, id);
    p1_json_out_text(out, ",\"result\":{\"tools\":[");
    /* as many tools as fit the budget, at least one (mcpdevice.registry.page) */
    for (index = first; index < PUMP1_TOOL_COUNT; index++) {
        long size = (long)pump1_tools[index].size;
        if (index > first && used + size + 1 > budget) {
            break;
        }
        if (index > first) {
            p1_json_out_text(out, ",");
        }
        p1_json_out_bytes(out, pump1_tools[index].json, pump1_tools[index].size);
        used += size + 1;
    }
    if (index < PUMP1_TOOL_COUNT) {
        p1_json_out_text(out, "],\"nextCursor\":\"");
        p1_json_sink_int(&raw, index);
        p1_json_out_text(out, "\"}}");
    } else {
        p1_json_out_text(out, "]}}");
    }
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

typedef struct call {
    pump_refusal_t refusal;
} call_t;

static void call_result(const mcpb_pump1_t *pump, const void *context, json_out_t *out)
{
    p1_pump_write_tool_result(pump, &((const call_t *)context)->refusal, out);
}

/*
 * The cache keeps an answer as it went out, with two savings: the id is not kept apart (it is the
 * answer's, right after ANSWER_HEAD), and a result whose text is the escaped structuredContent
 * (results.ok) keeps that text once: the escaped copy is left out and written again on a repeat.
 */
static const char ANSWER_HEAD[] = "{\"jsonrpc\":\"2.0\",\"id\":";
static const char TEXT_HEAD[] = ",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"";
static const char TEXT_TAIL[] = "\"}],\"structuredContent\":";
#define HEAD_LEN (sizeof ANSWER_HEAD - 1)
#define TAIL_LEN (sizeof TEXT_TAIL - 1)

/* Writes json.dumps' escaping of the bytes s[0..n) to out (escaping 1), or checks that text[0..text_len)
 * is exactly that (out NULL): 1 when it is. */
static int escaped(json_out_t *out, const char *s, size_t n, const char *text, size_t text_len)
{
    size_t i, at = 0;
    for (i = 0; i < n; i++) {
        char one[13];
        json_out_t o;
        json_sink_t sink;
        p1_json_out_init(&o, one, sizeof one);
        p1_json_sink_init(&sink, out != NULL ? out : &o, 1);
        p1_json_sink_char(&sink, (uint32_t)(unsigned char)s[i]);
        if (out == NULL) {
            if (o.len > text_len - at || memcmp(text + at, one, o.len) != 0) {
                return 0;
            }
            at += o.len;
        }
    }
    return out != NULL || at == text_len;
}

/* Keeps answer[0..n) in the entry, folded when it can be: 1, or 0 when it does not fit. */
static int keep(mcpb_pump1_cache_entry_t *entry, const char *answer, size_t n, size_t id_len)
{
    size_t text_at = HEAD_LEN + id_len + sizeof TEXT_HEAD - 1, at;
    entry->text_at = 0;
    if (n > text_at && memcmp(answer + HEAD_LEN + id_len, TEXT_HEAD, sizeof TEXT_HEAD - 1) == 0 &&
        answer[n - 1] == '}' && answer[n - 2] == '}') {
        for (at = text_at; at + TAIL_LEN + 2 <= n; at++) {
            if (memcmp(answer + at, TEXT_TAIL, TAIL_LEN) == 0 &&
                escaped(NULL, answer + at + TAIL_LEN, n - 2 - at - TAIL_LEN, answer + text_at, at - text_at)) {
                if (text_at + n - at > sizeof entry->answer) {
                    return 0;
                }
                memmove(entry->answer, answer, text_at);
                memmove(entry->answer + text_at, answer + at, n - at);
                entry->text_at = (uint16_t)text_at;
                entry->answer_len = (uint16_t)(text_at + n - at);
                return 1;
            }
        }
    }
    if (n > sizeof entry->answer) {
        return 0;
    }
    memmove(entry->answer, answer, n);
    entry->answer_len = (uint16_t)n;
    return 1;
}

static void replay(const mcpb_pump1_cache_entry_t *e, json_out_t *out)
{
    size_t at = e->text_at;
    if (at == 0) {
        p1_json_out_bytes(out, e->answer, e->answer_len);
        return;
    }
    p1_json_out_bytes(out, e->answer, at);
    escaped(out, e->answer + at + TAIL_LEN, e->answer_len - 2 - at - TAIL_LEN, NULL, 0);
    p1_json_out_bytes(out, e->answer + at, e->answer_len - at);
}

static int same_id(const mcpb_pump1_cache_entry_t *e, const char *id, size_t id_len)
{
    return e->id_len == id_len && memcmp(e->answer + HEAD_LEN, id, id_len) == 0;
}

static void remember(mcpb_pump1_t *pump, const char *id, size_t id_len, uint64_t print, const call_t *call,
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
    if (out->len <= HEAD_LEN + id_len || memcmp(answer, ANSWER_HEAD, HEAD_LEN) != 0 ||
        memcmp(answer + HEAD_LEN, id, id_len) != 0 || !keep(entry, answer, out->len, id_len)) {
        return; /* a larger answer is sent but not kept */
    }
    entry->fingerprint = print;
    entry->id_len = (uint16_t)id_len;
    pump->cache_used++;
}

static void tools_call(mcpb_pump1_t *pump, json_span_t id, json_span_t params, const char *in, size_t in_len,
                       json_out_t *out)
{
    char id_text[MCPB_PUMP1_CACHE_ID_MAX];
    json_out_t id_out;
    json_sink_t raw;
    uint64_t print = fingerprint(in, in_len);
    json_span_t name = p1_json_get(params, "name"), arguments = p1_json_get(params, "arguments");
    json_kind_t kind = p1_json_kind(arguments);
    call_t call;
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
            return;
        }
    }
    tool = p1_json_kind(name) == JSON_STRING ? p1_pump_tool_index(name) : -1;
    if (tool < 0) {
        p1_rpc_error(pump, id, RPC_INVALID_PARAMS, unknown_tool, &name, out);
        return;
    }
    if (kind != JSON_ABSENT && kind != JSON_NULL && kind != JSON_OBJECT) {
        fixed_error(pump, id, RPC_INVALID_PARAMS, "Invalid params: arguments must be an object", out);
        return;
    }
    call.refusal = p1_pump_tool_call(pump, tool, arguments);
    p1_rpc_result(pump, id, call_result, &call, out);
    remember(pump, id_text, p1_json_out_fits(&id_out) ? id_out.len : MCPB_PUMP1_CACHE_ID_MAX + 1, print, &call, id,
             out);
}

/* -- the message -------------------------------------------------------------------------------- */

static void dispatch(mcpb_pump1_t *pump, const char *in, size_t in_len, json_out_t *out)
{
    json_span_t root, method, id, params;
    json_kind_t method_kind, params_kind;
    if (!p1_json_parse(in, in_len, &root)) {
        size_t sizes[3] = {0, 0, 0};
        sizes[1] = in_len;
        p1_rpc_error(pump, NULL_ID, RPC_PARSE_ERROR, sized, sizes, out);
        return;
    }
    if (p1_json_kind(root) != JSON_OBJECT) {
        fixed_error(pump, NULL_ID, RPC_INVALID_REQUEST,
                    "Invalid Request: send one JSON-RPC object per frame, no batches", out);
        return;
    }
    method = p1_json_get(root, "method");
    id = p1_json_get(root, "id");
    method_kind = p1_json_kind(method);
    if ((method_kind == JSON_ABSENT || method_kind == JSON_NULL) &&
        (p1_json_get(root, "result").n > 0 || p1_json_get(root, "error").n > 0)) {
        return; /* an answer to a request of ours; the device sends none that it waits for */
    }
    if (id.n == 0 && method_kind == JSON_STRING) {
        return; /* a notification */
    }
    if (p1_json_kind(id) != JSON_STRING && p1_json_kind(id) != JSON_INT) {
        fixed_error(pump, NULL_ID, RPC_INVALID_REQUEST, "Invalid Request: id must be a string or an integer", out);
        return;
    }
    if (method_kind != JSON_STRING || !p1_json_string_is(p1_json_get(root, "jsonrpc"), "2.0")) {
        fixed_error(pump, id, RPC_INVALID_REQUEST, "Invalid Request: needs \"jsonrpc\":\"2.0\" and a method", out);
        return;
    }
    params = p1_json_get(root, "params");
    params_kind = p1_json_kind(params);
    if (params_kind != JSON_ABSENT && params_kind != JSON_NULL && params_kind != JSON_OBJECT) {
        fixed_error(pump, id, RPC_INVALID_PARAMS, "Invalid params: params must be an object", out);
        return;
    }
    pump->counts.requests++;
    if (p1_json_string_is(method, "tools/call")) {
        tools_call(pump, id, params, in, in_len, out);
    } else if (p1_json_string_is(method, "tools/list")) {
        tools_list(pump, id, p1_json_get(params, "cursor"), out);
    } else if (p1_json_string_is(method, "ping")) {
        p1_rpc_result(pump, id, empty_result, NULL, out);
    } else if (p1_json_string_is(method, "initialize")) {
        initialize(pump, id, params, out);
    } else {
        quoted_message_t m = {"Method not found: ", {NULL, 0},
                              ". This device answers initialize, ping, tools/list and tools/call", 0};
        m.value = method;
        p1_rpc_error(pump, id, RPC_METHOD_NOT_FOUND, quoted, &m, out);
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

static int is_bytes_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* The request id in the first bytes of a message, or absent (dispatcher._id_in). */
static json_span_t id_in(const char *head, size_t n)
{
    json_span_t none = {NULL, 0}, id;
    size_t at = 0, end;
    while (at + 4 <= n && memcmp(head + at, "\"id\"", 4) != 0) {
        at++;
    }
    if (at + 4 > n) {
        return none;
    }
    for (at += 4; at < n && is_bytes_space(head[at]); at++) {
    }
    if (at >= n || head[at] != ':') {
        return none;
    }
    for (at++; at < n && is_bytes_space(head[at]); at++) {
    }
    end = at;
    if (at < n && head[at] == '"') {
        for (end = at + 1; end < n && head[end] != '"'; end++) {
        }
        end = end < n ? end + 1 : at; /* no closing quote: nothing */
    } else {
        while (end < n && (head[end] == '-' || (head[end] >= '0' && head[end] <= '9'))) {
            end++;
        }
        if (end == n || !(head[end] == ' ' || head[end] == '\t' || head[end] == '\r' || head[end] == '\n' ||
                          head[end] == ',' || head[end] == '}')) {
            return none; /* cut off by the end of the head, a fraction, or not JSON */
        }
    }
    if (!p1_json_parse(head + at, end - at, &id) || (p1_json_kind(id) != JSON_STRING && p1_json_kind(id) != JSON_INT)) {
        return none;
    }
    return id;
}

int mcpb_pump1_oversize(void *pump_object, size_t size, const char *head, size_t head_len, char *out_buf,
                        size_t out_cap)
{
    mcpb_pump1_t *pump = (mcpb_pump1_t *)pump_object;
    json_out_t out;
    size_t sizes[3];
    sizes[0] = 1;
    sizes[1] = size;
    sizes[2] = pump->config.frame_max;
    p1_json_out_init(&out, out_buf, out_cap);
    p1_pump_heard(pump);
    p1_rpc_error(pump, id_in(head, head_len), RPC_INVALID_REQUEST, sized, sizes, &out);
    return finish(&out);
}
