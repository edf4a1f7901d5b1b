/* Reconnect back-off: exponential with equal jitter, so a plant of boards never redials in step. */
#ifndef MCPB_BACKOFF_H
#define MCPB_BACKOFF_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint32_t min_ms;   /* the first ceiling (default 1000) */
    uint32_t max_ms;   /* the largest ceiling (default 30000) */
    uint32_t failures; /* dials since the last reset */
} mcpb_backoff_t;

void mcpb_backoff_init(mcpb_backoff_t *backoff, uint32_t min_ms, uint32_t max_ms);
/* The wait before the next dial after a failed or lost link: between half the ceiling and the
 * ceiling, where the ceiling is min_ms doubled per failure up to max_ms. */
uint32_t mcpb_backoff_next(mcpb_backoff_t *backoff, uint32_t random32);
/* A refusal (close 1008, HTTP 4xx): the ceiling goes to max_ms at once, never a tight loop. */
uint32_t mcpb_backoff_refused(mcpb_backoff_t *backoff, uint32_t random32);
/* A link proved useful (the client: it carried a message and stayed up max_ms): the next loss starts
 * from min_ms again. */
void mcpb_backoff_reset(mcpb_backoff_t *backoff);

#ifdef __cplusplus
}
#endif

#endif
