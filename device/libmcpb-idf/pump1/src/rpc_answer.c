/* JSON-RPC answers (rpc_answer.h). */
#include "rpc_answer.h"

static void write_head(json_out_t *out, json_span_t id)
{
    json_sink_t raw;
    p1_json_sink_init(&raw, out, 0);
    p1_json_out_text(out, "{\"jsonrpc\":\"2.0\",\"id\":");
    p1_json_sink_id(&raw, id);
}

static void write_error_start(json_out_t *out, json_span_t id, int code)
{
    json_sink_t raw;
    p1_json_sink_init(&raw, out, 0);
    write_head(out, id);
    p1_json_out_text(out, ",\"error\":{\"code\":");
    p1_json_sink_int(&raw, code);
    p1_json_out_text(out, ",\"message\":\"");
}

/* Bytes the message takes inside the answer when cut after `limit` code points; *count: its length. */
static size_t message_bytes(rpc_message_fn message, const void *context, size_t limit, size_t *count)
{
    json_out_t measure;
    json_sink_t sink;
    p1_json_out_init(&measure, NULL, 0);
    p1_json_sink_init(&sink, &measure, 1);
    sink.limit = limit;
    message(&sink, context);
    *count = sink.count;
    return measure.len;
}

static void write_error(const mcpb_pump1_t *pump, json_span_t id, int code, rpc_message_fn message,
                        const void *context, json_out_t *out)
{
    json_out_t measure;
    json_sink_t sink;
    size_t frame_max = pump->config.frame_max, envelope, length, kept, answer;
    int cut = 0;
    p1_json_out_init(&measure, NULL, 0);
    write_error_start(&measure, id, code);
    envelope = measure.len + 3; /* and "}} */
    answer = envelope + message_bytes(message, context, (size_t)-1, &length);
    kept = length;
    /* the loop of dispatcher._error: cut by the excess and three more for "...", until it fits */
    while (answer > frame_max && (cut ? kept + 3 : kept) > 3) {
        size_t current = cut ? kept + 3 : kept, excess = answer - frame_max, ignored;
        kept = current > excess + 3 ? current - excess - 3 : 0;
        cut = 1;
        answer = envelope + message_bytes(message, context, kept, &ignored) + 3;
    }
    write_error_start(out, id, code);
    p1_json_sink_init(&sink, out, 1);
    sink.limit = kept;
    message(&sink, context);
    if (cut) {
        p1_json_out_text(out, "...");
    }
    p1_json_out_text(out, "\"}}");
}

void p1_rpc_error(mcpb_pump1_t *pump, json_span_t id, int code, rpc_message_fn message, const void *context,
               json_out_t *out)
{
    pump->counts.errors++;
    write_error(pump, id, code, message, context, out);
}

static void too_large_message(json_sink_t *sink, const void *context)
{
    p1_json_sink_text(sink, "Response too large: ");
    p1_json_sink_unsigned(sink, (unsigned long)*(const size_t *)context);
    p1_json_sink_text(sink, " bytes");
}

void p1_rpc_result(mcpb_pump1_t *pump, json_span_t id, rpc_result_fn result, const void *context, json_out_t *out)
{
    json_out_t measure;
    p1_json_out_init(&measure, NULL, 0);
    write_head(&measure, id);
    p1_json_out_text(&measure, ",\"result\":");
    result(pump, context, &measure);
    p1_json_out_text(&measure, "}");
    if (measure.len > pump->config.frame_max) {
        p1_rpc_error(pump, id, RPC_INTERNAL_ERROR, too_large_message, &measure.len, out);
        return;
    }
    write_head(out, id);
    p1_json_out_text(out, ",\"result\":");
    result(pump, context, out);
    p1_json_out_text(out, "}");
}

void p1_rpc_text_message(json_sink_t *sink, const void *context)
{
    p1_json_sink_text(sink, (const char *)context);
}
