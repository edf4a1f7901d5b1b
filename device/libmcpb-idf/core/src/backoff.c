/* Jittered exponential back-off with the state in a caller-owned struct. */
#include "mcpb/backoff.h"

void mcpb_backoff_init(mcpb_backoff_t *backoff, uint32_t min_ms, uint32_t max_ms)
{
    backoff->min_ms = min_ms > 0 ? min_ms : 1000;
    backoff->max_ms = max_ms >= backoff->min_ms ? max_ms : backoff->min_ms;
    backoff->failures = 0;
}

static uint32_t jittered(uint32_t ceiling, uint32_t random32)
{
    uint32_t half = ceiling / 2;
    /* random32 scaled onto [0, ceiling - half] without overflow */
    return half + (uint32_t)(((uint64_t)random32 * (uint64_t)(ceiling - half + 1)) >> 32);
}

uint32_t mcpb_backoff_next(mcpb_backoff_t *backoff, uint32_t random32)
{
    uint32_t ceiling = backoff->min_ms, i;
    /* min_ms doubled once per failure (16 at most), never past max_ms; 32-bit: no libgcc shifts */
    for (i = 0; i < backoff->failures && i < 16; i++) {
        ceiling = ceiling > backoff->max_ms / 2 ? backoff->max_ms : ceiling * 2;
    }
    if (ceiling > backoff->max_ms) {
        ceiling = backoff->max_ms;
    }
    if (backoff->failures < UINT32_MAX) {
        backoff->failures++;
    }
    return jittered(ceiling, random32);
}

uint32_t mcpb_backoff_refused(mcpb_backoff_t *backoff, uint32_t random32)
{
    if (backoff->failures < 16) {
        backoff->failures = 16;
    }
    return mcpb_backoff_next(backoff, random32);
}

void mcpb_backoff_reset(mcpb_backoff_t *backoff)
{
    backoff->failures = 0;
}
