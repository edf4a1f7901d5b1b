/* The client's outgoing side: messages and control frames through the tx buffer, one segment at a
 * time, WebSocket-masked or COBS-framed as the link needs. */
#include <string.h>

#include "client_internal.h"

typedef struct {
    mcpb_client_t *client;
    size_t fill;
    int failed;
    int masking;
    uint8_t mask[4];
    size_t phase;
} writer_t;

static int flush(writer_t *writer)
{
    mcpb_client_t *client = writer->client;
    if (writer->fill > 0 && !writer->failed &&
        client->port.send(client->port.ctx, client->buffers.tx, writer->fill) < 0) {
        writer->failed = 1;
    }
    writer->fill = 0;
    return writer->failed ? -1 : 0;
}

static int put(void *ctx, const uint8_t *data, size_t len)
{
    writer_t *writer = (writer_t *)ctx;
    mcpb_buffers_t *buffers = &writer->client->buffers;
    while (len > 0 && !writer->failed) {
        size_t take = buffers->tx_cap - writer->fill;
        if (take > len) {
            take = len;
        }
        memcpy(buffers->tx + writer->fill, data, take);
        if (MCPB_WITH_WEBSOCKET && writer->masking) {
            mcpb_ws_mask(buffers->tx + writer->fill, take, writer->mask, writer->phase);
            writer->phase += take;
        }
        writer->fill += take;
        data += take;
        len -= take;
        if (writer->fill == buffers->tx_cap) {
            flush(writer);
        }
    }
    return writer->failed ? -1 : 0;
}

static void random_mask(mcpb_client_t *client, uint8_t mask[4])
{
    uint32_t bits = client->port.random32(client->port.ctx);
    memcpy(mask, &bits, 4); /* random bytes: their order does not matter */
}

/* Writes the pieces as one message: a masked text frame, or one COBS frame. */
static int send_pieces(mcpb_client_t *client, uint8_t opcode, const uint8_t *const pieces[], const size_t lens[],
                       size_t count)
{
    writer_t writer;
    size_t total = 0, i;
    memset(&writer, 0, sizeof(writer));
    writer.client = client;
    for (i = 0; i < count; i++) {
        total += lens[i];
    }
    if (WAY_SERIAL(client)) {
        mcpb_cobs_encoder_t enc;
        mcpb_cobs_encoder_begin(&enc, put, &writer);
        for (i = 0; i < count; i++) {
            mcpb_cobs_encoder_put(&enc, pieces[i], lens[i]);
        }
        mcpb_cobs_encoder_end(&enc);
    } else {
        uint8_t header[MCPB_WS_MAX_HEADER];
        size_t header_len;
        random_mask(client, writer.mask);
        header_len = mcpb_ws_header(header, opcode, total, writer.mask);
        put(&writer, header, header_len);
        writer.masking = 1;
        for (i = 0; i < count; i++) {
            put(&writer, pieces[i], lens[i]);
        }
    }
    return flush(&writer);
}

int mcpb__send_message(mcpb_client_t *client, size_t slot_index, const char *message, size_t len)
{
    /* room for {"provider":"<64 bytes, each escaped as \u00XX at worst>","payload": */
    char prefix[12 + MCPB_SLOT_MAX * 6 + 2 + 11 + 1];
    const uint8_t *pieces[3];
    size_t lens[3];
    if (slot_index == MCPB_NO_SLOT || !ENVELOPED(client)) {
        pieces[0] = (const uint8_t *)message;
        lens[0] = len;
        return send_pieces(client, MCPB_WS_TEXT, pieces, lens, 1);
    }
    lens[0] = mcpb_envelope_prefix(prefix, sizeof(prefix), client->config.slots[slot_index].name);
    pieces[0] = (const uint8_t *)prefix;
    pieces[1] = (const uint8_t *)message;
    lens[1] = len;
    pieces[2] = (const uint8_t *)"}";
    lens[2] = 1;
    return send_pieces(client, MCPB_WS_TEXT, pieces, lens, 3);
}

int mcpb__send_control(mcpb_client_t *client, uint8_t opcode, const uint8_t *payload, size_t len)
{
    const uint8_t *pieces[1];
    size_t lens[1];
    pieces[0] = payload;
    lens[0] = len;
    return send_pieces(client, opcode, pieces, lens, 1);
}

void mcpb__send_close(mcpb_client_t *client, int code, const char *reason)
{
    uint8_t payload[2 + MCPB_WS_MAX_REASON];
    size_t reason_len = strlen(reason);
    if (reason_len > MCPB_WS_MAX_REASON) {
        reason_len = MCPB_WS_MAX_REASON;
    }
    payload[0] = (uint8_t)(code >> 8);
    payload[1] = (uint8_t)code;
    memcpy(payload + 2, reason, reason_len);
    mcpb__send_control(client, MCPB_WS_CLOSE_FRAME, payload, 2 + reason_len);
}
