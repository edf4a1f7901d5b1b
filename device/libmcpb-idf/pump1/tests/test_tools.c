/* The five tools: results, argument checks and refusals of device/micropython/pump1/tools.py. */
#include <stdio.h>
#include <string.h>

#include "test_support.h"

#define F fixture_t *f = (fixture_t *)*state
#define SPEED_RULE "speed_rpm must be a whole number of rpm between 300 and 2900, got "

/* The answer is an isError result with exactly this text (as it stands inside the JSON string). */
static void assert_refused(const fixture_t *f, int id, const char *text)
{
    char expected[1024];
    snprintf(expected, sizeof expected,
             "{\"jsonrpc\":\"2.0\",\"id\":%d,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"%s\"}],"
             "\"isError\":true}}",
             id, text);
    assert_string_equal(f->answer, expected);
}

static void get_status_returns_the_status_twice(void **state)
{
    F;
    call_tool(f, 1, "get_status", NULL);
    assert_string_equal(
        f->answer,
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"{\\\"state\\\":"
        "\\\"stopped\\\",\\\"speed_rpm\\\":0,\\\"setpoint_rpm\\\":1450,\\\"flow_lpm\\\":0.0,\\\"pressure_bar\\\":0.0,"
        "\\\"motor_temp_c\\\":25.0,\\\"run_hours\\\":0.0,\\\"fault\\\":null,\\\"uptime_s\\\":0}\"}],"
        "\"structuredContent\":{\"state\":\"stopped\",\"speed_rpm\":0,\"setpoint_rpm\":1450,\"flow_lpm\":0.0,"
        "\"pressure_bar\":0.0,\"motor_temp_c\":25.0,\"run_hours\":0.0,\"fault\":null,\"uptime_s\":0}}}");
    call_tool(f, 2, "get_status", "{}");
    assert_answer_has(f, "\"structuredContent\":{\"state\":\"stopped\"");
    call_tool(f, 3, "get_status", "null");
    assert_answer_has(f, "\"structuredContent\":{\"state\":\"stopped\"");
}

static void tools_without_arguments_refuse_one(void **state)
{
    static const char *const tools[] = {"get_status", "stop", "reset_fault"};
    int i;
    F;
    for (i = 0; i < 3; i++) {
        call_tool(f, i, tools[i], "{\"x\":1,\"y\":2}");
        assert_refused(f, i, "Unknown argument x: this tool takes no arguments.");
    }
    call_tool(f, 4, "start", "{\"speed_rpm\":1200,\"fast\":true}");
    assert_refused(f, 4, "Unknown argument fast: this tool takes only speed_rpm.");
    call_tool(f, 5, "set_speed", "{\"sp\\u00e9ed\":1}");
    assert_refused(f, 5, "Unknown argument sp\\u00e9ed: this tool takes only speed_rpm.");
}

static void unknown_tools_and_bad_arguments_are_protocol_errors(void **state)
{
    F;
    call_tool(f, 1, "open_valve", NULL);
    assert_string_equal(f->answer, "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32602,\"message\":\"Unknown "
                                   "tool: \\\"open_valve\\\". This device offers get_status, start, set_speed, stop, "
                                   "reset_fault\"}}");
    ask(f, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{}}");
    assert_answer_has(f, "Unknown tool: null. This device");
    call_tool(f, 3, "start", "[1200]");
    assert_string_equal(f->answer, "{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-32602,\"message\":\"Invalid "
                                   "params: arguments must be an object\"}}");
}

static void start_ramps_to_the_setpoint(void **state)
{
    F;
    call_tool(f, 1, "start", NULL);
    assert_answer_has(f, "\"structuredContent\":{\"state\":\"starting\",\"speed_rpm\":0,\"setpoint_rpm\":1450,");
    run_for(f, 1000);
    call_tool(f, 2, "start", "{\"speed_rpm\":1200.0}");
    assert_answer_has(f, "{\"state\":\"starting\",\"speed_rpm\":600,\"setpoint_rpm\":1200,\"flow_lpm\":24.8,"
                         "\"pressure_bar\":0.17,");
    run_for(f, 1000);
    call_tool(f, 3, "get_status", NULL);
    assert_answer_has(f, "{\"state\":\"running\",\"speed_rpm\":1200,\"setpoint_rpm\":1200,\"flow_lpm\":49.7,"
                         "\"pressure_bar\":0.68,");
}

static void start_checks_the_speed(void **state)
{
    static const struct {
        const char *arguments;
        const char *text;
    } cases[] = {
        {"{\"speed_rpm\":null}", SPEED_RULE "null"},
        {"{\"speed_rpm\":\"1200\"}", SPEED_RULE "\\\"1200\\\""},
        {"{\"speed_rpm\":true}", SPEED_RULE "true"},
        {"{\"speed_rpm\":[1,{\"a\":2}]}", SPEED_RULE "[1, {\\\"a\\\": 2}]"},
        {"{\"speed_rpm\":1200.5}", SPEED_RULE "1200.5"},
        {"{\"speed_rpm\":1e-7}", SPEED_RULE "1e-07"},
        {"{\"speed_rpm\":1e400}", SPEED_RULE "inf"},
        {"{\"speed_rpm\":NaN}", SPEED_RULE "nan"},
        {"{\"speed_rpm\":5000}", "speed_rpm 5000 is out of range: this pump runs between 300 and 2900 rpm."},
        {"{\"speed_rpm\":299}", "speed_rpm 299 is out of range: this pump runs between 300 and 2900 rpm."},
        {"{\"speed_rpm\":2901.0}", "speed_rpm 2901 is out of range: this pump runs between 300 and 2900 rpm."},
        {"{\"speed_rpm\":-0}", "speed_rpm 0 is out of range: this pump runs between 300 and 2900 rpm."},
        {"{\"speed_rpm\":1.5e20}",
         "speed_rpm 150000000000000000000 is out of range: this pump runs between 300 and 2900 rpm."},
        {"{\"speed_rpm\":1200,\"speed_rpm\":3000}",
         "speed_rpm 3000 is out of range: this pump runs between 300 and 2900 rpm."},
    };
    size_t i;
    F;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        call_tool(f, (int)i, "start", cases[i].arguments);
        assert_refused(f, (int)i, cases[i].text);
    }
    call_tool(f, 99, "start", "{\"speed_rpm\":12E2}");
    assert_answer_has(f, "\"state\":\"starting\",\"speed_rpm\":0,\"setpoint_rpm\":1200,");
}

static void set_speed_changes_only_a_running_pump(void **state)
{
    F;
    call_tool(f, 1, "set_speed", "{}");
    assert_refused(f, 1, "set_speed needs speed_rpm, the new speed in rpm (300 to 2900).");
    call_tool(f, 2, "set_speed", "{\"speed_rpm\":1000}");
    assert_refused(f, 2, "The pump is stopped; set_speed only changes a running pump. Call start with speed_rpm to "
                         "run it.");
    call_tool(f, 3, "set_speed", "{\"speed_rpm\":null}");
    assert_refused(f, 3, SPEED_RULE "null");
    call_tool(f, 4, "start", NULL);
    run_for(f, 500);
    call_tool(f, 5, "set_speed", "{\"speed_rpm\":2900}");
    assert_answer_has(f, "\"state\":\"starting\",\"speed_rpm\":300,\"setpoint_rpm\":2900,");
    call_tool(f, 6, "set_speed", "{\"speed_rpm\":100}");
    assert_refused(f, 6, "speed_rpm 100 is out of range: this pump runs between 300 and 2900 rpm.");
    call_tool(f, 7, "stop", NULL);
    call_tool(f, 8, "set_speed", "{\"speed_rpm\":1000}");
    assert_refused(f, 8, "The pump is stopping; set_speed only changes a running pump. Call start with speed_rpm to "
                         "run it.");
}

static void stop_ramps_down_and_keeps_the_setpoint(void **state)
{
    F;
    call_tool(f, 1, "stop", NULL);
    assert_answer_has(f, "\"structuredContent\":{\"state\":\"stopped\"");
    call_tool(f, 2, "start", "{\"speed_rpm\":900}");
    run_for(f, 3000);
    call_tool(f, 3, "stop", NULL);
    assert_answer_has(f, "\"structuredContent\":{\"state\":\"stopping\",\"speed_rpm\":900,\"setpoint_rpm\":900,");
    run_for(f, 1500);
    call_tool(f, 4, "get_status", NULL);
    assert_answer_has(f, "\"structuredContent\":{\"state\":\"stopped\",\"speed_rpm\":0,\"setpoint_rpm\":900,");
    call_tool(f, 5, "start", NULL);
    assert_answer_has(f, "\"structuredContent\":{\"state\":\"starting\",\"speed_rpm\":0,\"setpoint_rpm\":900,");
}

static void a_fault_refuses_start_until_reset(void **state)
{
    F;
    call_tool(f, 1, "start", "{\"speed_rpm\":1500}");
    run_for(f, 5000);
    mcpb_pump1_inject(&f->pump, MCPB_PUMP1_SENSOR_FAILURE);
    run_for(f, 100);
    call_tool(f, 2, "get_status", NULL);
    assert_answer_has(f, "\"flow_lpm\":null,\"pressure_bar\":null,");
    assert_answer_has(f, "\"fault\":{\"code\":\"sensor_failure\",\"text\":\"Sensor flow and pressure reads nothing "
                         "valid (open or shorted loop), so the device stopped the pump. Check the sensor wiring, then "
                         "call reset_fault.\"}");
    call_tool(f, 3, "start", NULL);
    assert_refused(f, 3, "The pump is in fault sensor_failure: Sensor flow and pressure reads nothing valid (open or "
                         "shorted loop), so the device stopped the pump. Check the sensor wiring, then call "
                         "reset_fault.");
    call_tool(f, 4, "set_speed", "{\"speed_rpm\":1000}");
    assert_answer_has(f, "The pump is in fault sensor_failure:");
    call_tool(f, 5, "reset_fault", NULL);
    assert_refused(f, 5, "The sensor_failure fault persists: sensor flow and pressure still reads nothing valid. "
                         "Check its wiring, then call reset_fault again.");
    call_tool(f, 6, "stop", NULL);
    assert_answer_has(f, "\"structuredContent\":{\"state\":\"fault\"");
    mcpb_pump1_clear(&f->pump, MCPB_PUMP1_SENSOR_FAILURE);
    call_tool(f, 7, "reset_fault", NULL);
    assert_answer_has(f, "\"structuredContent\":{\"state\":\"stopping\"");
    assert_answer_has(f, "\"fault\":null");
}

static void overtemp_trips_and_resets_below_85(void **state)
{
    F;
    call_tool(f, 1, "start", "{\"speed_rpm\":2900}");
    mcpb_pump1_inject(&f->pump, MCPB_PUMP1_OVERTEMP);
    while (f->pump.fault == 0) {
        run_for(f, 100);
        mcpb_pump1_heard(&f->pump);
    }
    call_tool(f, 2, "get_status", NULL);
    assert_answer_has(f, "\"fault\":{\"code\":\"overtemp\",\"text\":\"Motor temperature 95.1 C is above the trip "
                         "limit of 95 C, so the drive stopped the pump. Let the motor cool below 85 C, then call "
                         "reset_fault.\"}");
    call_tool(f, 3, "reset_fault", NULL);
    assert_answer_has(f, "The overtemp fault persists: the motor is at 95.1 C, above the reset limit of 85 C. Let "
                         "it cool, then call reset_fault again.");
    mcpb_pump1_clear(&f->pump, MCPB_PUMP1_OVERTEMP);
    run_for(f, 60000);
    call_tool(f, 4, "reset_fault", NULL);
    assert_answer_has(f, "\"structuredContent\":{\"state\":\"stopped\"");
}

static void dry_run_trips_after_five_seconds(void **state)
{
    F;
    call_tool(f, 1, "start", "{\"speed_rpm\":1450}");
    run_for(f, 3000);
    mcpb_pump1_inject(&f->pump, MCPB_PUMP1_DRY_RUN);
    run_for(f, 4900);
    mcpb_pump1_heard(&f->pump);
    call_tool(f, 2, "get_status", NULL);
    assert_answer_has(f, "\"state\":\"running\"");
    run_for(f, 100);
    call_tool(f, 3, "get_status", NULL);
    assert_answer_has(f, "\"fault\":{\"code\":\"dry_run\",\"text\":\"Flow stayed below 20% of the expected 60 L/min "
                         "while running: the pump is running dry. Check priming and the suction side, then call "
                         "reset_fault.\"}");
    call_tool(f, 4, "reset_fault", NULL);
    assert_refused(f, 4, "The dry_run fault persists: the pump still has no water on its suction side. Prime it and "
                         "check the suction side, then call reset_fault again.");
    mcpb_pump1_clear(&f->pump, MCPB_PUMP1_DRY_RUN);
    call_tool(f, 5, "reset_fault", NULL);
    assert_answer_has(f, "\"fault\":null");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(get_status_returns_the_status_twice, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(tools_without_arguments_refuse_one, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(unknown_tools_and_bad_arguments_are_protocol_errors, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(start_ramps_to_the_setpoint, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(start_checks_the_speed, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(set_speed_changes_only_a_running_pump, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(stop_ramps_down_and_keeps_the_setpoint, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(a_fault_refuses_start_until_reset, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(overtemp_trips_and_resets_below_85, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(dry_run_trips_after_five_seconds, fixture_setup, fixture_teardown),
    };
    return cmocka_run_group_tests_name("pump1 tools", tests, NULL, NULL);
}
