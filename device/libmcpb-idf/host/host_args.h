/* pump1-host's command line. */
#ifndef PUMP1_HOST_ARGS_H
#define PUMP1_HOST_ARGS_H

#include <stdint.h>

#define HOST_MAX_SLOTS 4
#define HOST_TOKEN_MAX 511 /* bytes of the token read from --token-file */
#define HOST_DEADMAN_MAX_S 86400 /* a day, as the MicroPython board's deadman_s */
#define HOST_STRING_OF(x) #x
#define HOST_STRING(x) HOST_STRING_OF(x)

typedef struct {
    char host[256];           /* from --url, or the serial device from --serial */
    uint16_t port;
    int serial;
    int multiplex;
    const char *slots[HOST_MAX_SLOTS];
    int slot_count;
    int aggregate;
    char token[HOST_TOKEN_MAX + 1]; /* read from --token-file, whitespace around it taken off; never logged */
    char device_id[128];
    int verbose;
    unsigned baud;
    const char *mqtt_url;     /* --mqtt: the MQTT plain profile's option (see the hook in pump1_host.c) */
    const char *mqtt_user;    /* --mqtt-user, or NULL */
    const char *mqtt_password_file; /* --mqtt-password-file, or NULL; read by host_mqtt.c */
    double deadman_s;         /* --deadman-s, 0 when not given (the pump's default, 90 s) */
} host_args_t;

/* Fills args from argv: 0, or -1 after printing what is wrong and the usage to stderr. */
int host_args_parse(host_args_t *args, int argc, char **argv);

#endif
