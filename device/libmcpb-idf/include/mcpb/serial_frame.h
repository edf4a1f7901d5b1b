/* Serial frames: COBS( JSON bytes + CRC-32 little endian ) between 0x00 delimiters, both ways.
 * The format: docs/device-serial.md "Frames". No I/O here: bytes in, frames out. */
#ifndef MCPB_SERIAL_FRAME_H
#define MCPB_SERIAL_FRAME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MCPB_HEAD_BYTES 96 /* of an oversize request, where its id is looked for (after an envelope's
                              * slot name on an enveloped link) */

/* Where encoded bytes go: 0 on success, negative to stop (the encoder reports it at the end). */
typedef int (*mcpb_sink_fn)(void *ctx, const uint8_t *data, size_t len);

/* CRC-32 (IEEE, as binascii.crc32); pass 0 to start, the previous value to continue. */
uint32_t mcpb_crc32(uint32_t crc, const void *data, size_t len);

/* Streams one frame: begin (writes the leading 0x00), put the message in any number of pieces,
 * end (the CRC, the last block, the closing 0x00). Never holds more than one 255-byte block. */
typedef struct {
    uint8_t block[255];
    size_t fill;
    uint32_t crc;
    mcpb_sink_fn sink;
    void *sink_ctx;
    int failed;
} mcpb_cobs_encoder_t;

void mcpb_cobs_encoder_begin(mcpb_cobs_encoder_t *enc, mcpb_sink_fn sink, void *sink_ctx);
void mcpb_cobs_encoder_put(mcpb_cobs_encoder_t *enc, const uint8_t *data, size_t len);
int mcpb_cobs_encoder_end(mcpb_cobs_encoder_t *enc);

/* One whole frame into a buffer (leading and closing 0x00 included): its size, 0 when out_cap is short. */
size_t mcpb_serial_frame_encode(const uint8_t *message, size_t len, uint8_t *out, size_t out_cap);

typedef enum {
    MCPB_FRAME_NONE = 0,     /* the bytes ran out before a frame ended */
    MCPB_FRAME_MESSAGE = 1,  /* a verified message: buf[0..size), NUL-terminated at buf[size] */
    MCPB_FRAME_OVERSIZE = 2  /* a verified message over the cap: size, head[0..head_len) (its first
                              * bytes that fit buf, NUL-terminated) */
} mcpb_frame_kind_t;

typedef struct {
    mcpb_frame_kind_t kind;
    size_t size;
    const uint8_t *head;
    size_t head_len;
} mcpb_frame_t;

/* Undoes COBS as bytes arrive, into the caller's buffer (cap = the frame cap + 4 for the CRC + 1),
 * and checks the CRC by its residue, so a frame over the cap is still verified, only its first
 * cap - 1 bytes stored.
 * A frame failing COBS or the CRC is dropped and counted; decoding resumes after the next 0x00. */
typedef struct {
    uint8_t *buf;
    size_t cap;
    size_t left;      /* bytes left in the current COBS block; 0: a code byte is next */
    int zero_due;     /* a zero goes before the next block's bytes */
    int bad;          /* not a frame: skip to the next 0x00 */
    size_t size;      /* decoded bytes so far, CRC included */
    uint32_t crc;
    uint32_t dropped; /* frames dropped (bad COBS or CRC) */
} mcpb_cobs_decoder_t;

void mcpb_cobs_decoder_init(mcpb_cobs_decoder_t *dec, uint8_t *buf, size_t cap);
/* Feeds bytes until one frame ends; returns how many were consumed. Call again with the rest. */
size_t mcpb_cobs_decoder_feed(mcpb_cobs_decoder_t *dec, const uint8_t *data, size_t len, mcpb_frame_t *frame);

#ifdef __cplusplus
}
#endif

#endif
