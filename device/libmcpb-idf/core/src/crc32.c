/* CRC-32 (IEEE 802.3, reflected 0xEDB88320), bitwise: no 1 KB table on a small board. */
#include "mcpb/serial_frame.h"

uint32_t mcpb_crc32(uint32_t crc, const void *data, size_t len)
{
    const uint8_t *bytes = (const uint8_t *)data;
    crc = ~crc;
    while (len-- > 0) {
        unsigned bit;
        crc ^= *bytes++;
        for (bit = 0; bit < 8; bit++) {
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
        }
    }
    return ~crc;
}
