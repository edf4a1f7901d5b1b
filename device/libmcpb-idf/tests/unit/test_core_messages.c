/* The core's own messages: the register frame (dedicated, serial, enveloped), envelopes, the serial
 * register request, refusals with id null, and the answer to a request over the frame cap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "mcpb/messages.h"

static const mcpb_hello_t hello = {"24:0a:c4:12:34:56", "libmcpb-idf", "0.1.0", "05bcc58176efee25"};

static void test_register_frame_serial(void **state)
{
    char out[512];
    size_t n;
    (void)state;
    n = mcpb_register_frame(out, sizeof(out), &hello, "pump-1", 1);
    out[n] = '\0';
    assert_string_equal(out,
                        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/register\",\"params\":{\"hello\":{"
                        "\"device_id\":\"24:0a:c4:12:34:56\",\"firmware\":{\"name\":\"libmcpb-idf\",\"version\":"
                        "\"0.1.0\"},\"schema\":\"05bcc58176efee25\"},\"slot\":\"pump-1\",\"aggregate\":true}}");
}

static void test_register_frame_dedicated_without_aggregate(void **state)
{
    char out[512];
    mcpb_hello_t bare = {"dev \"1\"", "fw", "1", NULL};
    size_t n;
    (void)state;
    n = mcpb_register_frame(out, sizeof(out), &bare, NULL, 0);
    out[n] = '\0';
    assert_string_equal(out, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/register\",\"params\":{\"hello\":{"
                             "\"device_id\":\"dev \\\"1\\\"\",\"firmware\":{\"name\":\"fw\",\"version\":\"1\"}}}}");
    assert_int_equal(mcpb_register_frame(out, 100, &hello, NULL, 1), 0);
}

static void test_envelopes(void **state)
{
    char out[128], slot[MCPB_SLOT_MAX + 1];
    static const char envelope[] =
        "{\"provider\":\"valve-2\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":\"brk-1\",\"method\":\"ping\"}}";
    size_t at, len, n;
    (void)state;
    n = mcpb_envelope_prefix(out, sizeof(out), "valve-2");
    out[n] = '\0';
    assert_string_equal(out, "{\"provider\":\"valve-2\",\"payload\":");
    assert_int_equal(mcpb_envelope_parse(envelope, strlen(envelope), slot, &at, &len), 0);
    assert_string_equal(slot, "valve-2");
    assert_int_equal(len, strlen("{\"jsonrpc\":\"2.0\",\"id\":\"brk-1\",\"method\":\"ping\"}"));
    assert_memory_equal(envelope + at, "{\"jsonrpc\"", 10);
    /* payload first, spaces, an escaped name */
    assert_int_equal(mcpb_envelope_parse("{ \"payload\" : {} , \"provider\" : \"a\\/b\" }", 40, slot, &at, &len), 0);
    assert_string_equal(slot, "a/b");
    assert_int_equal(len, 2);
    assert_int_equal(mcpb_envelope_parse("{\"jsonrpc\":\"2.0\",\"id\":1}", 24, slot, &at, &len), -1);
    assert_int_equal(mcpb_envelope_parse("{\"provider\":7,\"payload\":{}}", 28, slot, &at, &len), -1);
    assert_int_equal(mcpb_envelope_parse("{\"provider\":\"a\"}", 16, slot, &at, &len), -1);
}

static void test_register_request(void **state)
{
    static const char exact[] = "{\"jsonrpc\":\"2.0\",\"method\":\"broker/register\"}";
    static const char spaced[] = "{ \"method\" : \"broker/register\", \"jsonrpc\": \"2.0\" }";
    static const char request[] = "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"broker/register\"}";
    (void)state;
    assert_true(mcpb_is_register_request(exact, strlen(exact)));
    assert_true(mcpb_is_register_request(spaced, strlen(spaced)));
    assert_false(mcpb_is_register_request(request, strlen(request)));
    assert_false(mcpb_is_register_request("{\"method\":\"ping\"}", 17));
    assert_false(mcpb_is_register_request("garbage", 7));
}

static void test_refusals(void **state)
{
    static const char refusal[] = "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32000,\"message\":"
                                  "\"Slot already held by a live provider; call provider_status on _broker.\"}}";
    static const char answer[] = "{\"jsonrpc\":\"2.0\",\"id\":\"brk-1\",\"error\":{\"code\":-1,\"message\":\"x\"}}";
    char reason[32];
    (void)state;
    assert_true(mcpb_refusal_in(refusal, strlen(refusal), reason, sizeof(reason)));
    assert_string_equal(reason, "Slot already held by a live pro"); /* cut to the buffer */
    assert_false(mcpb_refusal_in(answer, strlen(answer), reason, sizeof(reason)));
    assert_false(mcpb_refusal_in("{\"id\":null,\"result\":{}}", 23, reason, sizeof(reason)));
    assert_true(mcpb_refusal_in("{\"id\":null,\"error\":{}}", 22, reason, sizeof(reason)));
    assert_string_equal(reason, "");
}

static void test_too_large_answer(void **state)
{
    static const char head[] = "{\"jsonrpc\":\"2.0\",\"id\":\"brk-4\",\"method\":\"tools/call\",\"params\":{\"name\":\"x";
    char out[256];
    size_t n;
    (void)state;
    n = mcpb_too_large_answer(out, sizeof(out), head, strlen(head), 9000, 4096);
    assert_int_equal(n, strlen(out));
    assert_string_equal(out, "{\"jsonrpc\":\"2.0\",\"id\":\"brk-4\",\"error\":{\"code\":-32600,\"message\":\"Request "
                             "too large: 9000 bytes; this device accepts frames of at most 4096 bytes\"}}");
    mcpb_too_large_answer(out, sizeof(out), "{\"params\":", 10, 5000, 1024);
    assert_non_null(strstr(out, "\"id\":null,"));
    assert_int_equal(mcpb_too_large_answer(out, 40, head, strlen(head), 9000, 4096), 0);
}

static void test_too_large_response(void **state)
{
    static const char request[] = "{\"jsonrpc\":\"2.0\",\"method\":\"tools/list\",\"id\":-3}";
    char out[256];
    size_t n;
    (void)state;
    n = mcpb_too_large_response(out, sizeof(out), request, strlen(request));
    assert_int_equal(n, strlen(out));
    assert_string_equal(out, "{\"jsonrpc\":\"2.0\",\"id\":-3,\"error\":{\"code\":-32603,\"message\":\"Response too "
                             "large\"}}");
    mcpb_too_large_response(out, sizeof(out), "{\"method\":\"ping\"}", 17);
    assert_non_null(strstr(out, "\"id\":null,"));
    /* cut anywhere: nothing */
    assert_int_equal(mcpb_too_large_response(out, 20, request, strlen(request)), 0);
    assert_int_equal(mcpb_too_large_response(out, 60, request, strlen(request)), 0);
    assert_int_equal(mcpb_too_large_response(out, n, request, strlen(request)), 0);
    assert_int_equal(mcpb_too_large_response(out, n + 1, request, strlen(request)), n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_register_frame_serial),
        cmocka_unit_test(test_register_frame_dedicated_without_aggregate),
        cmocka_unit_test(test_envelopes),
        cmocka_unit_test(test_register_request),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_too_large_answer),
        cmocka_unit_test(test_too_large_response),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
