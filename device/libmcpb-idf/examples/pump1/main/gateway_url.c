/* Splits CONFIG_MCPB_GATEWAY_URL; the slot comes from CONFIG_MCPB_SLOT, so the path only says
 * whether the link is the multiplexed one. */
#include "gateway_url.h"

#include <stdlib.h>
#include <string.h>

int gateway_url_parse(const char *url, gateway_url_t *out)
{
    const char *host;
    size_t len;
    memset(out, 0, sizeof *out);
    if (strncmp(url, "wss://", 6) == 0) {
        out->tls = 1;
        host = url + 6;
    } else if (strncmp(url, "ws://", 5) == 0) {
        host = url + 5;
    } else {
        return -1;
    }
    len = strcspn(host, ":/");
    if (len == 0 || len >= sizeof out->host) {
        return -1;
    }
    memcpy(out->host, host, len);
    out->port = out->tls ? 443 : 80;
    if (host[len] == ':') {
        long port = strtol(host + len + 1, NULL, 10);
        if (port <= 0 || port > 65535) {
            return -1;
        }
        out->port = (uint16_t)port;
    }
    out->multiplex = strstr(host + len, "/providers") != NULL && strstr(host + len, "/providers/") == NULL;
    return 0;
}
