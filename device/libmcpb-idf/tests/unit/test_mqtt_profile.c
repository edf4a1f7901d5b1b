/* The MQTT plain profile (core/src/mcpb_mqtt.c) against a fake message port that records what
 * the profile does and hands it scripted messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "mcpb/mqtt.h"

#define MAX_CALLS 16
#define MAX_INBOX 8

typedef struct sent {
    char topic[MCPB_MQTT_TOPIC_MAX];
    char data[512];
    size_t len;
    int qos;
    int retain;
} sent;

typedef struct scripted {
    const char *topic;
    const char *payload;
    size_t size; /* 0: strlen(payload) */
    int retained;
} scripted;

typedef struct fake {
    uint32_t clock;
    int connects, subscribes, closes, clean_closes, refuse_subscribe, lost;
    mcpb_mqtt_connect_options options;
    char will_topic[MCPB_MQTT_TOPIC_MAX];
    char subscribed[MCPB_MQTT_TOPIC_MAX];
    int subscribed_qos;
    int order; /* bumped per call, to check subscribe comes before the register frame */
    int subscribe_at;
    int first_publish_at;
    sent published[MAX_CALLS];
    int publishes;
    scripted inbox[MAX_INBOX];
    int inbox_len, inbox_next;
    char last_log[256];
    int logs;
    volatile int *stop_when_empty;
    uint32_t random;
} fake;

static int fake_connect(void *ctx, const mcpb_mqtt_connect_options *options)
{
    fake *f = ctx;
    f->order++;
    f->connects++;
    f->options = *options;
    strcpy(f->will_topic, options->will_topic);
    f->options.will_topic = f->will_topic;
    return 0;
}

static int fake_subscribe(void *ctx, const char *topic, int qos)
{
    fake *f = ctx;
    f->subscribe_at = ++f->order;
    f->subscribes++;
    strcpy(f->subscribed, topic);
    f->subscribed_qos = qos;
    return f->refuse_subscribe ? MCPB_MQTT_E_REFUSED : 0;
}

static int fake_publish(void *ctx, const char *topic, const void *data, size_t len, int qos, int retain)
{
    fake *f = ctx;
    sent *s;
    if (f->lost) {
        return MCPB_MQTT_E_LINK;
    }
    assert_true(f->publishes < MAX_CALLS);
    assert_true(len < sizeof s->data);
    s = &f->published[f->publishes++];
    if (f->first_publish_at == 0) {
        f->first_publish_at = ++f->order;
    }
    strcpy(s->topic, topic);
    memcpy(s->data, data, len);
    s->data[len] = '\0';
    s->len = len;
    s->qos = qos;
    s->retain = retain;
    return 0;
}

static int fake_receive(void *ctx, mcpb_mqtt_message *m, uint32_t timeout_ms)
{
    fake *f = ctx;
    const scripted *s;
    size_t size;
    if (f->lost) {
        return MCPB_MQTT_E_LINK;
    }
    if (f->inbox_next == f->inbox_len) {
        f->clock += timeout_ms;
        if (f->stop_when_empty != NULL) {
            *f->stop_when_empty = 1;
        }
        return 0;
    }
    s = &f->inbox[f->inbox_next++];
    size = s->size != 0 ? s->size : strlen(s->payload);
    m->topic_len = strlen(s->topic);
    memcpy(m->topic, s->topic, m->topic_len < m->topic_cap ? m->topic_len : m->topic_cap);
    m->payload_len = strlen(s->payload) < m->payload_cap ? strlen(s->payload) : m->payload_cap;
    memcpy(m->payload, s->payload, m->payload_len);
    m->size = size;
    m->retained = s->retained;
    m->qos = 1;
    f->clock += 5;
    return MCPB_MQTT_MESSAGE;
}

static void fake_close(void *ctx, int clean)
{
    fake *f = ctx;
    f->closes++;
    f->clean_closes += clean != 0;
}

static uint32_t fake_now(void *ctx)
{
    return ((fake *)ctx)->clock;
}

static void fake_log(void *ctx, int level, const char *message)
{
    fake *f = ctx;
    (void)level;
    f->logs++;
    strncpy(f->last_log, message, sizeof f->last_log - 1);
}

static uint32_t fake_random(void *ctx)
{
    return ((fake *)ctx)->random;
}

static void fake_sleep(void *ctx, uint32_t ms)
{
    ((fake *)ctx)->clock += ms;
}

/* The handler: echoes "answer to <request>", records what it saw. */
typedef struct echo {
    int calls;
    char seen[512];
    int result; /* 1: answer; 0: no answer; -1: out too small; 2: a length past out_cap */
} echo;

static int echo_handler(void *ctx, const char *in, size_t in_len, char *out, size_t out_cap)
{
    echo *e = ctx;
    e->calls++;
    memcpy(e->seen, in, in_len);
    e->seen[in_len] = '\0';
    if (e->result <= 0) {
        return e->result == 0 ? 0 : -(int)(out_cap + 1);
    }
    if (e->result == 2) {
        return (int)(out_cap + 1);
    }
    assert_true(in_len + 10 < out_cap);
    memcpy(out, "answer to ", 10);
    memcpy(out + 10, in, in_len);
    return (int)(in_len + 10);
}

typedef struct rig {
    fake f;
    mcpb_mqtt_port port;
    mcpb_mqtt_config config;
    mcpb_hello_t hello;
    mcpb_mqtt m;
    char in[256];
    char out[512];
    echo e;
} rig;

static rig *new_rig(void)
{
    static rig r; /* one test at a time; reset here */
    memset(&r, 0, sizeof r);
    r.port.ctx = &r.f;
    r.port.connect = fake_connect;
    r.port.subscribe = fake_subscribe;
    r.port.publish = fake_publish;
    r.port.receive = fake_receive;
    r.port.close = fake_close;
    r.port.now_ms = fake_now;
    r.port.log = fake_log;
    r.port.random32 = fake_random;
    r.port.sleep_ms = fake_sleep;
    r.f.clock = 1000;
    mcpb_mqtt_config_defaults(&r.config);
    r.config.host = "broker.lan";
    r.config.slot = "pump-1";
    r.config.username = "pump-1";
    r.config.password = "secret";
    r.hello.device_id = "24:0a:c4:12:34:56";
    r.hello.firmware_name = "pump-1-idf";
    r.hello.firmware_version = "0.1.0";
    r.hello.schema = "05bcc58176efee25";
    r.config.hello = &r.hello;
    r.e.result = 1;
    return &r;
}

static int start(rig *r)
{
    int rc = mcpb_mqtt_init(&r->m, &r->config, &r->port, r->in, sizeof r->in, r->out, sizeof r->out);
    return rc != 0 ? rc : mcpb_mqtt_open(&r->m);
}

static void push(rig *r, const char *topic, const char *payload, size_t size, int retained)
{
    scripted *s = &r->f.inbox[r->f.inbox_len++];
    s->topic = topic;
    s->payload = payload;
    s->size = size;
    s->retained = retained;
}

static void test_topics_and_client_id(void **state)
{
    rig *r = new_rig();
    (void)state;
    r->config.prefix = "site-a/cell-3/mcpb";
    assert_int_equal(mcpb_mqtt_init(&r->m, &r->config, &r->port, r->in, sizeof r->in, r->out, sizeof r->out), 0);
    assert_string_equal(r->m.status_topic, "site-a/cell-3/mcpb/pump-1/status");
    assert_string_equal(r->m.down_topic, "site-a/cell-3/mcpb/pump-1/down");
    assert_string_equal(r->m.up_topic, "site-a/cell-3/mcpb/pump-1/up");
    assert_string_equal(r->m.client_id, "mcpb-pump-1");
    r->config.prefix = NULL;
    r->config.client_id = "cell-3-pump-1";
    assert_int_equal(mcpb_mqtt_init(&r->m, &r->config, &r->port, r->in, sizeof r->in, r->out, sizeof r->out), 0);
    assert_string_equal(r->m.status_topic, "mcpb/pump-1/status");
    assert_string_equal(r->m.client_id, "cell-3-pump-1");
}

static void test_names_that_cannot_be_topic_levels(void **state)
{
    static const char *const slots[] = {
        "", "_all", ".", "..", "a/b", "a+b", "a#", "tab\there", "del\x7f", "zero\xe2\x80\x8bwidth",
        "bidi\xe2\x80\xaeyes", "bom\xef\xbb\xbf", "c1\xc2\x85",
        "12345678901234567890123456789012345678901234567890123456789012345",
    };
    static const char *const prefixes[] = {"", "$SYS", "/mcpb", "mcpb/", "a//b", "a/+/b", "#"};
    rig *r = new_rig();
    size_t i;
    (void)state;
    for (i = 0; i < sizeof slots / sizeof slots[0]; i++) {
        r->config.slot = slots[i];
        assert_int_equal(mcpb_mqtt_init(&r->m, &r->config, &r->port, r->in, sizeof r->in, r->out, sizeof r->out),
                         MCPB_MQTT_E_CONFIG);
    }
    r->config.slot = "pump-1";
    for (i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        r->config.prefix = prefixes[i];
        assert_int_equal(mcpb_mqtt_init(&r->m, &r->config, &r->port, r->in, sizeof r->in, r->out, sizeof r->out),
                         MCPB_MQTT_E_CONFIG);
    }
    r->config.prefix = NULL;
    r->config.username = NULL; /* a password without a user */
    assert_int_equal(mcpb_mqtt_init(&r->m, &r->config, &r->port, r->in, sizeof r->in, r->out, sizeof r->out),
                     MCPB_MQTT_E_CONFIG);
    r->config.username = "u";
    r->config.slot = "caf\xc3\xa9-\"1\""; /* UTF-8 and quotes are fine in a slot */
    assert_int_equal(mcpb_mqtt_init(&r->m, &r->config, &r->port, r->in, sizeof r->in, r->out, sizeof r->out), 0);
}

/* Names the gateway refuses in a slot (gateway/core/names.py): init refuses them too, with a
 * config_error line naming the slot, instead of announcing a slot the gateway never attaches. */
static void test_slots_the_gateway_refuses_are_refused_at_init(void **state)
{
    static const char *const slots[] = {
        "ls\xe2\x80\xa8x",         /* U+2028 line separator */
        "ps\xe2\x80\xa9x",         /* U+2029 paragraph separator */
        "pu\xee\x80\x80x",         /* U+E000 private use */
        "pu\xef\xa3\xbf",          /* U+F8FF, the last of the BMP's private use */
        "pu\xf3\xb0\x80\x80",     /* U+F0000, plane 15 private use */
        "alm\xd8\x9c",             /* U+061C Arabic letter mark */
        "mvs\xe1\xa0\x8e",         /* U+180E Mongolian vowel separator */
        "ann\xef\xbf\xb9",         /* U+FFF9 interlinear annotation anchor */
        "ann\xef\xbf\xbb",         /* U+FFFB */
        "tag\xf3\xa0\x80\x81",     /* U+E0001 language tag */
        "tag\xf3\xa0\x81\xbf",     /* U+E007F cancel tag */
        "wj\xe2\x81\xa0",          /* U+2060 word joiner */
        "isol\xe2\x81\xa6",        /* U+2066 left-to-right isolate */
        "num\xd8\x80",             /* U+0600 Arabic number sign */
        "egy\xf0\x93\x90\xb0",     /* U+13430 Egyptian hieroglyph format control */
        "mus\xf0\x9d\x85\xb3",     /* U+1D173 musical symbol begin beam */
        "kai\xf0\x91\x82\xbd",     /* U+110BD Kaithi number sign */
        "non\xef\xb7\x90",         /* U+FDD0 noncharacter */
        "non\xef\xbf\xbe",         /* U+FFFE noncharacter */
        "non\xf0\x9f\xbf\xbf",     /* U+1FFFF noncharacter */
        "res\xef\xbf\xb0",         /* U+FFF0 unassigned */
        "un\xf1\x80\x80\x80",      /* U+40000, plane 4: unassigned */
        "bad\xffx",                 /* no UTF-8 text holds 0xFF */
        "cut\xe2\x80",             /* a lead byte without all its continuation bytes */
        "over\xe0\x80\xaf",        /* an overlong "/" */
        "sur\xed\xa0\x80",         /* U+D800, a surrogate */
        "big\xf4\x90\x80\x80",     /* past U+10FFFF */
    };
    rig *r = new_rig();
    size_t i;
    (void)state;
    for (i = 0; i < sizeof slots / sizeof slots[0]; i++) {
        r->config.slot = slots[i];
        r->f.last_log[0] = '\0';
        assert_int_equal(mcpb_mqtt_init(&r->m, &r->config, &r->port, r->in, sizeof r->in, r->out, sizeof r->out),
                         MCPB_MQTT_E_CONFIG);
        assert_non_null(strstr(r->f.last_log, "mqtt config_error: slot is not printable UTF-8"));
    }
}

/* What the gateway takes in a name stays allowed: letters of any script, spaces, symbols, emoji,
 * the variation selectors, CJK beyond the BMP. */
static void test_printable_slots_outside_ascii_are_taken(void **state)
{
    static const char *const slots[] = {
        "caf\xc3\xa9",                /* U+00E9 */
        "Cell 3",                      /* a space */
        "\xd0\xbd\xd0\xb0\xd1\x81\xd0\xbe\xd1\x81", /* Cyrillic */
        "pump\xe2\x80\x90" "1",      /* U+2010 hyphen, next to the zero-width characters */
        "pump\xe2\x80\xaf" "1",      /* U+202F narrow no-break space (Zs), after the bidi controls */
        "\xef\xbf\xbd",              /* U+FFFD replacement character, between FFFB and FFFE */
        "\xef\xbb\xbe",              /* U+FEFE, next to the byte order mark */
        "\xe1\x82\xbd",              /* U+10BD Georgian, the low 16 bits of U+110BD */
        "\xf0\x9f\x92\xa7",          /* U+1F4A7 droplet */
        "\xf0\xa0\x80\x80",          /* U+20000 CJK extension B */
        "vs\xf3\xa0\x84\x80",        /* U+E0100 variation selector 17 */
        "\xe4\xb8\xad\xe6\x96\x87", /* U+4E2D U+6587 */
    };
    rig *r = new_rig();
    size_t i;
    (void)state;
    for (i = 0; i < sizeof slots / sizeof slots[0]; i++) {
        r->config.slot = slots[i];
        assert_int_equal(mcpb_mqtt_init(&r->m, &r->config, &r->port, r->in, sizeof r->in, r->out, sizeof r->out), 0);
    }
}

static void test_open_sets_will_subscribes_then_announces(void **state)
{
    rig *r = new_rig();
    (void)state;
    assert_int_equal(start(r), 0);
    assert_string_equal(r->f.options.host, "broker.lan");
    assert_int_equal(r->f.options.port, 1883);
    assert_string_equal(r->f.options.client_id, "mcpb-pump-1");
    assert_string_equal(r->f.options.username, "pump-1");
    assert_string_equal(r->f.options.password, "secret");
    assert_int_equal(r->f.options.keepalive_s, 60);
    assert_string_equal(r->f.will_topic, "mcpb/pump-1/status");
    assert_int_equal(r->f.options.will_len, 0);
    assert_int_equal(r->f.options.will_qos, 1);
    assert_int_equal(r->f.options.will_retain, 1);
    assert_string_equal(r->f.subscribed, "mcpb/pump-1/down");
    assert_int_equal(r->f.subscribed_qos, 1);
    assert_true(r->f.subscribe_at < r->f.first_publish_at);
    assert_int_equal(r->f.publishes, 1);
    assert_string_equal(r->f.published[0].topic, "mcpb/pump-1/status");
    assert_int_equal(r->f.published[0].qos, 1);
    assert_int_equal(r->f.published[0].retain, 1);
    assert_string_equal(r->f.published[0].data,
                        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/register\",\"params\":{\"hello\":"
                        "{\"device_id\":\"24:0a:c4:12:34:56\",\"firmware\":{\"name\":\"pump-1-idf\",\"version\":"
                        "\"0.1.0\"},\"schema\":\"05bcc58176efee25\"},\"slot\":\"pump-1\",\"aggregate\":true}}");
    assert_int_equal(r->m.links, 1);
}

static void test_refused_subscription_fails_the_dial(void **state)
{
    rig *r = new_rig();
    (void)state;
    r->f.refuse_subscribe = 1;
    assert_int_equal(start(r), MCPB_MQTT_E_REFUSED);
    assert_int_equal(r->f.publishes, 0);
    mcpb_mqtt_shutdown(&r->m); /* nothing announced, so nothing to clear */
    assert_int_equal(r->f.publishes, 0);
    assert_int_equal(r->f.closes, 1);
}

static void test_request_on_down_is_answered_on_up(void **state)
{
    rig *r = new_rig();
    (void)state;
    assert_int_equal(start(r), 0);
    push(r, "mcpb/pump-1/down", "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\"}", 0, 0);
    assert_int_equal(mcpb_mqtt_serve(&r->m, 100, echo_handler, &r->e), 0);
    assert_int_equal(r->e.calls, 1);
    assert_string_equal(r->e.seen, "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\"}");
    assert_int_equal(r->f.publishes, 2);
    assert_string_equal(r->f.published[1].topic, "mcpb/pump-1/up");
    assert_string_equal(r->f.published[1].data, "answer to {\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\"}");
    assert_int_equal(r->f.published[1].qos, 1);
    assert_int_equal(r->f.published[1].retain, 0);
}

static void test_notification_gets_no_answer(void **state)
{
    rig *r = new_rig();
    (void)state;
    r->e.result = 0;
    assert_int_equal(start(r), 0);
    push(r, "mcpb/pump-1/down", "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", 0, 0);
    assert_int_equal(mcpb_mqtt_serve(&r->m, 100, echo_handler, &r->e), 0);
    assert_int_equal(r->e.calls, 1);
    assert_int_equal(r->f.publishes, 1);
}

static void test_retained_and_foreign_messages_are_dropped(void **state)
{
    rig *r = new_rig();
    int i;
    (void)state;
    assert_int_equal(start(r), 0);
    push(r, "mcpb/pump-1/down", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\"}", 0, 1);
    push(r, "mcpb/pump-2/down", "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\"}", 0, 0);
    push(r, "mcpb/pump-1/downstairs", "{}", 0, 0);
    for (i = 0; i < 3; i++) {
        assert_int_equal(mcpb_mqtt_serve(&r->m, 100, echo_handler, &r->e), 0);
    }
    assert_int_equal(r->e.calls, 0);
    assert_int_equal(r->f.publishes, 1);
    assert_int_equal(r->m.dropped, 3);
    assert_int_equal(r->m.carried, 0); /* not contact from the gateway */
}

/* The gateway refusing the slot (another provider holds it): an error with id null on down. Over
 * MQTT no close reason carries it, so the board logs it (the first and every hundredth, as
 * mqtt_dropped), hands it to no handler, and does not take it for contact from the gateway. */
static void test_the_gateways_refusal_is_logged_and_is_not_contact(void **state)
{
    static const char refusal[] = "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32000,\"message\":"
                                  "\"Slot already held by a live provider; stop it first\"}}";
    rig *r = new_rig();
    uint32_t heard;
    int i;
    (void)state;
    assert_int_equal(start(r), 0);
    heard = r->m.heard_ms;
    push(r, "mcpb/pump-1/down", refusal, 0, 0);
    assert_int_equal(mcpb_mqtt_serve(&r->m, 100, echo_handler, &r->e), 0);
    assert_string_equal(r->f.last_log, "mqtt gateway_error: Slot already held by a live provider; stop it first");
    assert_int_equal(r->e.calls, 0);
    assert_int_equal(r->f.publishes, 1); /* the register frame alone: no answer on up */
    assert_int_equal(r->m.carried, 0);
    assert_int_equal(r->m.heard_ms, heard);
    assert_int_equal(r->m.refused, 1);
    r->f.logs = 0;
    for (i = 2; i <= 200; i++) {
        r->f.inbox_len = r->f.inbox_next = 0;
        push(r, "mcpb/pump-1/down", refusal, 0, 0);
        assert_int_equal(mcpb_mqtt_serve(&r->m, 100, echo_handler, &r->e), 0);
    }
    assert_int_equal(r->f.logs, 2); /* the 100th and the 200th */
    assert_int_equal(r->m.heard_ms, heard);
    /* refusals alone: the link goes silent and ends, and the next dial announces anew */
    r->f.clock = heard + r->config.silence_ms;
    assert_int_equal(mcpb_mqtt_serve(&r->m, 100, echo_handler, &r->e), MCPB_MQTT_E_SILENT);
    /* an answer to a request of its own would carry an id: that is no refusal, it goes on */
    assert_int_equal(start(r), 0);
    push(r, "mcpb/pump-1/down", "{\"jsonrpc\":\"2.0\",\"id\":4,\"error\":{\"code\":-1,\"message\":\"x\"}}", 0, 0);
    assert_int_equal(mcpb_mqtt_serve(&r->m, 100, echo_handler, &r->e), 0);
    assert_int_equal(r->e.calls, 1);
    assert_int_equal(r->m.carried, 1);
}

static void test_oversize_request_is_refused_under_its_id(void **state)
{
    rig *r = new_rig();
    (void)state;
    assert_int_equal(start(r), 0);
    push(r, "mcpb/pump-1/down", "{\"jsonrpc\":\"2.0\",\"id\":\"brk-7\",\"method\":\"tools/call\",\"params\":{", 9000, 0);
    assert_int_equal(mcpb_mqtt_serve(&r->m, 100, echo_handler, &r->e), 0);
    assert_int_equal(r->e.calls, 0);
    assert_int_equal(r->f.publishes, 2);
    assert_string_equal(r->f.published[1].topic, "mcpb/pump-1/up");
    assert_string_equal(r->f.published[1].data,
                        "{\"jsonrpc\":\"2.0\",\"id\":\"brk-7\",\"error\":{\"code\":-32600,\"message\":\"Request too "
                        "large: 9000 bytes; this device accepts frames of at most 256 bytes\"}}");
}

static void test_answer_too_large_for_out_becomes_an_error(void **state)
{
    rig *r = new_rig();
    (void)state;
    r->e.result = -1;
    assert_int_equal(start(r), 0);
    push(r, "mcpb/pump-1/down", "{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"tools/list\"}", 0, 0);
    assert_int_equal(mcpb_mqtt_serve(&r->m, 100, echo_handler, &r->e), 0);
    assert_int_equal(r->f.publishes, 2);
    assert_string_equal(r->f.published[1].data,
                        "{\"jsonrpc\":\"2.0\",\"id\":12,\"error\":{\"code\":-32603,\"message\":\"Response too "
                        "large\"}}");
}

/* A handler that returns more than out_cap: the answer is the same error, never out's bytes (which
 * would be an earlier answer's, and past the buffer's end). */
static void test_answer_length_past_out_cap_becomes_an_error(void **state)
{
    rig *r = new_rig();
    (void)state;
    r->e.result = 1;
    assert_int_equal(start(r), 0);
    push(r, "mcpb/pump-1/down", "{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"ping\"}", 0, 0);
    assert_int_equal(mcpb_mqtt_serve(&r->m, 100, echo_handler, &r->e), 0);
    r->e.result = 2;
    push(r, "mcpb/pump-1/down", "{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"tools/list\"}", 0, 0);
    assert_int_equal(mcpb_mqtt_serve(&r->m, 100, echo_handler, &r->e), 0);
    assert_int_equal(r->f.publishes, 3);
    assert_string_equal(r->f.published[2].data,
                        "{\"jsonrpc\":\"2.0\",\"id\":12,\"error\":{\"code\":-32603,\"message\":\"Response too "
                        "large\"}}");
}

static void test_silence_from_the_gateway_ends_the_link(void **state)
{
    rig *r = new_rig();
    (void)state;
    r->config.silence_ms = 1000;
    assert_int_equal(start(r), 0);
    assert_int_equal(mcpb_mqtt_serve(&r->m, 600, echo_handler, &r->e), 0);
    assert_int_equal(mcpb_mqtt_serve(&r->m, 600, echo_handler, &r->e), 0); /* waits only the 400 left */
    assert_int_equal(r->f.clock, 2000);
    assert_int_equal(mcpb_mqtt_serve(&r->m, 600, echo_handler, &r->e), MCPB_MQTT_E_SILENT);
}

static void test_lost_link_is_reported(void **state)
{
    rig *r = new_rig();
    (void)state;
    assert_int_equal(start(r), 0);
    r->f.lost = 1;
    assert_int_equal(mcpb_mqtt_serve(&r->m, 100, echo_handler, &r->e), MCPB_MQTT_E_LINK);
}

static void test_shutdown_clears_the_status_then_disconnects(void **state)
{
    rig *r = new_rig();
    (void)state;
    assert_int_equal(start(r), 0);
    mcpb_mqtt_shutdown(&r->m);
    assert_int_equal(r->f.publishes, 2);
    assert_string_equal(r->f.published[1].topic, "mcpb/pump-1/status");
    assert_int_equal(r->f.published[1].len, 0);
    assert_int_equal(r->f.published[1].retain, 1);
    assert_int_equal(r->f.published[1].qos, 1);
    assert_int_equal(r->f.clean_closes, 1);
    mcpb_mqtt_shutdown(&r->m); /* twice is harmless */
    assert_int_equal(r->f.publishes, 2);
    assert_int_equal(r->f.closes, 1);
}

static void test_backoff_doubles_and_resets_after_traffic(void **state)
{
    rig *r = new_rig();
    (void)state;
    r->f.random = 0xFFFFFFFFu; /* the top of each range */
    assert_int_equal(mcpb_mqtt_init(&r->m, &r->config, &r->port, r->in, sizeof r->in, r->out, sizeof r->out), 0);
    assert_in_range(mcpb_mqtt_backoff_ms(&r->m), 999, 1000);
    assert_in_range(mcpb_mqtt_backoff_ms(&r->m), 1999, 2000);
    assert_in_range(mcpb_mqtt_backoff_ms(&r->m), 3999, 4000);
    r->f.random = 0; /* the bottom: half the ceiling */
    assert_int_equal(mcpb_mqtt_backoff_ms(&r->m), 4000);
    assert_int_equal(mcpb_mqtt_backoff_ms(&r->m), 8000);
    assert_int_equal(mcpb_mqtt_backoff_ms(&r->m), 15000);
    assert_int_equal(mcpb_mqtt_backoff_ms(&r->m), 15000);
    assert_int_equal(mcpb_mqtt_open(&r->m), 0);
    push(r, "mcpb/pump-1/down", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}", 0, 0);
    assert_int_equal(mcpb_mqtt_serve(&r->m, 100, echo_handler, &r->e), 0);
    r->f.clock += 30000; /* a link that carried a request and stayed up the longest wait */
    assert_int_equal(mcpb_mqtt_backoff_ms(&r->m), 500);
}

/* Two boards with one client id push each other off at the broker, and the gateway speaks on down
 * at every attach: a link that carried a message but was lost within the longest wait is a failed
 * dial, so the waits grow to the maximum instead of starting over at 1 s. */
static void test_backoff_grows_when_links_are_pushed_off_soon(void **state)
{
    static const uint32_t ceilings[] = {1000, 2000, 4000, 8000, 16000, 30000, 30000};
    rig *r = new_rig();
    size_t i;
    (void)state;
    r->f.random = 0xFFFFFFFFu; /* the top of each range: the ceiling */
    assert_int_equal(mcpb_mqtt_init(&r->m, &r->config, &r->port, r->in, sizeof r->in, r->out, sizeof r->out), 0);
    for (i = 0; i < sizeof ceilings / sizeof ceilings[0]; i++) {
        r->f.inbox_len = r->f.inbox_next = 0;
        r->f.lost = 0;
        assert_int_equal(mcpb_mqtt_open(&r->m), 0);
        push(r, "mcpb/pump-1/down", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}", 0, 0);
        assert_int_equal(mcpb_mqtt_serve(&r->m, 100, echo_handler, &r->e), 0);
        assert_int_equal(r->m.carried, 1);
        r->f.clock += 700; /* the other board dials and the broker drops this one */
        r->f.lost = 1;
        assert_int_equal(mcpb_mqtt_serve(&r->m, 100, echo_handler, &r->e), MCPB_MQTT_E_LINK);
        mcpb_mqtt_shutdown(&r->m);
        assert_in_range(mcpb_mqtt_backoff_ms(&r->m), ceilings[i] - 1, ceilings[i]);
    }
    assert_int_equal(r->e.calls, 7);
}

static void tick_count(void *ctx, uint32_t now_ms)
{
    (void)now_ms;
    (*(int *)ctx)++;
}

static void test_run_serves_until_stopped_and_clears_status(void **state)
{
    rig *r = new_rig();
    volatile int stop = 0;
    int ticks = 0;
    (void)state;
    push(r, "mcpb/pump-1/down", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}", 0, 0);
    r->f.stop_when_empty = &stop;
    assert_int_equal(mcpb_mqtt_init(&r->m, &r->config, &r->port, r->in, sizeof r->in, r->out, sizeof r->out), 0);
    assert_int_equal(mcpb_mqtt_run(&r->m, echo_handler, &r->e, tick_count, &ticks, &stop), 0);
    assert_int_equal(r->e.calls, 1);
    assert_true(ticks >= 2);
    assert_int_equal(r->f.publishes, 3); /* register, answer, empty status */
    assert_string_equal(r->f.published[2].topic, "mcpb/pump-1/status");
    assert_int_equal(r->f.published[2].len, 0);
    assert_int_equal(r->f.clean_closes, 1);
    assert_non_null(strstr(r->f.last_log, "link_closed"));
}

static void test_every_link_announces_and_clears_its_status(void **state)
{
    rig *r = new_rig();
    int rounds;
    (void)state;
    r->config.silence_ms = 300;
    assert_int_equal(mcpb_mqtt_init(&r->m, &r->config, &r->port, r->in, sizeof r->in, r->out, sizeof r->out), 0);
    /* a silent gateway: each link ends after 300 ms */
    for (rounds = 0; rounds < 2; rounds++) {
        assert_int_equal(mcpb_mqtt_open(&r->m), 0);
        while (mcpb_mqtt_serve(&r->m, 100, echo_handler, &r->e) == 0) {
        }
        mcpb_mqtt_shutdown(&r->m);
    }
    assert_int_equal(r->f.connects, 2);
    assert_int_equal(r->m.links, 2);
    /* every link announces itself and clears its status when it ends */
    assert_int_equal(r->f.publishes, 4);
    assert_int_equal(r->f.published[2].retain, 1);
    assert_true(r->f.published[2].len > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topics_and_client_id),
        cmocka_unit_test(test_names_that_cannot_be_topic_levels),
        cmocka_unit_test(test_slots_the_gateway_refuses_are_refused_at_init),
        cmocka_unit_test(test_printable_slots_outside_ascii_are_taken),
        cmocka_unit_test(test_open_sets_will_subscribes_then_announces),
        cmocka_unit_test(test_refused_subscription_fails_the_dial),
        cmocka_unit_test(test_request_on_down_is_answered_on_up),
        cmocka_unit_test(test_notification_gets_no_answer),
        cmocka_unit_test(test_retained_and_foreign_messages_are_dropped),
        cmocka_unit_test(test_the_gateways_refusal_is_logged_and_is_not_contact),
        cmocka_unit_test(test_oversize_request_is_refused_under_its_id),
        cmocka_unit_test(test_answer_too_large_for_out_becomes_an_error),
        cmocka_unit_test(test_answer_length_past_out_cap_becomes_an_error),
        cmocka_unit_test(test_silence_from_the_gateway_ends_the_link),
        cmocka_unit_test(test_lost_link_is_reported),
        cmocka_unit_test(test_shutdown_clears_the_status_then_disconnects),
        cmocka_unit_test(test_backoff_doubles_and_resets_after_traffic),
        cmocka_unit_test(test_backoff_grows_when_links_are_pushed_off_soon),
        cmocka_unit_test(test_run_serves_until_stopped_and_clears_status),
        cmocka_unit_test(test_every_link_announces_and_clears_its_status),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
