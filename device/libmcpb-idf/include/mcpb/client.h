/* The provider link: connect, register, serve one slot or several, and come back after every loss.
 * Driven by mcpb_client_poll from a main loop or a task; no allocation, no global state. */
#ifndef MCPB_CLIENT_H
#define MCPB_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "mcpb/backoff.h"
#include "mcpb/features.h"
#include "mcpb/messages.h"
#include "mcpb/port.h"
#include "mcpb/serial_frame.h"
#include "mcpb/ws_frame.h"
#include "mcpb/ws_handshake.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MCPB_VERSION "0.1.0"
#define MCPB_REASON_MAX 123 /* a WebSocket close reason's limit; reasons are cut to it */
#define MCPB_MAX_SLOTS 8

/* The buffers a board gives the client (mcpb_buffers_t), from its frame cap; the ESP-IDF example
 * and pump1-host size theirs with these. rx and tx are slices of the byte stream, not messages. */
#define MCPB_MESSAGE_CAP(frame_max) ((frame_max) + 5) /* the frame, a serial CRC-32 and a NUL */
#define MCPB_ANSWER_CAP(frame_max) (frame_max)
#define MCPB_RX_CAP 128 /* bytes read from the port at a time */
#define MCPB_TX_CAP 128 /* bytes written at a time; a message goes out in several writes */

/* One JSON-RPC message in (in[in_len] is a NUL, as a courtesy); the answer goes to out. Returns the
 * answer's length (at most out_cap), 0 for no answer, negative when out_cap is too small. A negative
 * length or one past out_cap sends nothing of out: the client answers -32603 "Response too large"
 * under the request's id instead. */
typedef int (*mcpb_handler_fn)(void *ctx, const char *in, size_t in_len, char *out, size_t out_cap);

typedef enum {
    MCPB_WAY_WS_DEDICATED = 0, /* ws://host:port/provider/<slot>: one slot, named by the URL */
    MCPB_WAY_WS_MULTIPLEX,     /* ws://host:port/providers: every frame an envelope, many slots */
    MCPB_WAY_SERIAL            /* COBS frames on a serial line; envelopes when there are several slots */
} mcpb_way_t;

typedef struct {
    const char *name;      /* 1 to 64 bytes of UTF-8 */
    int aggregate;         /* join _all */
    const char *schema;    /* hello.schema: the hash of this slot's tools/list, or NULL */
    mcpb_handler_fn handler;
    void *handler_ctx;
} mcpb_slot_t;

typedef enum {
    MCPB_LINK_CONNECTED = 1, /* the link is up and the register frame went out */
    MCPB_LINK_REFUSED,       /* the gateway refused: HTTP 4xx, close 1008, or an error with id null
                                * (in an envelope: that slot, sent no request on this link) */
    MCPB_LINK_CLOSED,        /* the peer closed (close frame, the stream ended, or an error with id null
                                * after the gateway had taken the slot: on a bare serial line the link
                                * ends; in an envelope the gateway let that slot go and the link stays) */
    MCPB_LINK_ERROR          /* cannot connect, handshake failed, protocol error, silence */
} mcpb_link_kind_t;

/* What happened to the link, with the evidence. */
typedef struct {
    mcpb_link_kind_t kind;
    int close_code;                    /* WebSocket close code, 0 when none */
    int http_status;                   /* status of a refused upgrade, 0 when none */
    char slot[MCPB_SLOT_MAX + 1];      /* the slot refused or let go on an enveloped link, else "": that
                                        * slot is served no more until the next MCPB_LINK_CONNECTED */
    char reason[MCPB_REASON_MAX + 1];  /* close reason, refusal body or message, what failed */
    uint32_t retry_in_ms;              /* the wait before the next dial, when the link is down */
} mcpb_link_event_t;

typedef void (*mcpb_event_fn)(void *ctx, const mcpb_link_event_t *event);

/* Memory the caller gives the client. */
typedef struct {
    uint8_t *message;   /* one incoming message: the frame cap + 5 (serial CRC and a NUL); >= 1024 */
    size_t message_cap;
    char *answer;       /* one outgoing message (a handler's answer, the register frame); >= 512 */
    size_t answer_cap;
    uint8_t *rx;        /* bytes read from the port at a time, e.g. 512; >= 16 */
    size_t rx_cap;
    uint8_t *tx;        /* bytes written to the port at a time, >= 64; about one TCP segment is best */
    size_t tx_cap;
} mcpb_buffers_t;

typedef struct {
    mcpb_way_t way;
    const char *host;             /* TCP host name or address; for serial, the device path. Host, token
                                   * and agent hold no control character (init refuses one) */
    uint16_t port;                /* TCP port; 0 for serial */
    const char *token;            /* provider secret (X-Provider-Token), or NULL */
    const char *agent;            /* User-Agent, or NULL for "libmcpb-idf" */
    const char *device_id;        /* hello.device_id, written as a JSON string (escaped) */
    const char *firmware_name;
    const char *firmware_version;
    const mcpb_slot_t *slots;
    size_t slot_count;            /* 1 to MCPB_MAX_SLOTS; dedicated WebSocket: exactly 1 */
    uint32_t silence_ms;          /* nothing from the gateway this long: redial (default 90000) */
    uint32_t handshake_ms;        /* the upgrade answer must come within (default 10000) */
    uint32_t backoff_min_ms;      /* default 1000 */
    uint32_t backoff_max_ms;      /* default 30000; below backoff_min_ms it is raised to it */
    mcpb_event_fn on_event;       /* optional */
    void *event_ctx;
    void (*on_heard)(void *ctx);  /* optional: every frame from the gateway, pings included */
    void *heard_ctx;
} mcpb_client_config_t;

typedef enum {
    MCPB_STATE_IDLE = 0,  /* waiting for the next dial */
    MCPB_STATE_UPGRADING, /* TCP is up, waiting for the 101 */
    MCPB_STATE_OPEN,      /* registered and serving */
    MCPB_STATE_STOPPED
} mcpb_client_state_t;

/* The fields used most come first: a small core reaches them with short instructions. */
typedef struct {
    mcpb_client_state_t state;
    uint32_t dial_at_ms;          /* IDLE: when to dial; OPEN: when the link came up */
    uint32_t since_ms;            /* UPGRADING: when it started; OPEN: last frame heard */
    int carried;                  /* this link delivered a message from the gateway (on /providers: one for a slot, not a refusal) */
    size_t pending;               /* bytes of rx[] not fed yet, starting at pending_at */
    size_t pending_at;
    size_t head_len;              /* UPGRADING: response bytes gathered in message[] */
    mcpb_port_t port;
    mcpb_buffers_t buffers;
    mcpb_client_config_t config;
    mcpb_backoff_t backoff;
    uint32_t links;               /* links made so far */
    uint32_t messages_in;         /* messages handed to handlers */
    uint32_t dropped;             /* messages not delivered: unknown slot, bad envelope, over the frame cap */
    char key[MCPB_WS_KEY_CHARS + 1];
    mcpb_ws_rx_t ws;
    mcpb_cobs_decoder_t cobs;
    mcpb_link_event_t last_event;
} mcpb_client_t;

/* Checks the configuration and buffers; 0, or -1 with a log line saying what is wrong (a buffer
 * under its least size above: "buffers too small", naming none).
 * Nothing is copied: config strings, slots and buffers must outlive the client. */
int mcpb_client_init(mcpb_client_t *client, const mcpb_client_config_t *config, const mcpb_port_t *port,
                     const mcpb_buffers_t *buffers);

/* One step: dial when due, read what arrives within timeout_ms, answer it. Returns how long the
 * caller may wait before the next call without missing anything (0 when this call already waited
 * in the port's recv). It does not wait itself while the link is down (the back-off between dials)
 * or stopped: the caller sleeps that long (usleep, vTaskDelay), or its loop spins the CPU. */
uint32_t mcpb_client_poll(mcpb_client_t *client, uint32_t timeout_ms);

/* Sends one message of the slot's own (a notification) on the open link: 0, or -1 when not open. */
int mcpb_client_send(mcpb_client_t *client, size_t slot_index, const char *message, size_t len);

/* Closes the link politely (WebSocket close 1001) and stops; poll does nothing afterwards. */
void mcpb_client_stop(mcpb_client_t *client, const char *reason);

/* 1 while registered and serving. */
int mcpb_client_connected(const mcpb_client_t *client);

#ifdef __cplusplus
}
#endif

#endif
