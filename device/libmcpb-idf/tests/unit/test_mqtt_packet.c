/* The host MQTT client's packet codec (ports/posix/mqtt_posix.c), and its reading of packets off
 * a socket: a socketpair stands in for the broker. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mqtt_posix.h"

static void check_length(uint32_t length, const uint8_t *bytes, size_t count)
{
    uint8_t out[4];
    uint32_t back = 0;
    size_t used = 0;
    assert_int_equal(mcpb_mqtt_put_length(out, length), count);
    assert_memory_equal(out, bytes, count);
    assert_int_equal(mcpb_mqtt_get_length(out, count, &back, &used), 0);
    assert_int_equal(back, length);
    assert_int_equal(used, count);
    /* every shorter prefix asks for more */
    while (count-- > 0) {
        assert_int_equal(mcpb_mqtt_get_length(out, count, &back, &used), MCPB_MQTT_PKT_SHORT);
    }
}

static void test_remaining_length_boundaries(void **state)
{
    static const uint8_t b0[] = {0x00};
    static const uint8_t b127[] = {0x7F};
    static const uint8_t b128[] = {0x80, 0x01};
    static const uint8_t b16383[] = {0xFF, 0x7F};
    static const uint8_t b16384[] = {0x80, 0x80, 0x01};
    static const uint8_t b2097151[] = {0xFF, 0xFF, 0x7F};
    static const uint8_t b2097152[] = {0x80, 0x80, 0x80, 0x01};
    static const uint8_t bmax[] = {0xFF, 0xFF, 0xFF, 0x7F};
    uint8_t out[4];
    (void)state;
    check_length(0, b0, 1);
    check_length(127, b127, 1);
    check_length(128, b128, 2);
    check_length(16383, b16383, 2);
    check_length(16384, b16384, 3);
    check_length(2097151, b2097151, 3);
    check_length(2097152, b2097152, 4);
    check_length(MCPB_MQTT_LENGTH_MAX, bmax, 4);
    assert_int_equal(mcpb_mqtt_put_length(out, MCPB_MQTT_LENGTH_MAX + 1), 0);
}

static void test_remaining_length_malformed(void **state)
{
    static const uint8_t five[] = {0xFF, 0xFF, 0xFF, 0xFF, 0x01};
    uint32_t length;
    size_t used;
    (void)state;
    assert_int_equal(mcpb_mqtt_get_length(five, sizeof five, &length, &used), MCPB_MQTT_PKT_MALFORMED);
    assert_int_equal(mcpb_mqtt_get_length(five, 4, &length, &used), MCPB_MQTT_PKT_MALFORMED);
    assert_int_equal(mcpb_mqtt_get_length(five, 0, &length, &used), MCPB_MQTT_PKT_SHORT);
}

static void test_connect_with_will_and_credential(void **state)
{
    static const uint8_t expected[] = {
        0x10, 41,                                     /* CONNECT, remaining length */
        0, 4, 'M', 'Q', 'T', 'T', 4,                  /* protocol name and level 3.1.1 */
        0xEE,                                         /* user, password, will retain, will QoS 1, will, clean */
        0, 60,                                        /* keepalive */
        0, 6, 'm', 'c', 'p', 'b', '-', '1',           /* client id */
        0, 8, 'm', 'c', 'p', 'b', '/', '1', '/', 's', /* will topic (mcpb/1/s) */
        0, 0,                                         /* empty will message */
        0, 4, 'u', 's', 'e', 'r',                     /* user */
        0, 3, 'p', 'w', 'd',                          /* password */
    };
    mcpb_mqtt_connect_options o;
    uint8_t buf[128];
    (void)state;
    memset(&o, 0, sizeof o);
    o.client_id = "mcpb-1";
    o.keepalive_s = 60;
    o.will_topic = "mcpb/1/s";
    o.will_payload = "";
    o.will_qos = 1;
    o.will_retain = 1;
    o.username = "user";
    o.password = "pwd";
    assert_int_equal(mcpb_mqtt_encode_connect(buf, sizeof buf, &o), sizeof expected);
    assert_memory_equal(buf, expected, sizeof expected);
    assert_int_equal(mcpb_mqtt_encode_connect(buf, sizeof expected - 1, &o), MCPB_MQTT_PKT_SPACE);
    o.username = NULL; /* a password alone is never sent */
    o.will_topic = NULL;
    assert_int_equal(mcpb_mqtt_encode_connect(buf, sizeof buf, &o), 20);
    assert_int_equal(buf[9], 0x02);
}

static void test_subscribe(void **state)
{
    static const uint8_t expected[] = {0x82, 8, 0x12, 0x34, 0, 3, 'a', '/', 'b', 1};
    uint8_t buf[16];
    (void)state;
    assert_int_equal(mcpb_mqtt_encode_subscribe(buf, sizeof buf, 0x1234, "a/b", 1), sizeof expected);
    assert_memory_equal(buf, expected, sizeof expected);
    assert_int_equal(mcpb_mqtt_encode_subscribe(buf, 9, 0x1234, "a/b", 1), MCPB_MQTT_PKT_SPACE);
}

static void test_publish_head_around_length_boundaries(void **state)
{
    uint8_t buf[32];
    (void)state;
    /* topic "t/up" (2 + 4) plus packet id 2: 8 bytes before the payload */
    assert_int_equal(mcpb_mqtt_encode_publish_head(buf, sizeof buf, "t/up", 119, 1, 0, 7), 2 + 8);
    assert_int_equal(buf[0], 0x32);
    assert_int_equal(buf[1], 127);
    assert_int_equal(mcpb_mqtt_encode_publish_head(buf, sizeof buf, "t/up", 120, 1, 0, 7), 3 + 8);
    assert_int_equal(buf[1], 0x80);
    assert_int_equal(buf[2], 0x01);
    assert_int_equal(buf[9], 0);
    assert_int_equal(buf[10], 7);
    assert_int_equal(mcpb_mqtt_encode_publish_head(buf, sizeof buf, "t/up", 16384 - 8, 1, 1, 7), 4 + 8);
    assert_int_equal(buf[0], 0x33);
    /* QoS 0 has no packet id; an empty retained status is header and topic only */
    assert_int_equal(mcpb_mqtt_encode_publish_head(buf, sizeof buf, "t/status", 0, 0, 1, 0), 2 + 10);
    assert_int_equal(buf[0], 0x31);
    assert_int_equal(buf[1], 10);
    assert_int_equal(mcpb_mqtt_encode_publish_head(buf, sizeof buf, "t", MCPB_MQTT_LENGTH_MAX, 1, 0, 1),
                     MCPB_MQTT_PKT_SPACE);
}

static const uint8_t a_publish[] = {0x33, 12, 0, 4, 'm', '/', 'u', 'p', 0x01, 0x02, '{', '}', '!', '?'};

static void test_decode_publish(void **state)
{
    mcpb_mqtt_publish_view v;
    size_t cut;
    (void)state;
    assert_int_equal(mcpb_mqtt_decode_publish(a_publish, sizeof a_publish, &v), 0);
    assert_int_equal(v.qos, 1);
    assert_int_equal(v.retained, 1);
    assert_int_equal(v.packet_id, 0x0102);
    assert_int_equal(v.topic_len, 4);
    assert_memory_equal(v.topic, "m/up", 4);
    assert_int_equal(v.payload_len, 4);
    assert_memory_equal(v.payload, "{}!?", 4);
    for (cut = 0; cut < sizeof a_publish; cut++) {
        assert_int_equal(mcpb_mqtt_decode_publish(a_publish, cut, &v), MCPB_MQTT_PKT_SHORT);
    }
}

static void test_decode_publish_malformed(void **state)
{
    static const uint8_t topic_past_end[] = {0x30, 4, 0, 9, 'a', 'b'};
    static const uint8_t qos3[] = {0x36, 3, 0, 1, 'a'};
    static const uint8_t qos2[] = {0x34, 5, 0, 1, 'a', 0, 1};
    static const uint8_t no_room_for_id[] = {0x32, 4, 0, 2, 'a', 'b'};
    static const uint8_t too_short[] = {0x30, 1, 0};
    static const uint8_t not_publish[] = {0x40, 2, 0, 1};
    mcpb_mqtt_publish_view v;
    (void)state;
    assert_int_equal(mcpb_mqtt_decode_publish(topic_past_end, sizeof topic_past_end, &v), MCPB_MQTT_PKT_MALFORMED);
    assert_int_equal(mcpb_mqtt_decode_publish(qos3, sizeof qos3, &v), MCPB_MQTT_PKT_MALFORMED);
    assert_int_equal(mcpb_mqtt_decode_publish(qos2, sizeof qos2, &v), MCPB_MQTT_PKT_MALFORMED);
    assert_int_equal(mcpb_mqtt_decode_publish(no_room_for_id, sizeof no_room_for_id, &v), MCPB_MQTT_PKT_MALFORMED);
    assert_int_equal(mcpb_mqtt_decode_publish(too_short, sizeof too_short, &v), MCPB_MQTT_PKT_MALFORMED);
    assert_int_equal(mcpb_mqtt_decode_publish(not_publish, sizeof not_publish, &v), MCPB_MQTT_PKT_MALFORMED);
}

static void test_connack_and_suback(void **state)
{
    static const uint8_t accepted[] = {0x20, 2, 0, 0};
    static const uint8_t refused[] = {0x20, 2, 0, 5};
    static const uint8_t unknown_code[] = {0x20, 2, 0, 6};
    static const uint8_t wrong_type[] = {0x90, 2, 0, 0};
    static const uint8_t granted[] = {0x90, 3, 0, 7, 1};
    static const uint8_t denied[] = {0x90, 3, 0, 7, 0x80};
    static const uint8_t odd_code[] = {0x90, 3, 0, 7, 3};
    (void)state;
    assert_int_equal(mcpb_mqtt_decode_connack(accepted, 4), 0);
    assert_int_equal(mcpb_mqtt_decode_connack(refused, 4), 5);
    assert_int_equal(mcpb_mqtt_decode_connack(unknown_code, 4), MCPB_MQTT_PKT_MALFORMED);
    assert_int_equal(mcpb_mqtt_decode_connack(wrong_type, 4), MCPB_MQTT_PKT_MALFORMED);
    assert_int_equal(mcpb_mqtt_decode_connack(accepted, 3), MCPB_MQTT_PKT_SHORT);
    assert_int_equal(mcpb_mqtt_decode_suback(granted, 5, 7), 1);
    assert_int_equal(mcpb_mqtt_decode_suback(denied, 5, 7), 0x80);
    assert_int_equal(mcpb_mqtt_decode_suback(granted, 5, 8), MCPB_MQTT_PKT_MALFORMED);
    assert_int_equal(mcpb_mqtt_decode_suback(odd_code, 5, 7), MCPB_MQTT_PKT_MALFORMED);
    assert_int_equal(mcpb_mqtt_decode_suback(granted, 4, 7), MCPB_MQTT_PKT_SHORT);
}

/* ---- the client on a socket ---- */

typedef struct wire {
    mcpb_mqtt_posix client;
    mcpb_mqtt_port port;
    int broker; /* the test's end */
    char topic[64];
    char payload[16];
    mcpb_mqtt_message m;
} wire;

static void wire_up(wire *w)
{
    int fds[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    mcpb_mqtt_posix_port(&w->client, &w->port);
    w->client.fd = fds[0];
    w->client.io_timeout_ms = 200;
    w->broker = fds[1];
    memset(&w->m, 0, sizeof w->m);
    w->m.topic = w->topic;
    w->m.topic_cap = sizeof w->topic;
    w->m.payload = w->payload;
    w->m.payload_cap = sizeof w->payload;
}

static void wire_down(wire *w)
{
    w->port.close(w->port.ctx, 0);
    close(w->broker);
}

static void test_receive_acks_a_qos1_publish_and_skips_other_packets(void **state)
{
    static const uint8_t pingresp_then_puback[] = {0xD0, 0, 0x40, 2, 0, 9};
    uint8_t ack[4];
    wire w;
    (void)state;
    wire_up(&w);
    assert_int_equal(write(w.broker, pingresp_then_puback, sizeof pingresp_then_puback), sizeof pingresp_then_puback);
    assert_int_equal(write(w.broker, a_publish, sizeof a_publish), sizeof a_publish);
    assert_int_equal(w.port.receive(w.port.ctx, &w.m, 500), MCPB_MQTT_MESSAGE);
    assert_int_equal(w.m.topic_len, 4);
    assert_memory_equal(w.topic, "m/up", 4);
    assert_int_equal(w.m.size, 4);
    assert_int_equal(w.m.payload_len, 4);
    assert_memory_equal(w.payload, "{}!?", 4);
    assert_int_equal(w.m.retained, 1);
    assert_int_equal(read(w.broker, ack, sizeof ack), sizeof ack);
    assert_int_equal(ack[0], 0x40);
    assert_int_equal(ack[1], 2);
    assert_int_equal(ack[2], 1);
    assert_int_equal(ack[3], 2);
    assert_int_equal(w.port.receive(w.port.ctx, &w.m, 20), 0); /* nothing more: a timeout */
    wire_down(&w);
}

static void test_receive_keeps_the_head_of_an_oversize_message(void **state)
{
    uint8_t packet[2 + 2 + 1 + 200];
    wire w;
    (void)state;
    wire_up(&w);
    memset(packet, 'x', sizeof packet);
    packet[0] = 0x30;
    packet[1] = 0x80 | (203 & 0x7F);
    packet[2] = 203 >> 7;
    packet[3] = 0;
    packet[4] = 1; /* topic length 1, then topic 'x' and 200 bytes of payload */
    assert_int_equal(write(w.broker, packet, 5), 5);
    assert_int_equal(write(w.broker, packet + 5, sizeof packet - 5 - 1), sizeof packet - 6);
    /* one byte short: the first read stalls and the link counts as gone */
    assert_int_equal(w.port.receive(w.port.ctx, &w.m, 500), MCPB_MQTT_E_LINK);
    wire_down(&w);

    wire_up(&w);
    {
        uint8_t whole[3 + 203];
        memset(whole, 'y', sizeof whole);
        whole[0] = 0x30;
        whole[1] = 0x80 | (203 & 0x7F);
        whole[2] = 203 >> 7;
        whole[3] = 0;
        whole[4] = 1;
        assert_int_equal(write(w.broker, whole, sizeof whole), sizeof whole);
        assert_int_equal(w.port.receive(w.port.ctx, &w.m, 500), MCPB_MQTT_MESSAGE);
        assert_int_equal(w.m.size, 200);
        assert_int_equal(w.m.payload_len, sizeof w.payload);
        assert_int_equal(w.m.retained, 0);
    }
    wire_down(&w);
}

static void test_receive_refuses_malformed_input(void **state)
{
    static const uint8_t five_length_bytes[] = {0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01};
    static const uint8_t qos2[] = {0x34, 5, 0, 1, 'a', 0, 1};
    wire w;
    (void)state;
    wire_up(&w);
    assert_int_equal(write(w.broker, five_length_bytes, sizeof five_length_bytes), sizeof five_length_bytes);
    assert_int_equal(w.port.receive(w.port.ctx, &w.m, 500), MCPB_MQTT_E_LINK);
    wire_down(&w);
    wire_up(&w);
    assert_int_equal(write(w.broker, qos2, sizeof qos2), sizeof qos2);
    assert_int_equal(w.port.receive(w.port.ctx, &w.m, 500), MCPB_MQTT_E_LINK);
    wire_down(&w);
    wire_up(&w);
    close(w.broker); /* the broker hangs up */
    w.broker = -1;
    assert_int_equal(w.port.receive(w.port.ctx, &w.m, 500), MCPB_MQTT_E_LINK);
    w.port.close(w.port.ctx, 0);
}

static void test_keepalive_pings_and_gives_up_without_an_answer(void **state)
{
    uint8_t ping[2];
    wire w;
    (void)state;
    wire_up(&w);
    w.client.keepalive_s = 1; /* PINGREQ after 500 ms idle, give up 500 ms later */
    w.client.sent_ms = w.port.now_ms(w.port.ctx);
    assert_int_equal(w.port.receive(w.port.ctx, &w.m, 700), 0);
    assert_int_equal(read(w.broker, ping, sizeof ping), 2);
    assert_int_equal(ping[0], 0xC0);
    assert_int_equal(ping[1], 0);
    assert_int_equal(w.port.receive(w.port.ctx, &w.m, 2000), MCPB_MQTT_E_LINK);
    wire_down(&w);
}

static void test_publish_writes_head_and_payload(void **state)
{
    static const uint8_t expected[] = {0x32, 9, 0, 3, 'm', '/', 'u', 0, 1, '{', '}'};
    uint8_t got[32];
    wire w;
    (void)state;
    wire_up(&w);
    assert_int_equal(w.port.publish(w.port.ctx, "m/u", "{}", 2, 1, 0), 0);
    assert_int_equal(read(w.broker, got, sizeof got), sizeof expected);
    assert_memory_equal(got, expected, sizeof expected);
    w.port.close(w.port.ctx, 1);
    assert_int_equal(read(w.broker, got, sizeof got), 2);
    assert_int_equal(got[0], 0xE0);
    close(w.broker);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_remaining_length_boundaries),
        cmocka_unit_test(test_remaining_length_malformed),
        cmocka_unit_test(test_connect_with_will_and_credential),
        cmocka_unit_test(test_subscribe),
        cmocka_unit_test(test_publish_head_around_length_boundaries),
        cmocka_unit_test(test_decode_publish),
        cmocka_unit_test(test_decode_publish_malformed),
        cmocka_unit_test(test_connack_and_suback),
        cmocka_unit_test(test_receive_acks_a_qos1_publish_and_skips_other_packets),
        cmocka_unit_test(test_receive_keeps_the_head_of_an_oversize_message),
        cmocka_unit_test(test_receive_refuses_malformed_input),
        cmocka_unit_test(test_keepalive_pings_and_gives_up_without_an_answer),
        cmocka_unit_test(test_publish_writes_head_and_payload),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
