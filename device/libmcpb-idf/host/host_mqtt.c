/* pump1-host --mqtt (see host_mqtt.h). */
#define _DEFAULT_SOURCE 1

#include "host_mqtt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcpb/mqtt.h"
#include "mqtt_posix.h"

#define MQTT_DEFAULT_PORT 1883
#define HOST_MQTT_PASSWORD_MAX 255 /* bytes of the first line of --mqtt-password-file */

static int refuse(const char *what, const char *value)
{
    fprintf(stderr, "pump1-host: %s%s%s\n", what, value ? ": " : "", value ? value : "");
    return 2;
}

/* "HOST:PORT", "HOST", "mqtt://HOST[:PORT]" or "[v6]:PORT" into host and port. */
static int parse_broker(const char *url, char *host, size_t host_cap, int *port)
{
    const char *rest = url, *colon;
    size_t host_len;
    if (strncmp(rest, "mqtt://", 7) == 0) {
        rest += 7;
    } else if (strncmp(rest, "mqtts://", 8) == 0) {
        return -1; /* no TLS in the host build */
    } else if (strstr(rest, "://") != NULL) {
        return -1;
    }
    *port = MQTT_DEFAULT_PORT;
    if (*rest == '[') {
        const char *close = strchr(rest, ']');
        if (close == NULL) {
            return -1;
        }
        host_len = (size_t)(close - rest - 1);
        if (host_len == 0 || host_len >= host_cap) {
            return -1;
        }
        memcpy(host, rest + 1, host_len);
        colon = close[1] == ':' ? close + 1 : (close[1] == '\0' || close[1] == '/' ? NULL : close + 1);
        if (colon != NULL && *colon != ':') {
            return -1;
        }
    } else {
        colon = strchr(rest, ':');
        host_len = colon != NULL ? (size_t)(colon - rest) : strcspn(rest, "/");
        if (host_len == 0 || host_len >= host_cap) {
            return -1;
        }
        memcpy(host, rest, host_len);
    }
    host[host_len] = '\0';
    if (colon != NULL) {
        char *end;
        long number = strtol(colon + 1, &end, 10);
        if (number <= 0 || number > 65535 || (*end != '\0' && *end != '/')) {
            return -1;
        }
        *port = (int)number;
    }
    return 0;
}

static void tick_pump(void *ctx, uint32_t now_ms)
{
    mcpb_pump1_tick(ctx, now_ms);
}

int host_mqtt_run(const host_args_t *args, mcpb_port_t *port, mcpb_pump1_t *pumps, mcpb_slot_t *slots,
                  int slot_count, volatile sig_atomic_t *stop)
{
    static char password[HOST_MQTT_PASSWORD_MAX + 1];
    char host[256];
    int broker_port;
    int rc;
    mcpb_hello_t hello;
    mcpb_mqtt_host_options options;

    if (slot_count != 1) {
        return refuse("--mqtt serves exactly one --slot", NULL);
    }
    if (!slots[0].aggregate) {
        return refuse("--no-aggregate is not available with --mqtt (the plain profile always joins _all)", NULL);
    }
    if (parse_broker(args->mqtt_url, host, sizeof host, &broker_port) < 0) {
        return refuse("--mqtt wants HOST:PORT or mqtt://HOST[:PORT] (no TLS in the host build)", args->mqtt_url);
    }
    if (args->mqtt_password_file != NULL) {
        if (args->mqtt_user == NULL) {
            return refuse("--mqtt-password-file needs --mqtt-user", NULL);
        }
        rc = mcpb_mqtt_read_password_file(args->mqtt_password_file, password, sizeof password);
        if (rc == MCPB_MQTT_PASSWORD_TOO_LONG) {
            return refuse("the MQTT password is longer than " HOST_STRING(HOST_MQTT_PASSWORD_MAX) " bytes",
                          args->mqtt_password_file);
        }
        if (rc < 0) {
            return refuse("cannot read the MQTT password file", args->mqtt_password_file);
        }
    }

    memset(&hello, 0, sizeof hello);
    hello.device_id = args->device_id;
    hello.firmware_name = "libmcpb-idf";
    hello.firmware_version = MCPB_VERSION;
    hello.schema = slots[0].schema;

    memset(&options, 0, sizeof options);
    options.host = host;
    options.port = broker_port;
    options.slot = slots[0].name;
    options.user = args->mqtt_user;
    options.password = args->mqtt_password_file != NULL ? password : NULL;
    options.hello = &hello;
    options.handler = slots[0].handler;
    options.handler_ctx = slots[0].handler_ctx;
    options.tick = tick_pump;
    options.tick_ctx = &pumps[0];
    options.stop = stop; /* sig_atomic_t is int on the POSIX hosts this builds for */

    rc = mcpb_mqtt_host_serve(&options);
    memset(password, 0, sizeof password);
    if (rc != MCPB_MQTT_OK) {
        return refuse("the MQTT plain profile cannot use this slot or credential", slots[0].name);
    }
    port->log(port->ctx, MCPB_LOG_INFO, "stopped by signal");
    return 0;
}
