/* The incremental COBS + CRC-32 frame decoder: bytes in any chunks, verified messages out. */
#include "mcpb/serial_frame.h"

#include <string.h>

#define CRC_RESIDUE 0x2144DF1Cu /* CRC-32 of any message followed by its own CRC, little endian */

static void reset(mcpb_cobs_decoder_t *dec)
{
    dec->left = 0;
    dec->zero_due = 0;
    dec->bad = 0;
    dec->size = 0;
    dec->crc = 0;
    dec->head_len = 0;
    dec->over = 0;
}

void mcpb_cobs_decoder_init(mcpb_cobs_decoder_t *dec, uint8_t *buf, size_t cap)
{
    dec->buf = buf;
    dec->cap = cap;
    dec->dropped = 0;
    reset(dec);
}

static void keep(mcpb_cobs_decoder_t *dec, const uint8_t *data, size_t len)
{
    size_t end = dec->size + len;
    dec->crc = mcpb_crc32(dec->crc, data, len);
    /* One byte of buf stays free for the NUL after the message. */
    if (!dec->over && end < dec->cap) {
        memcpy(dec->buf + dec->size, data, len);
    } else {
        if (!dec->over) {
            size_t from_buf = dec->size < MCPB_HEAD_BYTES ? dec->size : MCPB_HEAD_BYTES;
            memcpy(dec->head, dec->buf, from_buf);
            dec->head_len = from_buf;
            dec->over = 1;
        }
        if (dec->head_len < MCPB_HEAD_BYTES) {
            size_t take = MCPB_HEAD_BYTES - dec->head_len;
            if (take > len) {
                take = len;
            }
            memcpy(dec->head + dec->head_len, data, take);
            dec->head_len += take;
        }
    }
    dec->size = end;
}

/* A 0x00 ended the frame: fills `frame` and returns 1 when it was a message. */
static int finish(mcpb_cobs_decoder_t *dec, mcpb_frame_t *frame)
{
    int delivered = 0;
    if (dec->bad || dec->left > 0) {
        dec->dropped++;
    } else if (dec->size == 0) {
        /* two delimiters in a row: nothing was lost */
    } else if (dec->size < 5 || dec->crc != CRC_RESIDUE) {
        dec->dropped++;
    } else {
        frame->size = dec->size - 4;
        if (dec->over || frame->size + 5 > dec->cap) {
            frame->kind = MCPB_FRAME_OVERSIZE;
            if (!dec->over) {
                dec->head_len = frame->size < MCPB_HEAD_BYTES ? frame->size : MCPB_HEAD_BYTES;
                memcpy(dec->head, dec->buf, dec->head_len);
            } else if (dec->head_len > frame->size) {
                dec->head_len = frame->size;
            }
            frame->head = dec->head;
            frame->head_len = dec->head_len;
        } else {
            frame->kind = MCPB_FRAME_MESSAGE;
            dec->buf[frame->size] = 0;
            frame->head = dec->buf;
            frame->head_len = frame->size;
        }
        delivered = 1;
    }
    reset(dec);
    return delivered;
}

size_t mcpb_cobs_decoder_feed(mcpb_cobs_decoder_t *dec, const uint8_t *data, size_t len, mcpb_frame_t *frame)
{
    size_t at = 0;
    frame->kind = MCPB_FRAME_NONE;
    frame->size = 0;
    frame->head = NULL;
    frame->head_len = 0;
    while (at < len) {
        if (dec->bad) {
            const uint8_t *zero = (const uint8_t *)memchr(data + at, 0, len - at);
            if (zero == NULL) {
                return len;
            }
            at = (size_t)(zero - data);
            dec->left = 0;
        }
        if (dec->left == 0) {
            uint8_t code = data[at++];
            if (code == 0) {
                if (finish(dec, frame)) {
                    return at;
                }
                continue;
            }
            if (dec->zero_due) {
                static const uint8_t zero_byte = 0;
                keep(dec, &zero_byte, 1);
            }
            dec->left = (size_t)code - 1;
            dec->zero_due = code < 255;
            continue;
        }
        {
            size_t end = len - at < dec->left ? len : at + dec->left;
            const uint8_t *zero = (const uint8_t *)memchr(data + at, 0, end - at);
            if (zero != NULL) { /* a block cut short: bytes were lost */
                dec->bad = 1;
                at = (size_t)(zero - data);
                continue;
            }
            keep(dec, data + at, end - at);
            dec->left -= end - at;
            at = end;
        }
    }
    return at;
}
