/* Log text a port may print: gateway text (a close reason, a refusal) cannot end a line or forge another. */
#include "mcpb/port.h"

void mcpb_log_text(char *out, size_t cap, const char *in)
{
    size_t n = 0;
    for (; *in != '\0'; in++) {
        unsigned char c = (unsigned char)*in;
        int control = c < 0x20 || c == 0x7F;
        if (n + (control ? 4 : 1) >= cap) {
            break;
        }
        if (control) {
            out[n++] = '\\';
            out[n++] = 'x';
            out[n++] = "0123456789abcdef"[c >> 4];
            out[n++] = "0123456789abcdef"[c & 15];
        } else {
            out[n++] = (char)c;
        }
    }
    out[n] = '\0';
}
