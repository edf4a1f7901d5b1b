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
}

void mcpb_cobs_decoder_init(mcpb_cobs_decoder_t *dec, uint8_t *buf, size_t cap)
{
    dec->buf = buf;
    dec->cap = cap;
    dec->dropped = 0;
    reset(dec);
}

/* What fits of the frame goes to buf: all of a message, the first bytes (the head) of one over the
 * cap. One byte of buf stays free for the NUL after it. */
static void keep(mcpb_cobs_decoder_t *dec, const uint8_t *data, size_t len)
{
    size_t at = dec->size < dec->cap - 1 ? dec->size : dec->cap - 1, room = dec->cap - 1 - at;
    dec->crc = mcpb_crc32(dec->crc, data, len);
    memcpy(dec->buf + at, data, len < room ? len : room);
    dec->size += len;
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
        /* the message, or the head of one over the cap (its CRC bytes cut off when they fit) */
        frame->size = dec->size - 4;
        frame->kind = frame->size + 5 > dec->cap ? MCPB_FRAME_OVERSIZE : MCPB_FRAME_MESSAGE;
        frame->head = dec->buf;
        frame->head_len = frame->size < dec->cap - 1 ? frame->size : dec->cap - 1;
        dec->buf[frame->head_len] = 0;
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
