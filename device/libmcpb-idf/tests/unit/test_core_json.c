/* The JSON scanner: members, nesting bound, strings both ways, and ids in a message's first bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "mcpb/json_scan.h"

static int member(const char *json, const char *key, char *value)
{
    size_t at, len;
    int found = mcpb_json_member(json, strlen(json), key, &at, &len);
    if (found == 1) {
        memcpy(value, json + at, len);
        value[len] = '\0';
    }
    return found;
}

static void test_members(void **state)
{
    char value[256];
    (void)state;
    assert_int_equal(member(" { \"a\" : 1 , \"b\":{\"c\":[1,{\"d\":\"}\"}]}, \"e\":\"x\\\"y\"}", "b", value), 1);
    assert_string_equal(value, "{\"c\":[1,{\"d\":\"}\"}]}");
    assert_int_equal(member("{\"a\":1,\"b\":2}", "c", value), 0);
    assert_int_equal(member("{}", "a", value), 0);
    assert_int_equal(member("{\"e\":\"x\\\"y\"}", "e", value), 1);
    assert_string_equal(value, "\"x\\\"y\"");
    assert_int_equal(member("{\"id\":null,\"error\":{}}", "id", value), 1);
    assert_string_equal(value, "null");
    assert_int_equal(member("[1,2]", "a", value), -1);
    assert_int_equal(member("{\"a\":1,", "b", value), -1);
    assert_int_equal(member("{\"a\" 1}", "a", value), -1);
    assert_int_equal(member("{\"a\":[1,2}", "a", value), -1);
    assert_int_equal(member("{\"a\":\"open", "a", value), -1);
    assert_int_equal(member("{\"a\":\"ctl\x01\"}", "a", value), -1);
    assert_int_equal(member("", "a", value), -1);
}

static void test_nesting_bound(void **state)
{
    char deep[300];
    size_t n = 0, i;
    (void)state;
    for (i = 0; i < 64; i++) {
        deep[n++] = '[';
    }
    for (i = 0; i < 64; i++) {
        deep[n++] = ']';
    }
    assert_int_equal(mcpb_json_skip_value(deep, n, 0), n);
    n = 0;
    for (i = 0; i < 65; i++) {
        deep[n++] = '[';
    }
    for (i = 0; i < 65; i++) {
        deep[n++] = ']';
    }
    assert_int_equal(mcpb_json_skip_value(deep, n, 0), 0);
}

static void test_string_decoding(void **state)
{
    char out[64];
    static const char text[] = "\"a\\\"b\\\\c\\/d\\n\\u00e9\\ud83d\\ude00\"";
    (void)state;
    assert_int_equal(mcpb_json_string(text, strlen(text), out, sizeof(out)), 14);
    assert_string_equal(out, "a\"b\\c/d\n\xc3\xa9\xf0\x9f\x98\x80");
    assert_int_equal(mcpb_json_string("\"pump-1\"", 8, out, 6), -1); /* no room for the NUL */
    assert_int_equal(mcpb_json_string("\"\\ud83d\"", 8, out, sizeof(out)), -1); /* lone surrogate */
    assert_int_equal(mcpb_json_string("\"\\x\"", 4, out, sizeof(out)), -1);
    assert_int_equal(mcpb_json_string("\"\\u12\"", 6, out, sizeof(out)), -1);
    assert_int_equal(mcpb_json_string("nope", 4, out, sizeof(out)), -1);
    /* \u0000 would end the decoded text early for strcmp ("open\u0000whatever" read as "open"): malformed */
    assert_int_equal(mcpb_json_string("\"open\\u0000whatever\"", 20, out, sizeof(out)), -1);
    assert_int_equal(mcpb_json_string("\"\\u0000\"", 8, out, sizeof(out)), -1);
    assert_int_equal(mcpb_json_string("\"\\u0001\"", 8, out, sizeof(out)), 1); /* other controls decode */
    assert_int_equal(out[0], 1);
}

static void test_string_encoding(void **state)
{
    char out[64];
    size_t at = 0;
    (void)state;
    assert_int_equal(mcpb_json_put_string(out, sizeof(out), &at, "a\"b\\c\n\x01\xc3\xa9"), 0);
    out[at] = '\0';
    assert_string_equal(out, "\"a\\\"b\\\\c\\n\\u0001\xc3\xa9\"");
    at = 0;
    assert_int_equal(mcpb_json_put_string(out, 4, &at, "abc"), -1);
    assert_int_equal(at, 0);
    assert_int_equal(mcpb_json_put_string(out, 5, &at, "abc"), 0);
    assert_int_equal(at, 5);
}

static void test_format(void **state)
{
    char out[32];
    (void)state;
    assert_int_equal(mcpb_format(out, sizeof out, "%s:%u", "127.0.0.1", 3000u), 14);
    assert_string_equal(out, "127.0.0.1:3000");
    assert_int_equal(mcpb_format(out, sizeof out, "HTTP %d: %d %ld", 401, -2147483647 - 1, -5L), 24);
    assert_string_equal(out, "HTTP 401: -2147483648 -5");
    mcpb_format(out, sizeof out, "%lu %lu %u", 4294967295ul, 0ul, 7u);
    assert_string_equal(out, "4294967295 0 7");
    assert_int_equal(mcpb_format(out, 6, "abc%sxyz", "def"), 9); /* cut, NUL-terminated, whole length */
    assert_string_equal(out, "abcde");
    /* %j and %P through mcpb_format_fit: a JSON string, a path segment; 0 when it does not fit */
    assert_int_equal(mcpb_format_fit(out, sizeof out, "%j/%P", "a\"b\x01", "a b/\xc3\xa9~-._"), 31);
    assert_string_equal(out, "\"a\\\"b\\u0001\"/a%20b%2F%C3%A9~-._");
    assert_int_equal(mcpb_format_fit(out, 5, "%P", "a b"), 0);
    assert_int_equal(mcpb_format_fit(out, 6, "%P", "a b"), 5);
}

static void test_id_in_head(void **state)
{
    char id[40];
    (void)state;
    assert_int_equal(mcpb_json_id_in("{\"jsonrpc\":\"2.0\",\"id\":\"brk-12\",\"method\"", 40, id, sizeof(id)), 8);
    assert_string_equal(id, "\"brk-12\"");
    assert_int_equal(mcpb_json_id_in("{\"id\" : -7 ,\"x\"", 16, id, sizeof(id)), 2);
    assert_string_equal(id, "-7");
    assert_int_equal(mcpb_json_id_in("{\"id\":12", 8, id, sizeof(id)), 0);    /* may be cut: 123 */
    assert_int_equal(mcpb_json_id_in("{\"id\":1.5,", 10, id, sizeof(id)), 0); /* not an integer */
    assert_int_equal(mcpb_json_id_in("{\"id\":\"brk-", 11, id, sizeof(id)), 0);
    assert_int_equal(mcpb_json_id_in("{\"method\":\"x\"}", 14, id, sizeof(id)), 0);
    assert_int_equal(mcpb_json_id_in("{\"id\":null,", 11, id, sizeof(id)), 0);
    assert_int_equal(mcpb_json_id_in("{\"id\":\"0123456789\",", 19, id, 8), 0); /* does not fit */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_members),
        cmocka_unit_test(test_nesting_bound),
        cmocka_unit_test(test_string_decoding),
        cmocka_unit_test(test_string_encoding),
        cmocka_unit_test(test_id_in_head),
        cmocka_unit_test(test_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
