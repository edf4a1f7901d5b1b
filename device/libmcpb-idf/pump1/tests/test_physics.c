/*
 * Physics, ramp and dead-man against values taken from device/micropython/pump1/physics.py and
 * controller.py run under CPython with the same inputs (the doubles are the same bit for bit).
 */
#include <string.h>

#include "pump_physics.h"
#include "test_support.h"

#define F fixture_t *f = (fixture_t *)*state

static void the_ramp_moves_600_rpm_per_second(void **state)
{
    (void)state;
    /* ramp_toward(0.0, 2900, 0.1), (1000.0, 300, 0.25), (1000.0, 1100, 0.5) */
    assert_true(p1_pump_ramp_toward(0.0, 2900, 0.1) == 60.0);
    assert_true(p1_pump_ramp_toward(1000.0, 300, 0.25) == 850.0);
    assert_true(p1_pump_ramp_toward(1000.0, 1100, 0.5) == 1100.0);
}

static void the_model_follows_the_affinity_laws_and_the_thermal_lag(void **state)
{
    /* PumpPhysics().step(dt, rpm) in sequence; then speed, temperature, flow, pressure (repr) */
    static const struct {
        double dt_s, rpm, temp, flow, pressure;
    } steps[] = {
        {0.1, 60.0, 25.00003207789833, 2.4827586206896552, 0.0017122473246135553},
        {0.5, 1450.0, 25.093392269505884, 60.0, 1.0},
        {2.0, 2900.0, 26.56560598503638, 120.0, 4.0},
        {60.0, 2900.0, 54.02137940215494, 120.0, 4.0},
    };
    mcpb_pump1_physics_t physics;
    mcpb_pump1_reading_t reading;
    size_t i;
    (void)state;
    p1_pump_physics_init(&physics, PUMP_THERMAL_TAU_S);
    for (i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        p1_pump_physics_step(&physics, steps[i].dt_s, steps[i].rpm);
        p1_pump_physics_read(&physics, &reading);
        assert_true(physics.speed_rpm == steps[i].rpm);
        assert_true(reading.motor_temp_c == steps[i].temp);
        assert_true(reading.flow_lpm == steps[i].flow);
        assert_true(reading.pressure_bar == steps[i].pressure);
    }
}

static void a_start_to_full_speed_takes_about_five_seconds(void **state)
{
    /* PumpController(SimulatedHardware()).start(2900), then tick() every 100 ms: the status at
     * 1 s, 4.8 s, 4.9 s and 10 s */
    static const char *const expected[] = {
        "{\"state\":\"starting\",\"speed_rpm\":600,\"setpoint_rpm\":2900,\"flow_lpm\":24.8,\"pressure_bar\":0.17,"
        "\"motor_temp_c\":25.0,\"run_hours\":0.0,\"fault\":null,\"uptime_s\":1}",
        "{\"state\":\"starting\",\"speed_rpm\":2880,\"setpoint_rpm\":2900,\"flow_lpm\":119.2,\"pressure_bar\":3.95,"
        "\"motor_temp_c\":26.2,\"run_hours\":0.001,\"fault\":null,\"uptime_s\":4}",
        "{\"state\":\"running\",\"speed_rpm\":2900,\"setpoint_rpm\":2900,\"flow_lpm\":120.0,\"pressure_bar\":4.0,"
        "\"motor_temp_c\":26.3,\"run_hours\":0.001,\"fault\":null,\"uptime_s\":4}",
        "{\"state\":\"running\",\"speed_rpm\":2900,\"setpoint_rpm\":2900,\"flow_lpm\":120.0,\"pressure_bar\":4.0,"
        "\"motor_temp_c\":29.8,\"run_hours\":0.003,\"fault\":null,\"uptime_s\":10}",
    };
    static const uint32_t after_ms[] = {1000, 3800, 100, 5100};
    size_t i;
    F;
    mcpb_pump1_init(&f->pump, NULL);
    mcpb_pump1_tick(&f->pump, 0); /* the CPython run starts its clock at 0 */
    call_tool(f, 1, "start", "{\"speed_rpm\":2900}");
    for (i = 0; i < 4; i++) {
        run_for(f, after_ms[i]);
        /* get_status counts as contact but does not move the model: read it through the answer */
        call_tool(f, 2 + (int)i, "get_status", NULL); /* a new id: a repeated one is answered from the cache */
        assert_answer_has(f, expected[i]);
    }
}

static void the_dead_man_stops_a_silent_pump(void **state)
{
    F;
    call_tool(f, 1, "start", NULL);
    run_for(f, 90000);
    assert_int_equal(f->pump.fault, 0); /* 90 s of silence is still allowed */
    run_for(f, 100);
    call_tool(f, 2, "get_status", NULL);
    assert_answer_has(f, "\"fault\":{\"code\":\"link_lost\",\"text\":\"No request or ping from the gateway for 90 s "
                         "while the motor turned, so the device stopped it. Check the network and the gateway, then "
                         "call reset_fault and start.\"}");
    assert_answer_has(f, "\"structuredContent\":{\"state\":\"fault\",\"speed_rpm\":1390,");
    run_for(f, 3000);
    assert_true(mcpb_pump1_at_rest(&f->pump));
    call_tool(f, 3, "reset_fault", NULL);
    assert_answer_has(f, "\"structuredContent\":{\"state\":\"stopped\",\"speed_rpm\":0,");
}

static void any_message_or_ping_feeds_the_dead_man(void **state)
{
    mcpb_pump1_config_t config;
    int i;
    F;
    mcpb_pump1_config_default(&config);
    config.deadman_s = 10;
    mcpb_pump1_init(&f->pump, &config);
    mcpb_pump1_tick(&f->pump, 0xFFFFF000u); /* the 32-bit clock wraps during the test */
    call_tool(f, 1, "start", NULL);
    for (i = 0; i < 5; i++) {
        run_for(f, 8000);
        if (i % 2 == 0) {
            mcpb_pump1_heard(&f->pump);
        } else {
            ask(f, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}");
        }
    }
    assert_int_equal(f->pump.fault, 0);
    run_for(f, 10100);
    call_tool(f, 2, "get_status", NULL);
    assert_answer_has(f, "No request or ping from the gateway for 10 s while the motor turned");
}

static void a_command_acts_at_the_time_it_is_handled(void **state)
{
    F;
    call_tool(f, 1, "start", "{\"speed_rpm\":1500}");
    mcpb_pump1_clock(&f->pump, 1050); /* 50 ms later, no tick between: the ramp has begun */
    call_tool(f, 2, "stop", NULL);
    assert_answer_has(f, "\"structuredContent\":{\"state\":\"stopping\",");
}

static void the_dead_man_text_writes_its_seconds_as_percent_g(void **state)
{
    mcpb_pump1_config_t config;
    F;
    mcpb_pump1_config_default(&config);
    config.deadman_s = 2.5;
    mcpb_pump1_init(&f->pump, &config);
    mcpb_pump1_tick(&f->pump, 0);
    call_tool(f, 1, "start", NULL);
    run_for(f, 2600);
    call_tool(f, 2, "get_status", NULL);
    assert_answer_has(f, "No request or ping from the gateway for 2.5 s while the motor turned");
}

static void a_stopped_pump_never_trips_the_dead_man(void **state)
{
    F;
    run_for(f, 200000);
    call_tool(f, 1, "get_status", NULL);
    assert_answer_has(f, "\"structuredContent\":{\"state\":\"stopped\"");
    assert_answer_has(f, "\"fault\":null,\"uptime_s\":200}");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_ramp_moves_600_rpm_per_second),
        cmocka_unit_test(the_model_follows_the_affinity_laws_and_the_thermal_lag),
        cmocka_unit_test_setup_teardown(a_start_to_full_speed_takes_about_five_seconds, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(the_dead_man_stops_a_silent_pump, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(any_message_or_ping_feeds_the_dead_man, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(a_stopped_pump_never_trips_the_dead_man, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(a_command_acts_at_the_time_it_is_handled, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(the_dead_man_text_writes_its_seconds_as_percent_g, fixture_setup,
                                        fixture_teardown),
    };
    return cmocka_run_group_tests_name("pump1 physics", tests, NULL, NULL);
}
