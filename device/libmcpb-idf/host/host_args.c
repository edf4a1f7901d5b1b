/* pump1-host's command line: --url or --serial, slots, token file, device id. */
#define _DEFAULT_SOURCE 1

#include "host_args.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: pump1-host --url ws://HOST[:PORT][/PATH] --slot SLOT [--slot SLOT2 ...] [--multiplex]\n"
    "                  [--token-file FILE] [--device-id ID] [--no-aggregate] [--verbose]\n"
    "       pump1-host --serial /dev/ttyX [--baud 115200] --slot SLOT [--device-id ID]\n"
    "       pump1-host --mqtt HOST:PORT --slot SLOT [--mqtt-user USER --mqtt-password-file FILE]\n"
    "                  [--device-id ID]   (the MQTT plain profile, when built in; mqtt://HOST:PORT too)\n"
    "       every way takes [--deadman-s S]: seconds of silence from the gateway that stop a turning pump (90)\n"
    "Serves pump-1 (a simulated pump) into the gateway's slot; reconnects by itself; SIGTERM/SIGINT stop it.\n"
    "The device id is HOSTNAME-SLOT (the first slot) unless --device-id gives one.\n";

static int complain(const char *what, const char *value)
{
    fprintf(stderr, "pump1-host: %s%s%s\n%s", what, value ? ": " : "", value ? value : "", usage);
    return -1;
}

/* ws://host[:port][/path] into host and port: one URL, nothing after the port but a path. */
static int parse_url(host_args_t *args, const char *url)
{
    const char *rest, *end, *colon, *after;
    size_t host_len;
    if (strncmp(url, "ws://", 5) == 0) {
        rest = url + 5;
    } else if (strncmp(url, "http://", 7) == 0) {
        rest = url + 7;
    } else if (strncmp(url, "wss://", 6) == 0 || strncmp(url, "https://", 8) == 0) {
        return complain("wss:// needs TLS, which the host build does not have; use ws:// on a trusted network", url);
    } else {
        return complain("the URL must start with ws://", url);
    }
    end = rest + strcspn(rest, "/");
    if (*rest == '[') {
        const char *close = memchr(rest, ']', (size_t)(end - rest));
        if (close == NULL) {
            return complain("unbalanced [ in the URL", url);
        }
        host_len = (size_t)(close - rest - 1);
        memcpy(args->host, rest + 1, host_len < sizeof(args->host) ? host_len : 0);
        colon = close[1] == ':' ? close + 1 : NULL;
        after = close + 1;
    } else {
        colon = memchr(rest, ':', (size_t)(end - rest));
        host_len = (size_t)((colon ? colon : end) - rest);
        if (host_len >= sizeof(args->host)) {
            return complain("host name too long", url);
        }
        memcpy(args->host, rest, host_len);
        after = end;
    }
    if (host_len == 0 || host_len >= sizeof(args->host)) {
        return complain("no host in the URL", url);
    }
    args->host[host_len] = '\0';
    args->port = 80;
    if (colon != NULL) {
        unsigned long number = 0;
        for (after = colon + 1; *after >= '0' && *after <= '9' && number <= 65535; after++) {
            number = number * 10 + (unsigned long)(*after - '0');
        }
        if (after == colon + 1 || number == 0 || number > 65535) {
            return complain("the port in the URL must be a number from 1 to 65535", url);
        }
        args->port = (uint16_t)number;
    }
    if (*after != '\0' && *after != '/') {
        /* "ws://a:1,ws://b:2" would dial a:1 alone: the host program knows one gateway */
        return complain("one URL, ws://HOST[:PORT][/PATH]: nothing may follow the port but a path", url);
    }
    return 0;
}

/* --deadman-s: seconds, from a millisecond (the pump counts whole milliseconds: less would be 0) to a
 * day; the pump core would take a bad value for its default silently, so the command line refuses it. */
static int parse_deadman(host_args_t *args, const char *value)
{
    char *end = NULL;
    double seconds = strtod(value, &end);
    if (end == value || *end != '\0' || !(seconds >= 0.001 && seconds <= HOST_DEADMAN_MAX_S)) {
        return complain("--deadman-s must be a number of seconds from 0.001 to "
                        HOST_STRING(HOST_DEADMAN_MAX_S), value);
    }
    args->deadman_s = seconds;
    return 0;
}

/* The token is the file's text with the whitespace around it taken off, as the gateway reads its
 * own token files: a trailing newline is not part of it. A control character inside it is left for
 * mcpb_client_init to refuse, naming the token. */
static int read_token(host_args_t *args, const char *path)
{
    FILE *file = fopen(path, "r");
    size_t len, start = 0;
    int more = 0, c;
    if (file == NULL) {
        return complain("cannot read the token file", path);
    }
    len = fread(args->token, 1, HOST_TOKEN_MAX, file);
    while ((c = fgetc(file)) != EOF) {
        more |= !isspace(c); /* whitespace after a token of the longest length is still no part of it */
    }
    fclose(file);
    while (len > 0 && isspace((unsigned char)args->token[len - 1])) {
        len--;
    }
    while (start < len && isspace((unsigned char)args->token[start])) {
        start++;
    }
    if (more) {
        return complain("the token is longer than " HOST_STRING(HOST_TOKEN_MAX) " bytes", path);
    }
    memmove(args->token, args->token + start, len - start);
    args->token[len - start] = '\0';
    if (len == start) {
        return complain("the token file is empty", path);
    }
    return 0;
}

int host_args_parse(host_args_t *args, int argc, char **argv)
{
    int i, baud_given = 0;
    memset(args, 0, sizeof(*args));
    args->aggregate = 1;
    args->baud = 115200;
    for (i = 1; i < argc; i++) {
        const char *flag = argv[i];
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        int takes_value = strcmp(flag, "--url") == 0 || strcmp(flag, "--serial") == 0 ||
                          strcmp(flag, "--slot") == 0 || strcmp(flag, "--token-file") == 0 ||
                          strcmp(flag, "--device-id") == 0 || strcmp(flag, "--baud") == 0 ||
                          strcmp(flag, "--mqtt") == 0 || strcmp(flag, "--mqtt-user") == 0 ||
                          strcmp(flag, "--mqtt-password-file") == 0 || strcmp(flag, "--deadman-s") == 0;
        if (takes_value && value == NULL) {
            return complain("missing value for", flag);
        }
        if (strcmp(flag, "--url") == 0) {
            if (parse_url(args, value) < 0) {
                return -1;
            }
        } else if (strcmp(flag, "--serial") == 0) {
            if (strlen(value) >= sizeof(args->host)) {
                return complain("serial device path too long", value);
            }
            strcpy(args->host, value);
            args->serial = 1;
            args->port = 0;
        } else if (strcmp(flag, "--slot") == 0) {
            if (args->slot_count == HOST_MAX_SLOTS) {
                return complain("too many --slot (at most 4)", value);
            }
            if (strlen(value) == 0 || strlen(value) > 64 || value[0] == '_') {
                return complain("a slot name is 1 to 64 bytes and does not start with _", value);
            }
            args->slots[args->slot_count++] = value;
        } else if (strcmp(flag, "--token-file") == 0) {
            if (read_token(args, value) < 0) {
                return -1;
            }
        } else if (strcmp(flag, "--device-id") == 0) {
            snprintf(args->device_id, sizeof(args->device_id), "%s", value);
        } else if (strcmp(flag, "--baud") == 0) {
            /* the speeds the POSIX port sets (port_posix.c); another would be 115200 unsaid */
            static const char *const speeds[] = {"9600", "19200", "38400", "57600", "115200",
                                                 "230400", "460800", "921600"};
            size_t k = 0;
            while (k < sizeof speeds / sizeof speeds[0] && strcmp(value, speeds[k]) != 0) {
                k++;
            }
            if (k == sizeof speeds / sizeof speeds[0]) {
                return complain("--baud must be one of 9600, 19200, 38400, 57600, 115200, 230400, 460800, "
                                "921600", value);
            }
            args->baud = (unsigned)strtoul(value, NULL, 10);
            baud_given = 1;
        } else if (strcmp(flag, "--mqtt") == 0) {
            args->mqtt_url = value;
        } else if (strcmp(flag, "--mqtt-user") == 0) {
            args->mqtt_user = value;
        } else if (strcmp(flag, "--mqtt-password-file") == 0) {
            args->mqtt_password_file = value;
        } else if (strcmp(flag, "--deadman-s") == 0) {
            if (parse_deadman(args, value) < 0) {
                return -1;
            }
        } else if (strcmp(flag, "--multiplex") == 0) {
            args->multiplex = 1;
        } else if (strcmp(flag, "--no-aggregate") == 0) {
            args->aggregate = 0;
        } else if (strcmp(flag, "--verbose") == 0) {
            args->verbose = 1;
        } else if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) {
            fputs(usage, stdout);
            exit(0);
        } else {
            return complain("unknown option", flag);
        }
        if (takes_value) {
            i++;
        }
    }
    if ((args->host[0] == '\0') == (args->mqtt_url == NULL)) {
        return complain("give exactly one of --url, --serial or --mqtt", NULL);
    }
    if ((args->mqtt_user != NULL || args->mqtt_password_file != NULL) && args->mqtt_url == NULL) {
        return complain("--mqtt-user and --mqtt-password-file go with --mqtt", NULL);
    }
    /* what the MQTT plain profile has no use for would be ignored: the broker credential is
     * --mqtt-user and --mqtt-password-file, and one slot is one set of topics */
    if (args->mqtt_url != NULL && (args->token[0] != '\0' || args->multiplex || baud_given)) {
        return complain(args->token[0] != '\0' ? "--token-file is not available with --mqtt (the broker "
                                                  "credential is --mqtt-user and --mqtt-password-file)"
                        : args->multiplex ? "--multiplex is not available with --mqtt (the plain profile serves "
                                            "one slot per connection)"
                                          : "--baud is not available with --mqtt (it sets the --serial line's speed)",
                        NULL);
    }
    if (args->slot_count == 0) {
        return complain("give --slot", NULL);
    }
    if (args->slot_count > 1 && !args->multiplex && !args->serial && args->mqtt_url == NULL) {
        return complain("several slots over WebSocket need --multiplex (the /providers path)", NULL);
    }
    if (args->device_id[0] == '\0') {
        /* the host and the first slot: several boards on one PC are several devices to the gateway */
        char name[64];
        if (gethostname(name, sizeof(name)) != 0) {
            strcpy(name, "host");
        }
        name[sizeof(name) - 1] = '\0';
        snprintf(args->device_id, sizeof(args->device_id), "%s-%.63s", name, args->slots[0]);
    }
    return 0;
}
