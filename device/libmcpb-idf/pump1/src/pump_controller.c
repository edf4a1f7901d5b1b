/* The pump-1 state machine (pump_controller.h). */
#include "pump_controller.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "json_number.h"
#include "pump_physics.h"

static const json_span_t NOTHING = {NULL, 0};

const char *p1_pump_state_name(int state)
{
    static const char *const names[] = {"stopped", "starting", "running", "stopping", "fault"};
    return names[state];
}

const char *p1_pump_fault_code(int fault)
{
    static const char *const codes[] = {"", "link_lost", "sensor_failure", "overtemp", "dry_run"};
    return codes[fault];
}

/* Wrap-safe milliseconds from `earlier` to `later`. */
static int32_t ticks_diff(uint32_t later, uint32_t earlier)
{
    uint32_t d = later - earlier;
    return d <= 0x7FFFFFFFu ? (int32_t)d : -(int32_t)(0xFFFFFFFFu - d) - 1;
}

/* Whole seconds plus a millisecond remainder: exact for years, as the MicroPython board keeps them. */
static void add_ms(uint32_t *seconds, uint32_t *rem_ms, uint32_t dt_ms)
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

void p1_pump_write_failed_sensors(const mcpb_pump1_t *pump, json_sink_t *sink)
{
    static const char *const names[] = {"flow", "pressure", "temperature"};
    int i, first = 1;
    for (i = 0; i < 3; i++) {
        if (!(pump->reading.valid & (1u << i))) {
            p1_json_sink_text(sink, first ? "" : " and ");
            p1_json_sink_text(sink, names[i]);
            first = 0;
        }
    }
}

static void trip(mcpb_pump1_t *pump, int fault)
{
    pump->fault = fault;
    pump->state = PUMP_FAULT;
    pump->dry_ms = 0;
}

static void detect_faults(mcpb_pump1_t *pump, uint32_t dt_ms)
{
    const mcpb_pump1_reading_t *r = &pump->reading;
    double expected;
    if (sensors_failed(pump)) {
        char names[32];
        json_out_t out;
        json_sink_t sink;
        p1_json_out_init(&out, names, sizeof names - 1);
        p1_json_sink_init(&sink, &out, 0);
        p1_pump_write_failed_sensors(pump, &sink);
        names[out.len < sizeof names ? out.len : sizeof names - 1] = '\0';
        trip(pump, FAULT_SENSOR_FAILURE);
        snprintf(pump->fault_text, sizeof pump->fault_text,
                 "Sensor %s reads nothing valid (open or shorted loop), so the device stopped the pump. "
                 "Check the sensor wiring, then call reset_fault.",
                 names);
        return;
    }
    if (r->motor_temp_c > PUMP_TRIP_C) {
        trip(pump, FAULT_OVERTEMP);
        snprintf(pump->fault_text, sizeof pump->fault_text,
                 "Motor temperature %.1f C is above the trip limit of %d C, so the drive stopped the pump. "
                 "Let the motor cool below %d C, then call reset_fault.",
                 r->motor_temp_c, (int)PUMP_TRIP_C, (int)PUMP_RESET_C);
        return;
    }
    expected = PUMP_RATED_FLOW_LPM * pump->speed / PUMP_MAX_RPM;
    if (pump->state == PUMP_RUNNING && r->flow_lpm < PUMP_DRY_FLOW_PERCENT / 100.0 * expected) {
        pump->dry_ms += dt_ms;
        if (pump->dry_ms >= pump->dry_run_ms) {
            trip(pump, FAULT_DRY_RUN);
            snprintf(pump->fault_text, sizeof pump->fault_text,
                     "Flow stayed below %d%% of the expected %.0f L/min while running: the pump is running dry. "
                     "Check priming and the suction side, then call reset_fault.",
                     PUMP_DRY_FLOW_PERCENT, expected);
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
    double dt_s;
    dt_ms = diff > 0 ? (uint32_t)diff : 0;
    pump->last_ms = now;
    dt_s = dt_ms / 1000.0;
    if (turning && ticks_diff(now, pump->heard_ms) > (int32_t)pump->deadman_ms) {
        trip(pump, FAULT_LINK_LOST);
        snprintf(pump->fault_text, sizeof pump->fault_text,
                 "No request or ping from the gateway for %lu s while the motor turned, so the device stopped it. "
                 "Check the network and the gateway, then call reset_fault and start.",
                 (unsigned long)(pump->deadman_ms / 1000));
        turning = 0;
    }
    pump->speed = p1_pump_ramp_toward(pump->speed, turning ? (double)pump->setpoint_rpm : 0.0, dt_s);
    drive(pump, dt_s);
    add_ms(&pump->uptime_s, &pump->uptime_rem_ms, dt_ms);
    if (pump->speed > 0) {
        add_ms(&pump->run_s, &pump->run_rem_ms, dt_ms);
    }
    if (pump->state == PUMP_STARTING && pump->speed == pump->setpoint_rpm) {
        pump->state = PUMP_RUNNING;
    } else if (pump->state == PUMP_STOPPING && pump->speed == 0) {
        pump->state = PUMP_STOPPED;
    }
    if (pump->fault == FAULT_NONE) {
        detect_faults(pump, dt_ms);
    }
}

void p1_pump_controller_init(mcpb_pump1_t *pump)
{
    pump->deadman_ms = (uint32_t)(pump->config.deadman_s * 1000);
    pump->dry_run_ms = (uint32_t)(pump->config.dry_run_s * 1000);
    pump->state = PUMP_STOPPED;
    pump->setpoint_rpm = pump->config.default_setpoint_rpm;
    pump->speed = 0.0;
    pump->fault = FAULT_NONE;
    pump->fault_text[0] = '\0';
    p1_pump_physics_init(&pump->physics, pump->config.thermal_tau_s);
    pump->now_ms = pump->last_ms = pump->heard_ms = 0;
    pump->clock_started = 0;
    pump->uptime_s = pump->uptime_rem_ms = pump->run_s = pump->run_rem_ms = pump->dry_ms = 0;
    p1_pump_advance(pump);
}

void p1_pump_heard(mcpb_pump1_t *pump)
{
    pump->heard_ms = pump->now_ms;
}

static void command(mcpb_pump1_t *pump)
{
    p1_pump_heard(pump);
    p1_pump_advance(pump);
}

pump_refusal_t p1_pump_check_speed(json_span_t speed)
{
    json_kind_t kind = p1_json_kind(speed);
    double v;
    if (kind != JSON_INT && kind != JSON_FLOAT) {
        return p1_pump_refusal(REFUSE_SPEED_NOT_NUMBER, speed);
    }
    v = p1_json_number_value(speed);
    if (kind == JSON_FLOAT && !(isfinite(v) && v == floor(v))) {
        return p1_pump_refusal(REFUSE_SPEED_NOT_WHOLE, speed);
    }
    if (v < PUMP_MIN_RPM || v > PUMP_MAX_RPM) {
        return p1_pump_refusal(REFUSE_SPEED_OUT_OF_RANGE, speed);
    }
    return p1_pump_refusal(REFUSE_NONE, speed);
}

static int given(json_span_t value)
{
    json_kind_t kind = p1_json_kind(value);
    return kind != JSON_ABSENT && kind != JSON_NULL;
}

void p1_pump_get_status(mcpb_pump1_t *pump)
{
    command(pump);
}

pump_refusal_t p1_pump_start(mcpb_pump1_t *pump, json_span_t speed)
{
    command(pump);
    if (given(speed)) {
        pump_refusal_t refusal = p1_pump_check_speed(speed);
        if (refusal.kind != REFUSE_NONE) {
            return refusal;
        }
    }
    if (pump->fault != FAULT_NONE) {
        return p1_pump_refusal(REFUSE_IN_FAULT, NOTHING);
    }
    if (given(speed)) {
        pump->setpoint_rpm = (int)p1_json_number_value(speed);
    }
    if (pump->state == PUMP_STOPPED || pump->state == PUMP_STOPPING) {
        pump->state = PUMP_STARTING;
    }
    return p1_pump_refusal(REFUSE_NONE, NOTHING);
}

pump_refusal_t p1_pump_set_speed(mcpb_pump1_t *pump, json_span_t speed)
{
    pump_refusal_t refusal;
    command(pump);
    refusal = p1_pump_check_speed(speed);
    if (refusal.kind != REFUSE_NONE) {
        return refusal;
    }
    if (pump->fault != FAULT_NONE) {
        return p1_pump_refusal(REFUSE_IN_FAULT, NOTHING);
    }
    if (pump->state == PUMP_STOPPED || pump->state == PUMP_STOPPING) {
        return p1_pump_refusal(REFUSE_NOT_RUNNING, NOTHING);
    }
    pump->setpoint_rpm = (int)p1_json_number_value(speed);
    return refusal;
}

void p1_pump_stop(mcpb_pump1_t *pump)
{
    command(pump);
    if (pump->state == PUMP_STARTING || pump->state == PUMP_RUNNING) {
        pump->state = pump->speed == 0 ? PUMP_STOPPED : PUMP_STOPPING;
    }
}

pump_refusal_t p1_pump_reset_fault(mcpb_pump1_t *pump)
{
    command(pump);
    switch (pump->fault) {
    case FAULT_NONE:
        return p1_pump_refusal(REFUSE_NONE, NOTHING);
    case FAULT_OVERTEMP:
        if (!(pump->reading.valid & MCPB_PUMP1_TEMP_VALID)) {
            return p1_pump_refusal(REFUSE_OVERTEMP_UNREADABLE, NOTHING);
        }
        if (pump->reading.motor_temp_c >= PUMP_RESET_C) {
            return p1_pump_refusal(REFUSE_OVERTEMP_PERSISTS, NOTHING);
        }
        break;
    case FAULT_SENSOR_FAILURE:
        if (sensors_failed(pump)) {
            return p1_pump_refusal(REFUSE_SENSOR_PERSISTS, NOTHING);
        }
        break;
    case FAULT_DRY_RUN:
        if (dry_run_persists(pump)) {
            return p1_pump_refusal(REFUSE_DRY_RUN_PERSISTS, NOTHING);
        }
        break;
    default:
        break; /* link_lost: this very request shows the link is back */
    }
    pump->fault = FAULT_NONE;
    pump->fault_text[0] = '\0';
    pump->state = pump->speed == 0 ? PUMP_STOPPED : PUMP_STOPPING;
    return p1_pump_refusal(REFUSE_NONE, NOTHING);
}

void p1_pump_write_status(const mcpb_pump1_t *pump, json_sink_t *sink)
{
    /* the readings: flow and pressure floored at 0 (a minimum-0 schema), then round(value, digits) */
    static const char *const names[3] = {",\"flow_lpm\":", ",\"pressure_bar\":", ",\"motor_temp_c\":"};
    static const unsigned char digits[3] = {1, 2, 1};
    const mcpb_pump1_reading_t *r = &pump->reading;
    double values[3];
    int i;
    values[0] = r->flow_lpm;
    values[1] = r->pressure_bar;
    values[2] = r->motor_temp_c;
    p1_json_sink_text(sink, "{\"state\":");
    p1_json_sink_quoted(sink, p1_pump_state_name(pump->state));
    p1_json_sink_text(sink, ",\"speed_rpm\":");
    p1_json_sink_int(sink, (long)(pump->speed + 0.5));
    p1_json_sink_text(sink, ",\"setpoint_rpm\":");
    p1_json_sink_int(sink, pump->setpoint_rpm);
    for (i = 0; i < 3; i++) {
        p1_json_sink_text(sink, names[i]);
        if (!(r->valid & (1u << i))) {
            p1_json_sink_text(sink, "null");
        } else {
            p1_json_float_rounded(sink, i < 2 && values[i] < 0.0 ? 0.0 : values[i], digits[i]);
        }
    }
    p1_json_sink_text(sink, ",\"run_hours\":");
    p1_json_float_rounded(sink, ((double)pump->run_s + pump->run_rem_ms / 1000.0) / 3600.0, 3);
    p1_json_sink_text(sink, ",\"fault\":");
    if (pump->fault == FAULT_NONE) {
        p1_json_sink_text(sink, "null");
    } else {
        p1_json_sink_text(sink, "{\"code\":");
        p1_json_sink_quoted(sink, p1_pump_fault_code(pump->fault));
        p1_json_sink_text(sink, ",\"text\":");
        p1_json_sink_quoted(sink, pump->fault_text);
        p1_json_sink_char(sink, '}');
    }
    p1_json_sink_text(sink, ",\"uptime_s\":");
    p1_json_sink_unsigned(sink, pump->uptime_s);
    p1_json_sink_char(sink, '}');
}
