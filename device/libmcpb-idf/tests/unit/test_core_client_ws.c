/* The client over a dedicated WebSocket, against a fake gateway: the upgrade, the register frame,
 * answers, pings, every refusal path with its back-off, oversize requests, silence and loss. */
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
static fake_handler_t handler;
static mcpb_slot_t slot;
static mcpb_client_config_t config;
static mcpb_buffers_t buffers;
static mcpb_client_t client;
static uint8_t message[1024 + 5];
static char answer[1024];
static uint8_t rx[256];
static uint8_t tx[100];
static char payload[70000];

static int setup(void **state)
{
    (void)state;
    fake_port_init(&fake, &port);
    memset(&handler, 0, sizeof(handler));
    handler.answer = "{\"jsonrpc\":\"2.0\",\"id\":\"brk-1\",\"result\":{}}";
    memset(&slot, 0, sizeof(slot));
    slot.name = "pump c1";
    slot.aggregate = 1;
    slot.schema = "abc123";
    slot.handler = fake_handler;
    slot.handler_ctx = &handler;
    memset(&config, 0, sizeof(config));
    config.way = MCPB_WAY_WS_DEDICATED;
    config.host = "127.0.0.1";
    config.port = 3000;
    config.token = "tok-1";
    config.device_id = "host-1";
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

static void poll_times(int times)
{
    int i;
    for (i = 0; i < times; i++) {
        mcpb_client_poll(&client, 100);
    }
}

/* Dials, checks the request, answers 101, and reads the register frame. */
static void open_link(void)
{
    const char *request;
    uint8_t opcode;
    size_t len;
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), 0);
    mcpb_client_poll(&client, 100);
    assert_int_equal(fake.connects, 1);
    assert_string_equal(fake.connected_host, "127.0.0.1");
    assert_int_equal(fake.connected_port, 3000);
    request = (const char *)fake.from_device;
    assert_memory_equal(request, "GET /provider/pump%20c1 HTTP/1.1\r\n", 34);
    assert_non_null(strstr(request, "X-Provider-Token: tok-1\r\n"));
    fake_accept_upgrade(&fake, 1);
    mcpb_client_poll(&client, 100);
    assert_true(mcpb_client_connected(&client));
    assert_int_equal(fake.last_event.kind, MCPB_LINK_CONNECTED);
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0);
    assert_int_equal(opcode, MCPB_WS_TEXT);
    assert_string_equal(payload, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/register\",\"params\":{\"hello\":{"
                                 "\"device_id\":\"host-1\",\"firmware\":{\"name\":\"libmcpb-idf\",\"version\":\""
                                 MCPB_VERSION "\"},\"schema\":\"abc123\"},\"aggregate\":true}}");
}

static void test_request_answered_masked(void **state)
{
    uint8_t opcode;
    size_t len;
    (void)state;
    open_link();
    fake_push_text(&fake, "{\"jsonrpc\":\"2.0\",\"id\":\"brk-1\",\"method\":\"ping\"}");
    poll_times(1);
    assert_int_equal(handler.calls, 1);
    assert_string_equal(handler.last, "{\"jsonrpc\":\"2.0\",\"id\":\"brk-1\",\"method\":\"ping\"}");
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0);
    assert_string_equal(payload, handler.answer);
}

static void test_websocket_ping_gets_pong(void **state)
{
    uint8_t opcode;
    size_t len;
    (void)state;
    open_link();
    fake_push_frame(&fake, 0x89, "beat", 4, NULL);
    poll_times(1);
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0);
    assert_int_equal(opcode, MCPB_WS_PONG_FRAME);
    assert_string_equal(payload, "beat");
    assert_int_equal(handler.calls, 0);
}

static void test_frames_with_the_101_are_served(void **state)
{
    uint8_t opcode;
    size_t len;
    (void)state;
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), 0);
    mcpb_client_poll(&client, 100);
    fake_accept_upgrade(&fake, 1);
    fake_push_text(&fake, "{\"jsonrpc\":\"2.0\",\"id\":\"brk-1\",\"method\":\"initialize\"}");
    fake.recv_chunk = 0;
    poll_times(2);
    assert_int_equal(handler.calls, 1);
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0); /* register */
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0); /* answer */
    assert_string_equal(payload, handler.answer);
}

/* Interim answers (100 Continue, 102) before the 101 are read past, whether they come in reads of
 * their own or with the 101 and the frames after it. */
static void test_interim_answers_before_the_101_are_skipped(void **state)
{
    static const char interim[] = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\nX-A: b\r\n\r\n";
    uint8_t opcode;
    size_t len;
    int chunk;
    (void)state;
    for (chunk = 0; chunk <= 7; chunk += 7) {
        setup(NULL);
        assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), 0);
        mcpb_client_poll(&client, 100);
        fake_push(&fake, interim, strlen(interim));
        fake_accept_upgrade(&fake, 1);
        fake_push_text(&fake, "{\"jsonrpc\":\"2.0\",\"id\":\"brk-1\",\"method\":\"initialize\"}");
        fake.recv_chunk = (size_t)chunk; /* 0: all at once */
        poll_times(80);
        assert_true(mcpb_client_connected(&client));
        assert_int_equal(fake.last_event.kind, MCPB_LINK_CONNECTED);
        assert_int_equal(handler.calls, 1);
        assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0); /* register */
        assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0); /* answer */
        assert_string_equal(payload, handler.answer);
    }
}

static void test_held_slot_refusal_backs_off_to_max(void **state)
{
    static const char reason[] = "Slot already held by a live provider; call provider_status on _broker. Slot: \"pump c1\"";
    uint8_t close_payload[2 + sizeof(reason)];
    uint8_t opcode;
    size_t len;
    uint32_t wait;
    (void)state;
    open_link();
    close_payload[0] = 0x03;
    close_payload[1] = 0xF0;
    memcpy(close_payload + 2, reason, sizeof(reason) - 1);
    fake_push_frame(&fake, 0x88, close_payload, 2 + sizeof(reason) - 1, NULL);
    poll_times(1);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_REFUSED);
    assert_int_equal(fake.last_event.close_code, 1008);
    assert_string_equal(fake.last_event.reason, reason);
    assert_true(fake.last_event.retry_in_ms >= 15000 && fake.last_event.retry_in_ms <= 30000);
    assert_false(mcpb_client_connected(&client));
    /* the close was answered, with 1000 */
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0);
    assert_int_equal(opcode, MCPB_WS_CLOSE_FRAME);
    assert_int_equal((uint8_t)payload[0] << 8 | (uint8_t)payload[1], 1000);
    /* no redial until the wait is over: never a tight loop */
    wait = mcpb_client_poll(&client, 100);
    assert_true(wait >= 14000);
    assert_int_equal(fake.connects, 1);
    fake.now += fake.last_event.retry_in_ms;
    mcpb_client_poll(&client, 100);
    assert_int_equal(fake.connects, 2);
}

static void test_close_after_traffic_redials_soon(void **state)
{
    (void)state;
    open_link();
    fake_push_text(&fake, "{\"jsonrpc\":\"2.0\",\"id\":\"brk-1\",\"method\":\"ping\"}");
    fake_push_frame(&fake, 0x88, "\x03\xe8" "bye", 5, NULL);
    poll_times(2);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_CLOSED);
    assert_int_equal(fake.last_event.close_code, 1000);
    assert_string_equal(fake.last_event.reason, "bye");
    assert_true(fake.last_event.retry_in_ms <= 1000);
}

/* A gateway restart: the loss of a good link redials soon, then failed dials double again. */
static void test_failed_dials_after_a_good_link_keep_doubling(void **state)
{
    int i;
    (void)state;
    fake.random_value = UINT32_MAX;
    open_link();
    fake_push_text(&fake, "{\"jsonrpc\":\"2.0\",\"id\":\"brk-1\",\"method\":\"ping\"}");
    fake_push_frame(&fake, 0x88, "\x03\xe9" "Gateway shutting down", 23, NULL);
    poll_times(2);
    assert_int_equal(fake.last_event.retry_in_ms, 1000);
    fake.fail_connects = 3;
    for (i = 0; i < 3; i++) {
        fake.now += fake.last_event.retry_in_ms;
        mcpb_client_poll(&client, 100);
        assert_int_equal(fake.last_event.kind, MCPB_LINK_ERROR);
        assert_int_equal(fake.last_event.retry_in_ms, 2000u << i);
    }
}

/* The gateway speaks first on every link (initialize), then closes a board whose tools/list it cannot
 * take with 1008: the link carried a message but proved nothing, so the ceiling keeps doubling to
 * the longest wait instead of redialling every second; a link that stays up backoff_max_ms resets it. */
static void test_closes_in_the_handshake_climb_to_the_longest_back_off(void **state)
{
    static const char reason[] = "Provider must answer initialize and tools/list: tools/list failed: Response too large";
    static const uint32_t ceilings[] = {1000, 2000, 4000, 8000, 16000, 30000, 30000};
    uint8_t close_payload[2 + sizeof(reason)];
    size_t i;
    (void)state;
    fake.random_value = UINT32_MAX; /* every wait its ceiling */
    close_payload[0] = 0x03;
    close_payload[1] = 0xF0;
    memcpy(close_payload + 2, reason, sizeof(reason) - 1);
    open_link();
    for (i = 0; i < sizeof(ceilings) / sizeof(ceilings[0]); i++) {
        if (i > 0) {
            fake.from_device_at = fake.from_device_len; /* the last link's frames, read */
            fake.now += fake.last_event.retry_in_ms;
            mcpb_client_poll(&client, 100);
            fake_accept_upgrade(&fake, 1);
            mcpb_client_poll(&client, 100);
            assert_true(mcpb_client_connected(&client));
        }
        fake_push_text(&fake, "{\"jsonrpc\":\"2.0\",\"id\":\"brk-1\",\"method\":\"initialize\"}");
        fake_push_frame(&fake, 0x88, close_payload, 2 + sizeof(reason) - 1, NULL);
        poll_times(2);
        assert_int_equal(fake.last_event.kind, MCPB_LINK_CLOSED);
        assert_int_equal(fake.last_event.close_code, 1008);
        assert_string_equal(fake.last_event.reason, reason);
        assert_int_equal(fake.last_event.retry_in_ms, ceilings[i]);
    }
    assert_int_equal(handler.calls, (int)i);
    /* a link that carried a message and stayed up backoff_max_ms (30 s) starts the ceiling over */
    fake.from_device_at = fake.from_device_len;
    fake.now += fake.last_event.retry_in_ms;
    mcpb_client_poll(&client, 100);
    fake_accept_upgrade(&fake, 1);
    mcpb_client_poll(&client, 100);
    fake_push_text(&fake, "{\"jsonrpc\":\"2.0\",\"id\":\"brk-1\",\"method\":\"initialize\"}");
    poll_times(1);
    fake.now += 30000;
    fake_push_frame(&fake, 0x88, "\x03\xe9" "Gateway shutting down", 23, NULL);
    poll_times(1);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_CLOSED);
    assert_int_equal(fake.last_event.retry_in_ms, 1000);
}

static void test_http_401_is_a_refusal_with_the_body(void **state)
{
    static const char reply[] = "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: 60\r\n\r\n"
                                "{\"error\":\"invalid_provider_token\",\"error_description\":\"bad\"}";
    (void)state;
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), 0);
    mcpb_client_poll(&client, 100);
    fake_take_request(&fake);
    fake_push(&fake, reply, strlen(reply));
    poll_times(3);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_REFUSED);
    assert_int_equal(fake.last_event.http_status, 401);
    assert_string_equal(fake.last_event.reason, "HTTP 401: bad");
    assert_true(fake.last_event.retry_in_ms >= 15000);
    assert_null(strstr(fake.last_log, "tok-1")); /* the secret is never logged */
}

/* The gateway's refusal body, {"error": …, "error_description": …} with the description past the
 * first 123 bytes and escaped quotes in it: the reason is the description, decoded and cut to 123. */
static void test_http_refusal_reason_is_the_error_description(void **state)
{
    static const char body[] =
        "{\"error\": \"provider_identity_revoked\", \"padding\": \"0123456789012345678901234567890123456789012345678\", "
        "\"error_description\": \"The identity \\\"valve-2\\\" this device presents was revoked on this gateway "
        "(mcp-gateway devices revoke). Install the device again to issue it a new one.\"}";
    static const char want[] = "HTTP 401: The identity \"valve-2\" this device presents was revoked on this gateway "
                               "(mcp-gateway devices revoke). Install the";
    char head[128];
    (void)state;
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), 0);
    mcpb_client_poll(&client, 100);
    fake_take_request(&fake);
    snprintf(head, sizeof(head), "HTTP/1.1 401 Unauthorized\r\nContent-Length: %u\r\n\r\n", (unsigned)strlen(body));
    fake_push(&fake, head, strlen(head));
    fake_push(&fake, body, strlen(body));
    poll_times(6); /* 256 bytes a read: the body comes in a later read than its first bytes */
    assert_int_equal(fake.last_event.kind, MCPB_LINK_REFUSED);
    assert_int_equal(fake.last_event.http_status, 401);
    assert_int_equal(strlen(want), MCPB_REASON_MAX);
    assert_string_equal(fake.last_event.reason, want);
}

/* The refusal's body may come in a later read than its head: the reason waits for it. */
static void test_http_401_body_after_the_head(void **state)
{
    static const char head[] = "HTTP/1.1 401 Unauthorized\r\nContent-Length: 34\r\n\r\n";
    static const char body[] = "{\"error\":\"invalid_provider_token\"}";
    (void)state;
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), 0);
    mcpb_client_poll(&client, 100);
    fake_take_request(&fake);
    fake_push(&fake, head, strlen(head));
    poll_times(2);
    assert_int_equal(client.state, MCPB_STATE_UPGRADING);
    fake_push(&fake, body, strlen(body));
    poll_times(2);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_REFUSED);
    assert_string_equal(fake.last_event.reason, "HTTP 401: {\"error\":\"invalid_provider_token\"}");
}

static void test_http_400_and_503(void **state)
{
    static const char bad_path[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
    static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\n\r\n";
    (void)state;
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), 0);
    mcpb_client_poll(&client, 100);
    fake_take_request(&fake);
    fake_push(&fake, bad_path, strlen(bad_path));
    poll_times(2);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_REFUSED);
    assert_int_equal(fake.last_event.http_status, 400);
    fake.now += fake.last_event.retry_in_ms;
    fake.to_device_len = fake.to_device_at = 0;
    mcpb_client_poll(&client, 100);
    fake_take_request(&fake);
    fake_push(&fake, busy, strlen(busy));
    poll_times(2);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_ERROR);
    assert_int_equal(fake.last_event.http_status, 503);
}

static void test_wrong_accept_not_http_and_timeout(void **state)
{
    (void)state;
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), 0);
    mcpb_client_poll(&client, 100);
    fake_accept_upgrade(&fake, 0);
    poll_times(2);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_ERROR);
    assert_non_null(strstr(fake.last_event.reason, "Sec-WebSocket-Accept"));

    fake.now += fake.last_event.retry_in_ms;
    mcpb_client_poll(&client, 100);
    fake_push(&fake, "SSH-2.0-OpenSSH_9\r\n", 19);
    poll_times(2);
    assert_non_null(strstr(fake.last_event.reason, "not HTTP"));

    fake.now += fake.last_event.retry_in_ms;
    mcpb_client_poll(&client, 100);
    poll_times(200); /* 100 ms each: past the 10 s handshake bound */
    assert_non_null(strstr(fake.last_event.reason, "no upgrade answer"));
}

static void test_connect_failures_back_off_exponentially(void **state)
{
    uint32_t waits[4];
    int i;
    (void)state;
    fake.random_value = UINT32_MAX;
    fake.fail_connects = 4;
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), 0);
    for (i = 0; i < 4; i++) {
        mcpb_client_poll(&client, 100);
        assert_int_equal(fake.last_event.kind, MCPB_LINK_ERROR);
        assert_non_null(strstr(fake.last_event.reason, "cannot connect to 127.0.0.1:3000"));
        waits[i] = fake.last_event.retry_in_ms;
        fake.now += waits[i];
    }
    assert_int_equal(waits[0], 1000);
    assert_int_equal(waits[1], 2000);
    assert_int_equal(waits[2], 4000);
    assert_int_equal(waits[3], 8000);
}

static void test_oversize_request_answered_and_link_survives(void **state)
{
    uint8_t opcode;
    size_t len;
    (void)state;
    open_link();
    memset(payload, 'x', 5000);
    memcpy(payload, "{\"jsonrpc\":\"2.0\",\"id\":\"brk-3\",\"method\":\"tools/call\",\"params\":{\"a\":\"", 66);
    fake_push_frame(&fake, 0x81, payload, 5000, NULL);
    fake_push_text(&fake, "{\"jsonrpc\":\"2.0\",\"id\":\"brk-4\",\"method\":\"ping\"}");
    poll_times(40); /* 256 bytes a read */
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0);
    assert_string_equal(payload, "{\"jsonrpc\":\"2.0\",\"id\":\"brk-3\",\"error\":{\"code\":-32600,\"message\":"
                                 "\"Request too large: 5000 bytes; this device accepts frames of at most 1024 bytes\"}}");
    assert_int_equal(handler.calls, 1);
    assert_true(mcpb_client_connected(&client));
}

/* A close with a code no endpoint may send (RFC 6455 7.4.1: 1005, 1006, 1015; 0 and 4999 are no
 * code at all or unassigned) is answered with 1000, never echoed. */
static void test_close_answered_with_1000_whatever_its_code(void **state)
{
    static const int codes[] = {1005, 1006, 1015, 0, 4999, 1001};
    uint8_t opcode;
    size_t len, i;
    (void)state;
    for (i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        uint8_t close_payload[2] = {(uint8_t)(codes[i] >> 8), (uint8_t)codes[i]};
        setup(NULL);
        open_link();
        fake_push_frame(&fake, 0x88, close_payload, codes[i] == 1005 ? 0 : 2, NULL);
        poll_times(1);
        assert_false(mcpb_client_connected(&client));
        assert_int_equal(fake.last_event.close_code, codes[i]);
        assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0);
        assert_int_equal(opcode, MCPB_WS_CLOSE_FRAME);
        assert_int_equal(len, 2);
        assert_int_equal((uint8_t)payload[0] << 8 | (uint8_t)payload[1], 1000);
    }
}

/* An oversize request's id is the one in its first 96 bytes, as the MicroPython board finds it: a
 * string id of up to 72 characters (74 with its quotes) after {"jsonrpc":"2.0","id":, not null. */
static void test_oversize_request_with_a_long_id(void **state)
{
    static const size_t lengths[] = {64, 66, 72};
    char id[80], expected[300];
    uint8_t opcode;
    size_t len, i;
    (void)state;
    for (i = 0; i < sizeof(lengths) / sizeof(lengths[0]); i++) {
        int n;
        setup(NULL);
        open_link();
        memset(id, 'k', lengths[i]);
        id[lengths[i]] = '\0';
        memset(payload, 'x', 5000);
        n = snprintf(payload, sizeof(payload), "{\"jsonrpc\":\"2.0\",\"id\":\"%s\",\"params\":{\"a\":\"", id);
        payload[n] = 'x';
        fake_push_frame(&fake, 0x81, payload, 5000, NULL);
        poll_times(40);
        assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0);
        snprintf(expected, sizeof(expected), "{\"jsonrpc\":\"2.0\",\"id\":\"%s\",\"error\":{\"code\":-32600,", id);
        assert_memory_equal(payload, expected, strlen(expected));
    }
}

/* An "id" past the first 96 bytes may be a nested one (an argument named id): not the request's. */
static void test_oversize_request_id_past_the_head_is_null(void **state)
{
    uint8_t opcode;
    size_t len;
    int n;
    (void)state;
    open_link();
    memset(payload, 'x', 5000);
    n = snprintf(payload, sizeof(payload), "{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{\"name\":"
                                           "\"get_status\",\"arguments\":{\"note\":\"padding padding\",\"id\":7,"
                                           "\"pad\":\"");
    payload[n] = 'x';
    assert_true(n > 96);
    fake_push_frame(&fake, 0x81, payload, 5000, NULL);
    poll_times(40);
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0);
    assert_memory_equal(payload, "{\"jsonrpc\":\"2.0\",\"id\":null,", 27);
}

/* The next frame answers request `id` (as written in JSON) with -32603 "Response too large", a text
 * frame on a link that stays up. */
static void expect_response_too_large(const char *id)
{
    char expected[128];
    uint8_t opcode;
    size_t len;
    snprintf(expected, sizeof(expected),
             "{\"jsonrpc\":\"2.0\",\"id\":%s,\"error\":{\"code\":-32603,\"message\":\"Response too large\"}}", id);
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0);
    assert_int_equal(opcode, MCPB_WS_TEXT);
    assert_string_equal(payload, expected);
    assert_true(mcpb_client_connected(&client));
}

/* A handler whose answer does not fit: the caller gets -32603 under its id at once, not its deadline. */
static void test_answer_too_large_answered_with_an_error(void **state)
{
    uint8_t opcode;
    size_t len;
    (void)state;
    open_link();
    handler.result = -2000;
    fake_push_text(&fake, "{\"jsonrpc\":\"2.0\",\"id\":\"brk-1\",\"method\":\"tools/list\"}");
    poll_times(1);
    assert_int_equal(handler.calls, 1);
    expect_response_too_large("\"brk-1\"");
    /* an integer id, as written */
    fake_push_text(&fake, "{\"jsonrpc\":\"2.0\",\"id\":77,\"method\":\"tools/call\"}");
    poll_times(1);
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0);
    assert_non_null(strstr(payload, "\"id\":77,\"error\":{\"code\":-32603"));
}

/* A handler that returns more than out_cap: the answer buffer then holds an earlier message's bytes,
 * never sent; the caller gets -32603 under its id, as for a negative length. */
static void test_answer_length_past_out_cap_answered_with_an_error(void **state)
{
    uint8_t opcode;
    size_t len;
    (void)state;
    open_link();
    fake_push_text(&fake, "{\"jsonrpc\":\"2.0\",\"id\":\"brk-1\",\"method\":\"ping\"}");
    poll_times(1);
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0);
    assert_string_equal(payload, handler.answer);
    handler.result = (int)sizeof(answer) + 1;
    fake_push_text(&fake, "{\"jsonrpc\":\"2.0\",\"id\":\"brk-2\",\"method\":\"tools/list\"}");
    poll_times(1);
    expect_response_too_large("\"brk-2\"");
}

static void test_silence_redials_with_close_1001(void **state)
{
    uint8_t opcode;
    size_t len;
    (void)state;
    open_link();
    poll_times(901); /* 100 ms each */
    assert_int_equal(fake.last_event.kind, MCPB_LINK_ERROR);
    assert_non_null(strstr(fake.last_event.reason, "no frame or ping from the gateway for 90 s"));
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0);
    assert_int_equal(opcode, MCPB_WS_CLOSE_FRAME);
    assert_int_equal((uint8_t)payload[0] << 8 | (uint8_t)payload[1], 1001);
}

static void test_lost_connection_and_protocol_error(void **state)
{
    uint8_t opcode;
    size_t len;
    (void)state;
    open_link();
    fake.peer_closed = 1;
    poll_times(1);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_CLOSED);
    assert_int_equal(fake.last_event.close_code, 1006);

    fake.peer_closed = 0;
    fake.now += fake.last_event.retry_in_ms;
    fake.from_device_at = fake.from_device_len;
    mcpb_client_poll(&client, 100);
    fake_accept_upgrade(&fake, 1);
    mcpb_client_poll(&client, 100);
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0); /* register */
    fake_push(&fake, "\xC1\x00", 2); /* RSV1 without an extension */
    poll_times(1);
    assert_int_equal(fake.last_event.kind, MCPB_LINK_ERROR);
    assert_int_equal(fake.last_event.close_code, 1002);
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0);
    assert_int_equal(opcode, MCPB_WS_CLOSE_FRAME);
    assert_int_equal((uint8_t)payload[0] << 8 | (uint8_t)payload[1], 1002);
}

static void test_stop_closes_with_1001(void **state)
{
    uint8_t opcode;
    size_t len;
    (void)state;
    open_link();
    mcpb_client_stop(&client, "device shutting down");
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0);
    assert_int_equal(opcode, MCPB_WS_CLOSE_FRAME);
    assert_string_equal(payload + 2, "device shutting down");
    assert_false(fake.open);
    assert_int_equal(mcpb_client_poll(&client, 100), 100);
    assert_int_equal(fake.connects, 1);
}

static void test_bad_configuration_refused(void **state)
{
    mcpb_slot_t two[2];
    (void)state;
    two[0] = slot;
    two[1] = slot;
    config.slots = two;
    config.slot_count = 2;
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), -1);
    assert_non_null(strstr(fake.last_log, "exactly one slot"));
    config.slots = &slot;
    config.slot_count = 1;
    buffers.message_cap = 100;
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), -1);
    assert_non_null(strstr(fake.last_log, "buffers too small"));
}

/* init refuses a host, token or agent that holds a control character, naming the field and never
 * the secret: a token read with fgets keeps its newline, which would end the X-Provider-Token line
 * (the gateway answered 400 and echoed the secret into the board's log). The device id goes into
 * the register frame as a JSON string, escaped: a control character there is harmless. */
static void test_control_characters_refused(void **state)
{
    static const struct {
        const char **field;
        const char *value;
        const char *log;
    } cases[] = {
        {&config.token, "tok-1\n", "token holds a control character"},
        {&config.token, "tok\r\nX-Other: 1", "token holds a control character"},
        {&config.agent, "agent\x7f", "agent holds a control character"},
        {&config.agent, "agent\t1", "agent holds a control character"},
        {&config.host, "127.0.0.1\r", "host holds a control character"},
    };
    uint8_t opcode;
    size_t i, len;
    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *kept = *cases[i].field;
        *cases[i].field = cases[i].value;
        assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), -1);
        assert_string_equal(fake.last_log, cases[i].log);
        assert_int_equal(mcpb_client_poll(&client, 100), 100);
        assert_int_equal(fake.connects, 0);
        *cases[i].field = kept;
    }
    config.agent = "agent \xc3\xa9 1"; /* UTF-8 and spaces are fine */
    config.device_id = "host\n1";
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), 0);
    mcpb_client_poll(&client, 100);
    assert_non_null(strstr((const char *)fake.from_device, "User-Agent: agent \xc3\xa9 1\r\n"));
    fake_accept_upgrade(&fake, 1);
    mcpb_client_poll(&client, 100);
    assert_true(mcpb_client_connected(&client));
    assert_int_equal(fake_next_frame(&fake, &opcode, payload, sizeof(payload), &len), 0);
    assert_non_null(strstr(payload, "\"device_id\":\"host\\n1\""));
}

/* A maximum below the minimum is not refused: it is raised to the minimum (docs/device-c.md). */
static void test_backoff_max_below_min_is_raised_to_it(void **state)
{
    int i;
    (void)state;
    fake.random_value = UINT32_MAX;
    fake.fail_connects = 3;
    config.backoff_min_ms = 5000;
    config.backoff_max_ms = 2000;
    assert_int_equal(mcpb_client_init(&client, &config, &port, &buffers), 0);
    for (i = 0; i < 3; i++) {
        mcpb_client_poll(&client, 100);
        assert_int_equal(fake.last_event.kind, MCPB_LINK_ERROR);
        assert_int_equal(fake.last_event.retry_in_ms, 5000);
        fake.now += fake.last_event.retry_in_ms;
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_request_answered_masked, setup),
        cmocka_unit_test_setup(test_websocket_ping_gets_pong, setup),
        cmocka_unit_test_setup(test_frames_with_the_101_are_served, setup),
        cmocka_unit_test_setup(test_interim_answers_before_the_101_are_skipped, setup),
        cmocka_unit_test_setup(test_held_slot_refusal_backs_off_to_max, setup),
        cmocka_unit_test_setup(test_close_after_traffic_redials_soon, setup),
        cmocka_unit_test_setup(test_failed_dials_after_a_good_link_keep_doubling, setup),
        cmocka_unit_test_setup(test_closes_in_the_handshake_climb_to_the_longest_back_off, setup),
        cmocka_unit_test_setup(test_http_401_is_a_refusal_with_the_body, setup),
        cmocka_unit_test_setup(test_http_refusal_reason_is_the_error_description, setup),
        cmocka_unit_test_setup(test_http_401_body_after_the_head, setup),
        cmocka_unit_test_setup(test_http_400_and_503, setup),
        cmocka_unit_test_setup(test_wrong_accept_not_http_and_timeout, setup),
        cmocka_unit_test_setup(test_connect_failures_back_off_exponentially, setup),
        cmocka_unit_test_setup(test_oversize_request_answered_and_link_survives, setup),
        cmocka_unit_test_setup(test_close_answered_with_1000_whatever_its_code, setup),
        cmocka_unit_test_setup(test_oversize_request_with_a_long_id, setup),
        cmocka_unit_test_setup(test_oversize_request_id_past_the_head_is_null, setup),
        cmocka_unit_test_setup(test_answer_too_large_answered_with_an_error, setup),
        cmocka_unit_test_setup(test_answer_length_past_out_cap_answered_with_an_error, setup),
        cmocka_unit_test_setup(test_silence_redials_with_close_1001, setup),
        cmocka_unit_test_setup(test_lost_connection_and_protocol_error, setup),
        cmocka_unit_test_setup(test_stop_closes_with_1001, setup),
        cmocka_unit_test_setup(test_bad_configuration_refused, setup),
        cmocka_unit_test_setup(test_control_characters_refused, setup),
        cmocka_unit_test_setup(test_backoff_max_below_min_is_raised_to_it, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
