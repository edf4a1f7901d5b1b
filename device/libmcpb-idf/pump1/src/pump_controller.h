/*
 * The pump-1 state machine of device/micropython/pump1/controller.py: setpoint, ramp, faults,
 * dead-man and the status object. Commands first bring the model up to the last time the pump
 * was told (mcpb_pump1_tick) and count as contact with the gateway.
 */
#ifndef MCPB_PUMP1_CONTROLLER_H
#define MCPB_PUMP1_CONTROLLER_H

#include "json_out.h"
#include "json_scan.h"
#include "mcpb_pump1.h"
#include "pump_refusal.h"

enum pump_state { PUMP_STOPPED, PUMP_STARTING, PUMP_RUNNING, PUMP_STOPPING, PUMP_FAULT };
enum pump_fault { FAULT_NONE, FAULT_LINK_LOST, FAULT_SENSOR_FAILURE, FAULT_OVERTEMP, FAULT_DRY_RUN };

#define PUMP_DRY_FLOW_PERCENT 20 /* flow below this share of the expected flow counts as running dry */

const char *p1_pump_state_name(int state);
const char *p1_pump_fault_code(int fault);

void p1_pump_controller_init(mcpb_pump1_t *pump);

/* Advance the model to pump->now_ms: ramp, hardware, counters, transitions, faults. */
void p1_pump_advance(mcpb_pump1_t *pump);

void p1_pump_heard(mcpb_pump1_t *pump);

/* Commands: a refusal, or kind REFUSE_NONE when the command was carried out. */
void p1_pump_get_status(mcpb_pump1_t *pump);
pump_refusal_t p1_pump_start(mcpb_pump1_t *pump, json_span_t speed);     /* absent or null: the setpoint */
pump_refusal_t p1_pump_set_speed(mcpb_pump1_t *pump, json_span_t speed); /* null is refused */
void p1_pump_stop(mcpb_pump1_t *pump);
pump_refusal_t p1_pump_reset_fault(mcpb_pump1_t *pump);

/* The device's own limits on a speed value of any JSON kind (absent counts as null). */
pump_refusal_t p1_pump_check_speed(json_span_t speed);

/* The names of the sensors that read nothing valid, joined by " and ". */
void p1_pump_write_failed_sensors(const mcpb_pump1_t *pump, json_sink_t *sink);

/* The status object of the tools' outputSchema, compact JSON. */
void p1_pump_write_status(const mcpb_pump1_t *pump, json_sink_t *sink);

#endif
