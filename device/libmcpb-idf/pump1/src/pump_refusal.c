/* The texts of the tools' refusals (pump_refusal.h). */
#include "pump_refusal.h"

#include <stdio.h>

#include "json_number.h"
#include "pump_controller.h"
#include "pump_physics.h"

#define SPEED_RULE "speed_rpm must be a whole number of rpm between 300 and 2900, got "

pump_refusal_t p1_pump_refusal(pump_refusal_kind_t kind, json_span_t value)
{
    pump_refusal_t refusal;
    refusal.kind = kind;
    refusal.value = value;
    refusal.takes_speed = 0;
    return refusal;
}

static void write_celsius(json_sink_t *sink, double value)
{
    char text[32];
    snprintf(text, sizeof text, "%.1f", value);
    p1_json_sink_text(sink, text);
}

void p1_pump_write_refusal(const mcpb_pump1_t *pump, const pump_refusal_t *refusal, json_sink_t *sink)
{
    switch (refusal->kind) {
    case REFUSE_NONE:
        break;
    case REFUSE_UNKNOWN_ARGUMENT:
        p1_json_sink_text(sink, "Unknown argument ");
        p1_json_sink_string_text(sink, refusal->value);
        p1_json_sink_text(sink, refusal->takes_speed ? ": this tool takes only speed_rpm."
                                                  : ": this tool takes no arguments.");
        break;
    case REFUSE_SPEED_NOT_NUMBER:
        p1_json_sink_text(sink, SPEED_RULE);
        p1_json_sink_dumps(sink, refusal->value);
        break;
    case REFUSE_SPEED_NOT_WHOLE:
        p1_json_sink_text(sink, SPEED_RULE);
        p1_json_number_repr(sink, refusal->value);
        break;
    case REFUSE_SPEED_OUT_OF_RANGE:
        p1_json_sink_text(sink, "speed_rpm ");
        p1_json_number_as_int(sink, refusal->value);
        p1_json_sink_text(sink, " is out of range: this pump runs between 300 and 2900 rpm.");
        break;
    case REFUSE_IN_FAULT:
        p1_json_sink_text(sink, "The pump is in fault ");
        p1_json_sink_text(sink, p1_pump_fault_code(pump->fault));
        p1_json_sink_text(sink, ": ");
        p1_json_sink_text(sink, pump->fault_text);
        break;
    case REFUSE_NOT_RUNNING:
        p1_json_sink_text(sink, "The pump is ");
        p1_json_sink_text(sink, p1_pump_state_name(pump->state));
        p1_json_sink_text(sink, "; set_speed only changes a running pump. Call start with speed_rpm to run it.");
        break;
    case REFUSE_SPEED_MISSING:
        p1_json_sink_text(sink, "set_speed needs speed_rpm, the new speed in rpm (300 to 2900).");
        break;
    case REFUSE_OVERTEMP_UNREADABLE:
        p1_json_sink_text(sink, "The overtemp fault cannot be reset: the motor temperature sensor reads nothing valid.");
        break;
    case REFUSE_OVERTEMP_PERSISTS:
        p1_json_sink_text(sink, "The overtemp fault persists: the motor is at ");
        write_celsius(sink, pump->reading.motor_temp_c);
        p1_json_sink_text(sink, " C, above the reset limit of 85 C. Let it cool, then call reset_fault again.");
        break;
    case REFUSE_SENSOR_PERSISTS:
        p1_json_sink_text(sink, "The sensor_failure fault persists: sensor ");
        p1_pump_write_failed_sensors(pump, sink);
        p1_json_sink_text(sink, " still reads nothing valid. Check its wiring, then call reset_fault again.");
        break;
    case REFUSE_DRY_RUN_PERSISTS:
        p1_json_sink_text(sink, "The dry_run fault persists: the pump still has no water on its suction side. "
                             "Prime it and check the suction side, then call reset_fault again.");
        break;
    }
}
