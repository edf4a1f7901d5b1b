/* The client's upgrade request and the check of the server's answer. */
#include "mcpb/ws_handshake.h"

#include <string.h>

#include "digest.h"
#include "mcpb/json_scan.h"

static const char ws_guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

size_t mcpb_ws_provider_path(const char *slot, char *out, size_t out_cap)
{
    static const char prefix[] = "/provider/";
    static const char hex[] = "0123456789ABCDEF";
    size_t n = sizeof(prefix) - 1;
    const unsigned char *c;
    if (out_cap <= n) {
        return 0;
    }
    memcpy(out, prefix, n);
    for (c = (const unsigned char *)slot; *c != 0; c++) {
        int unreserved = (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
                         *c == '-' || *c == '.' || *c == '_' || *c == '~';
        if (unreserved) {
            if (n + 1 >= out_cap) {
                return 0;
            }
            out[n++] = (char)*c;
        } else {
            if (n + 3 >= out_cap) {
                return 0;
            }
            out[n++] = '%';
            out[n++] = hex[*c >> 4];
            out[n++] = hex[*c & 15];
        }
    }
    out[n] = '\0';
    return n;
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
    size_t n = mcpb_format(out, out_cap,
                     "GET %s HTTP/1.1\r\nHost: %s%s%s:%u\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nUser-Agent: %s\r\n%s%s%s\r\n",
                     path, bracket ? "[" : "", host, bracket ? "]" : "", (unsigned)port, key, agent,
                     token != NULL && token[0] != '\0' ? "X-Provider-Token: " : "",
                     token != NULL ? token : "", token != NULL && token[0] != '\0' ? "\r\n" : "");
    return n < out_cap ? n : 0;
}

static int lower(int c)
{
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* 1 when line[0..len) starts with `name` and a colon, ignoring case; *value gets what follows, trimmed. */
static int header_named(const char *line, size_t len, const char *name, const char **value, size_t *value_len)
{
    size_t name_len = strlen(name), i;
    if (len <= name_len || line[name_len] != ':') {
        return 0;
    }
    for (i = 0; i < name_len; i++) {
        if (lower((unsigned char)line[i]) != lower((unsigned char)name[i])) {
            return 0;
        }
    }
    i = name_len + 1;
    while (i < len && (line[i] == ' ' || line[i] == '\t')) {
        i++;
    }
    while (len > i && (line[len - 1] == ' ' || line[len - 1] == '\t')) {
        len--;
    }
    *value = line + i;
    *value_len = len - i;
    return 1;
}

int mcpb_ws_parse_response(const char *buf, size_t len, const char *key, mcpb_http_response_t *response)
{
    size_t end = 0, at, i;
    char accept[MCPB_WS_ACCEPT_CHARS + 1];
    for (i = 0; i + 3 < len; i++) {
        if (memcmp(buf + i, "\r\n\r\n", 4) == 0) {
            end = i + 4;
            break;
        }
    }
    if (len >= 5 && memcmp(buf, "HTTP/", 5) != 0) {
        return -1;
    }
    if (end == 0) {
        return 0;
    }
    memset(response, 0, sizeof(*response));
    response->head_len = end;
    /* "HTTP/1.1 101 Switching Protocols" */
    at = 5;
    while (at < end && buf[at] != ' ') {
        at++;
    }
    if (at + 4 > end || buf[at + 1] < '1' || buf[at + 1] > '5' || buf[at + 2] < '0' || buf[at + 2] > '9' ||
        buf[at + 3] < '0' || buf[at + 3] > '9') {
        return -1;
    }
    response->status = (buf[at + 1] - '0') * 100 + (buf[at + 2] - '0') * 10 + (buf[at + 3] - '0');
    mcpb_ws_accept_for(key, accept);
    while (at < end && buf[at] != '\n') {
        at++;
    }
    at++;
    while (at < end) {
        size_t line_end = at;
        const char *value;
        size_t value_len;
        while (line_end < end && buf[line_end] != '\r' && buf[line_end] != '\n') {
            line_end++;
        }
        if (header_named(buf + at, line_end - at, "sec-websocket-accept", &value, &value_len)) {
            response->accept_ok = value_len == MCPB_WS_ACCEPT_CHARS && memcmp(value, accept, value_len) == 0;
        } else if (header_named(buf + at, line_end - at, "content-length", &value, &value_len)) {
            size_t number = 0;
            for (i = 0; i < value_len && value[i] >= '0' && value[i] <= '9' && number < 100000000u; i++) {
                number = number * 10 + (size_t)(value[i] - '0');
            }
            response->content_length = number;
        }
        at = line_end;
        while (at < end && (buf[at] == '\r' || buf[at] == '\n')) {
            at++;
        }
    }
    return 1;
}
