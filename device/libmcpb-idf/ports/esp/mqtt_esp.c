/* The MQTT message port (mcpb/mqtt.h) over esp-mqtt. esp-mqtt runs its own task; its event
 * handler turns events into queue items that connect, subscribe and receive wait for. */
#include <stdlib.h>
#include <string.h>

#include "port_esp.h"

#define EVENT_QUEUE_DEPTH 8
#define WAIT_MS 10000           /* CONNACK, SUBACK */
#define INBOX_WAIT_MS 5000      /* a message waiting for receive to take the previous one */

typedef enum {
    EV_CONNECTED = 1,
    EV_GONE,                    /* disconnected, or the broker refused the connection */
    EV_SUBSCRIBED,
    EV_SUBSCRIBE_REFUSED,
    EV_DATA
} event_kind;

static void post(mcpb_esp_mqtt_t *m, event_kind kind)
{
    int item = kind;
    xQueueSend(m->events, &item, pdMS_TO_TICKS(INBOX_WAIT_MS));
}

static void on_data(mcpb_esp_mqtt_t *m, const esp_mqtt_event_t *event)
{
    size_t offset = (size_t)event->current_data_offset;
    size_t len = (size_t)event->data_len;
    if (offset == 0) {
        /* The first fragment carries the topic. Wait for receive to copy the previous message. */
        m->assembling = xSemaphoreTake(m->inbox_free, pdMS_TO_TICKS(INBOX_WAIT_MS)) == pdTRUE;
        if (!m->assembling) {
            return;
        }
        m->topic_len = (size_t)event->topic_len;
        memcpy(m->topic, event->topic, m->topic_len < sizeof m->topic ? m->topic_len : sizeof m->topic);
        m->size = (size_t)event->total_data_len;
        m->retained = event->retain;
        m->qos = event->qos;
        m->inbox_len = 0;
    }
    if (!m->assembling) {
        return; /* a message dropped because receive never took the one before */
    }
    if (offset < m->inbox_cap) {
        size_t keep = len < m->inbox_cap - offset ? len : m->inbox_cap - offset;
        memcpy(m->inbox + offset, event->data, keep);
        m->inbox_len = offset + keep;
    }
    if (offset + len >= (size_t)event->total_data_len) {
        m->assembling = 0;
        post(m, EV_DATA);
    }
}

static void on_event(void *arg, esp_event_base_t base, int32_t id, void *data)
{
    mcpb_esp_mqtt_t *m = arg;
    esp_mqtt_event_handle_t event = data;
    (void)base;
    switch ((esp_mqtt_event_id_t)id) {
    case MQTT_EVENT_CONNECTED:
        post(m, EV_CONNECTED);
        break;
    case MQTT_EVENT_DISCONNECTED:
        post(m, EV_GONE);
        break;
    case MQTT_EVENT_ERROR:
        if (event->error_handle != NULL && event->error_handle->error_type == MQTT_ERROR_TYPE_CONNECTION_REFUSED) {
            post(m, EV_GONE);
        }
        break;
    case MQTT_EVENT_SUBSCRIBED:
        /* The SUBACK's return code: 0x80 is a refusal (the ACL). */
        post(m, event->data_len > 0 && (uint8_t)event->data[0] == 0x80 ? EV_SUBSCRIBE_REFUSED : EV_SUBSCRIBED);
        break;
    case MQTT_EVENT_DATA:
        on_data(m, event);
        break;
    default:
        break;
    }
}

/* The next event within ms, or 0. */
static int next_event(mcpb_esp_mqtt_t *m, uint32_t ms)
{
    int item = 0;
    return xQueueReceive(m->events, &item, pdMS_TO_TICKS(ms)) == pdTRUE ? item : 0;
}

static void drop_client(mcpb_esp_mqtt_t *m)
{
    if (m->client != NULL) {
        esp_mqtt_client_destroy(m->client); /* stops the task; sends DISCONNECT while connected */
        m->client = NULL;
    }
    xQueueReset(m->events);
    m->assembling = 0;
    xSemaphoreGive(m->inbox_free);
}

static int mqtt_connect(void *ctx, const mcpb_mqtt_connect_options *o)
{
    mcpb_esp_mqtt_t *m = ctx;
    esp_mqtt_client_config_t config;
    uint32_t start;
    drop_client(m);
    memset(&config, 0, sizeof config);
    config.broker.address.hostname = o->host;
    config.broker.address.port = o->port;
    config.broker.address.transport = MQTT_TRANSPORT_OVER_TCP;
    config.credentials.client_id = o->client_id;
    config.credentials.username = o->username;
    config.credentials.authentication.password = o->password;
    config.session.protocol_ver = MQTT_PROTOCOL_V_3_1_1;
    config.session.keepalive = o->keepalive_s;
    config.session.disable_keepalive = o->keepalive_s == 0;
    config.session.disable_clean_session = false; /* a request sent while the board was away is stale */
    config.session.last_will.topic = o->will_topic;
    config.session.last_will.msg = o->will_payload;
    config.session.last_will.msg_len = (int)o->will_len;
    config.session.last_will.qos = o->will_qos;
    config.session.last_will.retain = o->will_retain;
    config.network.disable_auto_reconnect = true; /* the profile redials, with its back-off */
    config.network.timeout_ms = WAIT_MS;
    m->client = esp_mqtt_client_init(&config);
    if (m->client == NULL) {
        return MCPB_MQTT_E_LINK;
    }
    esp_mqtt_client_register_event(m->client, ESP_EVENT_ANY_ID, on_event, m);
    if (esp_mqtt_client_start(m->client) != ESP_OK) {
        drop_client(m);
        return MCPB_MQTT_E_LINK;
    }
    start = mcpb_esp_now_ms(NULL);
    while (mcpb_esp_now_ms(NULL) - start < WAIT_MS) {
        int kind = next_event(m, WAIT_MS);
        if (kind == EV_CONNECTED) {
            return MCPB_MQTT_OK;
        }
        if (kind == EV_GONE) {
            break;
        }
    }
    drop_client(m);
    return MCPB_MQTT_E_LINK;
}

static int mqtt_subscribe(void *ctx, const char *topic, int qos)
{
    mcpb_esp_mqtt_t *m = ctx;
    uint32_t start = mcpb_esp_now_ms(NULL);
    if (m->client == NULL || esp_mqtt_client_subscribe(m->client, topic, qos) < 0) {
        return MCPB_MQTT_E_LINK;
    }
    while (mcpb_esp_now_ms(NULL) - start < WAIT_MS) {
        switch (next_event(m, WAIT_MS)) {
        case EV_SUBSCRIBED:
            return MCPB_MQTT_OK;
        case EV_SUBSCRIBE_REFUSED:
            return MCPB_MQTT_E_REFUSED;
        case EV_GONE:
            return MCPB_MQTT_E_LINK;
        default:
            break;
        }
    }
    return MCPB_MQTT_E_LINK;
}

static int mqtt_publish(void *ctx, const char *topic, const void *data, size_t len, int qos, int retain)
{
    mcpb_esp_mqtt_t *m = ctx;
    /* esp-mqtt writes at once and keeps a QoS 1 message for its PUBACK; nothing waits here. */
    if (m->client == NULL || esp_mqtt_client_publish(m->client, topic, data, (int)len, qos, retain) < 0) {
        return MCPB_MQTT_E_LINK;
    }
    return MCPB_MQTT_OK;
}

static int mqtt_receive(void *ctx, mcpb_mqtt_message *message, uint32_t timeout_ms)
{
    mcpb_esp_mqtt_t *m = ctx;
    uint32_t start = mcpb_esp_now_ms(NULL);
    if (m->client == NULL) {
        return MCPB_MQTT_E_LINK;
    }
    for (;;) {
        uint32_t spent = mcpb_esp_now_ms(NULL) - start;
        int kind = next_event(m, spent < timeout_ms ? timeout_ms - spent : 0);
        if (kind == EV_GONE) {
            return MCPB_MQTT_E_LINK;
        }
        if (kind == EV_DATA) {
            size_t topic_keep = m->topic_len < message->topic_cap ? m->topic_len : message->topic_cap;
            size_t keep = m->inbox_len < message->payload_cap ? m->inbox_len : message->payload_cap;
            memcpy(message->topic, m->topic, topic_keep);
            message->topic_len = m->topic_len;
            memcpy(message->payload, m->inbox, keep);
            message->payload_len = keep;
            message->size = m->size;
            message->retained = m->retained;
            message->qos = m->qos;
            xSemaphoreGive(m->inbox_free);
            return MCPB_MQTT_MESSAGE;
        }
        if (kind == 0) {
            return 0;
        }
    }
}

static void mqtt_close(void *ctx, int clean)
{
    (void)clean; /* esp-mqtt sends DISCONNECT whenever it is still connected */
    drop_client(ctx);
}

int mcpb_esp_mqtt_init(mcpb_esp_mqtt_t *m, mcpb_mqtt_port *port, size_t frame_max)
{
    memset(m, 0, sizeof *m);
    m->inbox = malloc(frame_max); /* once, at boot: the heap, so that static RAM stays the frames */
    m->inbox_cap = frame_max;
    m->events = xQueueCreate(EVENT_QUEUE_DEPTH, sizeof(int));
    m->inbox_free = xSemaphoreCreateBinary();
    if (m->inbox == NULL || m->events == NULL || m->inbox_free == NULL) {
        return -1;
    }
    xSemaphoreGive(m->inbox_free);
    memset(port, 0, sizeof *port);
    port->ctx = m;
    port->connect = mqtt_connect;
    port->subscribe = mqtt_subscribe;
    port->publish = mqtt_publish;
    port->receive = mqtt_receive;
    port->close = mqtt_close;
    port->now_ms = mcpb_esp_now_ms;
    port->log = mcpb_esp_log;
    port->random32 = mcpb_esp_random32;
    port->sleep_ms = mcpb_esp_sleep_ms;
    return 0;
}
