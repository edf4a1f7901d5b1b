/* Set-up, time and the small accessors of mcpb_pump1.h. */
#include <string.h>

#include "mcpb_pump1.h"
#include "pump1_schema.h"
#include "pump_controller.h"
#include "pump_physics.h"

void mcpb_pump1_config_default(mcpb_pump1_config_t *config)
{
    config->deadman_s = 90;
    config->dry_run_s = 5;
    config->default_setpoint_rpm = 1450;
    config->thermal_tau_s = PUMP_THERMAL_TAU_S;
    config->frame_max = 4096;
    config->firmware_version = MCPB_PUMP1_FIRMWARE_VERSION;
    config->hardware = NULL;
}

/* The largest tool with the room dispatcher.tool_budget keeps for the envelope and the id. */
static size_t least_frame_max(void)
{
    size_t largest = 0;
    int i;
    for (i = 0; i < PUMP1_TOOL_COUNT; i++) {
        largest = pump1_tools[i].size > largest ? pump1_tools[i].size : largest;
    }
    return largest + 96 + 32;
}

/* A value the MicroPython config would refuse falls back to its default. */
static void settle(mcpb_pump1_config_t *config)
{
    mcpb_pump1_config_t defaults;
    const mcpb_pump1_hardware_t *hw = config->hardware;
    mcpb_pump1_config_default(&defaults);
    if (!(config->deadman_s > 0 && config->deadman_s < 2000000)) {
        config->deadman_s = defaults.deadman_s;
    }
    if (!(config->dry_run_s >= 0 && config->dry_run_s < 2000000)) {
        config->dry_run_s = defaults.dry_run_s;
    }
    if (config->default_setpoint_rpm < PUMP_MIN_RPM || config->default_setpoint_rpm > PUMP_MAX_RPM) {
        config->default_setpoint_rpm = defaults.default_setpoint_rpm;
    }
    if (!(config->thermal_tau_s > 0)) {
        config->thermal_tau_s = defaults.thermal_tau_s;
    }
    if (config->frame_max < least_frame_max()) {
        config->frame_max = least_frame_max();
    }
    if (config->firmware_version == NULL) {
        config->firmware_version = defaults.firmware_version;
    }
    if (hw != NULL && (hw->drive == NULL || hw->read == NULL)) {
        config->hardware = NULL;
    }
}

void mcpb_pump1_init(mcpb_pump1_t *pump, const mcpb_pump1_config_t *config)
{
    memset(pump, 0, sizeof *pump);
    if (config != NULL) {
        pump->config = *config;
    } else {
        mcpb_pump1_config_default(&pump->config);
    }
    settle(&pump->config);
    p1_pump_controller_init(pump);
}

void mcpb_pump1_clock(void *pump_object, uint32_t now_ms)
{
    mcpb_pump1_t *pump = (mcpb_pump1_t *)pump_object;
    if (!pump->clock_started) {
        /* the first time told (a tick or a command) sets the time base: the board may have been up a while */
        pump->clock_started = 1;
        pump->last_ms = pump->heard_ms = now_ms;
    }
    pump->now_ms = now_ms;
}

void mcpb_pump1_tick(void *pump_object, uint32_t now_ms)
{
    mcpb_pump1_clock(pump_object, now_ms);
    p1_pump_advance((mcpb_pump1_t *)pump_object);
}

void mcpb_pump1_new_link(void *pump_object)
{
    ((mcpb_pump1_t *)pump_object)->cache_used = 0;
}

void mcpb_pump1_heard(void *pump_object)
{
    p1_pump_heard((mcpb_pump1_t *)pump_object);
}

int mcpb_pump1_at_rest(const mcpb_pump1_t *pump)
{
    return pump->speed == 0 && (pump->state == PUMP_STOPPED || pump->state == PUMP_FAULT);
}

const char *mcpb_pump1_schema_hash(void)
{
    return pump1_schema_hash;
}

void mcpb_pump1_inject(mcpb_pump1_t *pump, mcpb_pump1_condition_t condition)
{
    pump->physics.injected |= (unsigned)condition;
}

void mcpb_pump1_clear(mcpb_pump1_t *pump, mcpb_pump1_condition_t condition)
{
    pump->physics.injected &= ~(unsigned)condition;
}

const mcpb_pump1_counts_t *mcpb_pump1_counts(const mcpb_pump1_t *pump)
{
    return &pump->counts;
}
