/* The pump-1 physics model (pump_physics.h). */
#include "pump_physics.h"

#include <math.h>

double p1_pump_ramp_toward(double current, double target, double dt_s)
{
    double step = PUMP_RAMP_RPM_PER_S * dt_s;
    /* |target - current| and current - step round as the two branches of physics.py do */
    if (fabs(target - current) <= step) {
        return target;
    }
    return target > current ? current + step : current - step;
}

double p1_pump_expected_flow(double speed_rpm)
{
    return PUMP_RATED_FLOW_LPM * speed_rpm / PUMP_MAX_RPM;
}

void p1_pump_physics_init(mcpb_pump1_physics_t *physics, double thermal_tau_s)
{
    physics->speed_rpm = 0.0;
    physics->motor_temp_c = PUMP_AMBIENT_C;
    physics->thermal_tau_s = thermal_tau_s;
    physics->injected = 0;
}

void p1_pump_physics_step(mcpb_pump1_physics_t *physics, double dt_s, double drive_rpm)
{
    double load, steady;
    if (dt_s <= 0) {
        return;
    }
    physics->speed_rpm = drive_rpm < 0 ? 0.0 : drive_rpm > PUMP_MAX_RPM ? (double)PUMP_MAX_RPM : drive_rpm;
    load = physics->speed_rpm / PUMP_MAX_RPM;
    steady = PUMP_AMBIENT_C + PUMP_TEMP_RISE_AT_MAX_C * load * load;
    if (physics->injected & MCPB_PUMP1_OVERTEMP) {
        steady += PUMP_BLOCKED_COOLING_EXTRA_C;
    }
    physics->motor_temp_c += (steady - physics->motor_temp_c) * (1.0 - exp(-dt_s / physics->thermal_tau_s));
}

void p1_pump_physics_read(const mcpb_pump1_physics_t *physics, mcpb_pump1_reading_t *reading)
{
    double ratio = physics->speed_rpm / PUMP_MAX_RPM;
    reading->valid = MCPB_PUMP1_TEMP_VALID;
    reading->motor_temp_c = physics->motor_temp_c;
    reading->flow_lpm = 0.0;
    reading->pressure_bar = 0.0;
    if (physics->injected & MCPB_PUMP1_SENSOR_FAILURE) {
        return;
    }
    reading->valid |= MCPB_PUMP1_FLOW_VALID | MCPB_PUMP1_PRESSURE_VALID;
    if (physics->injected & MCPB_PUMP1_DRY_RUN) {
        reading->flow_lpm = 0.0;
        reading->pressure_bar = PUMP_DRY_PRESSURE_BAR * ratio;
        return;
    }
    reading->flow_lpm = p1_pump_expected_flow(physics->speed_rpm);
    reading->pressure_bar = PUMP_RATED_PRESSURE_BAR * ratio * ratio;
}
