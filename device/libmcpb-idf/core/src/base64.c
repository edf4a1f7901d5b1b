/* Base64 encoding (RFC 4648) for the handshake's Sec-WebSocket-Key and -Accept. */
#include "digest.h"

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t mcpb_base64_encode(const uint8_t *data, size_t len, char *out, size_t out_cap)
{
    size_t need = (len + 2) / 3 * 4;
    size_t at = 0, i;
    if (out_cap < need + 1) {
        return 0;
    }
    for (i = 0; i < len; i += 3) {
        uint32_t group = (uint32_t)data[i] << 16;
        if (i + 1 < len) {
            group |= (uint32_t)data[i + 1] << 8;
        }
        if (i + 2 < len) {
            group |= data[i + 2];
        }
        out[at++] = alphabet[(group >> 18) & 63];
        out[at++] = alphabet[(group >> 12) & 63];
        out[at++] = i + 1 < len ? alphabet[(group >> 6) & 63] : '=';
        out[at++] = i + 2 < len ? alphabet[group & 63] : '=';
    }
    out[at] = '\0';
    return at;
}
