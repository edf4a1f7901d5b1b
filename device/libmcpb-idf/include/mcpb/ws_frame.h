/* WebSocket frames (RFC 6455 section 5) as a client sees them: no I/O here, bytes in, events out. */
#ifndef MCPB_WS_FRAME_H
#define MCPB_WS_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "mcpb/serial_frame.h" /* MCPB_HEAD_BYTES */

#ifdef __cplusplus
extern "C" {
#endif

#define MCPB_WS_TEXT 0x1
#define MCPB_WS_BINARY 0x2
#define MCPB_WS_CLOSE_FRAME 0x8
#define MCPB_WS_PING_FRAME 0x9
#define MCPB_WS_PONG_FRAME 0xA
#define MCPB_WS_MAX_HEADER 14
#define MCPB_WS_MAX_REASON 123 /* a close payload is at most 125 bytes: the code and 123 of reason */

typedef enum {
    MCPB_WS_NONE = 0,       /* the bytes ran out before anything completed */
    MCPB_WS_MESSAGE,        /* a whole message (fragments joined): data/len, NUL-terminated */
    MCPB_WS_OVERSIZE,       /* a message over the cap, skipped: size, head/head_len (the first bytes
                             * that fit the buffer, NUL-terminated; data/len the same) */
    MCPB_WS_PING,           /* data/len: the payload to echo in the pong */
    MCPB_WS_PONG,
    MCPB_WS_CLOSE,          /* close_code (1005 when none), data/len: the reason */
    MCPB_WS_PROTOCOL_ERROR  /* error: what was wrong; the link must be closed with 1002 */
} mcpb_ws_event_kind_t;

typedef struct {
    mcpb_ws_event_kind_t kind;
    const uint8_t *data;
    size_t len;
    uint32_t size;          /* OVERSIZE: the message's bytes, UINT32_MAX when more (never stored) */
    const uint8_t *head;
    size_t head_len;
    int close_code;
    const char *error;
} mcpb_ws_event_t;

typedef struct { /* scalars first: a small core reaches them with short instructions */
    uint8_t *buf;               /* message assembly; messages up to cap - 1 bytes fit */
    size_t cap;
    size_t header_len;
    size_t header_need;
    uint32_t remaining;         /* payload bytes of the current frame still to come (saturated) */
    int masked;
    size_t phase;
    unsigned opcode;
    int fin;
    int in_message;             /* a fragmented message is being assembled */
    size_t message_len;
    int skipping;               /* the message being assembled is over the cap */
    uint32_t skipped;           /* bytes of the oversize message so far (saturated); buf keeps its first */
    size_t control_len;
    int failed;
    uint8_t mask[4];
    uint8_t header[MCPB_WS_MAX_HEADER];
    uint8_t control[125 + 1]; /* a control frame's payload, and a NUL after it: a close reason is a string */
} mcpb_ws_rx_t;

void mcpb_ws_rx_init(mcpb_ws_rx_t *rx, uint8_t *buf, size_t cap);
/* Feeds bytes until one event completes; returns how many were consumed. After a protocol
 * error the decoder stays failed (every later call reports it again). */
size_t mcpb_ws_rx_feed(mcpb_ws_rx_t *rx, const uint8_t *data, size_t len, mcpb_ws_event_t *event);

/* A final frame's header for `len` payload bytes (below 4 GB), masked with `mask` (NULL: unmasked): its size. */
size_t mcpb_ws_header(uint8_t out[MCPB_WS_MAX_HEADER], uint8_t opcode, size_t len, const uint8_t mask[4]);
/* XORs data with the mask, starting at mask byte `phase` (the payload offset modulo 4). */
void mcpb_ws_mask(uint8_t *data, size_t len, const uint8_t mask[4], size_t phase);

#ifdef __cplusplus
}
#endif

#endif
