/* The client on a serial line: the register frame naming its slot, broker/register answered, requests
 * answered in COBS frames, noise ignored, oversize refused, loss and reopen; the gateway's error with id
 * null ends the link (no contact) and the register frame goes out again after the back-off. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "mcpb/client.h"
#include "mcpb/serial_frame.h"
#include "test_core_fake_port.h"

static fake_port_t fake;
static int heard_count;
static mcpb_port_t port;
static fake_handler_t handler;
static mcpb_slot_t slot;
static mcpb_client_config_t config;
static mcpb_buffers_t buffers;
static mcpb_client_t client;
static uint8_t message[1024 + 5];
static char answer[1024];
static uint8_t rx[64];
static uint8_t tx[64];
static char got[8192];
static uint8_t wire[8192];

static const char register_frame[] =
    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/register\",\"params\":{\"hello\":{\"device_id\":\"b1\","
    "\"firmware\":{\"name\":\"libmcpb-idf\",\"version\":\"" MCPB_VERSION "\"},\"schema\":\"s1\"},\"slot\":"
    "\"pump-c1\",\"aggregate\":true}}";

static void count_heard(void *ctx)
{
    (void)ctx;
    heard_count++;
}

static int setup(void **state)
{
    (void)state;
    fake_port_init(&fake, &port);
    memset(&handler, 0, sizeof(handler));
    handler.answer = "{\"jsonrpc\":\"2.0\",\"id\":\"brk-7\",\"result\":{}}";
    memset(&slot, 0, sizeof(slot));
    slot.name = "pump-c1";
    slot.aggregate = 1;
    slot.schema = "s1";
    slot.handler = fake_handler;
    slot.handler_ctx = &handler;
    memset(&config, 0, sizeof(config));
    config.way = MCPB_WAY_SERIAL;
    config.host = "/dev/pts/9";
    config.device_id = "b1";
    config.slots = &slot;
    config.slot_count = 1;
    config.on_event = fake_on_event;
    config.event_ctx = &fake;
    config.on_heard = count_heard;
    heard_count = 0;
    buffers.message = message;
    buffers.message_cap = sizeof(message);
    buffers.answer = answer;
    buffers.answer_cap = sizeof(answer);
    buffers.rx = rx;
    buffers.rx_cap = sizeof(rx);
    buffers.tx = tx;
    buffers.tx_cap = sizeof(tx);
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), 0);
    mcpb_client_poll(&client, 100);
    return 0;
}

static void push_framed(const char *text)
{
    size_t n = mcpb_serial_frame_encode((const uint8_t *)text, strlen(text), wire, sizeof(wire));
    fake_push(&fake, wire, n);
}

static void poll_times(int times)
{
    int i;
    for (i = 0; i < times; i++) {
        mcpb_client_poll(&client, 100);
    }
}

static void test_opens_and_registers_with_slot(void **state)
{
    (void)state;
    assert_string_equal(fake.connected_host, "/dev/pts/9");
    assert_int_equal(fake.connected_port, 0);
    assert_int_equal(fake.from_device[0], 0); /* a leading delimiter ends what the line held */
    assert_true(fake_next_serial(&fake, got, sizeof(got)) > 0);
    assert_string_equal(got, register_frame);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_CONNECTED);
}

static void test_register_request_answered_again(void **state)
{
    (void)state;
    fake_next_serial(&fake, got, sizeof(got));
    push_framed("{\"jsonrpc\":\"2.0\",\"method\":\"broker/register\"}");
    poll_times(2);
    assert_true(fake_next_serial(&fake, got, sizeof(got)) > 0);
    assert_string_equal(got, register_frame);
    assert_int_equal(handler.calls, 0);
}

static void test_request_answered_through_noise_in_small_chunks(void **state)
{
    (void)state;
    fake_next_serial(&fake, got, sizeof(got));
    fake.recv_chunk = 5;
    fake_push(&fake, "I (312) boot: ESP-IDF v5.2\r\n", 28);
    push_framed("{\"jsonrpc\":\"2.0\",\"id\":\"brk-7\",\"method\":\"ping\"}");
    poll_times(40);
    assert_int_equal(handler.calls, 1);
    assert_string_equal(handler.last, "{\"jsonrpc\":\"2.0\",\"id\":\"brk-7\",\"method\":\"ping\"}");
    assert_true(fake_next_serial(&fake, got, sizeof(got)) > 0);
    assert_string_equal(got, handler.answer);
    assert_int_equal(client.cobs.dropped, 1);
}

/* After the wait the line is opened again and the register frame goes out again. */
static void assert_registers_again_after(uint32_t wait_ms)
{
    int connects = fake.connects;
    fake.now += wait_ms - 1;
    poll_times(1);
    assert_int_equal(fake.connects, connects); /* not a millisecond early */
    fake.now += 1;
    poll_times(1);
    assert_int_equal(fake.connects, connects + 1);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_CONNECTED);
    assert_true(fake_next_serial(&fake, got, sizeof(got)) > 0);
    assert_string_equal(got, register_frame);
}

static void test_refusal_closes_the_line_and_registers_again_after_the_longest_back_off(void **state)
{
    (void)state;
    fake_next_serial(&fake, got, sizeof(got));
    /* The gateway asks as the port opens: that is not the gateway taking the board. */
    push_framed("{\"jsonrpc\":\"2.0\",\"method\":\"broker/register\"}");
    poll_times(2);
    fake_next_serial(&fake, got, sizeof(got));
    heard_count = 0;
    fake.random_value = 0; /* the shortest wait of the jitter: half the ceiling */
    push_framed("{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32001,\"message\":\"Serial port /dev/ttyGW "
                "may not publish slot \\\"pump-c1\\\"; its slots setting allows: bench-*\"}}");
    poll_times(10); /* 64 bytes a read */
    assert_int_equal(fake.last_event.kind, MCPB_LINK_REFUSED);
    assert_string_equal(fake.last_event.reason,
                        "Serial port /dev/ttyGW may not publish slot \"pump-c1\"; its slots setting allows: bench-*");
    assert_int_equal(fake.last_event.retry_in_ms, 15000); /* the ceiling at its maximum, 30 s */
    assert_int_equal(handler.calls, 0);
    assert_int_equal(heard_count, 0); /* a refusal is no contact: the pump's dead-man runs on */
    assert_false(mcpb_client_connected(&client));
    assert_int_equal(fake.open, 0);
    assert_registers_again_after(15000);
    /* Refused again: the same longest wait, never a tight loop. */
    fake.random_value = UINT32_MAX;
    push_framed("{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32000,\"message\":\"Slot already held by a "
                "live provider\"}}");
    poll_times(10);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_REFUSED);
    assert_int_equal(fake.last_event.retry_in_ms, 30000);
    assert_registers_again_after(30000);
}

static void test_a_slot_let_go_after_traffic_closes_and_registers_again_soon(void **state)
{
    (void)state;
    fake_next_serial(&fake, got, sizeof(got));
    push_framed("{\"jsonrpc\":\"2.0\",\"id\":\"brk-7\",\"method\":\"ping\"}");
    poll_times(2);
    assert_int_equal(handler.calls, 1);
    fake_next_serial(&fake, got, sizeof(got));
    heard_count = 0;
    fake.random_value = UINT32_MAX;
    push_framed("{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32000,\"message\":\"No answer to heartbeat "
                "ping\"}}");
    poll_times(10);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_CLOSED);
    assert_string_equal(fake.last_event.reason, "No answer to heartbeat ping");
    assert_int_equal(fake.last_event.retry_in_ms, 1000); /* the link carried a request: back-off from 1 s */
    assert_int_equal(heard_count, 0);
    assert_int_equal(handler.calls, 1);
    assert_registers_again_after(1000);
}

static void test_oversize_refused_in_a_frame(void **state)
{
    static char big[3000];
    (void)state;
    fake_next_serial(&fake, got, sizeof(got));
    memset(big, 'x', sizeof(big) - 1);
    memcpy(big, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\"", 44);
    push_framed(big);
    poll_times(80);
    assert_true(fake_next_serial(&fake, got, sizeof(got)) > 0);
    assert_string_equal(got, "{\"jsonrpc\":\"2.0\",\"id\":5,\"error\":{\"code\":-32600,\"message\":\"Request too large: "
                             "2999 bytes; this device accepts frames of at most 1024 bytes\"}}");
}

static void test_answer_too_large_answered_in_a_frame(void **state)
{
    (void)state;
    fake_next_serial(&fake, got, sizeof(got));
    handler.result = -1;
    push_framed("{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"tools/list\"}");
    poll_times(4);
    assert_int_equal(handler.calls, 1);
    assert_true(fake_next_serial(&fake, got, sizeof(got)) > 0);
    assert_string_equal(got, "{\"jsonrpc\":\"2.0\",\"id\":12,\"error\":{\"code\":-32603,\"message\":"
                             "\"Response too large\"}}");
    assert_true(mcpb_client_connected(&client));
}

/* Two slots on the line, so envelopes: an oversize request for a slot of the longest name (64 bytes,
 * its envelope prefix 89) is answered in its envelope under its id, which lies past the frame's
 * first 96 bytes. */
static void test_oversize_envelope_of_a_long_slot_name_keeps_its_id(void **state)
{
    static const char name[] = "pump-with-the-longest-name-a-slot-may-have-sixty-four-bytes-xyz0";
    static char big[3000];
    mcpb_slot_t two[2];
    int n;
    (void)state;
    assert_int_equal(strlen(name), MCPB_SLOT_MAX);
    two[0] = slot;
    two[1] = slot;
    two[1].name = name;
    config.slots = two;
    config.slot_count = 2;
    fake_port_init(&fake, &port);
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), 0);
    poll_times(1);
    while (fake_next_serial(&fake, got, sizeof(got)) > 0) { /* the register envelopes */
    }
    memset(big, 'x', sizeof(big) - 1);
    n = snprintf(big, sizeof(big), "{\"provider\":\"%s\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":\"brk-31\",\"p\":\"",
                 name);
    big[n] = 'x';
    push_framed(big);
    poll_times(80);
    assert_true(fake_next_serial(&fake, got, sizeof(got)) > 0);
    snprintf(big, sizeof(big), "{\"provider\":\"%s\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":\"brk-31\",\"error\":"
                               "{\"code\":-32600,\"message\":\"Request too large: 2999 bytes; this device accepts "
                               "frames of at most 1024 bytes\"}}}", name);
    assert_string_equal(got, big);
    config.slots = &slot;
    config.slot_count = 1;
}

/* The register frame carries the slot name as JSON: a name the gateway cannot read is refused at init. */
static void test_slot_name_not_utf8_refused_at_init(void **state)
{
    (void)state;
    slot.name = "pump\x80";
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), -1);
    assert_string_equal(fake.last_log, "slots[0] is not printable UTF-8");
    slot.name = "pump\tc1";
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), -1);
}

static void test_hang_up_reopens_after_back_off(void **state)
{
    (void)state;
    fake.peer_closed = 1;
    poll_times(1);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_CLOSED);
    assert_int_equal(fake.last_event.close_code, 0);
    fake.peer_closed = 0;
    fake.now += fake.last_event.retry_in_ms;
    poll_times(1);
    assert_int_equal(fake.connects, 2);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_CONNECTED);
}

static void test_open_failure_names_the_device(void **state)
{
    (void)state;
    fake.fail_connects = 1;
    fake.open = 0;
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), 0);
    poll_times(1);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_ERROR);
    assert_string_equal(fake.last_event.reason, "cannot open /dev/pts/9");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_opens_and_registers_with_slot, setup),
        cmocka_unit_test_setup(test_register_request_answered_again, setup),
        cmocka_unit_test_setup(test_request_answered_through_noise_in_small_chunks, setup),
        cmocka_unit_test_setup(test_refusal_closes_the_line_and_registers_again_after_the_longest_back_off, setup),
        cmocka_unit_test_setup(test_a_slot_let_go_after_traffic_closes_and_registers_again_soon, setup),
        cmocka_unit_test_setup(test_oversize_envelope_of_a_long_slot_name_keeps_its_id, setup),
        cmocka_unit_test_setup(test_oversize_refused_in_a_frame, setup),
        cmocka_unit_test_setup(test_answer_too_large_answered_in_a_frame, setup),
        cmocka_unit_test_setup(test_slot_name_not_utf8_refused_at_init, setup),
        cmocka_unit_test_setup(test_hang_up_reopens_after_back_off, setup),
        cmocka_unit_test_setup(test_open_failure_names_the_device, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
