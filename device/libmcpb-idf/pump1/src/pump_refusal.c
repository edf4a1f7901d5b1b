/* The device's texts (pump_refusal.h). */
#include "pump_refusal.h"

#include <stdio.h>
#include <string.h>

#include "json_number.h"
#include "pump1_schema.h"
#include "pump_controller.h"
#include "pump_physics.h"

/* One byte of a text: a pair's two bytes (each maybe a pair in turn), or itself. */
static void put(json_sink_t *sink, unsigned c)
{
    while (c >= P1_TEXT_FIRST_PAIR) {
        const unsigned char *pair = p1_text_pairs + 2 * (c - P1_TEXT_FIRST_PAIR);
        put(sink, pair[0]);
        c = pair[1];
    }
    p1_json_sink_char(sink, c);
}

void p1_pump_out_text(json_out_t *out, const char *text)
{
    json_sink_t raw;
    p1_json_sink_init(&raw, out, 0);
    p1_pump_write_text(&raw, text, NULL);
}

const char *p1_text_nth(const char *list, int k)
{
    for (; k > 0; k--) {
        list += strlen(list) + 1;
    }
    return list;
}

void p1_pump_write_text(json_sink_t *sink, const char *text, const pump_text_args_t *args)
{
    const mcpb_pump1_t *pump = NULL;
    const mcpb_pump1_reading_t *r;
    const char *sep;
    double value;
    int c, i;
    while ((c = (unsigned char)*text++) != 0) {
        if (c < 0x20) {
            pump = args->pump; /* a text with values has args; one without may have none */
        }
        switch (c) {
        case T_FAULT_CODE:
            p1_pump_write_text(sink, p1_text_nth(P1_FAULT_CODES, pump->fault), args);
            break;
        case T_FAULT_TEXT:
            p1_json_sink_text(sink, pump->fault_text);
            break;
        case T_STATE:
            p1_pump_write_text(sink, p1_text_nth(P1_STATE_NAMES, pump->state), args);
            break;
        case T_SENSORS:
            sep = "";
            for (i = 0; i < 3; i++) {
                if (!(pump->reading.valid & (1u << i))) {
                    p1_json_sink_text(sink, sep);
                    p1_pump_write_text(sink, p1_text_nth(P1_SENSOR_NAMES, i), args);
                    sep = " and ";
                }
            }
            break;
        case T_TEMP:
            p1_json_fixed(sink, pump->reading.motor_temp_c, 1, 0);
            break;
        case T_FLOW:
            p1_json_fixed(sink, p1_pump_expected_flow(pump->speed), 0, 0);
            break;
        case T_DUMPS:
            p1_json_sink_dumps(sink, args->value);
            break;
        case T_STRING:
            p1_json_sink_string_text(sink, args->value);
            break;
        case T_REPR:
            p1_json_number_float(sink, args->value, 0);
            break;
        case T_INT:
            p1_json_number_as_int(sink, args->value);
            break;
        case T_NUMBER:
            if (args->number_ms) {
                char seconds[24]; /* "%g" of a 32-bit count of ms: at most "4.29497e+06" */
                snprintf(seconds, sizeof seconds, "%g", args->number / 1000.0);
                p1_json_sink_text(sink, seconds);
            } else {
                p1_json_sink_unsigned(sink, args->number);
            }
            break;
        case T_TOOLS:
            for (i = 0; i < PUMP1_TOOL_COUNT; i++) {
                p1_json_sink_text(sink, i == 0 ? "" : ", ");
                p1_json_sink_text(sink, pump1_tools[i].name);
            }
            break;
        case T_FRAME_MAX:
            p1_json_sink_unsigned(sink, (unsigned long)pump->config.frame_max);
            break;
        case T_SPEED:
            p1_json_sink_int(sink, (long)(pump->speed + 0.5));
            break;
        case T_SETPOINT:
            p1_json_sink_int(sink, pump->setpoint_rpm);
            break;
        case T_FLOW_LPM:
        case T_PRESSURE_BAR:
        case T_MOTOR_TEMP_C:
            /* flow and pressure floored at 0 (a minimum-0 schema), then round(value, digits) */
            i = c - T_FLOW_LPM;
            r = &pump->reading;
            value = i == 0 ? r->flow_lpm : i == 1 ? r->pressure_bar : r->motor_temp_c;
            if (!(r->valid & (1u << i))) {
                p1_json_sink_text(sink, "null");
            } else {
                p1_json_fixed(sink, i < 2 && value < 0.0 ? 0.0 : value, i == 1 ? 2 : 1, 1);
            }
            break;
        case T_RUN_HOURS:
            p1_json_fixed(sink, ((double)pump->run_s + pump->run_rem_ms / 1000.0) / 3600.0, 3, 1);
            break;
        case T_FAULT:
            p1_pump_write_text(sink, pump->fault == FAULT_NONE ? P1_STATUS_NO_FAULT : P1_STATUS_FAULT, args);
            break;
        case T_UPTIME:
            p1_json_sink_unsigned(sink, pump->uptime_s);
            break;
        default:
            put(sink, (unsigned)c);
            break;
        }
    }
}
