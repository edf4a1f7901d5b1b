/* The five pump-1 tools (pump_tools.h). */
#include "pump_tools.h"

#include "pump1_schema.h"
#include "pump_controller.h"

enum { GET_STATUS, START, SET_SPEED, STOP, RESET_FAULT };

int p1_pump_tool_index(json_span_t name)
{
    int i;
    for (i = 0; i < PUMP1_TOOL_COUNT; i++) {
        if (p1_json_string_is(name, pump1_tools[i].name)) {
            return i;
        }
    }
    return -1;
}

/* The first argument the tool does not take, as tools.py's _unexpected finds it. */
static pump_refusal_t unexpected(json_span_t arguments, int takes_speed)
{
    json_span_t key, value, none = {NULL, 0};
    size_t at = 0;
    pump_refusal_t refusal = p1_pump_refusal(REFUSE_NONE, none);
    if (p1_json_kind(arguments) != JSON_OBJECT) {
        return refusal;
    }
    while (p1_json_next_member(arguments, &at, &key, &value)) {
        if (!(takes_speed && p1_json_string_is(key, "speed_rpm"))) {
            refusal = p1_pump_refusal(REFUSE_UNKNOWN_ARGUMENT, key);
            refusal.takes_speed = takes_speed;
            return refusal;
        }
    }
    return refusal;
}

pump_refusal_t p1_pump_tool_call(mcpb_pump1_t *pump, int tool, json_span_t arguments)
{
    int takes_speed = tool == START || tool == SET_SPEED;
    pump_refusal_t refusal = unexpected(arguments, takes_speed);
    json_span_t speed = p1_json_get(arguments, "speed_rpm");
    if (refusal.kind != REFUSE_NONE) {
        return refusal;
    }
    switch (tool) {
    case GET_STATUS:
        p1_pump_get_status(pump);
        break;
    case START:
        if (p1_json_kind(speed) == JSON_NULL) {
            return p1_pump_check_speed(speed); /* an explicit null is not "use the setpoint" */
        }
        return p1_pump_start(pump, speed);
    case SET_SPEED:
        if (p1_json_kind(speed) == JSON_ABSENT) {
            return p1_pump_refusal(REFUSE_SPEED_MISSING, speed);
        }
        return p1_pump_set_speed(pump, speed);
    case STOP:
        p1_pump_stop(pump);
        break;
    default:
        return p1_pump_reset_fault(pump);
    }
    return refusal;
}

void p1_pump_write_tool_result(const mcpb_pump1_t *pump, const pump_refusal_t *refusal, json_out_t *out)
{
    json_sink_t raw, text;
    p1_json_sink_init(&raw, out, 0);
    p1_json_sink_init(&text, out, 1);
    p1_json_out_text(out, "{\"content\":[{\"type\":\"text\",\"text\":\"");
    if (refusal->kind != REFUSE_NONE) {
        p1_pump_write_refusal(pump, refusal, &text);
        p1_json_out_text(out, "\"}],\"isError\":true}");
        return;
    }
    p1_pump_write_status(pump, &text);
    p1_json_out_text(out, "\"}],\"structuredContent\":");
    p1_pump_write_status(pump, &raw);
    p1_json_out_text(out, "}");
}
