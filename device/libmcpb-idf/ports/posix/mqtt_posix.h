/* The host's MQTT 3.1.1 client as an mcpb message port (mcpb/mqtt.h), and the loop pump1-host
 * runs for --mqtt. TCP only; bounded buffers; QoS 0 and 1; PINGREQ keepalive.
 *
 * The packet codec is declared here too, so that tests can check it without a broker.
 */
#ifndef MCPB_MQTT_POSIX_H
#define MCPB_MQTT_POSIX_H

#include <stddef.h>
#include <stdint.h>

#include "mcpb/mqtt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Codec results besides a length. */
#define MCPB_MQTT_PKT_SHORT (-10)     /* more bytes are needed */
#define MCPB_MQTT_PKT_MALFORMED (-11) /* not a packet this client accepts */
#define MCPB_MQTT_PKT_SPACE (-12)     /* does not fit the output buffer */

#define MCPB_MQTT_LENGTH_MAX 268435455u /* the largest remaining length MQTT can encode */

/* The remaining length in 1 to 4 bytes; the count, or 0 above MCPB_MQTT_LENGTH_MAX. */
size_t mcpb_mqtt_put_length(uint8_t *out, uint32_t length);

/* Reads a remaining length from in[0..len): 0 with *length and *used set, MCPB_MQTT_PKT_SHORT
 * or MCPB_MQTT_PKT_MALFORMED (a fifth length byte). */
int mcpb_mqtt_get_length(const uint8_t *in, size_t len, uint32_t *length, size_t *used);

/* Whole packets into buf: their length, or MCPB_MQTT_PKT_SPACE. */
int mcpb_mqtt_encode_connect(uint8_t *buf, size_t cap, const mcpb_mqtt_connect_options *options);
int mcpb_mqtt_encode_subscribe(uint8_t *buf, size_t cap, uint16_t packet_id, const char *topic, int qos);
/* A PUBLISH up to its payload (fixed header, topic, packet id when qos is 1). */
int mcpb_mqtt_encode_publish_head(uint8_t *buf, size_t cap, const char *topic, size_t payload_len,
                                  int qos, int retain, uint16_t packet_id);

/* Where a PUBLISH's parts are, once its fixed header and topic length are known. */
typedef struct mcpb_mqtt_publish_view {
    int qos;
    int retained;
    uint16_t packet_id;
    const uint8_t *topic;   /* set by mcpb_mqtt_decode_publish only */
    size_t topic_len;
    const uint8_t *payload; /* set by mcpb_mqtt_decode_publish only */
    size_t payload_len;
} mcpb_mqtt_publish_view;

/* Checks a PUBLISH's first byte, remaining length and topic length: 0 with qos, retained,
 * topic_len and payload_len set, or MCPB_MQTT_PKT_MALFORMED (QoS 2 or 3, parts past the end). */
int mcpb_mqtt_publish_layout(uint8_t first, uint32_t remaining, uint16_t topic_len,
                             mcpb_mqtt_publish_view *view);

/* A whole PUBLISH packet in pkt[0..len). */
int mcpb_mqtt_decode_publish(const uint8_t *pkt, size_t len, mcpb_mqtt_publish_view *view);

/* A CONNACK: its return code (0 accepted, 1 to 5 refused), or MCPB_MQTT_PKT_SHORT or
 * MCPB_MQTT_PKT_MALFORMED. */
int mcpb_mqtt_decode_connack(const uint8_t *pkt, size_t len);

/* A SUBACK for packet_id: the granted QoS (0 to 2), 0x80 for a refusal, or a codec result. */
int mcpb_mqtt_decode_suback(const uint8_t *pkt, size_t len, uint16_t packet_id);

/* The client's state: one connection at a time. */
typedef struct mcpb_mqtt_posix {
    int fd;
    uint16_t keepalive_s;
    uint16_t packet_id;
    int pinging;          /* a PINGREQ went out that no packet has answered yet */
    uint32_t pinged_ms;
    uint32_t sent_ms;
    uint32_t io_timeout_ms;      /* 3000: a whole packet from its first byte, and a whole write */
    uint32_t connect_timeout_ms; /* 10000: the TCP connection; CONNACK; SUBSCRIBE to its SUBACK */
    uint32_t random_state;
} mcpb_mqtt_posix;

/* Readies client and fills port with its functions (log goes to stderr). */
void mcpb_mqtt_posix_port(mcpb_mqtt_posix *client, mcpb_mqtt_port *port);

/* The first line of a password file, without its line end, into buf: its length, -1 when the file
 * cannot be read, or MCPB_MQTT_PASSWORD_TOO_LONG when the line does not fit in cap - 1 bytes (buf
 * is cleared then: a cut password would only be refused by the broker, as a wrong one). */
#define MCPB_MQTT_PASSWORD_TOO_LONG (-2)
int mcpb_mqtt_read_password_file(const char *path, char *buf, size_t cap);

typedef struct mcpb_mqtt_host_options {
    const char *host;
    int port;
    const char *slot;
    const char *user;       /* NULL: none */
    const char *password;   /* NULL: none */
    const mcpb_hello_t *hello; /* params.hello of the register frame, or NULL */
    mcpb_handler_fn handler;
    void *handler_ctx;
    void (*tick)(void *ctx, uint32_t now_ms);
    void *tick_ctx;
    volatile int *stop;
} mcpb_mqtt_host_options;

/* Serves the slot over the plain profile with 4 KB frames until *stop is set, then clears its
 * status. 0 on a clean stop, MCPB_MQTT_E_CONFIG for a slot or credential that cannot be used. */
int mcpb_mqtt_host_serve(const mcpb_mqtt_host_options *options);

/* mcpb_mqtt_host_serve without a hello. */
int mcpb_mqtt_host_run(const char *host, int port, const char *slot, const char *user, const char *password,
                       mcpb_handler_fn handler, void *handler_ctx, void (*tick)(void *, uint32_t),
                       void *tick_ctx, volatile int *stop);

#ifdef __cplusplus
}
#endif

#endif
