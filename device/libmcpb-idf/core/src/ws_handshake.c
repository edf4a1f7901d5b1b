/* The client's upgrade request and the check of the server's answer. */
#include "mcpb/ws_handshake.h"

#include <string.h>

#include "digest.h"
#include "mcpb/json_scan.h"

static const char ws_guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

size_t mcpb_ws_provider_path(const char *slot, char *out, size_t out_cap)
{
    return mcpb_format_fit(out, out_cap, "/provider/%P", slot);
}

void mcpb_ws_make_key(const uint8_t nonce[16], char key[MCPB_WS_KEY_CHARS + 1])
{
    mcpb_base64_encode(nonce, 16, key, MCPB_WS_KEY_CHARS + 1);
}

void mcpb_ws_accept_for(const char *key, char accept[MCPB_WS_ACCEPT_CHARS + 1])
{
    mcpb_sha1_t sha;
    uint8_t digest[MCPB_SHA1_BYTES];
    mcpb_sha1_init(&sha);
    mcpb_sha1_update(&sha, key, strlen(key));
    mcpb_sha1_update(&sha, ws_guid, sizeof(ws_guid) - 1);
    mcpb_sha1_final(&sha, digest);
    mcpb_base64_encode(digest, sizeof(digest), accept, MCPB_WS_ACCEPT_CHARS + 1);
}

size_t mcpb_ws_request(char *out, size_t out_cap, const char *host, uint16_t port, const char *path,
                       const char *key, const char *token, const char *agent)
{
    int bracket = strchr(host, ':') != NULL; /* an IPv6 literal */
    size_t n;
    if (token != NULL && token[0] == '\0') {
        token = NULL;
    }
    /* a NULL %s prints nothing */
    n = mcpb_format(out, out_cap,
                    "GET %s HTTP/1.1\r\nHost: %s%s%s:%u\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nUser-Agent: %s\r\n%s%s%s\r\n",
                    path, bracket ? "[" : NULL, host, bracket ? "]" : NULL, (unsigned)port, key, agent,
                    token != NULL ? "X-Provider-Token: " : NULL, token, token != NULL ? "\r\n" : NULL);
    return n < out_cap ? n : 0;
}

/* The value of header `name` (lower case, with its colon) when the line at buf[at] is that header,
 * its leading blanks skipped; else NULL. */
static const char *header_value(const char *buf, size_t at, size_t end, const char *name)
{
    for (; *name != '\0'; name++, at++) {
        int c = at < end ? (unsigned char)buf[at] : 0;
        if ((c >= 'A' && c <= 'Z' ? c + 32 : c) != *name) {
            return NULL;
        }
    }
    while (at < end && (buf[at] == ' ' || buf[at] == '\t')) {
        at++;
    }
    return buf + at;
}

int mcpb_ws_parse_response(const char *buf, size_t len, const char *key, mcpb_http_response_t *response)
{
    size_t end = 0, at, i;
    char accept[MCPB_WS_ACCEPT_CHARS + 1];
    if (len >= 5 && memcmp(buf, "HTTP/", 5) != 0) {
        return -1;
    }
    for (i = 0; end == 0 && i + 3 < len; i++) {
        if (memcmp(buf + i, "\r\n\r\n", 4) == 0) {
            end = i + 4;
        }
    }
    if (end == 0) {
        return 0;
    }
    memset(response, 0, sizeof(*response));
    response->head_len = end;
    /* "HTTP/1.1 101 Switching Protocols" */
    for (at = 5; at < end && buf[at] != ' '; at++) {
    }
    for (i = 1; i <= 3; i++) {
        if (at + i >= end || buf[at + i] < '0' || buf[at + i] > '9') {
            return -1;
        }
        response->status = response->status * 10 + (buf[at + i] - '0');
    }
    if (response->status < 100 || response->status > 599) {
        return -1;
    }
    mcpb_ws_accept_for(key, accept);
    for (; at < end; at++) {
        const char *value;
        if (buf[at - 1] != '\n') {
            continue; /* headers start after a line end */
        }
        if ((value = header_value(buf, at, end, "sec-websocket-accept:")) != NULL) {
            const char *after = value + MCPB_WS_ACCEPT_CHARS;
            if ((size_t)(buf + end - value) > MCPB_WS_ACCEPT_CHARS &&
                memcmp(value, accept, MCPB_WS_ACCEPT_CHARS) == 0) {
                while (*after == ' ' || *after == '\t') {
                    after++;
                }
                response->accept_ok = *after == '\r' || *after == '\n';
            }
        } else if ((value = header_value(buf, at, end, "content-length:")) != NULL) {
            size_t number = 0;
            for (; *value >= '0' && *value <= '9' && number < 100000000u; value++) {
                number = number * 10 + (size_t)(*value - '0');
            }
            response->content_length = number;
        }
    }
    return 1;
}
