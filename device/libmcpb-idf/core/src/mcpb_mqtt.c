/* The MQTT plain profile over a message port; see mcpb/mqtt.h and docs/device-mqtt.md.
 *
 * Behaviour follows the MicroPython transport (device/micropython/mcpdevice/mqtt.py with
 * provider.py around it): clean session, an empty retained will on status, SUBSCRIBE to down
 * before the register frame goes out retained on status, answers on up without waiting for
 * their PUBACK. A retained or foreign message on down is dropped unread (a stale request must
 * never start a pump) and does not count as contact; only messages from the gateway do, and of
 * those not its refusals (an error with id null, logged as gateway_error as dispatcher.py logs
 * it). Every link that ends, also one the gateway left silent, clears the status before it goes,
 * and the next dial announces anew.
 */
#include "mcpb/mqtt.h"

#include <string.h>

#include "mcpb/json_scan.h"
#include "mcpb/port.h"

#define QOS_1 1
#define RETAIN 1
#define HEAD_BYTES 96 /* of an oversize request, searched for its id (as mqtt_client.py keeps) */
#define NOTE_MAX 192

/* One log line, "mqtt <event>: <detail>", cut to NOTE_MAX. */
static void note(const mcpb_mqtt *m, int level, const char *event, const char *detail)
{
    char line[NOTE_MAX];
    size_t n = 0;
    if (m->port->log == NULL) {
        return;
    }
    (void)mcpb_json_put_raw(line, sizeof line - 1, &n, "mqtt ", 5);
    (void)mcpb_json_put_raw(line, sizeof line - 1, &n, event, strlen(event));
    (void)mcpb_json_put_raw(line, sizeof line - 1, &n, ": ", 2);
    if (mcpb_json_put_raw(line, sizeof line - 1, &n, detail, strlen(detail)) != 0) {
        size_t room = sizeof line - 1 - n;
        memcpy(line + n, detail, room);
        n += room;
    }
    line[n] = '\0';
    m->port->log(m->port->ctx, level, line);
}

/* The rules of gateway/southbound/mqtt/topics.py for a slot that is one topic level, the slot-name
 * rules of every way in among them: what is wrong with the slot, else NULL. */
static const char *slot_problem(const char *slot)
{
    size_t len = slot == NULL ? 0 : strlen(slot);
    if (len == 0 || len > MCPB_SLOT_MAX || slot[0] == '_' || strcmp(slot, ".") == 0 || strcmp(slot, "..") == 0) {
        return "slot must be 1 to 64 bytes, not \".\" or \"..\", and not start with _";
    }
    if (strpbrk(slot, "/+#") != NULL) {
        return "slot holds /, + or #, which no topic level can";
    }
    if (!mcpb_name_ok(slot)) {
        return "slot is not printable UTF-8 (a control, format, separator, private-use or unassigned "
               "character, or bytes no UTF-8 text holds), which the gateway refuses";
    }
    return NULL;
}

static int prefix_ok(const char *prefix)
{
    size_t i;
    size_t len = strlen(prefix);
    if (len == 0 || prefix[0] == '$' || prefix[0] == '/' || prefix[len - 1] == '/') {
        return 0;
    }
    for (i = 0; i < len; i++) {
        if (prefix[i] == '+' || prefix[i] == '#' || (prefix[i] == '/' && prefix[i + 1] == '/')) {
            return 0;
        }
    }
    return 1;
}

static int make_topic(char *buf, const char *prefix, const char *slot, const char *kind)
{
    size_t n = 0;
    int bad = mcpb_json_put_raw(buf, MCPB_MQTT_TOPIC_MAX - 1, &n, prefix, strlen(prefix));
    bad |= mcpb_json_put_raw(buf, MCPB_MQTT_TOPIC_MAX - 1, &n, "/", 1);
    bad |= mcpb_json_put_raw(buf, MCPB_MQTT_TOPIC_MAX - 1, &n, slot, strlen(slot));
    bad |= mcpb_json_put_raw(buf, MCPB_MQTT_TOPIC_MAX - 1, &n, "/", 1);
    bad |= mcpb_json_put_raw(buf, MCPB_MQTT_TOPIC_MAX - 1, &n, kind, strlen(kind));
    buf[n] = '\0';
    return bad ? MCPB_MQTT_E_CONFIG : MCPB_MQTT_OK;
}

void mcpb_mqtt_config_defaults(mcpb_mqtt_config *config)
{
    memset(config, 0, sizeof *config);
    config->port = 1883;
    config->keepalive_s = 60;
    config->aggregate = 1;
    config->silence_ms = 90000;
    config->backoff_min_ms = 1000;
    config->backoff_max_ms = 30000;
    config->slice_ms = 100;
}

int mcpb_mqtt_init(mcpb_mqtt *m, const mcpb_mqtt_config *config, const mcpb_mqtt_port *port,
                   char *in, size_t in_cap, char *out, size_t out_cap)
{
    const char *prefix = config->prefix != NULL ? config->prefix : MCPB_MQTT_DEFAULT_PREFIX;
    const char *problem;
    size_t id_len = config->client_id != NULL ? strlen(config->client_id) : 0;
    memset(m, 0, sizeof *m);
    m->config = config;
    m->port = port;
    m->in = in;
    m->in_cap = in_cap;
    m->out = out;
    m->out_cap = out_cap;
    mcpb_backoff_init(&m->backoff, config->backoff_min_ms, config->backoff_max_ms);
    if ((problem = slot_problem(config->slot)) == NULL) {
        if (!prefix_ok(prefix)) {
            problem = "prefix must be topic levels: none empty, no + or #, not starting with $";
        } else if (in_cap == 0 || out_cap == 0) {
            problem = "the in and out buffers need room";
        } else if (config->password != NULL && config->username == NULL) {
            problem = "a password needs a username";
        } else if (make_topic(m->status_topic, prefix, config->slot, "status") != MCPB_MQTT_OK ||
                   make_topic(m->down_topic, prefix, config->slot, "down") != MCPB_MQTT_OK ||
                   make_topic(m->up_topic, prefix, config->slot, "up") != MCPB_MQTT_OK) {
            problem = "prefix and slot make a topic over 127 bytes";
        } else if (config->client_id != NULL && (id_len == 0 || id_len >= sizeof m->client_id)) {
            problem = "client_id must be 1 to 71 bytes";
        }
    }
    if (problem != NULL) {
        note(m, MCPB_LOG_ERROR, "config_error", problem);
        return MCPB_MQTT_E_CONFIG;
    }
    if (config->client_id != NULL) {
        memcpy(m->client_id, config->client_id, id_len + 1);
    } else {
        memcpy(m->client_id, "mcpb-", 5);
        memcpy(m->client_id + 5, config->slot, strlen(config->slot) + 1);
    }
    return MCPB_MQTT_OK;
}

int mcpb_mqtt_open(mcpb_mqtt *m)
{
    const mcpb_mqtt_config *c = m->config;
    const mcpb_mqtt_port *p = m->port;
    mcpb_mqtt_connect_options options;
    static const mcpb_hello_t no_hello = {0, 0, 0, 0};
    int rc;
    size_t n;

    m->carried = 0;
    memset(&options, 0, sizeof options);
    options.host = c->host;
    options.port = c->port;
    options.client_id = m->client_id;
    options.username = c->username;
    options.password = c->username != NULL ? c->password : NULL;
    options.keepalive_s = c->keepalive_s;
    options.will_topic = m->status_topic;
    options.will_payload = "";
    options.will_len = 0;
    options.will_qos = QOS_1;
    options.will_retain = RETAIN;
    rc = p->connect(p->ctx, &options);
    if (rc < 0) {
        return rc;
    }
    m->connected = 1;
    m->registered = 0;
    rc = p->subscribe(p->ctx, m->down_topic, QOS_1);
    if (rc < 0) {
        return rc;
    }
    m->links++;
    note(m, MCPB_LOG_INFO, "link_up", m->down_topic);
    n = mcpb_register_frame(m->out, m->out_cap, c->hello != NULL ? c->hello : &no_hello, c->slot, c->aggregate);
    if (n == 0) {
        return MCPB_MQTT_E_SPACE;
    }
    rc = p->publish(p->ctx, m->status_topic, m->out, n, QOS_1, RETAIN);
    if (rc < 0) {
        return rc;
    }
    m->registered = 1;
    m->up_ms = m->heard_ms = p->now_ms(p->ctx);
    return MCPB_MQTT_OK;
}

static void dropped(mcpb_mqtt *m, int ours)
{
    m->dropped++;
    if (m->dropped == 1 || m->dropped % 100 == 0) {
        note(m, MCPB_LOG_WARN, "mqtt_dropped", ours ? "retained, so stale" : "not our down topic");
    }
}

/* An error with id null on down is the gateway refusing the slot (held by another provider,
 * reserved, not declared): with no close reason over MQTT, the log is where a person sees it. It
 * is logged the first time and every hundredth, is no request for the handler, and is not
 * contact: the gateway refusing is not the gateway serving the slot. */
static int refused(mcpb_mqtt *m, size_t len)
{
    char reason[MCPB_REASON_MAX + 1];
    if (!mcpb_refusal_in(m->in, len, reason, sizeof reason)) {
        return 0;
    }
    m->refused++;
    if (m->refused == 1 || m->refused % 100 == 0) {
        note(m, MCPB_LOG_WARN, "gateway_error", reason);
    }
    return 1;
}

int mcpb_mqtt_serve(mcpb_mqtt *m, uint32_t wait_ms, mcpb_handler_fn handler, void *handler_ctx)
{
    const mcpb_mqtt_port *p = m->port;
    char topic[MCPB_MQTT_TOPIC_MAX];
    mcpb_mqtt_message message;
    uint32_t quiet = p->now_ms(p->ctx) - m->heard_ms;
    size_t down_len = strlen(m->down_topic);
    int ours;
    int rc;
    size_t n;

    if (quiet >= m->config->silence_ms) {
        return MCPB_MQTT_E_SILENT;
    }
    if (wait_ms > m->config->silence_ms - quiet) {
        wait_ms = m->config->silence_ms - quiet;
    }
    memset(&message, 0, sizeof message);
    message.topic = topic;
    message.topic_cap = sizeof topic;
    message.payload = m->in;
    message.payload_cap = m->in_cap;
    rc = p->receive(p->ctx, &message, wait_ms);
    if (rc < 0) {
        return MCPB_MQTT_E_LINK;
    }
    if (rc != MCPB_MQTT_MESSAGE) {
        return MCPB_MQTT_OK;
    }
    ours = message.topic_len == down_len && memcmp(message.topic, m->down_topic, down_len) == 0;
    if (!ours || message.retained) {
        dropped(m, ours);
        return MCPB_MQTT_OK;
    }
    if (message.size == message.payload_len && refused(m, message.payload_len)) {
        return MCPB_MQTT_OK;
    }
    m->heard_ms = p->now_ms(p->ctx);
    m->carried = 1;
    if (message.size > message.payload_len) {
        size_t head = message.payload_len < HEAD_BYTES ? message.payload_len : HEAD_BYTES;
        n = mcpb_too_large_answer(m->out, m->out_cap, m->in, head, (unsigned long long)message.size, m->in_cap);
    } else {
        rc = handler(handler_ctx, m->in, message.payload_len, m->out, m->out_cap);
        /* a length past out_cap is no answer either (the buffer holds stale bytes past it) */
        n = rc >= 0 && (size_t)rc <= m->out_cap
                ? (size_t)rc
                : mcpb_too_large_response(m->out, m->out_cap, m->in, message.payload_len);
    }
    if (n > 0 && p->publish(p->ctx, m->up_topic, m->out, n, QOS_1, 0) < 0) {
        return MCPB_MQTT_E_LINK;
    }
    return MCPB_MQTT_OK;
}

void mcpb_mqtt_shutdown(mcpb_mqtt *m)
{
    const mcpb_mqtt_port *p = m->port;
    if (!m->connected) {
        return;
    }
    m->connected = 0;
    if (m->registered) {
        /* What the will would say, now rather than when the keepalive runs out; a clean
         * DISCONNECT discards the will. */
        (void)p->publish(p->ctx, m->status_topic, "", 0, QOS_1, RETAIN);
        m->registered = 0;
    }
    p->close(p->ctx, 1);
}

uint32_t mcpb_mqtt_backoff_ms(mcpb_mqtt *m)
{
    /* A link pushed off sooner than the longest wait (by a second board with the same client id,
     * which redials within that wait) counts as a failed dial even when the gateway spoke on it:
     * the gateway speaks at every attach, and two such boards would otherwise redial at once. */
    if (m->carried && m->port->now_ms(m->port->ctx) - m->up_ms >= m->backoff.max_ms) {
        mcpb_backoff_reset(&m->backoff);
    }
    m->carried = 0;
    return mcpb_backoff_next(&m->backoff, m->port->random32 != NULL ? m->port->random32(m->port->ctx) : 0xFFFFFFFFu);
}

static const char *why_down(int rc)
{
    switch (rc) {
    case MCPB_MQTT_E_REFUSED:
        return "the broker refused the connection or the subscription (check the credential and ACL)";
    case MCPB_MQTT_E_SILENT:
        return "no frame or ping from the gateway";
    case MCPB_MQTT_E_SPACE:
        return "the register frame does not fit the frame buffer";
    default:
        return "the broker closed the connection or could not be reached";
    }
}

int mcpb_mqtt_run(mcpb_mqtt *m, mcpb_handler_fn handler, void *handler_ctx,
                  void (*tick)(void *ctx, uint32_t now_ms), void *tick_ctx, volatile int *stop)
{
    const mcpb_mqtt_port *p = m->port;
    uint32_t slice = m->config->slice_ms != 0 ? m->config->slice_ms : 100;

    while (!*stop) {
        uint32_t delay;
        uint32_t started;
        int rc = mcpb_mqtt_open(m);
        while (rc == MCPB_MQTT_OK && !*stop) {
            rc = mcpb_mqtt_serve(m, slice, handler, handler_ctx);
            if (tick != NULL) {
                tick(tick_ctx, p->now_ms(p->ctx));
            }
        }
        mcpb_mqtt_shutdown(m);
        if (*stop) {
            break;
        }
        delay = mcpb_mqtt_backoff_ms(m);
        /* Every lost link is logged; the failed dials of a long outage only now and then. */
        if (m->backoff.failures <= 3 || m->backoff.failures % 20 == 0) {
            note(m, MCPB_LOG_WARN, "link_down", why_down(rc));
        }
        started = p->now_ms(p->ctx);
        while (!*stop && p->now_ms(p->ctx) - started < delay) {
            uint32_t left = delay - (p->now_ms(p->ctx) - started);
            p->sleep_ms(p->ctx, left < slice ? left : slice);
            if (tick != NULL) {
                tick(tick_ctx, p->now_ms(p->ctx));
            }
        }
    }
    note(m, MCPB_LOG_INFO, "link_closed", m->status_topic);
    return MCPB_MQTT_OK;
}
