/* What the pump-1 unit tests share (test_support.h). */
#include "test_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fixture_setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    if (f == NULL) {
        return -1;
    }
    mcpb_pump1_init(&f->pump, NULL);
    mcpb_pump1_tick(&f->pump, 1000);
    *state = f;
    return 0;
}

int fixture_teardown(void **state)
{
    free(*state);
    return 0;
}

int ask(fixture_t *f, const char *frame)
{
    f->length = mcpb_pump1_handle(&f->pump, frame, strlen(frame), f->answer, ANSWER_CAP);
    f->answer[f->length > 0 ? f->length : 0] = '\0';
    return f->length;
}

int call_tool(fixture_t *f, int id, const char *name, const char *arguments)
{
    char frame[1024];
    if (arguments != NULL) {
        snprintf(frame, sizeof frame,
                 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\",\"arguments\":%s}}",
                 id, name, arguments);
    } else {
        snprintf(frame, sizeof frame,
                 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\"}}", id, name);
    }
    return ask(f, frame);
}

void run_for(fixture_t *f, uint32_t ms)
{
    uint32_t end = f->pump.now_ms + ms;
    while (f->pump.now_ms != end) {
        mcpb_pump1_tick(&f->pump, f->pump.now_ms + 100);
    }
}

void assert_answer_has(const fixture_t *f, const char *text)
{
    if (strstr(f->answer, text) == NULL) {
        print_error("answer:   %s\nexpected: ...%s...\n", f->answer, text);
        fail();
    }
}
