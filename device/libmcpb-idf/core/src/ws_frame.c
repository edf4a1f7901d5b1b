/* The WebSocket frame decoder and encoder. Oversize messages are skipped as they arrive and only
 * the first bytes that fit the buffer kept, so the device can still answer the request it refuses
 * (on /providers the envelope with a long slot name comes before the request's id). */
#include "mcpb/ws_frame.h"

#include <string.h>

/* The protocol errors in one string: an error is its offset (0 none), a constant where it is found
 * (shorter code than a pointer to each). */
#define E_S0 ""
#define E_S1 "stream already failed"
#define E_S2 "reserved bits set"
#define E_S3 "length top bit set"
#define E_S4 "unknown control opcode"
#define E_S5 "malformed control frame"
#define E_S6 "unknown data opcode"
#define E_S7 "bad fragment sequence"
#define E_S8 "one-byte close payload"
static const char errors[] =
    E_S0 "\0" E_S1 "\0" E_S2 "\0" E_S3 "\0" E_S4 "\0" E_S5 "\0" E_S6 "\0" E_S7 "\0" E_S8;
#define E_FAILED 1
#define E_RESERVED (E_FAILED + sizeof(E_S1))
#define E_TOP_BIT (E_RESERVED + sizeof(E_S2))
#define E_CONTROL_OPCODE (E_TOP_BIT + sizeof(E_S3))
#define E_MALFORMED_CONTROL (E_CONTROL_OPCODE + sizeof(E_S4))
#define E_DATA_OPCODE (E_MALFORMED_CONTROL + sizeof(E_S5))
#define E_FRAGMENTS (E_DATA_OPCODE + sizeof(E_S6))
#define E_ONE_BYTE_CLOSE (E_FRAGMENTS + sizeof(E_S7))

void mcpb_ws_rx_init(mcpb_ws_rx_t *rx, uint8_t *buf, size_t cap)
{
    memset(rx, 0, sizeof(*rx));
    rx->buf = buf;
    rx->cap = cap;
    rx->header_need = 2;
}

void mcpb_ws_mask(uint8_t *data, size_t len, const uint8_t mask[4], size_t phase)
{
    size_t i;
    for (i = 0; i < len; i++) {
        data[i] ^= mask[(phase + i) & 3u];
    }
}

size_t mcpb_ws_header(uint8_t out[MCPB_WS_MAX_HEADER], uint8_t opcode, size_t len, const uint8_t mask[4])
{
    uint32_t bits = (uint32_t)len;
    size_t n = len < 126 ? 2 : len < 65536 ? 4 : 10, i;
    out[0] = (uint8_t)(0x80u | opcode);
    out[1] = (uint8_t)(n == 2 ? len : n == 4 ? 126 : 127);
    for (i = n; i > 2; i--) { /* big endian, the high half of a 64-bit length 0 */
        out[i - 1] = (uint8_t)bits;
        bits >>= 8;
    }
    if (mask != NULL) {
        out[1] |= 0x80u;
        memcpy(out + n, mask, 4);
        n += 4;
    }
    return n;
}

/* The header is complete: check it and set up the payload. 0 when fine, else why not (E_...). */
static int start_frame(mcpb_ws_rx_t *rx)
{
    uint8_t first = rx->header[0];
    size_t at = rx->header_need - (rx->masked ? 4 : 0), i;
    uint32_t size = rx->header[1] & 0x7Fu, high = 0;
    rx->fin = first >> 7;
    rx->opcode = first & 0x0Fu;
    for (i = 2; i < at; i++) { /* 16 or 64 bits, big endian, after the 7-bit 126 or 127 */
        high |= size >> 24;
        size = (i == 2 ? 0 : size << 8) | rx->header[i];
    }
    memcpy(rx->mask, rx->header + at, 4); /* servers do not mask; tolerated anyway */
    rx->remaining = high != 0 ? UINT32_MAX : size; /* 4 GB or more: over any cap (it will not come) */
    rx->phase = 0;
    if (first & 0x70u) {
        return E_RESERVED;
    }
    if (at == 10 && (rx->header[2] & 0x80u)) {
        return E_TOP_BIT;
    }
    if (rx->opcode >= 8) {
        rx->control_len = 0;
        /* remaining, not size: a 64-bit length of 4 GB or more may have small low bits */
        return rx->opcode > MCPB_WS_PONG_FRAME       ? E_CONTROL_OPCODE
               : rx->remaining > 125 || !rx->fin ? E_MALFORMED_CONTROL
                                                 : 0;
    }
    if (rx->opcode > MCPB_WS_BINARY) {
        return E_DATA_OPCODE;
    }
    if ((rx->opcode == 0) != rx->in_message) {
        return E_FRAGMENTS;
    }
    if (rx->opcode != 0) {
        rx->in_message = 1;
        rx->message_len = 0;
        rx->skipping = 0;
    }
    if (!rx->skipping && rx->remaining > rx->cap - 1 - rx->message_len) {
        rx->skipping = 1;
        rx->skipped = (uint32_t)rx->message_len;
    }
    return 0;
}

static void take_payload(mcpb_ws_rx_t *rx, const uint8_t *data, size_t take)
{
    uint8_t *target;
    size_t keep = take;
    if (rx->opcode >= 8) {
        target = rx->control + rx->control_len;
        rx->control_len += take;
    } else {
        target = rx->buf + rx->message_len;
        if (rx->skipping) { /* what fits is kept, for the request's id */
            if (keep > rx->cap - 1 - rx->message_len) {
                keep = rx->cap - 1 - rx->message_len;
            }
            rx->skipped = rx->skipped > UINT32_MAX - take ? UINT32_MAX : rx->skipped + (uint32_t)take;
        }
        rx->message_len += keep;
    }
    memcpy(target, data, keep);
    if (rx->masked) {
        mcpb_ws_mask(target, keep, rx->mask, rx->phase);
    }
    rx->phase += take;
    rx->remaining -= (uint32_t)take;
}

/* The frame's payload is complete: fills event when that makes one. 0, or what was wrong (E_...). */
static int end_frame(mcpb_ws_rx_t *rx, mcpb_ws_event_t *event)
{
    static const uint8_t control_kinds[] = {MCPB_WS_CLOSE, MCPB_WS_PING, MCPB_WS_PONG};
    rx->header_len = 0;
    rx->header_need = 2;
    if (rx->opcode >= 8) {
        event->kind = (mcpb_ws_event_kind_t)control_kinds[rx->opcode - 8];
        rx->control[rx->control_len] = 0;
        event->data = rx->control;
        event->len = rx->control_len;
        if (rx->opcode == MCPB_WS_CLOSE_FRAME) {
            event->close_code = 1005;
            if (rx->control_len == 1) {
                return E_ONE_BYTE_CLOSE;
            }
            if (rx->control_len >= 2) {
                event->close_code = rx->control[0] << 8 | rx->control[1];
                event->data += 2;
                event->len -= 2;
            }
        }
    } else if (rx->fin) {
        /* an oversize message's first bytes are its head, where a whole one's are its data */
        rx->in_message = 0;
        rx->buf[rx->message_len] = 0;
        event->kind = rx->skipping ? MCPB_WS_OVERSIZE : MCPB_WS_MESSAGE;
        event->size = rx->skipped;
        event->data = event->head = rx->buf;
        event->len = event->head_len = rx->message_len;
        rx->skipping = 0;
    }
    return 0;
}

size_t mcpb_ws_rx_feed(mcpb_ws_rx_t *rx, const uint8_t *data, size_t len, mcpb_ws_event_t *event)
{
    size_t at = 0;
    int why = 0;
    memset(event, 0, sizeof(*event));
    if (rx->failed) {
        why = E_FAILED;
        at = len;
    }
    while (why == 0 && event->kind == MCPB_WS_NONE) {
        if (rx->header_len < rx->header_need) {
            if (at == len) {
                return at;
            }
            rx->header[rx->header_len++] = data[at++];
            if (rx->header_len == 2) {
                uint8_t size = rx->header[1] & 0x7Fu;
                rx->masked = rx->header[1] >> 7;
                rx->header_need = 2 + (size == 126 ? 2 : size == 127 ? 8 : 0) + (rx->masked ? 4 : 0);
            }
            if (rx->header_len == rx->header_need) {
                why = start_frame(rx);
            }
        } else {
            size_t take = len - at < rx->remaining ? len - at : rx->remaining;
            take_payload(rx, data + at, take);
            at += take;
            if (rx->remaining > 0) {
                return at;
            }
            why = end_frame(rx, event);
        }
    }
    if (why != 0) {
        rx->failed = 1;
        event->kind = MCPB_WS_PROTOCOL_ERROR;
        event->error = errors + why;
    }
    return at;
}
