/* The WebSocket frame decoder and encoder. Oversize messages are skipped as they arrive and only
 * their first bytes kept, so the device can still answer the request it refuses. */
#include "mcpb/ws_frame.h"

#include <string.h>

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

size_t mcpb_ws_header(uint8_t out[MCPB_WS_MAX_HEADER], uint8_t opcode, uint64_t len, const uint8_t mask[4])
{
    size_t n = 2, i;
    out[0] = (uint8_t)(0x80u | opcode);
    if (len < 126) {
        out[1] = (uint8_t)len;
    } else if (len < 65536) {
        out[1] = 126;
        out[2] = (uint8_t)(len >> 8);
        out[3] = (uint8_t)len;
        n = 4;
    } else {
        out[1] = 127;
        for (i = 0; i < 8; i++) {
            out[2 + i] = (uint8_t)(len >> (56 - 8 * i));
        }
        n = 10;
    }
    if (mask != NULL) {
        out[1] |= 0x80u;
        memcpy(out + n, mask, 4);
        n += 4;
    }
    return n;
}

static size_t fail(mcpb_ws_rx_t *rx, mcpb_ws_event_t *event, const char *why, size_t consumed)
{
    rx->failed = 1;
    event->kind = MCPB_WS_PROTOCOL_ERROR;
    event->error = why;
    return consumed;
}

/* The header is complete: check it and set up the payload. NULL when fine, else why not. */
static const char *start_frame(mcpb_ws_rx_t *rx)
{
    uint8_t first = rx->header[0], second = rx->header[1];
    size_t at = 2, i;
    uint64_t size = second & 0x7Fu;
    rx->fin = (first & 0x80u) != 0;
    rx->opcode = first & 0x0Fu;
    rx->masked = (second & 0x80u) != 0; /* servers do not mask; tolerated anyway */
    if (first & 0x70u) {
        return "reserved bits set without an extension";
    }
    if (size == 126) {
        size = (uint64_t)rx->header[2] << 8 | rx->header[3];
        at = 4;
    } else if (size == 127) {
        size = 0;
        for (i = 0; i < 8; i++) {
            size = size << 8 | rx->header[2 + i];
        }
        at = 10;
        if (size >> 63) {
            return "frame length with the top bit set";
        }
    }
    if (rx->masked) {
        memcpy(rx->mask, rx->header + at, 4);
    }
    rx->remaining = size;
    rx->phase = 0;
    if (rx->opcode >= 8) {
        if (rx->opcode > MCPB_WS_PONG_FRAME) {
            return "unknown control opcode";
        }
        if (size > 125 || !rx->fin) {
            return "malformed control frame";
        }
        rx->control_len = 0;
        return NULL;
    }
    if (rx->opcode > MCPB_WS_BINARY) {
        return "unknown data opcode";
    }
    if ((rx->opcode == 0) != (rx->in_message != 0)) {
        return "bad fragment sequence";
    }
    if (rx->opcode != 0) {
        rx->in_message = 1;
        rx->message_len = 0;
        rx->skipping = 0;
    }
    if (!rx->skipping && size > (uint64_t)(rx->cap - 1 - rx->message_len)) {
        rx->skipping = 1;
        rx->skipped = rx->message_len;
        rx->head_len = rx->message_len < MCPB_HEAD_BYTES ? rx->message_len : MCPB_HEAD_BYTES;
        memcpy(rx->head, rx->buf, rx->head_len);
    }
    return NULL;
}

/* The frame's payload is complete: 1 when that makes an event. */
static int end_frame(mcpb_ws_rx_t *rx, mcpb_ws_event_t *event)
{
    rx->header_len = 0;
    rx->header_need = 2;
    switch (rx->opcode) {
    case MCPB_WS_PING_FRAME:
    case MCPB_WS_PONG_FRAME:
        event->kind = rx->opcode == MCPB_WS_PING_FRAME ? MCPB_WS_PING : MCPB_WS_PONG;
        event->data = rx->control;
        event->len = rx->control_len;
        return 1;
    case MCPB_WS_CLOSE_FRAME:
        if (rx->control_len == 1) {
            return -1;
        }
        event->kind = MCPB_WS_CLOSE;
        event->close_code = rx->control_len >= 2 ? (rx->control[0] << 8 | rx->control[1]) : 1005;
        event->data = rx->control_len >= 2 ? rx->control + 2 : rx->control;
        event->len = rx->control_len >= 2 ? rx->control_len - 2 : 0;
        return 1;
    default:
        break;
    }
    if (!rx->fin) {
        return 0;
    }
    rx->in_message = 0;
    if (rx->skipping) {
        rx->skipping = 0;
        event->kind = MCPB_WS_OVERSIZE;
        event->size = rx->skipped;
        event->head = rx->head;
        event->head_len = rx->head_len;
        return 1;
    }
    rx->buf[rx->message_len] = 0;
    event->kind = MCPB_WS_MESSAGE;
    event->data = rx->buf;
    event->len = rx->message_len;
    return 1;
}

static void take_payload(mcpb_ws_rx_t *rx, const uint8_t *data, size_t take)
{
    uint8_t *target;
    if (rx->opcode >= 8) {
        target = rx->control + rx->control_len;
        rx->control_len += take;
    } else if (rx->skipping) {
        size_t keep = MCPB_HEAD_BYTES - rx->head_len;
        if (keep > take) {
            keep = take;
        }
        memcpy(rx->head + rx->head_len, data, keep);
        if (rx->masked) {
            mcpb_ws_mask(rx->head + rx->head_len, keep, rx->mask, rx->phase);
        }
        rx->head_len += keep;
        rx->skipped += take;
        rx->phase += take;
        rx->remaining -= take;
        return;
    } else {
        target = rx->buf + rx->message_len;
        rx->message_len += take;
    }
    memcpy(target, data, take);
    if (rx->masked) {
        mcpb_ws_mask(target, take, rx->mask, rx->phase);
    }
    rx->phase += take;
    rx->remaining -= take;
}

size_t mcpb_ws_rx_feed(mcpb_ws_rx_t *rx, const uint8_t *data, size_t len, mcpb_ws_event_t *event)
{
    size_t at = 0;
    memset(event, 0, sizeof(*event));
    if (rx->failed) {
        return fail(rx, event, "the stream already failed", len);
    }
    while (at < len || (rx->header_len == rx->header_need && rx->remaining == 0)) {
        if (rx->header_len < rx->header_need) {
            rx->header[rx->header_len++] = data[at++];
            if (rx->header_len == 2) {
                uint8_t size = rx->header[1] & 0x7Fu;
                rx->header_need = 2 + (size == 126 ? 2 : size == 127 ? 8 : 0) + ((rx->header[1] & 0x80u) ? 4 : 0);
            }
            if (rx->header_len == rx->header_need) {
                const char *why = start_frame(rx);
                if (why != NULL) {
                    return fail(rx, event, why, at);
                }
            }
            continue;
        }
        if (rx->remaining > 0) {
            size_t take = len - at;
            if ((uint64_t)take > rx->remaining) {
                take = (size_t)rx->remaining;
            }
            take_payload(rx, data + at, take);
            at += take;
        }
        if (rx->remaining == 0) {
            int made = end_frame(rx, event);
            if (made < 0) {
                return fail(rx, event, "close frame with a one-byte payload", at);
            }
            if (made) {
                return at;
            }
        }
    }
    return at;
}
