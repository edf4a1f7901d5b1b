/* SHA-1 and base64, only as much as the WebSocket handshake needs (RFC 6455 section 4). */
#ifndef MCPB_DIGEST_H
#define MCPB_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#define MCPB_SHA1_BYTES 20

typedef struct {
    uint32_t state[5];
    uint32_t total_bytes;   /* the handshake hashes 60 bytes: inputs up to 512 MB */
    uint8_t block[64];
    size_t block_len;
} mcpb_sha1_t;

void mcpb_sha1_init(mcpb_sha1_t *sha);
void mcpb_sha1_update(mcpb_sha1_t *sha, const void *data, size_t len);
void mcpb_sha1_final(mcpb_sha1_t *sha, uint8_t digest[MCPB_SHA1_BYTES]);

/* Standard base64 with padding; writes a NUL. Returns the length, or 0 when out_cap is too small. */
size_t mcpb_base64_encode(const uint8_t *data, size_t len, char *out, size_t out_cap);

#endif
