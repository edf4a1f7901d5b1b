/* The pump-1 state machine (pump_controller.h). */
#include "pump_controller.h"

#include <math.h>
#include <string.h>

#include "json_number.h"
#include "pump_physics.h"

/* Wrap-safe milliseconds from `earlier` to `later`. */
static int32_t ticks_diff(uint32_t later, uint32_t earlier)
{
    uint32_t d = later - earlier;
    return d <= 0x7FFFFFFFu ? (int32_t)d : -(int32_t)(0xFFFFFFFFu - d) - 1;
}

/* Whole seconds plus a millisecond remainder: exact for years, as the MicroPython board keeps them. */
P1_NOINLINE static void add_ms(uint32_t *seconds, uint32_t *rem_ms, uint32_t dt_ms)
{
    *rem_ms += dt_ms;
    if (*rem_ms >= 1000) {
        *seconds += *rem_ms / 1000;
        *rem_ms %= 1000;
    }
}

static void drive(mcpb_pump1_t *pump, double dt_s)
{
    const mcpb_pump1_hardware_t *hw = pump->config.hardware;
    if (hw != NULL) {
        hw->drive(hw->context, pump->speed, dt_s);
        hw->read(hw->context, &pump->reading);
    } else {
        p1_pump_physics_step(&pump->physics, dt_s, pump->speed);
        p1_pump_physics_read(&pump->physics, &pump->reading);
    }
}

static int dry_run_persists(const mcpb_pump1_t *pump)
{
    const mcpb_pump1_hardware_t *hw = pump->config.hardware;
    if (hw != NULL) {
        return hw->dry_run_persists != NULL && hw->dry_run_persists(hw->context);
    }
    return (pump->physics.injected & MCPB_PUMP1_DRY_RUN) != 0;
}

static int sensors_failed(const mcpb_pump1_t *pump)
{
    unsigned all = MCPB_PUMP1_FLOW_VALID | MCPB_PUMP1_PRESSURE_VALID | MCPB_PUMP1_TEMP_VALID;
    return (pump->reading.valid & all) != all;
}

/* Latches a fault; its text is written now, with the values of this moment. */
static void trip(mcpb_pump1_t *pump, int fault, const char *text)
{
    pump_text_args_t args = {NULL, {NULL, 0}, 0, 0};
    json_out_t out;
    json_sink_t sink;
    args.pump = pump;
    args.number = pump->deadman_ms; /* link_lost's dead-man: 2.5 s reads "2.5", as controller.py writes it */
    args.number_ms = 1;
    p1_json_out_init(&out, pump->fault_text, sizeof pump->fault_text - 1);
    p1_json_sink_init(&sink, &out, 0);
    p1_pump_write_text(&sink, text, &args);
    pump->fault_text[out.len < out.cap ? out.len : out.cap] = '\0';
    pump->fault = fault;
    pump->state = PUMP_FAULT;
    pump->dry_ms = 0;
}

static void detect_faults(mcpb_pump1_t *pump, uint32_t dt_ms)
{
    const mcpb_pump1_reading_t *r = &pump->reading;
    double expected;
    if (sensors_failed(pump)) {
        trip(pump, FAULT_SENSOR_FAILURE, P1_SENSOR_FAILURE_TEXT);
        return;
    }
    if (r->motor_temp_c > PUMP_TRIP_C) {
        trip(pump, FAULT_OVERTEMP, P1_OVERTEMP_TEXT);
        return;
    }
    expected = p1_pump_expected_flow(pump->speed);
    if (pump->state == PUMP_RUNNING && r->flow_lpm < PUMP_DRY_FLOW_PERCENT / 100.0 * expected) {
        pump->dry_ms += dt_ms;
        if (pump->dry_ms >= pump->dry_run_ms) {
            trip(pump, FAULT_DRY_RUN, P1_DRY_RUN_TEXT); /* quotes `expected` */
        }
    } else {
        pump->dry_ms = 0;
    }
}

void p1_pump_advance(mcpb_pump1_t *pump)
{
    uint32_t now = pump->now_ms, dt_ms;
    int32_t diff = ticks_diff(now, pump->last_ms);
    int turning = pump->state == PUMP_STARTING || pump->state == PUMP_RUNNING;
    double dt_s, target;
    dt_ms = diff > 0 ? (uint32_t)diff : 0;
    pump->last_ms = now;
    dt_s = dt_ms / 1000.0;
    if (turning && ticks_diff(now, pump->heard_ms) > (int32_t)pump->deadman_ms) {
        trip(pump, FAULT_LINK_LOST, P1_LINK_LOST_TEXT);
        turning = 0;
    }
    target = turning ? (double)pump->setpoint_rpm : 0.0;
    pump->speed = p1_pump_ramp_toward(pump->speed, target, dt_s);
    drive(pump, dt_s);
    add_ms(&pump->uptime_s, &pump->uptime_rem_ms, dt_ms);
    if (pump->speed > 0) {
        add_ms(&pump->run_s, &pump->run_rem_ms, dt_ms);
    }
    /* a pump still starting ramps to its setpoint, one stopping to 0: either is done at its target */
    if (pump->speed == target) {
        if (pump->state == PUMP_STARTING) {
            pump->state = PUMP_RUNNING;
        } else if (pump->state == PUMP_STOPPING) {
            pump->state = PUMP_STOPPED;
        }
    }
    if (pump->fault == FAULT_NONE) {
        detect_faults(pump, dt_ms);
    }
}

void p1_pump_controller_init(mcpb_pump1_t *pump)
{
    /* the rest of a stopped pump is zero (mcpb_pump1_init cleared it) */
    pump->deadman_ms = (uint32_t)(pump->config.deadman_s * 1000);
    pump->dry_run_ms = (uint32_t)(pump->config.dry_run_s * 1000);
    pump->setpoint_rpm = pump->config.default_setpoint_rpm;
    p1_pump_physics_init(&pump->physics, pump->config.thermal_tau_s);
    p1_pump_advance(pump);
}

/* The state a pump leaves for when told to stop: stopping while it still turns. */
P1_NOINLINE static int stop_state(const mcpb_pump1_t *pump)
{
    return pump->speed == 0 ? PUMP_STOPPED : PUMP_STOPPING;
}

const char *p1_pump_call(mcpb_pump1_t *pump, int tool, json_span_t arguments, json_span_t *quoted)
{
    json_span_t key, value, speed = {NULL, 0};
    json_kind_t kind;
    int takes_speed = tool == TOOL_START || tool == TOOL_SET_SPEED, stopped;
    size_t at = 0;
    double v = 0;
    /* the first argument the tool does not take, as tools.py's _unexpected finds it; else every
       member is speed_rpm, and the last one counts (a dict) */
    while (p1_json_kind(arguments) == JSON_OBJECT && p1_json_next_member(arguments, &at, &key, &value)) {
        if (!(takes_speed && p1_json_string_is(key, "speed_rpm"))) {
            *quoted = key;
            return takes_speed ? P1_UNKNOWN_ARGUMENT_SPEED : P1_UNKNOWN_ARGUMENT_NONE;
        }
        speed = value;
    }
    *quoted = speed; /* what the speed refusals quote; the other texts quote no value */
    kind = p1_json_kind(speed);
    if (tool == TOOL_SET_SPEED && kind == JSON_ABSENT) {
        return P1_SPEED_MISSING;
    }
    /* a command: the model up to now first, and it counts as contact; start with an explicit null
       (not "use the setpoint") is refused before it, as tools.py refuses it */
    if (!(tool == TOOL_START && kind == JSON_NULL)) {
        p1_pump_heard(pump);
        p1_pump_advance(pump);
    }
    stopped = pump->state == PUMP_STOPPED || pump->state == PUMP_STOPPING;
    if (takes_speed) {
        /* the speed's own limits, its value read once */
        if (kind != JSON_ABSENT) {
            if (kind != JSON_INT && kind != JSON_FLOAT) {
                return P1_SPEED_NOT_NUMBER;
            }
            v = p1_json_number_value(speed);
            /* v - floor(v) is 0 for a whole finite v only: NaN and infinity give NaN (one test, no isfinite) */
            if (kind == JSON_FLOAT && v - floor(v) != 0) {
                return P1_SPEED_NOT_WHOLE;
            }
            if (v < PUMP_MIN_RPM || v > PUMP_MAX_RPM) {
                return P1_SPEED_OUT_OF_RANGE;
            }
        }
        if (pump->fault != FAULT_NONE) {
            return P1_IN_FAULT;
        }
        if (stopped && tool == TOOL_SET_SPEED) {
            return P1_NOT_RUNNING;
        }
        if (kind != JSON_ABSENT) {
            pump->setpoint_rpm = (int)v;
        }
        if (stopped) {
            pump->state = PUMP_STARTING;
        }
        return NULL;
    }
    if (tool == TOOL_STOP && !stopped && pump->state != PUMP_FAULT) {
        pump->state = stop_state(pump);
    }
    if (tool != TOOL_RESET_FAULT) {
        return NULL;
    }
    switch (pump->fault) {
    case FAULT_NONE:
        return NULL;
    case FAULT_OVERTEMP:
        if (!(pump->reading.valid & MCPB_PUMP1_TEMP_VALID)) {
            return P1_OVERTEMP_UNREADABLE;
        }
        if (pump->reading.motor_temp_c >= PUMP_RESET_C) {
            return P1_OVERTEMP_PERSISTS;
        }
        break;
    case FAULT_SENSOR_FAILURE:
        if (sensors_failed(pump)) {
            return P1_SENSOR_PERSISTS;
        }
        break;
    case FAULT_DRY_RUN:
        if (dry_run_persists(pump)) {
            return P1_DRY_RUN_PERSISTS;
        }
        break;
    default:
        break; /* link_lost: this very request shows the link is back */
    }
    pump->fault = FAULT_NONE;
    pump->fault_text[0] = '\0';
    pump->state = stop_state(pump);
    return NULL;
}
