/*
 * pump1-dump: the C pump on the command line, for the checks written in Python.
 *
 *   pump1-dump                 the tools/list answers, following nextCursor, one per line
 *   pump1-dump --hash          mcpb_pump1_schema_hash()
 *   pump1-dump --script [--frame-max N] [--deadman S] [--dry-run S]
 *                              reads steps from stdin, one per line, and prints one line per
 *                              frame or oversize step (the answer; empty for none):
 *                                tick MS | heard | new_link | inject|clear dry_run|sensor_failure|overtemp
 *                                frame HEX | oversize SIZE HEX
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcpb_pump1.h"

#define OUT_CAP 16384

static size_t from_hex(const char *hex, char *bytes, size_t cap)
{
    size_t n = 0;
    unsigned value;
    while (hex[0] != '\0' && hex[0] != '\n' && hex[1] != '\0' && n < cap && sscanf(hex, "%2x", &value) == 1) {
        bytes[n++] = (char)value;
        hex += 2;
    }
    return n;
}

static void print_answer(int n, const char *out)
{
    if (n < 0) {
        printf("<out too small: %d>\n", n);
    } else {
        printf("%.*s\n", n, out);
    }
}

static mcpb_pump1_condition_t condition(const char *name)
{
    if (strncmp(name, "dry_run", 7) == 0) {
        return MCPB_PUMP1_DRY_RUN;
    }
    if (strncmp(name, "sensor_failure", 14) == 0) {
        return MCPB_PUMP1_SENSOR_FAILURE;
    }
    return MCPB_PUMP1_OVERTEMP;
}

static int script(mcpb_pump1_t *pump)
{
    static char line[65536], in[32768], out[OUT_CAP];
    while (fgets(line, sizeof line, stdin) != NULL) {
        if (strncmp(line, "tick ", 5) == 0) {
            mcpb_pump1_tick(pump, (uint32_t)strtoul(line + 5, NULL, 10));
        } else if (strncmp(line, "heard", 5) == 0) {
            mcpb_pump1_heard(pump);
        } else if (strncmp(line, "new_link", 8) == 0) {
            mcpb_pump1_new_link(pump);
        } else if (strncmp(line, "inject ", 7) == 0) {
            mcpb_pump1_inject(pump, condition(line + 7));
        } else if (strncmp(line, "clear ", 6) == 0) {
            mcpb_pump1_clear(pump, condition(line + 6));
        } else if (strncmp(line, "frame ", 6) == 0) {
            size_t n = from_hex(line + 6, in, sizeof in);
            print_answer(mcpb_pump1_handle(pump, in, n, out, sizeof out), out);
        } else if (strncmp(line, "oversize ", 9) == 0) {
            char *hex;
            size_t size = (size_t)strtoul(line + 9, &hex, 10), n;
            n = from_hex(hex + 1, in, sizeof in);
            print_answer(mcpb_pump1_oversize(pump, size, in, n, out, sizeof out), out);
        }
        fflush(stdout);
    }
    return 0;
}

static int tools_list(mcpb_pump1_t *pump)
{
    static char out[OUT_CAP];
    char request[128];
    int page;
    snprintf(request, sizeof request, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}");
    for (page = 0; page < 64; page++) {
        int n = mcpb_pump1_handle(pump, request, strlen(request), out, sizeof out);
        const char *cursor;
        if (n <= 0) {
            fprintf(stderr, "pump1-dump: tools/list gave %d\n", n);
            return 1;
        }
        printf("%.*s\n", n, out);
        out[n] = '\0';
        cursor = strstr(out, "\"nextCursor\":\"");
        if (cursor == NULL) {
            return 0;
        }
        snprintf(request, sizeof request,
                 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/list\",\"params\":{\"cursor\":\"%d\"}}", page + 2,
                 atoi(cursor + 14));
    }
    return 1;
}

int main(int argc, char **argv)
{
    static mcpb_pump1_t pump;
    mcpb_pump1_config_t config;
    int i, run_script = 0;
    mcpb_pump1_config_default(&config);
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--hash") == 0) {
            printf("%s\n", mcpb_pump1_schema_hash());
            return 0;
        } else if (strcmp(argv[i], "--script") == 0) {
            run_script = 1;
        } else if (strcmp(argv[i], "--frame-max") == 0 && i + 1 < argc) {
            config.frame_max = (size_t)strtoul(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--deadman") == 0 && i + 1 < argc) {
            config.deadman_s = strtod(argv[++i], NULL);
        } else if (strcmp(argv[i], "--dry-run") == 0 && i + 1 < argc) {
            config.dry_run_s = strtod(argv[++i], NULL);
        } else {
            fprintf(stderr, "usage: pump1-dump [--hash | --script [--frame-max N] [--deadman S] [--dry-run S]]\n");
            return 2;
        }
    }
    mcpb_pump1_init(&pump, &config);
    return run_script ? script(&pump) : tools_list(&pump);
}
