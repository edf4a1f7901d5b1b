/* The client on /providers with two slots: one register envelope each, requests routed by envelope,
 * answers wrapped for their slot, a refused slot reported while the link stays, strays dropped, a link
 * that carried only refusals and was closed with 1008 refused with the longest back-off. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "mcpb/client.h"
#include "test_core_fake_port.h"

static fake_port_t fake;
static mcpb_port_t port;
static fake_handler_t first, second;
static mcpb_slot_t slots[2];
static mcpb_client_config_t config;
static mcpb_buffers_t buffers;
static mcpb_client_t client;
static uint8_t message[2048 + 5];
static char answer[1024];
static uint8_t rx[512];
static uint8_t tx[256];
static char payload[8192];
/* The longest slot name (64 bytes): its envelope prefix alone is 89 bytes. */
#define LONG_NAME "valve-with-the-longest-name-a-slot-may-have-sixty-four-bytes-xyz"
static const char *second_name;

static int setup_named(const char *name)
{
    char prefix[128];
    uint8_t opcode;
    size_t len;
    second_name = name;
    fake_port_init(&fake, &port);
    memset(&first, 0, sizeof(first));
    memset(&second, 0, sizeof(second));
    second.answer = "{\"jsonrpc\":\"2.0\",\"id\":\"brk-2\",\"result\":{\"tools\":[]}}";
    memset(slots, 0, sizeof(slots));
    slots[0].name = "valve-1";
    slots[0].aggregate = 1;
    slots[0].handler = fake_handler;
    slots[0].handler_ctx = &first;
    slots[1].name = second_name;
    slots[1].handler = fake_handler;
    slots[1].handler_ctx = &second;
    memset(&config, 0, sizeof(config));
    config.way = MCPB_WAY_WS_MULTIPLEX;
    config.host = "gw.local";
    config.port = 3000;
    config.device_id = "board";
    config.slots = slots;
    config.slot_count = 2;
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
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), 0);
    mcpb_client_poll(&client, 100);
    assert_memory_equal(fake.from_device, "GET /providers HTTP/1.1\r\nHost: gw.local:3000\r\n", 46);
    fake_accept_upgrade(&fake, 1);
    mcpb_client_poll(&client, 100);
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0);
    assert_string_equal(payload, "{\"provider\":\"valve-1\",\"payload\":{\"jsonrpc\":\"2.0\",\"method\":"
                                 "\"notifications/register\",\"params\":{\"hello\":{\"device_id\":\"board\","
                                 "\"firmware\":{\"name\":\"libmcpb-idf\",\"version\":\"" MCPB_VERSION "\"}},"
                                 "\"aggregate\":true}}}");
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0);
    snprintf(prefix, sizeof(prefix), "{\"provider\":\"%s\",\"payload\":{", second_name);
    assert_non_null(strstr(payload, prefix));
    assert_null(strstr(payload, "aggregate"));
    return 0;
}

static int setup(void **state)
{
    (void)state;
    return setup_named("valve-2");
}

static int setup_id(void **state)
{
    (void)state;
    return setup_named("id");
}

static int setup_long(void **state)
{
    (void)state;
    assert_int_equal(strlen(LONG_NAME), MCPB_SLOT_MAX);
    return setup_named(LONG_NAME);
}

static void test_routed_and_wrapped(void **state)
{
    uint8_t opcode;
    size_t len;
    (void)state;
    fake_push_text(&fake, "{\"provider\":\"valve-2\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":\"brk-2\",\"method\":"
                          "\"tools/list\"}}");
    mcpb_client_poll(&client, 100);
    assert_int_equal(first.calls, 0);
    assert_int_equal(second.calls, 1);
    assert_string_equal(second.last, "{\"jsonrpc\":\"2.0\",\"id\":\"brk-2\",\"method\":\"tools/list\"}");
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0);
    assert_string_equal(payload, "{\"provider\":\"valve-2\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":\"brk-2\","
                                 "\"result\":{\"tools\":[]}}}");
}

static void test_refused_slot_reported_link_stays(void **state)
{
    (void)state;
    fake_push_text(&fake, "{\"provider\":\"valve-1\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":"
                          "-32000,\"message\":\"Slot already held by a live provider; call provider_status on "
                          "_broker. Slot: \\\"valve-1\\\"\"}}}");
    mcpb_client_poll(&client, 100);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_REFUSED);
    assert_string_equal(fake.last_event.slot, "valve-1");
    assert_non_null(strstr(fake.last_event.reason, "held by a live provider"));
    assert_int_equal(first.calls, 0);
    assert_true(mcpb_client_connected(&client));
}

static void test_strays_dropped(void **state)
{
    uint8_t opcode;
    size_t len;
    (void)state;
    fake_push_text(&fake, "{\"provider\":\"other\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}}");
    fake_push_text(&fake, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}");
    fake_push_text(&fake, "not json at all");
    mcpb_client_poll(&client, 100);
    assert_int_equal(first.calls + second.calls, 0);
    assert_int_equal(client.dropped, 3);
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), -1);
    assert_true(mcpb_client_connected(&client));
}

static void test_oversize_envelope_answered_for_its_slot(void **state)
{
    static char big[3000];
    uint8_t opcode;
    size_t len;
    int i;
    (void)state;
    memset(big, ' ', sizeof(big));
    memcpy(big, "{\"provider\":\"valve-2\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":\"brk-9\",", 63);
    fake_push_frame(&fake, 0x81, big, sizeof(big), NULL);
    for (i = 0; i < 10; i++) { /* 512 bytes a read */
        mcpb_client_poll(&client, 100);
    }
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0);
    assert_string_equal(payload, "{\"provider\":\"valve-2\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":\"brk-9\",\"error\":"
                                 "{\"code\":-32600,\"message\":\"Request too large: 3000 bytes; this device accepts "
                                 "frames of at most 2048 bytes\"}}}");
}

/* A slot name of 64 bytes puts the request's id past the envelope's first 96 bytes: the answer still
 * names it, found in the request's own first bytes, and the caller hears at once, not at its deadline. */
static void test_oversize_envelope_of_a_long_slot_name_keeps_its_id(void **state)
{
    static char big[5000];
    static const char request[] = "{\"jsonrpc\":\"2.0\",\"id\":\"brk-0123456789-0123456789-0123456789\",";
    uint8_t opcode;
    size_t len;
    int i, n;
    (void)state;
    memset(big, ' ', sizeof(big));
    n = snprintf(big, sizeof(big), "{\"provider\":\"%s\",\"payload\":%s", LONG_NAME, request);
    big[n] = ' ';
    fake_push_frame(&fake, 0x81, big, sizeof(big), NULL);
    for (i = 0; i < 12; i++) {
        mcpb_client_poll(&client, 100);
    }
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0);
    assert_string_equal(payload, "{\"provider\":\"" LONG_NAME "\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":"
                                 "\"brk-0123456789-0123456789-0123456789\",\"error\":{\"code\":-32600,\"message\":"
                                 "\"Request too large: 5000 bytes; this device accepts frames of at most 2048 bytes\"}}}");
}

/* A slot named "id": the envelope's "provider" value is no request id; the request's is found. */
static void test_oversize_envelope_of_a_slot_named_id(void **state)
{
    static char big[3000];
    uint8_t opcode;
    size_t len;
    int i;
    (void)state;
    memset(big, ' ', sizeof(big));
    memcpy(big, "{\"provider\":\"id\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":41,", 52);
    fake_push_frame(&fake, 0x81, big, sizeof(big), NULL);
    for (i = 0; i < 10; i++) {
        mcpb_client_poll(&client, 100);
    }
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0);
    assert_memory_equal(payload, "{\"provider\":\"id\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":41,\"error\"", 52);
}

/* A slot that served and is then refused was let go (a takeover, the gateway's shutdown): its event is
 * "closed", naming it, and the link stays for the other slot. A slot refused before it served was
 * refused at the door. */
static void test_slot_let_go_after_serving_is_closed(void **state)
{
    (void)state;
    fake_push_text(&fake, "{\"provider\":\"valve-2\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":\"brk-2\",\"method\":"
                          "\"tools/list\"}}");
    mcpb_client_poll(&client, 100);
    assert_int_equal(second.calls, 1);
    fake_push_text(&fake, "{\"provider\":\"valve-2\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":"
                          "-32000,\"message\":\"Gateway shutting down\"}}}");
    mcpb_client_poll(&client, 100);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_CLOSED);
    assert_string_equal(fake.last_event.slot, "valve-2");
    assert_string_equal(fake.last_event.reason, "Gateway shutting down");
    assert_true(mcpb_client_connected(&client));
    fake_push_text(&fake, "{\"provider\":\"valve-1\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":"
                          "-32000,\"message\":\"Slot already held by a live provider\"}}}");
    mcpb_client_poll(&client, 100);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_REFUSED);
    assert_string_equal(fake.last_event.slot, "valve-1");
}

/* An oversize request keeps what the slots served, and counts for its own slot: a slot let go after
 * it is "closed", not "refused". */
static void test_slot_let_go_after_an_oversize_request_is_closed(void **state)
{
    static char big[3000];
    int i;
    (void)state;
    fake_push_text(&fake, "{\"provider\":\"valve-2\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":\"brk-2\",\"method\":"
                          "\"tools/list\"}}");
    mcpb_client_poll(&client, 100);
    assert_int_equal(second.calls, 1);
    memset(big, ' ', sizeof(big));
    memcpy(big, "{\"provider\":\"valve-1\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":\"brk-9\",", 63);
    fake_push_frame(&fake, 0x81, big, sizeof(big), NULL);
    for (i = 0; i < 10; i++) { /* 512 bytes a read */
        mcpb_client_poll(&client, 100);
    }
    assert_int_equal(client.dropped, 1);
    assert_int_equal(first.calls, 0);
    fake_push_text(&fake, "{\"provider\":\"valve-2\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":"
                          "-32000,\"message\":\"Gateway shutting down\"}}}");
    mcpb_client_poll(&client, 100);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_CLOSED);
    assert_string_equal(fake.last_event.slot, "valve-2");
    /* valve-1 had only the oversize request: the gateway held it all the same */
    fake_push_text(&fake, "{\"provider\":\"valve-1\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":"
                          "-32000,\"message\":\"Gateway shutting down\"}}}");
    mcpb_client_poll(&client, 100);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_CLOSED);
    assert_string_equal(fake.last_event.slot, "valve-1");
    assert_true(mcpb_client_connected(&client));
}

static void test_answer_too_large_answered_in_its_envelope(void **state)
{
    uint8_t opcode;
    size_t len;
    (void)state;
    second.result = -1;
    fake_push_text(&fake, "{\"provider\":\"valve-2\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":\"brk-5\",\"method\":"
                          "\"tools/call\"}}");
    mcpb_client_poll(&client, 100);
    assert_int_equal(second.calls, 1);
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0);
    assert_string_equal(payload, "{\"provider\":\"valve-2\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":\"brk-5\",\"error\":"
                                 "{\"code\":-32603,\"message\":\"Response too large\"}}}");
    assert_true(mcpb_client_connected(&client));
}

/* The gateway's close when it served none of the slots claimed: code 1008 and its reason. */
static void push_no_slot_served(void)
{
    static const char reason[] = "\x03\xf0No slot served: every slot claimed was refused (last: \"valve-2\"); the "
                                 "error envelopes said why";
    fake_push_frame(&fake, 0x88, reason, sizeof(reason) - 1, NULL);
}

/* Refusal envelopes are not traffic: a link that carried only them and is closed with 1008 was
 * refused at the door, and the board waits the longest back-off (15 to 30 s), not 0.5 to 1 s. */
static void test_refusals_then_close_back_off_to_max(void **state)
{
    uint32_t wait;
    (void)state;
    fake_push_text(&fake, "{\"provider\":\"valve-1\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":"
                          "-32000,\"message\":\"Slot already held by a live provider\"}}}");
    fake_push_text(&fake, "{\"provider\":\"valve-2\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":"
                          "-32000,\"message\":\"Slot already held by a live provider\"}}}");
    push_no_slot_served();
    mcpb_client_poll(&client, 100);
    assert_int_equal(fake.events, 4); /* connected, two refused slots, the refused link */
    assert_int_equal(fake.last_event.kind, MCPB_LINK_REFUSED);
    assert_int_equal(fake.last_event.close_code, 1008);
    assert_string_equal(fake.last_event.slot, "");
    assert_string_equal(fake.last_event.reason, "No slot served: every slot claimed was refused (last: \"valve-2\"); "
                                                "the error envelopes said why");
    assert_true(fake.last_event.retry_in_ms >= 15000 && fake.last_event.retry_in_ms <= 30000);
    assert_false(mcpb_client_connected(&client));
    wait = mcpb_client_poll(&client, 100);
    assert_true(wait >= 14000);
    assert_int_equal(fake.connects, 1);
}

/* The same with the gateway's bare refusal (an envelope it could not read), then the close. */
static void test_bare_refusal_then_close_backs_off_to_max(void **state)
{
    (void)state;
    fake_push_text(&fake, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"Parse error\"}}");
    push_no_slot_served();
    mcpb_client_poll(&client, 100);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_REFUSED);
    assert_int_equal(fake.last_event.close_code, 1008);
    assert_true(fake.last_event.retry_in_ms >= 15000 && fake.last_event.retry_in_ms <= 30000);
}

/* A bare refusal's reason reaches the event whole, its escapes read, up to MCPB_REASON_MAX bytes. */
static void test_bare_refusal_reason_whole(void **state)
{
    (void)state;
    fake_push_text(&fake, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":"
                          "\"Bare message on /providers: wrap each in an envelope, "
                          "{\\\"provider\\\":<slot>,\\\"payload\\\":<message>}\"}}");
    mcpb_client_poll(&client, 100);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_REFUSED);
    assert_string_equal(fake.last_event.slot, "");
    assert_string_equal(fake.last_event.reason, "Bare message on /providers: wrap each in an envelope, "
                                                "{\"provider\":<slot>,\"payload\":<message>}");
    assert_true(mcpb_client_connected(&client));
}

/* A slot served a request before the close: the link was wanted, and the board redials soon. */
static void test_close_after_a_served_request_redials_soon(void **state)
{
    (void)state;
    fake_push_text(&fake, "{\"provider\":\"valve-1\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":"
                          "-32000,\"message\":\"Slot already held by a live provider\"}}}");
    fake_push_text(&fake, "{\"provider\":\"valve-2\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":\"brk-2\",\"method\":"
                          "\"tools/list\"}}");
    push_no_slot_served();
    mcpb_client_poll(&client, 100);
    assert_int_equal(second.calls, 1);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_CLOSED);
    assert_int_equal(fake.last_event.close_code, 1008);
    assert_true(fake.last_event.retry_in_ms <= 1000);
}

/* Slot names the gateway would drop the frame for, or hold once: refused at init, the slot named. */
static void test_slot_names_checked_at_init(void **state)
{
    (void)state;
    slots[1].name = "valve-1";
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), -1);
    assert_string_equal(fake.last_log, "slots[1] repeats a name");
    assert_int_equal(mcpb_client_poll(&client, 100), 100); /* stopped: nothing dialled */
    slots[1].name = "valve\xff";
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), -1);
    assert_string_equal(fake.last_log, "slots[1] is not printable UTF-8");
    slots[1].name = "caf\xe9"; /* Latin-1 */
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), -1);
    slots[1].name = "valve\xc3"; /* a lead byte without its continuation */
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), -1);
    slots[1].name = "valve\xc2\x85" "1"; /* U+0085, a C1 control: shows as "valve1" */
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), -1);
    assert_string_equal(fake.last_log, "slots[1] is not printable UTF-8");
    slots[1].name = "valve\xe0\x80\xaf"; /* an overlong "/" */
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), -1);
    slots[0].name = "valve\n1";
    slots[1].name = "valve-2";
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), -1);
    assert_string_equal(fake.last_log, "slots[0] is not printable UTF-8");
    slots[0].name = "Ventil \xc3\xa9 \xe2\x82\xac \xf0\x9f\x92\xa7"; /* 2-, 3- and 4-byte forms */
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), 0);
}

static void test_notification_sent_for_a_slot(void **state)
{
    static const char note[] = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}";
    uint8_t opcode;
    size_t len;
    (void)state;
    assert_int_equal(mcpb_client_send(&client, 0, note, strlen(note)), 0);
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0);
    assert_string_equal(payload, "{\"provider\":\"valve-1\",\"payload\":{\"jsonrpc\":\"2.0\",\"method\":"
                                 "\"notifications/tools/list_changed\"}}");
    assert_int_equal(mcpb_client_send(&client, 2, note, strlen(note)), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_routed_and_wrapped, setup),
        cmocka_unit_test_setup(test_refused_slot_reported_link_stays, setup),
        cmocka_unit_test_setup(test_strays_dropped, setup),
        cmocka_unit_test_setup(test_oversize_envelope_answered_for_its_slot, setup),
        cmocka_unit_test_setup(test_answer_too_large_answered_in_its_envelope, setup),
        cmocka_unit_test_setup(test_oversize_envelope_of_a_long_slot_name_keeps_its_id, setup_long),
        cmocka_unit_test_setup(test_oversize_envelope_of_a_slot_named_id, setup_id),
        cmocka_unit_test_setup(test_slot_let_go_after_serving_is_closed, setup),
        cmocka_unit_test_setup(test_slot_let_go_after_an_oversize_request_is_closed, setup),
        cmocka_unit_test_setup(test_refusals_then_close_back_off_to_max, setup),
        cmocka_unit_test_setup(test_bare_refusal_then_close_backs_off_to_max, setup),
        cmocka_unit_test_setup(test_bare_refusal_reason_whole, setup),
        cmocka_unit_test_setup(test_close_after_a_served_request_redials_soon, setup),
        cmocka_unit_test_setup(test_slot_names_checked_at_init, setup),
        cmocka_unit_test_setup(test_notification_sent_for_a_slot, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
