/* ws[s]://host[:port][/path] split for the core's client. */
#ifndef PUMP1_GATEWAY_URL_H
#define PUMP1_GATEWAY_URL_H

#include <stdint.h>

typedef struct {
    char host[128];
    uint16_t port;
    int tls;       /* wss */
    int multiplex; /* the path is /providers */
} gateway_url_t;

/* 0, or -1 for a URL that is not ws:// or wss:// with a host. */
int gateway_url_parse(const char *url, gateway_url_t *out);

#endif
