/* WebSocket frames: header lengths at the 125/126/65535 boundaries, masking, fragments, control
 * frames, close code and reason, oversize messages, and every protocol error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mcpb/ws_frame.h"

static uint8_t message[70000];
static uint8_t wire[200000];

static size_t frame(uint8_t *out, uint8_t first_byte, const uint8_t *payload, size_t len, const uint8_t *mask)
{
    size_t n = mcpb_ws_header(out, 0, len, mask);
    out[0] = first_byte;
    memcpy(out + n, payload, len);
    if (mask != NULL) {
        mcpb_ws_mask(out + n, len, mask, 0);
    }
    return n + len;
}

static void test_header_lengths(void **state)
{
    uint8_t header[MCPB_WS_MAX_HEADER];
    static const uint8_t mask[4] = {1, 2, 3, 4};
    (void)state;
    assert_int_equal(mcpb_ws_header(header, MCPB_WS_TEXT, 125, mask), 6);
    assert_int_equal(header[0], 0x81);
    assert_int_equal(header[1], 0x80 | 125);
    assert_int_equal(mcpb_ws_header(header, MCPB_WS_TEXT, 126, mask), 8);
    assert_int_equal(header[1], 0x80 | 126);
    assert_int_equal(header[2], 0);
    assert_int_equal(header[3], 126);
    assert_int_equal(mcpb_ws_header(header, MCPB_WS_TEXT, 65535, mask), 8);
    assert_int_equal(header[2], 0xFF);
    assert_int_equal(header[3], 0xFF);
    assert_int_equal(mcpb_ws_header(header, MCPB_WS_TEXT, 65536, mask), 14);
    assert_int_equal(header[1], 0x80 | 127);
    assert_int_equal(header[7], 1);
    assert_memory_equal(header + 10, mask, 4);
    assert_int_equal(mcpb_ws_header(header, MCPB_WS_PONG_FRAME, 0, NULL), 2);
    assert_int_equal(header[0], 0x8A);
    assert_int_equal(header[1], 0);
}

static void test_mask_round_trip_with_phase(void **state)
{
    static const uint8_t mask[4] = {0xA1, 0xB2, 0xC3, 0xD4};
    uint8_t data[10] = {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l'};
    uint8_t copy[10];
    (void)state;
    memcpy(copy, data, 10);
    mcpb_ws_mask(copy, 3, mask, 0);
    mcpb_ws_mask(copy + 3, 7, mask, 3); /* continuing at payload offset 3 */
    assert_int_equal(copy[0], 'h' ^ 0xA1);
    assert_int_equal(copy[3], 'l' ^ 0xD4);
    assert_int_equal(copy[4], 'o' ^ 0xA1);
    mcpb_ws_mask(copy, 10, mask, 0);
    assert_memory_equal(copy, data, 10);
}

/* Feeds all bytes, one event at a time; returns the last event and how many messages came. */
static int feed_all(mcpb_ws_rx_t *rx, const uint8_t *data, size_t len, size_t chunk, mcpb_ws_event_t *last)
{
    size_t at = 0;
    int messages = 0;
    while (at < len) {
        size_t give = chunk && len - at > chunk ? chunk : len - at;
        mcpb_ws_event_t event;
        size_t used = mcpb_ws_rx_feed(rx, data + at, give, &event);
        at += used;
        if (event.kind != MCPB_WS_NONE) {
            *last = event;
            messages++;
        }
    }
    return messages;
}

static void check_length(size_t len, size_t chunk)
{
    mcpb_ws_rx_t rx;
    mcpb_ws_event_t event;
    uint8_t *payload = malloc(len);
    size_t n, i;
    for (i = 0; i < len; i++) {
        payload[i] = (uint8_t)('a' + i % 26);
    }
    n = frame(wire, 0x81, payload, len, NULL);
    mcpb_ws_rx_init(&rx, message, sizeof(message));
    assert_int_equal(feed_all(&rx, wire, n, chunk, &event), 1);
    assert_int_equal(event.kind, MCPB_WS_MESSAGE);
    assert_int_equal(event.len, len);
    assert_memory_equal(event.data, payload, len);
    assert_int_equal(event.data[len], 0);
    free(payload);
}

static void test_lengths_at_boundaries(void **state)
{
    static const size_t lengths[] = {0, 1, 125, 126, 127, 65535, 65536};
    size_t i;
    (void)state;
    for (i = 0; i < sizeof(lengths) / sizeof(lengths[0]); i++) {
        check_length(lengths[i], 0);
        check_length(lengths[i], 1);
        check_length(lengths[i], 7);
    }
}

static void test_masked_server_frame_tolerated(void **state)
{
    static const uint8_t mask[4] = {9, 8, 7, 6};
    mcpb_ws_rx_t rx;
    mcpb_ws_event_t event;
    size_t n = frame(wire, 0x81, (const uint8_t *)"{\"id\":1}", 8, mask);
    (void)state;
    mcpb_ws_rx_init(&rx, message, sizeof(message));
    assert_int_equal(mcpb_ws_rx_feed(&rx, wire, n, &event), n);
    assert_int_equal(event.kind, MCPB_WS_MESSAGE);
    assert_string_equal((const char *)event.data, "{\"id\":1}");
}

static void test_fragments_with_ping_between(void **state)
{
    mcpb_ws_rx_t rx;
    mcpb_ws_event_t event;
    size_t n = 0, used;
    (void)state;
    n += frame(wire + n, 0x01, (const uint8_t *)"{\"a\":", 5, NULL);
    n += frame(wire + n, 0x89, (const uint8_t *)"hb", 2, NULL);
    n += frame(wire + n, 0x00, (const uint8_t *)"[1,", 3, NULL);
    n += frame(wire + n, 0x80, (const uint8_t *)"2]}", 3, NULL);
    mcpb_ws_rx_init(&rx, message, sizeof(message));
    used = mcpb_ws_rx_feed(&rx, wire, n, &event);
    assert_int_equal(event.kind, MCPB_WS_PING);
    assert_int_equal(event.len, 2);
    assert_memory_equal(event.data, "hb", 2);
    used += mcpb_ws_rx_feed(&rx, wire + used, n - used, &event);
    assert_int_equal(used, n);
    assert_int_equal(event.kind, MCPB_WS_MESSAGE);
    assert_string_equal((const char *)event.data, "{\"a\":[1,2]}");
}

static void test_pong_and_close(void **state)
{
    mcpb_ws_rx_t rx;
    mcpb_ws_event_t event;
    uint8_t close_payload[64];
    size_t n;
    static const char reason[] = "Slot already held by a live provider; call provider_status on _broker. Slot: \"p\"";
    (void)state;
    mcpb_ws_rx_init(&rx, message, sizeof(message));
    n = frame(wire, 0x8A, (const uint8_t *)"", 0, NULL);
    mcpb_ws_rx_feed(&rx, wire, n, &event);
    assert_int_equal(event.kind, MCPB_WS_PONG);

    close_payload[0] = 0x03;
    close_payload[1] = 0xF0; /* 1008 */
    n = frame(wire, 0x88, close_payload, 2, NULL);
    mcpb_ws_rx_feed(&rx, wire, n, &event);
    assert_int_equal(event.kind, MCPB_WS_CLOSE);
    assert_int_equal(event.close_code, 1008);
    assert_int_equal(event.len, 0);

    n = mcpb_ws_header(wire, 0, 2 + strlen(reason), NULL);
    wire[0] = 0x88;
    wire[n++] = 0x03;
    wire[n++] = 0xF0;
    memcpy(wire + n, reason, strlen(reason));
    n += strlen(reason);
    mcpb_ws_rx_feed(&rx, wire, n, &event);
    assert_int_equal(event.kind, MCPB_WS_CLOSE);
    assert_int_equal(event.close_code, 1008);
    assert_int_equal(event.len, strlen(reason));
    assert_memory_equal(event.data, reason, strlen(reason));

    n = frame(wire, 0x88, (const uint8_t *)"", 0, NULL);
    mcpb_ws_rx_feed(&rx, wire, n, &event);
    assert_int_equal(event.close_code, 1005);
}

static void test_oversize_single_frame_then_next_message(void **state)
{
    static uint8_t small[1024];
    mcpb_ws_rx_t rx;
    mcpb_ws_event_t event;
    uint8_t *payload = malloc(5000);
    size_t n, used;
    (void)state;
    memset(payload, 'x', 5000);
    memcpy(payload, "{\"jsonrpc\":\"2.0\",\"id\":\"brk-9\",", 30);
    n = frame(wire, 0x81, payload, 5000, NULL);
    n += frame(wire + n, 0x81, (const uint8_t *)"{}", 2, NULL);
    mcpb_ws_rx_init(&rx, small, sizeof(small));
    used = mcpb_ws_rx_feed(&rx, wire, n, &event);
    assert_int_equal(event.kind, MCPB_WS_OVERSIZE);
    assert_int_equal(event.size, 5000);
    /* the head is what fits the buffer, NUL-terminated: room for an envelope before the id */
    assert_int_equal(event.head_len, sizeof(small) - 1);
    assert_memory_equal(event.head, payload, sizeof(small) - 1);
    assert_int_equal(event.head[sizeof(small) - 1], 0);
    mcpb_ws_rx_feed(&rx, wire + used, n - used, &event);
    assert_int_equal(event.kind, MCPB_WS_MESSAGE);
    assert_string_equal((const char *)event.data, "{}");
    free(payload);
}

static void test_oversize_across_fragments_masked(void **state)
{
    static uint8_t small[1024];
    static const uint8_t mask[4] = {0x11, 0x22, 0x33, 0x44};
    mcpb_ws_rx_t rx;
    mcpb_ws_event_t event;
    uint8_t payload[700];
    size_t n = 0;
    (void)state;
    memset(payload, 'y', sizeof(payload));
    memcpy(payload, "{\"id\":42", 8);
    n += frame(wire + n, 0x01, payload, 50, mask);
    n += frame(wire + n, 0x00, payload + 50, 650, mask);
    n += frame(wire + n, 0x80, payload, 700, mask);
    mcpb_ws_rx_init(&rx, small, sizeof(small));
    assert_int_equal(feed_all(&rx, wire, n, 13, &event), 1);
    assert_int_equal(event.kind, MCPB_WS_OVERSIZE);
    assert_int_equal(event.size, 1400);
    assert_int_equal(event.head_len, sizeof(small) - 1); /* 700 of the first message, 323 of the third */
    assert_memory_equal(event.head, payload, 700);
    assert_memory_equal(event.head + 700, payload, sizeof(small) - 1 - 700);
}

static void test_exactly_at_cap_fits(void **state)
{
    static uint8_t small[1024];
    mcpb_ws_rx_t rx;
    mcpb_ws_event_t event;
    uint8_t payload[1024];
    size_t n;
    (void)state;
    memset(payload, 'z', sizeof(payload));
    n = frame(wire, 0x81, payload, 1023, NULL);
    mcpb_ws_rx_init(&rx, small, sizeof(small));
    mcpb_ws_rx_feed(&rx, wire, n, &event);
    assert_int_equal(event.kind, MCPB_WS_MESSAGE);
    assert_int_equal(event.len, 1023);
    n = frame(wire, 0x81, payload, 1024, NULL);
    mcpb_ws_rx_feed(&rx, wire, n, &event);
    assert_int_equal(event.kind, MCPB_WS_OVERSIZE);
}

static void expect_error(const uint8_t *bytes, size_t len, const char *why)
{
    mcpb_ws_rx_t rx;
    mcpb_ws_event_t event;
    mcpb_ws_rx_init(&rx, message, sizeof(message));
    mcpb_ws_rx_feed(&rx, bytes, len, &event);
    assert_int_equal(event.kind, MCPB_WS_PROTOCOL_ERROR);
    assert_non_null(strstr(event.error, why));
    /* a failed stream stays failed */
    mcpb_ws_rx_feed(&rx, (const uint8_t *)"\x81\x00", 2, &event);
    assert_int_equal(event.kind, MCPB_WS_PROTOCOL_ERROR);
}

static void test_protocol_errors(void **state)
{
    uint8_t bytes[300];
    size_t n;
    (void)state;
    expect_error((const uint8_t *)"\x89\x7E\x00\x7E", 4, "malformed control frame"); /* ping of 126 */
    expect_error((const uint8_t *)"\x09\x00", 2, "malformed control frame");         /* fragmented ping */
    expect_error((const uint8_t *)"\x83\x00", 2, "unknown data opcode");
    expect_error((const uint8_t *)"\x8B\x00", 2, "unknown control opcode");
    expect_error((const uint8_t *)"\x80\x00", 2, "fragment");                        /* continuation first */
    expect_error((const uint8_t *)"\xC1\x00", 2, "reserved bits");
    expect_error((const uint8_t *)"\x88\x01\x03", 3, "one-byte");
    expect_error((const uint8_t *)"\x81\x7F\x80\x00\x00\x00\x00\x00\x00\x00", 10, "top bit");
    /* a ping of 4 GB + 5 bytes: over 125, though its low 32 bits are not */
    expect_error((const uint8_t *)"\x89\x7F\x00\x00\x00\x01\x00\x00\x00\x05", 10, "malformed control frame");
    n = frame(bytes, 0x01, (const uint8_t *)"ab", 2, NULL);
    n += frame(bytes + n, 0x81, (const uint8_t *)"cd", 2, NULL); /* a new message inside a fragmented one */
    {
        mcpb_ws_rx_t rx;
        mcpb_ws_event_t event;
        mcpb_ws_rx_init(&rx, message, sizeof(message));
        mcpb_ws_rx_feed(&rx, bytes, n, &event);
        assert_int_equal(event.kind, MCPB_WS_PROTOCOL_ERROR);
        assert_non_null(strstr(event.error, "fragment"));
    }
}

static void test_truncated_input_waits(void **state)
{
    mcpb_ws_rx_t rx;
    mcpb_ws_event_t event;
    size_t n = frame(wire, 0x81, (const uint8_t *)"hello", 5, NULL);
    (void)state;
    mcpb_ws_rx_init(&rx, message, sizeof(message));
    assert_int_equal(mcpb_ws_rx_feed(&rx, wire, 1, &event), 1);
    assert_int_equal(event.kind, MCPB_WS_NONE);
    assert_int_equal(mcpb_ws_rx_feed(&rx, wire + 1, n - 2, &event), n - 2);
    assert_int_equal(event.kind, MCPB_WS_NONE);
    mcpb_ws_rx_feed(&rx, wire + n - 1, 1, &event);
    assert_int_equal(event.kind, MCPB_WS_MESSAGE);
    assert_string_equal((const char *)event.data, "hello");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_lengths),
        cmocka_unit_test(test_mask_round_trip_with_phase),
        cmocka_unit_test(test_lengths_at_boundaries),
        cmocka_unit_test(test_masked_server_frame_tolerated),
        cmocka_unit_test(test_fragments_with_ping_between),
        cmocka_unit_test(test_pong_and_close),
        cmocka_unit_test(test_oversize_single_frame_then_next_message),
        cmocka_unit_test(test_oversize_across_fragments_masked),
        cmocka_unit_test(test_exactly_at_cap_fits),
        cmocka_unit_test(test_protocol_errors),
        cmocka_unit_test(test_truncated_input_waits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
