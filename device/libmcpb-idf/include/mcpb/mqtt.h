/* The MQTT plain profile (docs/device-mqtt.md): topics <prefix>/<slot>/status|down|up, the
 * register frame retained on status, an empty retained will, requests from down handed to a
 * handler and answers published on up.
 *
 * The profile speaks to the broker through a message port, so the same logic runs on esp-mqtt
 * (ports/esp) and on the host's MQTT 3.1.1 client (ports/posix). It allocates nothing and keeps
 * its state in a caller-owned struct mcpb_mqtt; frames live in caller-given buffers.
 */
#ifndef MCPB_MQTT_H
#define MCPB_MQTT_H

#include <stddef.h>
#include <stdint.h>

#include "mcpb/backoff.h"
#include "mcpb/client.h" /* mcpb_handler_fn, the same handler every way in takes */
#include "mcpb/messages.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Topic names, NUL included. <prefix>/<slot>/status must fit. */
#define MCPB_MQTT_TOPIC_MAX 128
#define MCPB_MQTT_CLIENT_ID_MAX 72
#define MCPB_MQTT_DEFAULT_PREFIX "mcpb"

/* Results of port and profile calls. */
#define MCPB_MQTT_OK 0
#define MCPB_MQTT_MESSAGE 1      /* receive: a message is in the caller's buffers */
#define MCPB_MQTT_E_LINK (-1)    /* the connection is gone or never came up */
#define MCPB_MQTT_E_REFUSED (-2) /* the broker refused CONNECT or SUBSCRIBE */
#define MCPB_MQTT_E_CONFIG (-3)  /* a slot, prefix or client id that cannot be used */
#define MCPB_MQTT_E_SILENT (-4)  /* nothing from the gateway for silence_ms */
#define MCPB_MQTT_E_SPACE (-5)   /* a frame does not fit its buffer */

typedef struct mcpb_mqtt_connect_options {
    const char *host;
    uint16_t port;
    const char *client_id;
    const char *username;        /* NULL: none */
    const char *password;        /* NULL: none; only with a username */
    uint16_t keepalive_s;        /* 0: no keepalive */
    const char *will_topic;
    const void *will_payload;
    size_t will_len;
    int will_qos;
    int will_retain;
} mcpb_mqtt_connect_options;

/* A received PUBLISH. The caller sets the buffers and capacities; receive fills the rest. A
 * message larger than payload_cap keeps its first payload_cap bytes, and size tells the whole. */
typedef struct mcpb_mqtt_message {
    char *topic;
    size_t topic_cap;
    size_t topic_len;            /* may exceed topic_cap: the name did not fit and was cut */
    char *payload;
    size_t payload_cap;
    size_t payload_len;          /* bytes stored in payload */
    size_t size;                 /* bytes the message had */
    int retained;
    int qos;
} mcpb_mqtt_message;

/* The message port. connect blocks until CONNACK (or fails); subscribe until SUBACK; publish
 * does not wait for PUBACK; receive waits up to timeout_ms for one PUBLISH, keeping the
 * connection alive (PINGREQ) meanwhile, and returns MCPB_MQTT_MESSAGE, 0 on timeout or a
 * negative result when the link is gone. close(clean) sends DISCONNECT first when clean is set. */
typedef struct mcpb_mqtt_port {
    void *ctx;
    int (*connect)(void *ctx, const mcpb_mqtt_connect_options *options);
    int (*subscribe)(void *ctx, const char *topic, int qos);
    int (*publish)(void *ctx, const char *topic, const void *data, size_t len, int qos, int retain);
    int (*receive)(void *ctx, mcpb_mqtt_message *message, uint32_t timeout_ms);
    void (*close)(void *ctx, int clean);
    /* now_ms, log and random32 as in mcpb/port.h, so a platform's own plug in unchanged */
    uint32_t (*now_ms)(void *ctx);
    void (*log)(void *ctx, int level, const char *message); /* NULL: silent */
    uint32_t (*random32)(void *ctx);                         /* NULL: no jitter */
    void (*sleep_ms)(void *ctx, uint32_t ms);
} mcpb_mqtt_port;

typedef struct mcpb_mqtt_config {
    const char *host;
    uint16_t port;
    const char *prefix;          /* NULL: "mcpb" */
    const char *slot;
    const char *client_id;       /* NULL: "mcpb-<slot>" */
    const char *username;
    const char *password;
    uint16_t keepalive_s;
    const mcpb_hello_t *hello;   /* params.hello of the register frame (NULL: empty fields) */
    int aggregate;               /* params.aggregate: join _all */
    uint32_t silence_ms;         /* drop a link the gateway left silent this long */
    uint32_t backoff_min_ms;
    uint32_t backoff_max_ms;
    uint32_t slice_ms;           /* mcpb_mqtt_run calls tick at least this often */
} mcpb_mqtt_config;

typedef struct mcpb_mqtt {
    const mcpb_mqtt_config *config;
    const mcpb_mqtt_port *port;
    char *in;
    size_t in_cap;
    char *out;
    size_t out_cap;
    char status_topic[MCPB_MQTT_TOPIC_MAX];
    char down_topic[MCPB_MQTT_TOPIC_MAX];
    char up_topic[MCPB_MQTT_TOPIC_MAX];
    char client_id[MCPB_MQTT_CLIENT_ID_MAX];
    int connected;
    int registered;
    int carried;                 /* the link carried a message from the gateway */
    uint32_t up_ms;              /* when the link was announced */
    uint32_t heard_ms;
    mcpb_backoff_t backoff;
    uint32_t links;
    uint32_t dropped;            /* messages on down not handed on (retained, foreign topic) */
    uint32_t refused;            /* errors with id null on down: the gateway refusing the slot */
} mcpb_mqtt;

/* Port-independent defaults of mqtt.py: port 1883, keepalive 60 s, aggregate, silence 90 s,
 * back-off 1 s to 30 s, tick every 100 ms. */
void mcpb_mqtt_config_defaults(mcpb_mqtt_config *config);

/* Checks the names, builds the topics. in and out hold one request and one answer. A slot,
 * prefix, client id or credential it cannot use is MCPB_MQTT_E_CONFIG, after a `config_error`
 * log line naming it; a slot must be one the gateway takes (mcpb_name_ok, no "/", "+" or "#"). */
int mcpb_mqtt_init(mcpb_mqtt *m, const mcpb_mqtt_config *config, const mcpb_mqtt_port *port,
                   char *in, size_t in_cap, char *out, size_t out_cap);

/* Connects with the will, subscribes to down, then publishes the register frame retained. */
int mcpb_mqtt_open(mcpb_mqtt *m);

/* Waits up to wait_ms for one message and serves it. MCPB_MQTT_OK, or a negative result when
 * the link has to go (MCPB_MQTT_E_LINK, MCPB_MQTT_E_SILENT). An error with id null (the gateway
 * refusing the slot) is logged as `gateway_error <message>`, not handed on and not contact. */
int mcpb_mqtt_serve(mcpb_mqtt *m, uint32_t wait_ms, mcpb_handler_fn handler, void *handler_ctx);

/* Publishes the empty retained status (what the will would say), then DISCONNECT and close. */
void mcpb_mqtt_shutdown(mcpb_mqtt *m);

/* The wait before the next dial: equal jitter under a ceiling that doubles per failed dial. The
 * ceiling starts over only after a link that carried a message from the gateway and stayed up
 * at least backoff_max_ms; a link lost sooner counts as a failed dial. */
uint32_t mcpb_mqtt_backoff_ms(mcpb_mqtt *m);

/* Dials, serves and dials again until *stop is set; then clears the status and returns 0.
 * tick (may be NULL) runs at least every slice_ms, also while the link is down. */
int mcpb_mqtt_run(mcpb_mqtt *m, mcpb_handler_fn handler, void *handler_ctx,
                  void (*tick)(void *ctx, uint32_t now_ms), void *tick_ctx, volatile int *stop);

#ifdef __cplusplus
}
#endif

#endif
