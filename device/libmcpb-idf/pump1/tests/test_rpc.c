/* The JSON-RPC side of pump-1: the answers of device/micropython/mcpdevice/dispatcher.py. */
#include <stdio.h>
#include <string.h>

#include "test_support.h"

#define F fixture_t *f = (fixture_t *)*state

static void initialize_negotiates_the_version(void **state)
{
    F;
    ask(f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\"}}");
    assert_string_equal(f->answer,
                        "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":"
                        "{\"tools\":{\"listChanged\":false}},\"serverInfo\":{\"name\":\"pump-1\",\"version\":\"0.1.0\"},"
                        "\"instructions\":\"pump-1 is a centrifugal water pump on a variable-speed drive (300 to 2900 "
                        "rpm). Call get_status first. start runs it, set_speed changes the speed of a running pump, "
                        "stop ramps it down; the motor ramps at 600 rpm per second, so poll get_status to see it "
                        "arrive. A latched fault blocks start until reset_fault succeeds.\"}}");
    ask(f, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2099-01-01\"}}");
    assert_answer_has(f, "\"protocolVersion\":\"2025-11-25\"");
    ask(f, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"initialize\"}");
    assert_answer_has(f, "\"protocolVersion\":\"2025-11-25\"");
    ask(f, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2024-11-05\"}}");
    assert_answer_has(f, "\"protocolVersion\":\"2024-11-05\"");
}

/* serverInfo.version is json.dumps of the configured text: quotes, backslashes and control
 * characters escaped, as for any string of the answer. */
static void initialize_escapes_the_firmware_version(void **state)
{
    F;
    mcpb_pump1_config_t config;
    mcpb_pump1_config_default(&config);
    config.firmware_version = "1.0 \"beta\"\\\t\x01\x7f/";
    mcpb_pump1_init(&f->pump, &config);
    mcpb_pump1_tick(&f->pump, 1000);
    ask(f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}");
    assert_answer_has(f, "\"serverInfo\":{\"name\":\"pump-1\",\"version\":\"1.0 \\\"beta\\\"\\\\\\t\\u0001\\u007f/\"},"
                         "\"instructions\":\"pump-1 is a centrifugal");
}

static void ping_answers_an_empty_result(void **state)
{
    F;
    ask(f, "{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"ping\"}");
    assert_string_equal(f->answer, "{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"result\":{}}");
    ask(f, "  {\"method\" : \"ping\", \"id\" : -0 , \"jsonrpc\":\"2.0\"}\n");
    assert_string_equal(f->answer, "{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{}}");
}

static void notifications_and_responses_get_no_answer(void **state)
{
    F;
    assert_int_equal(ask(f, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}"), 0);
    assert_int_equal(ask(f, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{}}"), 0);
    assert_int_equal(ask(f, "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{}}"), 0);
    assert_int_equal(ask(f, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32000,\"message\":\"held\"}}"), 0);
    assert_int_equal(mcpb_pump1_counts(&f->pump)->requests, 0);
}

static void unknown_method_is_32601(void **state)
{
    F;
    ask(f, "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"resources/list\"}");
    assert_string_equal(f->answer, "{\"jsonrpc\":\"2.0\",\"id\":9,\"error\":{\"code\":-32601,\"message\":\"Method not "
                                   "found: resources/list. This device answers initialize, ping, tools/list and "
                                   "tools/call\"}}");
    ask(f, "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"caf\\u00e9\\n\"}");
    assert_answer_has(f, "Method not found: caf\\u00e9\\n. This");
}

static void malformed_json_is_a_parse_error(void **state)
{
    static const char *const frames[] = {
        "", "{", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"pi", "{\"id\":1,}", "{\"id\":01}", "{\"id\":1.}",
        "{\"a\":\"\\x\"}", "{\"a\":\"\\u12\"}", "{\"a\":\"\x01\"}", "{\"a\":\"\xff\"}", "{} {}", "nul", "[1,]",
        "{\"a\" 1}", "{'a':1}"};
    char expected[160];
    size_t i;
    F;
    for (i = 0; i < sizeof frames / sizeof frames[0]; i++) {
        ask(f, frames[i]);
        snprintf(expected, sizeof expected,
                 "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"Parse error: the frame "
                 "is not valid JSON (%u bytes)\"}}",
                 (unsigned)strlen(frames[i]));
        assert_string_equal(f->answer, expected);
    }
    assert_int_equal(mcpb_pump1_counts(&f->pump)->errors, sizeof frames / sizeof frames[0]);
}

static void nesting_deeper_than_16_is_a_parse_error(void **state)
{
    char frame[200];
    F;
    snprintf(frame, sizeof frame, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"x\":%s%s}",
             "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]");
    ask(f, frame);
    assert_answer_has(f, "-32700");
}

static void invalid_requests_are_32600(void **state)
{
    F;
    ask(f, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]");
    assert_string_equal(f->answer, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"Invalid "
                                   "Request: send one JSON-RPC object per frame, no batches\"}}");
    ask(f, "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}");
    assert_string_equal(f->answer, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"Invalid "
                                   "Request: id must be a string or an integer\"}}");
    ask(f, "{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"ping\"}");
    assert_answer_has(f, "id must be a string or an integer");
    ask(f, "{\"id\":\"a\",\"method\":\"ping\"}");
    assert_string_equal(f->answer, "{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"error\":{\"code\":-32600,\"message\":\"Invalid "
                                   "Request: needs \\\"jsonrpc\\\":\\\"2.0\\\" and a method\"}}");
    ask(f, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\",\"params\":[]}");
    assert_string_equal(f->answer, "{\"jsonrpc\":\"2.0\",\"id\":2,\"error\":{\"code\":-32602,\"message\":\"Invalid "
                                   "params: params must be an object\"}}");
}

static void tools_list_pages_with_cursors(void **state)
{
    static const char *const names[] = {"get_status", "start", "set_speed", "stop", "reset_fault"};
    char frame[160], expected[80];
    int page;
    F;
    for (page = 0; page < 5; page++) {
        if (page == 0) {
            snprintf(frame, sizeof frame, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}");
        } else {
            snprintf(frame, sizeof frame,
                     "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{\"cursor\":\"%d\"}}", page);
        }
        assert_true(ask(f, frame) <= 4096);
        snprintf(expected, sizeof expected, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"tools\":[{\"name\":\"%s\"",
                 names[page]);
        assert_int_equal(strncmp(f->answer, expected, strlen(expected)), 0);
        if (page < 4) {
            snprintf(expected, sizeof expected, "],\"nextCursor\":\"%d\"}}", page + 1);
        } else {
            snprintf(expected, sizeof expected, "}]}}");
        }
        assert_string_equal(f->answer + f->length - strlen(expected), expected);
    }
}

static void tools_list_refuses_unknown_cursors(void **state)
{
    F;
    ask(f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{\"cursor\":\"5\"}}");
    assert_string_equal(f->answer, "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32602,\"message\":\"Invalid "
                                   "params: unknown cursor \\\"5\\\"\"}}");
    ask(f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{\"cursor\":0}}");
    assert_answer_has(f, "unknown cursor 0\"");
    ask(f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{\"cursor\":{\"a\":[1,2.5]}}}");
    assert_answer_has(f, "unknown cursor {\\\"a\\\": [1, 2.5]}\"");
    ask(f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{\"cursor\":\"01\"}}");
    assert_answer_has(f, "{\"name\":\"start\"");
}

static void a_small_out_buffer_gives_a_negative_length(void **state)
{
    char small[16];
    const char *ping = "{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"ping\"}";
    const char *start = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"start\"}}";
    int n;
    F;
    n = mcpb_pump1_handle(&f->pump, ping, strlen(ping), small, sizeof small);
    assert_int_equal(n, -(int)strlen("{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"result\":{}}"));
    /* the call acted; its repeat is answered from the cache, without acting again */
    n = mcpb_pump1_handle(&f->pump, start, strlen(start), small, sizeof small);
    assert_true(n < 0);
    run_for(f, 1000);
    assert_int_equal(ask(f, start), -n);
    assert_answer_has(f, "\"state\\\":\\\"starting\\\",\\\"speed_rpm\\\":0,");
    assert_int_equal(mcpb_pump1_counts(&f->pump)->duplicates, 1);
}

static void an_oversize_frame_is_refused_with_its_id(void **state)
{
    const char *head = "{\"jsonrpc\":\"2.0\",\"id\":\"brk-7\",\"method\":\"tools/call\",\"par";
    char out[256];
    int n;
    F;
    n = mcpb_pump1_oversize(&f->pump, 5000, head, strlen(head), out, sizeof out);
    assert_true(n > 0);
    out[n] = '\0';
    assert_string_equal(out, "{\"jsonrpc\":\"2.0\",\"id\":\"brk-7\",\"error\":{\"code\":-32600,\"message\":\"Request "
                             "too large: 5000 bytes; this device accepts frames of at most 4096 bytes\"}}");
    n = mcpb_pump1_oversize(&f->pump, 5000, "{\"id\":42", 8, out, sizeof out);
    out[n] = '\0';
    assert_answer_has(f, ""); /* the fixture's answer is untouched */
    assert_non_null(strstr(out, "\"id\":null"));
}

static void a_repeated_call_is_answered_from_the_cache(void **state)
{
    const char *start =
        "{\"jsonrpc\":\"2.0\",\"id\":\"brk-1\",\"method\":\"tools/call\",\"params\":{\"name\":\"start\"}}";
    char first[ANSWER_CAP + 1];
    int id;
    F;
    ask(f, start);
    strcpy(first, f->answer);
    run_for(f, 2000);
    ask(f, start);
    assert_string_equal(f->answer, first);
    assert_int_equal(mcpb_pump1_counts(&f->pump)->duplicates, 1);
    /* the same id with other bytes is a new request */
    ask(f, "{\"jsonrpc\":\"2.0\",\"id\":\"brk-1\",\"method\":\"tools/call\",\"params\":{\"name\":\"stop\"}}");
    assert_answer_has(f, "stopping");
    /* four newer calls push it out */
    for (id = 0; id < 4; id++) {
        call_tool(f, id, "get_status", NULL);
    }
    ask(f, start);
    assert_string_not_equal(f->answer, first);
    assert_int_equal(mcpb_pump1_counts(&f->pump)->duplicates, 1);
    /* a new WebSocket connection empties the cache */
    strcpy(first, f->answer);
    mcpb_pump1_new_link(&f->pump);
    run_for(f, 500);
    ask(f, start);
    assert_string_not_equal(f->answer, first);
    assert_int_equal(mcpb_pump1_counts(&f->pump)->duplicates, 1);
}

/* A gateway's new initialize on the same link (MQTT after a missed heartbeat) keeps the cache: a
 * QoS 1 redelivery that arrives after it does not start a stopped pump again. */
static void the_cache_outlives_initialize(void **state)
{
    const char *initialize = "{\"jsonrpc\":\"2.0\",\"id\":\"brk-1\",\"method\":\"initialize\"}";
    const char *start = "{\"jsonrpc\":\"2.0\",\"id\":\"brk-2\",\"method\":\"tools/call\",\"params\":{\"name\":"
                        "\"start\",\"arguments\":{\"speed_rpm\":1200}}}";
    char first[ANSWER_CAP + 1];
    F;
    ask(f, initialize);
    ask(f, start);
    strcpy(first, f->answer);
    run_for(f, 1000);
    call_tool(f, 3, "stop", NULL);
    run_for(f, 5000);
    ask(f, initialize);
    ask(f, start);
    assert_string_equal(f->answer, first);
    assert_int_equal(mcpb_pump1_counts(&f->pump)->duplicates, 1);
    call_tool(f, 4, "get_status", NULL);
    assert_answer_has(f, "\"structuredContent\":{\"state\":\"stopped\"");
}

static void a_long_message_is_cut_to_the_frame(void **state)
{
    static char frame[6000];
    mcpb_pump1_config_t config;
    int n;
    size_t head;
    F;
    mcpb_pump1_config_default(&config);
    config.frame_max = 3300;
    mcpb_pump1_init(&f->pump, &config);
    strcpy(frame, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"");
    head = strlen(frame);
    memset(frame + head, 'm', 4000);
    strcpy(frame + head + 4000, "\"}");
    n = ask(f, frame);
    assert_int_equal(n, 3300);
    assert_string_equal(f->answer + n - 6, "...\"}}");
}

/* A command whose id leaves too little of the frame for its answer is refused before it acts: the
 * pump does not start while the caller is told the call failed (and a retry cannot start it twice). */
static void a_command_whose_answer_cannot_fit_is_refused_before_it_acts(void **state)
{
    static char frame[8192], id[4000];
    size_t longest = 4096 - MCPB_PUMP1_COMMAND_ANSWER_MAX; /* the longest id a command takes, as JSON */
    F;
    memset(id, '7', 3802);
    id[3802] = '\0';
    snprintf(frame, sizeof frame,
             "{\"jsonrpc\":\"2.0\",\"id\":\"%s\",\"method\":\"tools/call\",\"params\":{\"name\":\"start\","
             "\"arguments\":{\"speed_rpm\":1000}}}",
             id);
    assert_true(strlen(frame) < 4096);
    assert_true(ask(f, frame) > 0);
    assert_answer_has(f, "7\",\"error\":{\"code\":-32600,\"message\":\"Invalid Request: id too long for the answer "
                         "to fit the frame; nothing was done. Use an id of at most 2996 bytes\"}}");
    call_tool(f, 2, "get_status", NULL);
    assert_answer_has(f, "\"structuredContent\":{\"state\":\"stopped\",\"speed_rpm\":0,\"setpoint_rpm\":1450,");
    /* an id of the longest length a command takes: it acts and its answer fits */
    memset(id, '7', sizeof id);
    id[longest - 2] = '\0'; /* the quotes make up the rest */
    snprintf(frame, sizeof frame,
             "{\"jsonrpc\":\"2.0\",\"id\":\"%s\",\"method\":\"tools/call\",\"params\":{\"name\":\"start\","
             "\"arguments\":{\"speed_rpm\":1000}}}",
             id);
    assert_true(ask(f, frame) > 0);
    assert_answer_has(f, "\"structuredContent\":{\"state\":\"starting\",\"speed_rpm\":0,\"setpoint_rpm\":1000,");
    /* get_status changes nothing: it is answered as before, too large or not */
    memset(id, '7', 3802);
    id[3802] = '\0';
    snprintf(frame, sizeof frame,
             "{\"jsonrpc\":\"2.0\",\"id\":\"%s\",\"method\":\"tools/call\",\"params\":{\"name\":\"get_status\"}}", id);
    ask(f, frame);
    assert_answer_has(f, "\"error\":{\"code\":-32603,\"message\":\"Response too large: ");
}

static void extreme_reading(void *context, mcpb_pump1_reading_t *reading)
{
    (void)context;
    reading->flow_lpm = 999999.96; /* each prints as 1000000.0, the widest under 1e6 */
    reading->pressure_bar = 999999.996;
    reading->motor_temp_c = -999999.96;
    reading->valid = MCPB_PUMP1_FLOW_VALID | MCPB_PUMP1_PRESSURE_VALID | MCPB_PUMP1_TEMP_VALID;
}

static void no_drive(void *context, double rpm, double dt_s)
{
    (void)context;
    (void)rpm;
    (void)dt_s;
}

/* MCPB_PUMP1_COMMAND_ANSWER_MAX holds the widest status a command answers with: every number at its
 * widest, the longest fault code and a fault text as long as the pump keeps. */
static void the_widest_command_answer_fits_its_bound(void **state)
{
    static const char *const tools[] = {"get_status", "start", "set_speed", "stop", "reset_fault"};
    mcpb_pump1_hardware_t hardware = {NULL, no_drive, extreme_reading, NULL};
    mcpb_pump1_config_t config;
    int i;
    F;
    mcpb_pump1_config_default(&config);
    config.hardware = &hardware;
    mcpb_pump1_init(&f->pump, &config);
    mcpb_pump1_tick(&f->pump, 1000);
    for (i = 0; i < 5; i++) {
        /* the state is written directly: no run reaches every field's widest value at once */
        f->pump.uptime_s = 4294967295u;
        f->pump.run_s = 4294967295u;
        f->pump.run_rem_ms = 999;
        f->pump.speed = 2899.9;
        f->pump.setpoint_rpm = 2900;
        f->pump.state = 1; /* starting */
        f->pump.fault = 2; /* sensor_failure, the longest code */
        memset(f->pump.fault_text, 'w', MCPB_PUMP1_FAULT_TEXT_MAX - 1);
        f->pump.fault_text[MCPB_PUMP1_FAULT_TEXT_MAX - 1] = '\0';
        /* get_status gives the status a command answers with; a refusal (in fault) is shorter */
        call_tool(f, 1, tools[i], i == 2 ? "{\"speed_rpm\":2900}" : NULL);
        assert_true(f->length > 0);
        assert_true((size_t)f->length - 1 <= MCPB_PUMP1_COMMAND_ANSWER_MAX); /* the id 1 is one byte */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(initialize_negotiates_the_version, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(initialize_escapes_the_firmware_version, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(ping_answers_an_empty_result, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(notifications_and_responses_get_no_answer, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(unknown_method_is_32601, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(malformed_json_is_a_parse_error, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(nesting_deeper_than_16_is_a_parse_error, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(invalid_requests_are_32600, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(tools_list_pages_with_cursors, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(tools_list_refuses_unknown_cursors, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(a_small_out_buffer_gives_a_negative_length, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(an_oversize_frame_is_refused_with_its_id, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(a_repeated_call_is_answered_from_the_cache, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(the_cache_outlives_initialize, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(a_long_message_is_cut_to_the_frame, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(a_command_whose_answer_cannot_fit_is_refused_before_it_acts, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(the_widest_command_answer_fits_its_bound, fixture_setup, fixture_teardown),
    };
    return cmocka_run_group_tests_name("pump1 rpc", tests, NULL, NULL);
}
