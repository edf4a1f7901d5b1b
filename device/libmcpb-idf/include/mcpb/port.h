/* The platform port: the only way the core reaches sockets, serial lines, clocks, logs and entropy. */
#ifndef MCPB_PORT_H
#define MCPB_PORT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum mcpb_log_level {
    MCPB_LOG_ERROR = 0,
    MCPB_LOG_WARN = 1,
    MCPB_LOG_INFO = 2,
    MCPB_LOG_DEBUG = 3
};

/* Every function gets `ctx` back. A port serves one byte stream at a time. */
typedef struct mcpb_port {
    void *ctx;
    /* Open a byte stream: a TCP connection to host:port, or, with port 0, the serial device named
     * by host (raw, at the port's configured speed). 0 on success, negative on failure. */
    int (*connect)(void *ctx, const char *host, uint16_t port);
    /* Write all `len` bytes: 0 when they are out, negative on error. */
    int (*send)(void *ctx, const uint8_t *data, size_t len);
    /* Read what has arrived, waiting at most timeout_ms: >0 bytes read, 0 timeout, <0 closed or error. */
    int (*recv)(void *ctx, uint8_t *buf, size_t cap, uint32_t timeout_ms);
    /* Close the stream; safe to call when nothing is open. */
    void (*close)(void *ctx);
    /* Milliseconds from a monotonic clock; wraps around, compared by difference. */
    uint32_t (*now_ms)(void *ctx);
    /* One log line, without a trailing newline. */
    void (*log)(void *ctx, int level, const char *message);
    /* 32 random bits, for back-off jitter, WebSocket keys and masks. */
    uint32_t (*random32)(void *ctx);
} mcpb_port_t;

/* `in` into out (cap > 0), NUL-terminated, with every control byte (below 0x20, and 0x7F) written as
 * \xNN, cut at the last whole byte or escape that fits: what a port's log writes of a core line, whose
 * gateway text (a close reason, a refusal) could otherwise end the line or forge another. */
void mcpb_log_text(char *out, size_t cap, const char *in);

#ifdef __cplusplus
}
#endif

#endif
