/*
 * The pump-1 physics model, the constants of device/micropython/pump1/physics.py (which the
 * simulator also runs): the same arithmetic in the same order, so the same inputs give the same
 * doubles.
 */
#ifndef MCPB_PUMP1_PHYSICS_H
#define MCPB_PUMP1_PHYSICS_H

#include "mcpb_pump1.h"

#define PUMP_MIN_RPM 300
#define PUMP_MAX_RPM 2900
#define PUMP_RAMP_RPM_PER_S 600
#define PUMP_RATED_FLOW_LPM 120.0
#define PUMP_RATED_PRESSURE_BAR 4.0
#define PUMP_AMBIENT_C 25.0
#define PUMP_TRIP_C 95.0
#define PUMP_RESET_C 85.0
#define PUMP_TEMP_RISE_AT_MAX_C 45.0    /* steady rise at full speed: 70 degC, below the trip */
#define PUMP_THERMAL_TAU_S 60.0
#define PUMP_BLOCKED_COOLING_EXTRA_C 80.0 /* what an injected overtemp adds to the steady state */
#define PUMP_DRY_PRESSURE_BAR 0.05      /* a dry pump churns air: next to no head */

/* The flow the pump gives at a speed, with water at its suction side: one function for the model,
 * the dry-run check and the dry-run text, the same doubles for all three. */
double p1_pump_expected_flow(double speed_rpm);

/* The next speed of a ramp from current toward target, at most RAMP_RPM_PER_S * dt_s away. */
double p1_pump_ramp_toward(double current, double target, double dt_s);

void p1_pump_physics_init(mcpb_pump1_physics_t *physics, double thermal_tau_s);

/* The motor follows the (already ramped) speed reference for dt_s seconds. */
void p1_pump_physics_step(mcpb_pump1_physics_t *physics, double dt_s, double drive_rpm);

/* What the sensors read: the sensor_failure condition leaves flow and pressure invalid. */
void p1_pump_physics_read(const mcpb_pump1_physics_t *physics, mcpb_pump1_reading_t *reading);

#endif
