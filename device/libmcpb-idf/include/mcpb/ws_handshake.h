/* The WebSocket opening handshake (RFC 6455 section 4) from the client's side: no I/O here. */
#ifndef MCPB_WS_HANDSHAKE_H
#define MCPB_WS_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MCPB_WS_KEY_CHARS 24    /* base64 of 16 random bytes */
#define MCPB_WS_ACCEPT_CHARS 28 /* base64 of a SHA-1 */

/* "/provider/<slot, percent-encoded as one path segment>" into out: its length, 0 when it does not fit. */
size_t mcpb_ws_provider_path(const char *slot, char *out, size_t out_cap);

/* Sec-WebSocket-Key from 16 random bytes, NUL-terminated. */
void mcpb_ws_make_key(const uint8_t nonce[16], char key[MCPB_WS_KEY_CHARS + 1]);

/* The Sec-WebSocket-Accept a server must answer to `key`, NUL-terminated. */
void mcpb_ws_accept_for(const char *key, char accept[MCPB_WS_ACCEPT_CHARS + 1]);

/* The upgrade request (a provider token goes in X-Provider-Token, as docs/protocol.md says):
 * its length, 0 when it does not fit out_cap. */
size_t mcpb_ws_request(char *out, size_t out_cap, const char *host, uint16_t port, const char *path,
                       const char *key, const char *token, const char *agent);

typedef struct {
    int status;            /* the HTTP status code */
    int accept_ok;         /* Sec-WebSocket-Accept present and right for the key */
    size_t head_len;       /* bytes up to and including the blank line; frames follow */
    size_t content_length; /* of a refusal's body */
} mcpb_http_response_t;

/* Parses a response head in buf[0..len): 1 when complete (response filled), 0 when more bytes are
 * needed, -1 when it is not an HTTP response. */
int mcpb_ws_parse_response(const char *buf, size_t len, const char *key, mcpb_http_response_t *response);

#ifdef __cplusplus
}
#endif

#endif
