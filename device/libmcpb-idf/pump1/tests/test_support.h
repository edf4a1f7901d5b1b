/* What the pump-1 unit tests share: a pump, and one call that sends a frame and keeps the answer. */
#ifndef MCPB_PUMP1_TEST_SUPPORT_H
#define MCPB_PUMP1_TEST_SUPPORT_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "mcpb_pump1.h"

#define ANSWER_CAP 8192

typedef struct fixture {
    mcpb_pump1_t pump;
    char answer[ANSWER_CAP + 1];
    int length;
} fixture_t;

/* cmocka setup and teardown: a pump with the default config, its clock started at 1000 ms. */
int fixture_setup(void **state);
int fixture_teardown(void **state);

/* Send one frame (a C string); the answer is in f->answer (NUL-terminated) and its length returned. */
int ask(fixture_t *f, const char *frame);

/* tools/call of `name` with `arguments` (JSON text or NULL) and the numeric id `id`. */
int call_tool(fixture_t *f, int id, const char *name, const char *arguments);

/* Tick the pump every 100 ms for `ms` milliseconds past its last tick. */
void run_for(fixture_t *f, uint32_t ms);

/* The answer contains `text`. */
void assert_answer_has(const fixture_t *f, const char *text);

#endif
