/* A fake port for the core's tests: in-memory byte pipes, a clock that moves only when told or when
 * a recv times out, scripted randomness, and a plain WebSocket server speaking through the pipes. */
#ifndef TEST_CORE_FAKE_PORT_H
#define TEST_CORE_FAKE_PORT_H

#include <stddef.h>
#include <stdint.h>

#include "mcpb/client.h"
#include "mcpb/port.h"

#define FAKE_PIPE_BYTES (256 * 1024)

typedef struct {
    uint8_t to_device[FAKE_PIPE_BYTES]; /* what the gateway says, read by recv */
    size_t to_device_len, to_device_at;
    uint8_t from_device[FAKE_PIPE_BYTES]; /* what the device wrote */
    size_t from_device_len, from_device_at;
    size_t recv_chunk;      /* most bytes one recv returns (0: all) */
    int open;
    int connects;           /* connect calls */
    int fail_connects;      /* the next this many connects fail */
    int peer_closed;        /* recv answers -1 once to_device is drained */
    int fail_sends;
    char connected_host[256];
    uint16_t connected_port;
    uint32_t now;
    uint32_t random_value;  /* what random32 returns */
    int logs;
    char last_log[256];
    /* link events seen through the client's on_event */
    int events;
    mcpb_link_event_t last_event;
} fake_port_t;

void fake_port_init(fake_port_t *fake, mcpb_port_t *port);
void fake_push(fake_port_t *fake, const void *data, size_t len);
/* A server frame (unmasked unless mask is given) into to_device. */
void fake_push_frame(fake_port_t *fake, uint8_t first_byte, const void *payload, size_t len, const uint8_t *mask);
void fake_push_text(fake_port_t *fake, const char *text);
/* Answers the upgrade request the device wrote with a 101 and the right accept (accept_ok 0: wrong). */
void fake_accept_upgrade(fake_port_t *fake, int accept_ok);
/* The upgrade request the device wrote (NUL-terminated copy), and marks it read. */
const char *fake_take_request(fake_port_t *fake);
/* The next client frame the device wrote: opcode and unmasked payload (NUL-terminated); -1 when none
 * or when it is not masked. */
int fake_next_frame(fake_port_t *fake, uint8_t *opcode, char *payload, size_t cap, size_t *len);
/* The next serial frame the device wrote (decoded, CRC checked): its length, or -1 when none. */
int fake_next_serial(fake_port_t *fake, char *payload, size_t cap);
/* An event callback recording into the fake port (pass the fake as event_ctx). */
void fake_on_event(void *ctx, const mcpb_link_event_t *event);

/* A handler that records what it got and answers a fixed text (or returns `result` when nonzero). */
typedef struct {
    int calls;
    char last[8192];
    size_t last_len;
    const char *answer;
    int result;
} fake_handler_t;

int fake_handler(void *ctx, const char *in, size_t in_len, char *out, size_t out_cap);

#endif
