/*
 * The pump-1 state machine of device/micropython/pump1/controller.py: setpoint, ramp, faults and
 * dead-man (its status object is the text P1_STATUS, pump_refusal.h). Commands first bring the
 * model up to the last time the pump was told (mcpb_pump1_tick, mcpb_pump1_clock) and count as
 * contact with the gateway.
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

enum pump_tool { TOOL_GET_STATUS, TOOL_START, TOOL_SET_SPEED, TOOL_STOP, TOOL_RESET_FAULT }; /* schema order */

/* A stopped pump from its settled config; the rest of *pump is zero. */
void p1_pump_controller_init(mcpb_pump1_t *pump);

/* Advance the model to pump->now_ms: ramp, hardware, counters, transitions, faults. */
void p1_pump_advance(mcpb_pump1_t *pump);

/* Contact with the gateway now (inline: one store, smaller than the call). */
static inline void p1_pump_heard(mcpb_pump1_t *pump)
{
    pump->heard_ms = pump->now_ms;
}

/*
 * Carry out a tool call (`arguments`: an object or absent): the argument checks of tools.py, then
 * the command of controller.py. Returns the refusal's text and sets *quoted to the value it quotes,
 * or returns NULL when the command was carried out (a text, not a pump_refusal_t: a returned
 * struct costs a store of each member on every way out).
 */
const char *p1_pump_call(mcpb_pump1_t *pump, int tool, json_span_t arguments, json_span_t *quoted);

#endif
