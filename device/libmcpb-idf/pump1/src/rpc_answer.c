/* JSON-RPC answers (rpc_answer.h). */
#include "rpc_answer.h"

#include "pump_refusal.h"

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
static size_t message_bytes(const char *text, const pump_text_args_t *args, size_t limit, size_t *count)
{
    json_out_t measure;
    json_sink_t sink;
    p1_json_out_init(&measure, NULL, 0);
    p1_json_sink_init(&sink, &measure, 1);
    sink.limit = limit;
    p1_pump_write_text(&sink, text, args);
    *count = sink.count;
    return measure.len;
}

void p1_rpc_error(mcpb_pump1_t *pump, json_span_t id, int code, const char *text, const json_span_t *value,
                  unsigned long number, json_out_t *out)
{
    pump_text_args_t args = {NULL, {NULL, 0}, 0};
    json_out_t measure;
    json_sink_t sink;
    size_t frame_max = pump->config.frame_max, envelope, length, kept, answer;
    int cut = 0;
    pump->counts.errors++;
    args.pump = pump;
    args.number = number;
    if (value != NULL) {
        args.value = *value;
    }
    p1_json_out_init(&measure, NULL, 0);
    write_error_start(&measure, id, code);
    envelope = measure.len + 3; /* and "}} */
    answer = envelope + message_bytes(text, &args, (size_t)-1, &length);
    kept = length;
    /* the loop of dispatcher._error: cut by the excess and three more for "...", until it fits */
    while (answer > frame_max && (cut ? kept + 3 : kept) > 3) {
        size_t current = cut ? kept + 3 : kept, excess = answer - frame_max, ignored;
        kept = current > excess + 3 ? current - excess - 3 : 0;
        cut = 1;
        answer = envelope + message_bytes(text, &args, kept, &ignored) + 3;
    }
    write_error_start(out, id, code);
    p1_json_sink_init(&sink, out, 1);
    sink.limit = kept;
    p1_pump_write_text(&sink, text, &args);
    if (cut) {
        p1_json_out_text(out, "...");
    }
    p1_json_out_text(out, "\"}}");
}

void p1_rpc_result_head(json_out_t *out, json_span_t id)
{
    write_head(out, id);
    p1_json_out_text(out, ",\"result\":");
}

void p1_rpc_result(mcpb_pump1_t *pump, json_span_t id, rpc_result_fn result, const void *context, json_out_t *out)
{
    json_out_t measure;
    p1_json_out_init(&measure, NULL, 0);
    p1_rpc_result_head(&measure, id);
    result(pump, context, &measure);
    p1_json_out_text(&measure, "}");
    if (measure.len > pump->config.frame_max) {
        p1_rpc_error(pump, id, RPC_INTERNAL_ERROR, P1_RESPONSE_TOO_LARGE, NULL, (unsigned long)measure.len, out);
        return;
    }
    p1_rpc_result_head(out, id);
    result(pump, context, out);
    p1_json_out_text(out, "}");
}
