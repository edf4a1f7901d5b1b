/* JSON-RPC answers (rpc_answer.h). */
#include "rpc_answer.h"

#include "pump_refusal.h"

/* '{"jsonrpc":"2.0","id":ID' and `tail`, with a code (an error's start) the code and its message's
 * key: one function for the result's head and the error's. */
static void write_head(json_out_t *out, json_span_t id, const char *tail, int code)
{
    json_sink_t raw;
    p1_json_sink_init(&raw, out, 0);
    p1_pump_out_text(out, P1_RPC_HEAD);
    p1_json_sink_id(&raw, id);
    p1_pump_out_text(out, tail);
    if (code != 0) {
        p1_json_sink_int(&raw, code);
        p1_pump_out_text(out, P1_RPC_MESSAGE);
    }
}

/* The message, escaped and cut after `limit` code points, into `out`: how many it has uncut. */
P1_NOINLINE static size_t write_message(json_out_t *out, const char *text, const pump_text_args_t *args, size_t limit)
{
    json_sink_t sink;
    p1_json_sink_init(&sink, out, 1);
    sink.limit = limit;
    p1_pump_write_text(&sink, text, args);
    return sink.count;
}

void p1_rpc_error(mcpb_pump1_t *pump, json_span_t id, int code, const char *text, const json_span_t *value,
                  unsigned long number, json_out_t *out)
{
    pump_text_args_t args = {NULL, {NULL, 0}, 0, 0};
    json_out_t measure;
    size_t frame_max = pump->config.frame_max, head, kept, answer;
    int cut = 0;
    pump->counts.errors++;
    args.pump = pump;
    args.number = number;
    if (value != NULL) {
        args.value = *value;
    }
    /* measured first: the answer's start, then the message after it, again after each cut */
    p1_json_out_init(&measure, NULL, 0);
    write_head(&measure, id, P1_RPC_ERROR, code);
    head = measure.len;
    kept = write_message(&measure, text, &args, (size_t)-1);
    answer = measure.len + 3; /* and "}} */
    /* the loop of dispatcher._error: cut by the excess and three more for "...", until it fits */
    while (answer > frame_max && (cut ? kept + 3 : kept) > 3) {
        size_t current = cut ? kept + 3 : kept, excess = answer - frame_max;
        kept = current > excess + 3 ? current - excess - 3 : 0;
        cut = 1;
        measure.len = head;
        write_message(&measure, text, &args, kept);
        answer = measure.len + 3 + 3; /* and ..."}} */
    }
    write_head(out, id, P1_RPC_ERROR, code);
    write_message(out, text, &args, kept);
    if (cut) {
        p1_json_out_text(out, "...");
    }
    p1_json_out_text(out, "\"}}");
}

void p1_rpc_result_head(json_out_t *out, json_span_t id)
{
    write_head(out, id, P1_RPC_RESULT, 0);
}

void p1_rpc_result(mcpb_pump1_t *pump, json_span_t id, rpc_result_fn result, const void *context, json_out_t *out)
{
    json_out_t measure, *to = &measure;
    p1_json_out_init(&measure, NULL, 0);
    for (;;) { /* one pass that measures, then one that writes */
        p1_rpc_result_head(to, id);
        result(pump, context, to);
        p1_json_out_text(to, "}");
        if (to == out) {
            return;
        }
        if (measure.len > pump->config.frame_max) {
            p1_rpc_error(pump, id, RPC_INTERNAL_ERROR, P1_RESPONSE_TOO_LARGE, NULL, (unsigned long)measure.len, out);
            return;
        }
        to = out;
    }
}
