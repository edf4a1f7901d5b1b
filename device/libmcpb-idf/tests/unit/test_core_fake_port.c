/* The fake port and fake gateway for the core's tests (see test_core_fake_port.h). */
#include "test_core_fake_port.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcpb/serial_frame.h"
#include "mcpb/ws_frame.h"
#include "mcpb/ws_handshake.h"

static int fake_connect(void *ctx, const char *host, uint16_t port)
{
    fake_port_t *fake = (fake_port_t *)ctx;
    fake->connects++;
    if (fake->fail_connects > 0) {
        fake->fail_connects--;
        return -1;
    }
    snprintf(fake->connected_host, sizeof(fake->connected_host), "%s", host);
    fake->connected_port = port;
    fake->open = 1;
    return 0;
}

static int fake_send(void *ctx, const uint8_t *data, size_t len)
{
    fake_port_t *fake = (fake_port_t *)ctx;
    if (!fake->open || fake->fail_sends) {
        return -1;
    }
    if (FAKE_PIPE_BYTES - fake->from_device_len < len) {
        abort();
    }
    memcpy(fake->from_device + fake->from_device_len, data, len);
    fake->from_device_len += len;
    return 0;
}

static int fake_recv(void *ctx, uint8_t *buf, size_t cap, uint32_t timeout_ms)
{
    fake_port_t *fake = (fake_port_t *)ctx;
    size_t left = fake->to_device_len - fake->to_device_at;
    if (!fake->open) {
        return -1;
    }
    if (left == 0) {
        if (fake->peer_closed) {
            return -1;
        }
        fake->now += timeout_ms;
        return 0;
    }
    if (left > cap) {
        left = cap;
    }
    if (fake->recv_chunk > 0 && left > fake->recv_chunk) {
        left = fake->recv_chunk;
    }
    memcpy(buf, fake->to_device + fake->to_device_at, left);
    fake->to_device_at += left;
    return (int)left;
}

static void fake_close(void *ctx)
{
    fake_port_t *fake = (fake_port_t *)ctx;
    fake->open = 0;
}

static uint32_t fake_now(void *ctx)
{
    return ((fake_port_t *)ctx)->now;
}

static void fake_log(void *ctx, int level, const char *message)
{
    fake_port_t *fake = (fake_port_t *)ctx;
    (void)level;
    fake->logs++;
    snprintf(fake->last_log, sizeof(fake->last_log), "%s", message);
}

static uint32_t fake_random(void *ctx)
{
    return ((fake_port_t *)ctx)->random_value;
}

void fake_port_init(fake_port_t *fake, mcpb_port_t *port)
{
    memset(fake, 0, sizeof(*fake));
    fake->now = 1000;
    fake->random_value = 0x12345678u;
    port->ctx = fake;
    port->connect = fake_connect;
    port->send = fake_send;
    port->recv = fake_recv;
    port->close = fake_close;
    port->now_ms = fake_now;
    port->log = fake_log;
    port->random32 = fake_random;
}

void fake_push(fake_port_t *fake, const void *data, size_t len)
{
    if (FAKE_PIPE_BYTES - fake->to_device_len < len) {
        abort();
    }
    memcpy(fake->to_device + fake->to_device_len, data, len);
    fake->to_device_len += len;
}

void fake_push_frame(fake_port_t *fake, uint8_t first_byte, const void *payload, size_t len, const uint8_t *mask)
{
    uint8_t header[MCPB_WS_MAX_HEADER];
    size_t header_len = mcpb_ws_header(header, 0, len, mask);
    header[0] = first_byte;
    fake_push(fake, header, header_len);
    if (mask != NULL) {
        uint8_t *masked = malloc(len + 1);
        memcpy(masked, payload, len);
        mcpb_ws_mask(masked, len, mask, 0);
        fake_push(fake, masked, len);
        free(masked);
    } else {
        fake_push(fake, payload, len);
    }
}

void fake_push_text(fake_port_t *fake, const char *text)
{
    fake_push_frame(fake, 0x81, text, strlen(text), NULL);
}

const char *fake_take_request(fake_port_t *fake)
{
    static char request[4096];
    const uint8_t *start = fake->from_device + fake->from_device_at;
    size_t len = fake->from_device_len - fake->from_device_at, i;
    for (i = 0; i + 3 < len; i++) {
        if (memcmp(start + i, "\r\n\r\n", 4) == 0) {
            memcpy(request, start, i + 4);
            request[i + 4] = '\0';
            fake->from_device_at += i + 4;
            return request;
        }
    }
    return NULL;
}

void fake_accept_upgrade(fake_port_t *fake, int accept_ok)
{
    char reply[512], key[64], accept[MCPB_WS_ACCEPT_CHARS + 1];
    const char *request = fake_take_request(fake);
    const char *found = request != NULL ? strstr(request, "Sec-WebSocket-Key: ") : NULL;
    size_t key_len;
    if (found == NULL) {
        abort();
    }
    found += strlen("Sec-WebSocket-Key: ");
    key_len = strcspn(found, "\r");
    memcpy(key, found, key_len);
    key[key_len] = '\0';
    mcpb_ws_accept_for(key, accept);
    if (!accept_ok) {
        accept[0] = accept[0] == 'A' ? 'B' : 'A';
    }
    snprintf(reply, sizeof(reply),
             "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             "sec-websocket-accept: %s\r\n\r\n",
             accept);
    fake_push(fake, reply, strlen(reply));
}

int fake_next_frame(fake_port_t *fake, uint8_t *opcode, char *payload, size_t cap, size_t *len)
{
    const uint8_t *at = fake->from_device + fake->from_device_at;
    size_t left = fake->from_device_len - fake->from_device_at, header = 2, i;
    uint64_t size;
    if (left < 2 || !(at[1] & 0x80)) {
        return -1;
    }
    size = at[1] & 0x7Fu;
    if (size == 126) {
        size = (uint64_t)at[2] << 8 | at[3];
        header = 4;
    } else if (size == 127) {
        size = 0;
        for (i = 0; i < 8; i++) {
            size = size << 8 | at[2 + i];
        }
        header = 10;
    }
    if (left < header + 4 + size || size + 1 > cap) {
        return -1;
    }
    *opcode = at[0] & 0x0Fu;
    memcpy(payload, at + header + 4, (size_t)size);
    mcpb_ws_mask((uint8_t *)payload, (size_t)size, at + header, 0);
    payload[size] = '\0';
    *len = (size_t)size;
    fake->from_device_at += header + 4 + (size_t)size;
    return 0;
}

int fake_next_serial(fake_port_t *fake, char *payload, size_t cap)
{
    static uint8_t buf[FAKE_PIPE_BYTES];
    mcpb_cobs_decoder_t dec;
    mcpb_frame_t frame;
    mcpb_cobs_decoder_init(&dec, buf, sizeof(buf));
    while (fake->from_device_at < fake->from_device_len) {
        size_t used = mcpb_cobs_decoder_feed(&dec, fake->from_device + fake->from_device_at,
                                             fake->from_device_len - fake->from_device_at, &frame);
        fake->from_device_at += used;
        if (frame.kind == MCPB_FRAME_MESSAGE) {
            if (frame.size + 1 > cap) {
                return -1;
            }
            memcpy(payload, buf, frame.size + 1);
            return (int)frame.size;
        }
    }
    return -1;
}

void fake_on_event(void *ctx, const mcpb_link_event_t *event)
{
    fake_port_t *fake = (fake_port_t *)ctx;
    fake->events++;
    fake->last_event = *event;
}

int fake_handler(void *ctx, const char *in, size_t in_len, char *out, size_t out_cap)
{
    fake_handler_t *handler = (fake_handler_t *)ctx;
    size_t answer_len;
    handler->calls++;
    if (in[in_len] != '\0' || in_len >= sizeof(handler->last)) {
        abort(); /* the core promises a NUL after the message */
    }
    memcpy(handler->last, in, in_len + 1);
    handler->last_len = in_len;
    if (handler->result != 0) {
        return handler->result;
    }
    if (handler->answer == NULL) {
        return 0;
    }
    answer_len = strlen(handler->answer);
    if (answer_len > out_cap) {
        return -1;
    }
    memcpy(out, handler->answer, answer_len);
    return (int)answer_len;
}
