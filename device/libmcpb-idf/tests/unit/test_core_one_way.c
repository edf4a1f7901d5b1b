/* The core built with one way in (MCPB_WITH_* of mcpb/features.h, set by CMake): init refuses the
 * ways left out, naming the switch, and the way built in dials, registers and answers a request. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "mcpb/client.h"
#include "mcpb/serial_frame.h"
#include "test_core_fake_port.h"

#if MCPB_WITH_SERIAL == MCPB_WITH_WEBSOCKET
#error "built with exactly one of MCPB_WITH_SERIAL and MCPB_WITH_WEBSOCKET"
#endif

static fake_port_t fake;
static mcpb_port_t port;
static fake_handler_t handler;
static mcpb_slot_t slot;
static mcpb_client_config_t config;
static mcpb_buffers_t buffers;
static mcpb_client_t client;
static uint8_t message[1024 + 5];
static char answer[1024];
static uint8_t rx[128];
static uint8_t tx[128];
static char got[4096];

static int setup(void **state)
{
    (void)state;
    fake_port_init(&fake, &port);
    memset(&handler, 0, sizeof(handler));
    handler.answer = "{\"jsonrpc\":\"2.0\",\"id\":\"brk-1\",\"result\":{}}";
    memset(&slot, 0, sizeof(slot));
    slot.name = "pump-c1";
    slot.handler = fake_handler;
    slot.handler_ctx = &handler;
    memset(&config, 0, sizeof(config));
    config.host = "127.0.0.1";
    config.port = 3000;
    config.slots = &slot;
    config.slot_count = 1;
    config.on_event = fake_on_event;
    config.event_ctx = &fake;
    buffers.message = message;
    buffers.message_cap = sizeof(message);
    buffers.answer = answer;
    buffers.answer_cap = sizeof(answer);
    buffers.rx = rx;
    buffers.rx_cap = sizeof(rx);
    buffers.tx = tx;
    buffers.tx_cap = sizeof(tx);
    return 0;
}

/* init refuses `way`, logs the switch that left it out, and the client never dials. */
static void refused(mcpb_way_t way, const char *switch_name)
{
    config.way = way;
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), -1);
    assert_non_null(strstr(fake.last_log, switch_name));
    assert_int_equal(mcpb_client_poll(&client, 100), 100);
    assert_int_equal(fake.connects, 0);
}

static void test_ways_left_out_are_refused(void **state)
{
    (void)state;
#if MCPB_WITH_SERIAL
    refused(MCPB_WAY_WS_DEDICATED, "MCPB_WITH_WEBSOCKET");
    refused(MCPB_WAY_WS_MULTIPLEX, "MCPB_WITH_MULTIPLEX");
#else
    refused(MCPB_WAY_SERIAL, "MCPB_WITH_SERIAL");
    refused(MCPB_WAY_WS_MULTIPLEX, "MCPB_WITH_MULTIPLEX");
#endif
}

/* Every build refuses a token (or host, or agent) holding a control character, the one-way builds
 * included: a CR or LF would end a header line of the upgrade. */
static void test_control_character_refused(void **state)
{
    (void)state;
    config.way = MCPB_WITH_SERIAL ? MCPB_WAY_SERIAL : MCPB_WAY_WS_DEDICATED;
    config.token = "tok-1\n";
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), -1);
    assert_string_equal(fake.last_log, "token holds a control character");
    config.token = NULL;
    config.host = MCPB_WITH_SERIAL ? "/dev/ttyUSB0\n" : "127.0.0.1\n";
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), -1);
    assert_string_equal(fake.last_log, "host holds a control character");
    assert_int_equal(mcpb_client_poll(&client, 100), 100);
    assert_int_equal(fake.connects, 0);
}

static void test_way_built_in_serves(void **state)
{
    static const char request[] = "{\"jsonrpc\":\"2.0\",\"id\":\"brk-1\",\"method\":\"ping\"}";
    (void)state;
#if MCPB_WITH_SERIAL
    {
        static uint8_t wire[256];
        size_t n;
        config.way = MCPB_WAY_SERIAL;
        assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), 0);
        mcpb_client_poll(&client, 100);
        assert_true(mcpb_client_connected(&client));
        assert_true(fake_next_serial(&fake, got, sizeof(got)) > 0);
        assert_non_null(strstr(got, "\"slot\":\"pump-c1\""));
        n = mcpb_serial_frame_encode((const uint8_t *)request, strlen(request), wire, sizeof(wire));
        fake_push(&fake, wire, n);
        mcpb_client_poll(&client, 100);
        assert_true(fake_next_serial(&fake, got, sizeof(got)) > 0);
    }
#else
    {
        uint8_t opcode;
        size_t len;
        config.way = MCPB_WAY_WS_DEDICATED;
        assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), 0);
        mcpb_client_poll(&client, 100);
        assert_memory_equal(fake.from_device, "GET /provider/pump-c1 HTTP/1.1\r\n", 32);
        fake_accept_upgrade(&fake, 1);
        mcpb_client_poll(&client, 100);
        mcpb_client_poll(&client, 100); /* the 101 is longer than rx[]: two reads */
        assert_true(mcpb_client_connected(&client));
        assert_int_equal(fake_next_frame(&fake, &opcode, got, sizeof(got), &len), 0);
        assert_non_null(strstr(got, "notifications/register"));
        fake_push_text(&fake, request);
        mcpb_client_poll(&client, 100);
        assert_int_equal(fake_next_frame(&fake, &opcode, got, sizeof(got), &len), 0);
    }
#endif
    assert_int_equal(handler.calls, 1);
    assert_string_equal(handler.last, request);
    assert_string_equal(got, handler.answer);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_ways_left_out_are_refused, setup),
        cmocka_unit_test_setup(test_way_built_in_serves, setup),
        cmocka_unit_test_setup(test_control_character_refused, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
