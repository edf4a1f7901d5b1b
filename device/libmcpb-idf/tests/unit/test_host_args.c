/* pump1-host's command line (host/host_args.c): options a way has no use for are refused, with the
 * usage, instead of being taken and ignored. */
#define _DEFAULT_SOURCE 1 /* mkstemp */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "host_args.h"

static char token_path[64];

static int parse(host_args_t *args, const char *const *argv)
{
    char *copy[16];
    int argc = 0;
    while (argv[argc] != NULL) {
        copy[argc] = (char *)(uintptr_t)argv[argc];
        argc++;
    }
    copy[argc] = NULL;
    return host_args_parse(args, argc, copy);
}

static int setup(void **state)
{
    FILE *file;
    int fd;
    (void)state;
    strcpy(token_path, "/tmp/test_host_args_XXXXXX");
    fd = mkstemp(token_path);
    if (fd < 0) {
        return -1;
    }
    close(fd);
    file = fopen(token_path, "w");
    if (file == NULL) {
        return -1;
    }
    fputs("the-provider-secret\n", file);
    fclose(file);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(token_path);
    return 0;
}

/* --token-file, --multiplex and --baud mean nothing over MQTT: each is refused, whatever its place. */
static void test_options_mqtt_has_no_use_for_are_refused(void **state)
{
    const char *const token_first[] = {"pump1-host", "--token-file", token_path, "--mqtt", "127.0.0.1:1883",
                                       "--slot", "pump-c1", NULL};
    const char *const token_after[] = {"pump1-host", "--mqtt", "127.0.0.1:1883", "--slot", "pump-c1",
                                       "--token-file", token_path, NULL};
    const char *const multiplex[] = {"pump1-host", "--mqtt", "127.0.0.1:1883", "--slot", "pump-c1",
                                     "--multiplex", NULL};
    const char *const baud[] = {"pump1-host", "--mqtt", "127.0.0.1:1883", "--slot", "pump-c1", "--baud",
                                "115200", NULL};
    host_args_t args;
    (void)state;
    assert_int_equal(parse(&args, token_first), -1);
    assert_int_equal(parse(&args, token_after), -1);
    assert_int_equal(parse(&args, multiplex), -1);
    assert_int_equal(parse(&args, baud), -1);
}

static void test_the_ways_take_their_own_options(void **state)
{
    const char *const mqtt[] = {"pump1-host", "--mqtt", "127.0.0.1:1883", "--slot", "pump-c1", "--mqtt-user",
                                "pump-c1", "--mqtt-password-file", "/nonexistent", NULL};
    const char *const ws[] = {"pump1-host", "--url", "ws://127.0.0.1:3000", "--slot", "pump-c1", "--slot",
                              "pump-c2", "--multiplex", "--token-file", token_path, NULL};
    const char *const serial[] = {"pump1-host", "--serial", "/dev/ttyUSB0", "--baud", "921600", "--slot",
                                  "pump-c1", NULL};
    host_args_t args;
    (void)state;
    assert_int_equal(parse(&args, mqtt), 0);
    assert_string_equal(args.mqtt_url, "127.0.0.1:1883");
    assert_int_equal(parse(&args, ws), 0);
    assert_string_equal(args.token, "the-provider-secret");
    assert_int_equal(args.multiplex, 1);
    assert_int_equal(parse(&args, serial), 0);
    assert_int_equal(args.baud, 921600);
}

/* A speed the POSIX port cannot set would be 115200 without a word: refused instead. */
static void test_a_baud_rate_the_port_cannot_set_is_refused(void **state)
{
    static const char *const speeds[] = {"0", "-9600", "fast", "115200x", "", "250000"};
    const char *argv[] = {"pump1-host", "--serial", "/dev/ttyUSB0", "--slot", "pump-c1", "--baud", NULL, NULL};
    host_args_t args;
    size_t i;
    (void)state;
    for (i = 0; i < sizeof speeds / sizeof speeds[0]; i++) {
        argv[6] = speeds[i];
        assert_int_equal(parse(&args, argv), -1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_options_mqtt_has_no_use_for_are_refused),
        cmocka_unit_test(test_the_ways_take_their_own_options),
        cmocka_unit_test(test_a_baud_rate_the_port_cannot_set_is_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
