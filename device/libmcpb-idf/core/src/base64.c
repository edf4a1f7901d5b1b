/* Base64 encoding (RFC 4648) for the handshake's Sec-WebSocket-Key and -Accept. */
#include "digest.h"

size_t mcpb_base64_encode(const uint8_t *data, size_t len, char *out, size_t out_cap)
{
    size_t digits = (len * 4 + 2) / 3, at;
    if (out_cap < (len + 2) / 3 * 4 + 1) {
        return 0;
    }
    for (at = 0; at < digits; at++) { /* digit `at` holds bits 6 * at to 6 * at + 5 of the input */
        size_t byte = at * 6 / 8;
        unsigned pair = (unsigned)data[byte] << 8 | (byte + 1 < len ? data[byte + 1] : 0u);
        unsigned six = pair >> (10 - at * 6 % 8) & 63u;
        out[at] = (char)(six < 26    ? 'A' + six
                         : six < 52  ? 'a' - 26 + six
                         : six < 62  ? '0' - 52 + six
                         : six == 62 ? '+'
                                     : '/');
    }
    while (at % 4 != 0) {
        out[at++] = '=';
    }
    out[at] = '\0';
    return at;
}
