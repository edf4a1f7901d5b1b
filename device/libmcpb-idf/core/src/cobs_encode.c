/* The COBS + CRC-32 frame encoder: stuffs into one 255-byte block and hands each block on. */
#include "mcpb/serial_frame.h"

#include <string.h>

static void emit(mcpb_cobs_encoder_t *enc, const uint8_t *data, size_t len)
{
    if (!enc->failed && enc->sink(enc->sink_ctx, data, len) < 0) {
        enc->failed = 1;
    }
}

static void stuff(mcpb_cobs_encoder_t *enc, const uint8_t *data, size_t len)
{
    size_t i;
    for (i = 0; i < len; i++) {
        if (data[i] == 0) {
            enc->block[0] = (uint8_t)enc->fill;
            emit(enc, enc->block, enc->fill);
            enc->fill = 1;
            continue;
        }
        enc->block[enc->fill++] = data[i];
        if (enc->fill == 255) { /* 254 bytes without a zero: a full block */
            enc->block[0] = 255;
            emit(enc, enc->block, 255);
            enc->fill = 1;
        }
    }
}

void mcpb_cobs_encoder_begin(mcpb_cobs_encoder_t *enc, mcpb_sink_fn sink, void *sink_ctx)
{
    static const uint8_t delimiter = 0;
    enc->fill = 1;
    enc->crc = 0;
    enc->sink = sink;
    enc->sink_ctx = sink_ctx;
    enc->failed = 0;
    /* The leading 0x00 ends whatever the line held before (a boot banner, a stray print). */
    emit(enc, &delimiter, 1);
}

void mcpb_cobs_encoder_put(mcpb_cobs_encoder_t *enc, const uint8_t *data, size_t len)
{
    enc->crc = mcpb_crc32(enc->crc, data, len);
    stuff(enc, data, len);
}

int mcpb_cobs_encoder_end(mcpb_cobs_encoder_t *enc)
{
    uint8_t crc[4];
    static const uint8_t delimiter = 0;
    crc[0] = (uint8_t)enc->crc;
    crc[1] = (uint8_t)(enc->crc >> 8);
    crc[2] = (uint8_t)(enc->crc >> 16);
    crc[3] = (uint8_t)(enc->crc >> 24);
    stuff(enc, crc, 4);
    enc->block[0] = (uint8_t)enc->fill;
    emit(enc, enc->block, enc->fill);
    emit(enc, &delimiter, 1);
    return enc->failed ? -1 : 0;
}

typedef struct {
    uint8_t *out;
    size_t cap;
    size_t len;
} buffer_sink_t;

static int to_buffer(void *ctx, const uint8_t *data, size_t len)
{
    buffer_sink_t *buffer = (buffer_sink_t *)ctx;
    if (buffer->cap - buffer->len < len) {
        return -1;
    }
    memcpy(buffer->out + buffer->len, data, len);
    buffer->len += len;
    return 0;
}

size_t mcpb_serial_frame_encode(const uint8_t *message, size_t len, uint8_t *out, size_t out_cap)
{
    mcpb_cobs_encoder_t enc;
    buffer_sink_t buffer;
    buffer.out = out;
    buffer.cap = out_cap;
    buffer.len = 0;
    mcpb_cobs_encoder_begin(&enc, to_buffer, &buffer);
    mcpb_cobs_encoder_put(&enc, message, len);
    return mcpb_cobs_encoder_end(&enc) == 0 ? buffer.len : 0;
}
