/* Serial frames: the CRC check value, the byte examples of docs/device-serial.md as test vectors
 * (both ways, whole and byte by byte), block boundaries, damage, resynchronisation and oversize. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mcpb/serial_frame.h"

static const char ping[] = "{\"jsonrpc\":\"2.0\",\"id\":\"brk-7\",\"method\":\"ping\"}";
/* docs/device-serial.md, "Worked example: the gateway's ping": 53 bytes on the wire */
static const uint8_t ping_wire[] = {
    0x00, 0x33, 0x7b, 0x22, 0x6a, 0x73, 0x6f, 0x6e, 0x72, 0x70, 0x63, 0x22, 0x3a, 0x22, 0x32, 0x2e, 0x30, 0x22,
    0x2c, 0x22, 0x69, 0x64, 0x22, 0x3a, 0x22, 0x62, 0x72, 0x6b, 0x2d, 0x37, 0x22, 0x2c, 0x22, 0x6d,
    0x65, 0x74, 0x68, 0x6f, 0x64, 0x22, 0x3a, 0x22, 0x70, 0x69, 0x6e, 0x67, 0x22, 0x7d,
    0x67, 0x34, 0x84, 0xe7, 0x00};
static const char pong[] = "{\"jsonrpc\":\"2.0\",\"id\":\"brk-77\",\"result\":{}}";
/* docs/device-serial.md, "When the CRC holds a zero" */
static const uint8_t pong_wire[] = {
    0x00, 0x2f, 0x7b, 0x22, 0x6a, 0x73, 0x6f, 0x6e, 0x72, 0x70, 0x63, 0x22, 0x3a, 0x22, 0x32, 0x2e, 0x30, 0x22,
    0x2c, 0x22, 0x69, 0x64, 0x22, 0x3a, 0x22, 0x62, 0x72, 0x6b, 0x2d, 0x37, 0x37, 0x22,
    0x2c, 0x22, 0x72, 0x65, 0x73, 0x75, 0x6c, 0x74, 0x22, 0x3a, 0x7b, 0x7d, 0x7d, 0x7d, 0x47, 0xc7, 0x01, 0x00};

static uint8_t decoded[8192];
static uint8_t wire[16384];

static void test_crc32_check_value(void **state)
{
    (void)state;
    assert_int_equal(mcpb_crc32(0, "123456789", 9), 0xCBF43926u);
    assert_int_equal(mcpb_crc32(0, ping, strlen(ping)), 0xE7843467u);
    assert_int_equal(mcpb_crc32(0, pong, strlen(pong)), 0x00C7477Du);
    /* continuing a CRC over pieces gives the CRC of the whole */
    assert_int_equal(mcpb_crc32(mcpb_crc32(0, "1234", 4), "56789", 5), 0xCBF43926u);
}

static void test_encode_doc_vectors(void **state)
{
    (void)state;
    assert_int_equal(sizeof(ping_wire), 53);
    assert_int_equal(mcpb_serial_frame_encode((const uint8_t *)ping, strlen(ping), wire, sizeof(wire)), 53);
    assert_memory_equal(wire, ping_wire, 53);
    assert_int_equal(mcpb_serial_frame_encode((const uint8_t *)pong, strlen(pong), wire, sizeof(wire)),
                     sizeof(pong_wire));
    assert_memory_equal(wire, pong_wire, sizeof(pong_wire));
    assert_int_equal(mcpb_serial_frame_encode((const uint8_t *)ping, strlen(ping), wire, 52), 0);
}

static void decode_expect(const uint8_t *bytes, size_t len, size_t chunk, const char *expected)
{
    mcpb_cobs_decoder_t dec;
    mcpb_frame_t frame;
    size_t at = 0;
    int found = 0;
    mcpb_cobs_decoder_init(&dec, decoded, sizeof(decoded));
    while (at < len) {
        size_t give = chunk && len - at > chunk ? chunk : len - at;
        at += mcpb_cobs_decoder_feed(&dec, bytes + at, give, &frame);
        if (frame.kind == MCPB_FRAME_MESSAGE) {
            assert_int_equal(frame.size, strlen(expected));
            assert_memory_equal(decoded, expected, frame.size);
            assert_int_equal(decoded[frame.size], 0);
            found++;
        }
    }
    assert_int_equal(found, 1);
    assert_int_equal(dec.dropped, 0);
}

static void test_decode_doc_vectors(void **state)
{
    (void)state;
    decode_expect(ping_wire, sizeof(ping_wire), 0, ping);
    decode_expect(ping_wire, sizeof(ping_wire), 1, ping);
    decode_expect(pong_wire, sizeof(pong_wire), 0, pong);
    decode_expect(pong_wire, sizeof(pong_wire), 1, pong);
    decode_expect(pong_wire, sizeof(pong_wire), 3, pong);
}

static void round_trip(size_t len, int with_zeros)
{
    uint8_t *message = malloc(len + 1);
    mcpb_cobs_decoder_t dec;
    mcpb_frame_t frame;
    size_t n, i, used;
    for (i = 0; i < len; i++) {
        message[i] = with_zeros && i % 97 == 5 ? 0 : (uint8_t)(' ' + i % 90);
    }
    n = mcpb_serial_frame_encode(message, len, wire, sizeof(wire));
    assert_true(n > 0);
    for (i = 1; i + 1 < n; i++) {
        assert_int_not_equal(wire[i], 0);
    }
    if (!with_zeros) {
        /* a code byte per 254 bytes, plus one, plus the two delimiters */
        assert_true(n <= len + 4 + (len + 4) / 254 + 1 + 2);
    }
    mcpb_cobs_decoder_init(&dec, decoded, sizeof(decoded));
    used = mcpb_cobs_decoder_feed(&dec, wire, n, &frame);
    if (frame.kind == MCPB_FRAME_NONE) { /* the leading delimiter ends an empty chunk first */
        used += mcpb_cobs_decoder_feed(&dec, wire + used, n - used, &frame);
    }
    assert_int_equal(frame.kind, MCPB_FRAME_MESSAGE);
    assert_int_equal(frame.size, len);
    assert_memory_equal(decoded, message, len);
    free(message);
}

static void test_round_trips_at_block_boundaries(void **state)
{
    static const size_t lengths[] = {1, 249, 250, 251, 253, 254, 255, 507, 508, 509, 4096};
    size_t i;
    (void)state;
    for (i = 0; i < sizeof(lengths) / sizeof(lengths[0]); i++) {
        round_trip(lengths[i], 0);
        round_trip(lengths[i], 1);
    }
    /* docs: a 4,096-byte message is at most 4,119 bytes with both delimiters */
    {
        uint8_t *message = malloc(4096);
        memset(message, 'j', 4096);
        assert_true(mcpb_serial_frame_encode(message, 4096, wire, sizeof(wire)) <= 4119);
        free(message);
    }
}

/* Noise before a frame, a damaged frame, then a good one: only the good one comes out. */
static void test_damage_is_dropped_and_counted(void **state)
{
    static const char boot_text[] = "rst:0x1 (POWERON_RESET),boot:0x13\r\n";
    mcpb_cobs_decoder_t dec;
    mcpb_frame_t frame;
    size_t n = 0, at = 0;
    int messages = 0;
    (void)state;
    memcpy(wire + n, boot_text, strlen(boot_text));
    n += strlen(boot_text);
    memcpy(wire + n, ping_wire, sizeof(ping_wire));
    wire[n + 20] ^= 0x01; /* a flipped bit: CRC mismatch */
    n += sizeof(ping_wire);
    memcpy(wire + n, pong_wire, 10); /* a frame cut short by a delimiter */
    n += 10;
    memcpy(wire + n, ping_wire, sizeof(ping_wire));
    n += sizeof(ping_wire);
    memcpy(wire + n, "\x00\x00\x00", 3); /* delimiters in a row cost nothing */
    n += 3;
    mcpb_cobs_decoder_init(&dec, decoded, sizeof(decoded));
    while (at < n) {
        at += mcpb_cobs_decoder_feed(&dec, wire + at, n - at, &frame);
        if (frame.kind == MCPB_FRAME_MESSAGE) {
            assert_string_equal((const char *)decoded, ping);
            messages++;
        }
    }
    assert_int_equal(messages, 1);
    assert_int_equal(dec.dropped, 3); /* the text, the flipped bit, the cut frame */
}

static void test_short_and_bad_cobs(void **state)
{
    mcpb_cobs_decoder_t dec;
    mcpb_frame_t frame;
    (void)state;
    mcpb_cobs_decoder_init(&dec, decoded, sizeof(decoded));
    mcpb_cobs_decoder_feed(&dec, (const uint8_t *)"\x03\x41\x42\x00", 4, &frame); /* too short for a CRC */
    assert_int_equal(frame.kind, MCPB_FRAME_NONE);
    assert_int_equal(dec.dropped, 1);
    mcpb_cobs_decoder_feed(&dec, (const uint8_t *)"\x09\x41\x00", 3, &frame); /* block cut short */
    assert_int_equal(dec.dropped, 2);
}

static void test_oversize_verified_not_stored(void **state)
{
    static uint8_t small[128];
    char message[300];
    mcpb_cobs_decoder_t dec;
    mcpb_frame_t frame;
    size_t n, at = 0;
    (void)state;
    memset(message, 'q', sizeof(message));
    memcpy(message, "{\"jsonrpc\":\"2.0\",\"id\":17,", 25);
    n = mcpb_serial_frame_encode((const uint8_t *)message, sizeof(message), wire, sizeof(wire));
    mcpb_cobs_decoder_init(&dec, small, sizeof(small));
    do {
        at += mcpb_cobs_decoder_feed(&dec, wire + at, n - at, &frame);
    } while (frame.kind == MCPB_FRAME_NONE && at < n);
    assert_int_equal(frame.kind, MCPB_FRAME_OVERSIZE);
    assert_int_equal(frame.size, sizeof(message));
    assert_int_equal(frame.head_len, sizeof(small) - 1); /* what fits, NUL-terminated */
    assert_memory_equal(frame.head, message, sizeof(small) - 1);
    assert_int_equal(frame.head[sizeof(small) - 1], 0);
    /* damaged and oversize: dropped, not reported */
    wire[200] ^= 0x40;
    mcpb_cobs_decoder_init(&dec, small, sizeof(small));
    at = 0;
    do {
        at += mcpb_cobs_decoder_feed(&dec, wire + at, n - at, &frame);
    } while (frame.kind == MCPB_FRAME_NONE && at < n);
    assert_int_equal(frame.kind, MCPB_FRAME_NONE);
    assert_int_equal(dec.dropped, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32_check_value),
        cmocka_unit_test(test_encode_doc_vectors),
        cmocka_unit_test(test_decode_doc_vectors),
        cmocka_unit_test(test_round_trips_at_block_boundaries),
        cmocka_unit_test(test_damage_is_dropped_and_counted),
        cmocka_unit_test(test_short_and_bad_cobs),
        cmocka_unit_test(test_oversize_verified_not_stored),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
