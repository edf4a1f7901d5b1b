/* The POSIX ports' log lines: gateway text (a close reason, a refusal) reaches them raw, so every
 * control byte is written escaped (\xNN) and a line stays one line, whatever it quotes. */
#define _DEFAULT_SOURCE 1

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "mcpb_port_posix.h"
#if MCPB_TEST_MQTT_PORT
#include "mqtt_posix.h"
#endif

/* A line a hostile gateway would have the board write: a close reason forging a second line. */
static const char forged[] = "link closed code=1000: bye\npump1-host error: forged\r\x1b[2J\x7f end";
static const char escaped[] = "link closed code=1000: bye\\x0apump1-host error: forged\\x0d\\x1b[2J\\x7f end";

/* What `log` writes to stderr for `message`. */
static void captured(void (*log)(void *, int, const char *), void *ctx, const char *message, char *out,
                     size_t cap)
{
    FILE *file = tmpfile();
    int saved;
    size_t n;
    assert_non_null(file);
    fflush(stderr);
    saved = dup(2);
    assert_true(saved >= 0);
    assert_true(dup2(fileno(file), 2) >= 0);
    log(ctx, MCPB_LOG_WARN, message);
    fflush(stderr);
    assert_true(dup2(saved, 2) >= 0);
    close(saved);
    rewind(file);
    n = fread(out, 1, cap - 1, file);
    out[n] = '\0';
    fclose(file);
}

static void test_posix_port_escapes_controls(void **state)
{
    mcpb_posix_t posix;
    mcpb_port_t port;
    char out[512], expected[512];
    (void)state;
    memset(&posix, 0, sizeof(posix));
    posix.log_level = MCPB_LOG_DEBUG;
    posix.log_name = "pump1-host";
    mcpb_posix_port_init(&port, &posix);
    captured(port.log, port.ctx, forged, out, sizeof(out));
    snprintf(expected, sizeof(expected), "pump1-host warn: %s\n", escaped);
    assert_string_equal(out, expected);
}

/* A line longer than the port's 1024-byte buffer is cut at a whole escape, still one line. */
static void test_posix_port_long_line_cut_whole(void **state)
{
    static char message[2000];
    mcpb_posix_t posix;
    mcpb_port_t port;
    char out[2048];
    size_t len;
    (void)state;
    memset(message, '\n', sizeof(message) - 1);
    memset(&posix, 0, sizeof(posix));
    posix.log_level = MCPB_LOG_DEBUG;
    posix.log_name = "x";
    mcpb_posix_port_init(&port, &posix);
    captured(port.log, port.ctx, message, out, sizeof(out));
    len = strlen(out);
    assert_memory_equal(out, "x warn: \\x0a\\x0a", 16);
    assert_int_equal(len, strlen("x warn: ") + 255 * 4 + 1); /* 255 escapes of 4 in 1023 bytes, the line end */
    assert_ptr_equal(strchr(out, '\n'), out + len - 1);
}

#if MCPB_TEST_MQTT_PORT
static void test_mqtt_port_escapes_controls(void **state)
{
    mcpb_mqtt_posix client;
    mcpb_mqtt_port port;
    char out[512], expected[512];
    (void)state;
    mcpb_mqtt_posix_port(&client, &port);
    captured(port.log, port.ctx, forged, out, sizeof(out));
    snprintf(expected, sizeof(expected), "mcpb warn %s\n", escaped);
    assert_string_equal(out, expected);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_posix_port_escapes_controls),
        cmocka_unit_test(test_posix_port_long_line_cut_whole),
#if MCPB_TEST_MQTT_PORT
        cmocka_unit_test(test_mqtt_port_escapes_controls),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
