/* SHA-1 (FIPS 180-4), used only to check the server's Sec-WebSocket-Accept. */
#include "digest.h"

#include <string.h>

static uint32_t rotl(uint32_t value, unsigned bits)
{
    return (value << bits) | (value >> (32u - bits));
}

static void compress(uint32_t state[5], const uint8_t block[64])
{
    static const uint32_t k[4] = {0x5A827999u, 0x6ED9EBA1u, 0x8F1BBCDCu, 0xCA62C1D6u};
    uint32_t w[16], v[5];
    unsigned i;
    memcpy(v, state, sizeof(v));
    for (i = 0; i < 80; i++) {
        uint32_t f, next;
        unsigned round = i / 20;
        if (i < 16) {
            w[i] = (uint32_t)block[4 * i] << 24 | (uint32_t)block[4 * i + 1] << 16 |
                   (uint32_t)block[4 * i + 2] << 8 | (uint32_t)block[4 * i + 3];
        } else {
            w[i & 15] = rotl(w[(i - 3) & 15] ^ w[(i - 8) & 15] ^ w[(i - 14) & 15] ^ w[i & 15], 1);
        }
        if (round == 0) {
            f = (v[1] & v[2]) | (~v[1] & v[3]);
        } else if (round == 2) {
            f = (v[1] & v[2]) | (v[1] & v[3]) | (v[2] & v[3]);
        } else {
            f = v[1] ^ v[2] ^ v[3];
        }
        next = rotl(v[0], 5) + f + v[4] + k[round] + w[i & 15];
        v[4] = v[3];
        v[3] = v[2];
        v[2] = rotl(v[1], 30);
        v[1] = v[0];
        v[0] = next;
    }
    for (i = 0; i < 5; i++) {
        state[i] += v[i];
    }
}

void mcpb_sha1_init(mcpb_sha1_t *sha)
{
    sha->state[0] = 0x67452301u;
    sha->state[1] = 0xEFCDAB89u;
    sha->state[2] = 0x98BADCFEu;
    sha->state[3] = 0x10325476u;
    sha->state[4] = 0xC3D2E1F0u;
    sha->total_bytes = 0;
    sha->block_len = 0;
}

void mcpb_sha1_update(mcpb_sha1_t *sha, const void *data, size_t len)
{
    const uint8_t *bytes = (const uint8_t *)data;
    sha->total_bytes += len;
    while (len > 0) {
        size_t take = 64 - sha->block_len;
        if (take > len) {
            take = len;
        }
        memcpy(sha->block + sha->block_len, bytes, take);
        sha->block_len += take;
        bytes += take;
        len -= take;
        if (sha->block_len == 64) {
            compress(sha->state, sha->block);
            sha->block_len = 0;
        }
    }
}

void mcpb_sha1_final(mcpb_sha1_t *sha, uint8_t digest[MCPB_SHA1_BYTES])
{
    static const uint8_t pad = 0x80, zero = 0;
    uint32_t bits = sha->total_bytes * 8u;
    uint8_t length[8] = {0};
    unsigned i;
    for (i = 0; i < 4; i++) {
        length[4 + i] = (uint8_t)(bits >> (24 - 8 * i));
    }
    /* 0x80, zeros up to 56 bytes in the block, the length: the padding goes through update */
    mcpb_sha1_update(sha, &pad, 1);
    while (sha->block_len != 56) {
        mcpb_sha1_update(sha, &zero, 1);
    }
    mcpb_sha1_update(sha, length, 8);
    for (i = 0; i < 20; i++) {
        digest[i] = (uint8_t)(sha->state[i / 4] >> (24 - 8 * (i % 4)));
    }
}
