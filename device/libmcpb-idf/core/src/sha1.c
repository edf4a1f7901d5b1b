/* SHA-1 (FIPS 180-4), used only to check the server's Sec-WebSocket-Accept. Rolled into one loop
 * (the round function picked by index): the handshake hashes two blocks, size matters, speed not. */
#include "digest.h"

#include <string.h>

static uint32_t rotl(uint32_t value, unsigned bits)
{
    return (value << bits) | (value >> (32u - bits));
}

static void compress(mcpb_sha1_t *sha)
{
    static const uint32_t k[4] = {0x5A827999u, 0x6ED9EBA1u, 0x8F1BBCDCu, 0xCA62C1D6u};
    uint32_t w[80], a = sha->state[0], b = sha->state[1], c = sha->state[2], d = sha->state[3],
                    e = sha->state[4];
    unsigned i;
    for (i = 0; i < 16; i++) {
        const uint8_t *p = sha->block + 4 * i;
        w[i] = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
    }
    for (; i < 80; i++) { /* the whole schedule: plain indexing is shorter code than a ring of 16 */
        w[i] = rotl(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    }
    for (i = 0; i < 80; i++) {
        uint32_t f = b ^ c ^ d;
        if (i < 20) {
            f = d ^ (b & (c ^ d));
        } else if (i >= 40 && i < 60) {
            f = (b & c) | (d & (b | c));
        }
        f += rotl(a, 5) + e + k[i / 20] + w[i];
        e = d;
        d = c;
        c = rotl(b, 30);
        b = a;
        a = f;
    }
    sha->state[0] += a;
    sha->state[1] += b;
    sha->state[2] += c;
    sha->state[3] += d;
    sha->state[4] += e;
}

void mcpb_sha1_init(mcpb_sha1_t *sha)
{
    static const uint32_t initial[5] = {0x67452301u, 0xEFCDAB89u, 0x98BADCFEu, 0x10325476u, 0xC3D2E1F0u};
    memcpy(sha->state, initial, sizeof(initial));
    sha->total_bytes = 0;
    sha->block_len = 0;
}

void mcpb_sha1_update(mcpb_sha1_t *sha, const void *data, size_t len)
{
    const uint8_t *bytes = (const uint8_t *)data;
    sha->total_bytes += len;
    while (len-- > 0) {
        sha->block[sha->block_len++] = *bytes++;
        if (sha->block_len == 64) {
            compress(sha);
            sha->block_len = 0;
        }
    }
}

void mcpb_sha1_final(mcpb_sha1_t *sha, uint8_t digest[MCPB_SHA1_BYTES])
{
    uint32_t bits = sha->total_bytes * 8u;
    uint8_t byte = 0x80, length[8] = {0};
    unsigned i;
    for (i = 0; i < 4; i++) {
        length[4 + i] = (uint8_t)(bits >> (24 - 8 * i));
    }
    /* 0x80, zeros up to 56 bytes in the block, the length: the padding goes through update */
    do {
        mcpb_sha1_update(sha, &byte, 1);
        byte = 0;
    } while (sha->block_len != 56);
    mcpb_sha1_update(sha, length, 8);
    for (i = 0; i < 20; i++) {
        digest[i] = (uint8_t)(sha->state[i / 4] >> (24 - 8 * (i % 4)));
    }
}
