/* Back-off: ceilings double from min to max, the wait lies between half the ceiling and the ceiling,
 * a refusal goes straight to the max, and traffic resets it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "mcpb/backoff.h"

static void test_ceilings_double_to_max(void **state)
{
    static const uint32_t ceilings[] = {1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000};
    mcpb_backoff_t low, high;
    size_t i;
    (void)state;
    mcpb_backoff_init(&low, 1000, 30000);
    mcpb_backoff_init(&high, 1000, 30000);
    for (i = 0; i < sizeof(ceilings) / sizeof(ceilings[0]); i++) {
        assert_int_equal(mcpb_backoff_next(&low, 0), ceilings[i] / 2);
        assert_int_equal(mcpb_backoff_next(&high, UINT32_MAX), ceilings[i]);
    }
    for (i = 0; i < 100; i++) {
        assert_int_equal(mcpb_backoff_next(&high, UINT32_MAX), 30000); /* never overflows */
    }
}

static void test_jitter_spreads(void **state)
{
    mcpb_backoff_t backoff;
    uint32_t wait;
    (void)state;
    mcpb_backoff_init(&backoff, 1000, 30000);
    wait = mcpb_backoff_next(&backoff, 0x80000000u);
    assert_true(wait > 700 && wait < 800);
}

static void test_refusal_goes_to_max_and_reset_starts_over(void **state)
{
    mcpb_backoff_t backoff;
    uint32_t wait;
    (void)state;
    mcpb_backoff_init(&backoff, 1000, 30000);
    wait = mcpb_backoff_refused(&backoff, 0);
    assert_int_equal(wait, 15000);
    wait = mcpb_backoff_refused(&backoff, UINT32_MAX);
    assert_int_equal(wait, 30000);
    mcpb_backoff_reset(&backoff);
    assert_int_equal(mcpb_backoff_next(&backoff, UINT32_MAX), 1000);
}

static void test_bad_settings_are_made_sane(void **state)
{
    mcpb_backoff_t backoff;
    (void)state;
    mcpb_backoff_init(&backoff, 0, 0);
    assert_int_equal(backoff.min_ms, 1000);
    assert_int_equal(backoff.max_ms, 1000);
    assert_int_equal(mcpb_backoff_next(&backoff, UINT32_MAX), 1000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ceilings_double_to_max),
        cmocka_unit_test(test_jitter_spreads),
        cmocka_unit_test(test_refusal_goes_to_max_and_reset_starts_over),
        cmocka_unit_test(test_bad_settings_are_made_sane),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
