/* Runs the fuzz target on random and mutated inputs for a bounded time, for builds without
 * libFuzzer (gcc). Usage: fuzz_frames_random [seconds] [seed]. Any crash aborts under ASan. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint32_t state_bits = 2463534242u;

static uint32_t next_random(void)
{
    /* xorshift32: reproducible from the seed */
    state_bits ^= state_bits << 13;
    state_bits ^= state_bits >> 17;
    state_bits ^= state_bits << 5;
    return state_bits;
}

/* Seeds that reach deep states: frames of every kind, an upgrade answer, envelopes, COBS frames. */
static const char *const seeds[] = {
    "\x81\x05hello",
    "\x01\x03{\"a\x89\x02hb\x80\x02\":1}",
    "\x88\x05\x03\xf0" "bye",
    "\x81\x7e\x00\x80",
    "\x81\xfe\x00\x04\x01\x02\x03\x04zzzz",
    "HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
    "{\"provider\":\"v\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"message\":\"x\"}}}",
    "{\"jsonrpc\":\"2.0\",\"method\":\"broker/register\"}",
    "\x00\x33{\"jsonrpc\":\"2.0\",\"id\":\"brk-7\",\"method\":\"ping\"}\x67\x34\x84\xe7\x00",
};

int main(int argc, char **argv)
{
    static uint8_t input[4096];
    double seconds = argc > 1 ? atof(argv[1]) : 20.0;
    unsigned long runs = 0;
    clock_t start = clock();
    size_t seed_count = sizeof(seeds) / sizeof(seeds[0]);
    if (argc > 2) {
        state_bits = (uint32_t)strtoul(argv[2], NULL, 10) | 1u;
    }
    while ((double)(clock() - start) / CLOCKS_PER_SEC < seconds) {
        size_t size, i, flips;
        const char *seed = seeds[next_random() % seed_count];
        size_t seed_len = strlen(seed) + (seed[0] == '\0' ? 53 : 0);
        if (next_random() % 3 == 0) {
            size = next_random() % sizeof(input);
            for (i = 0; i < size; i++) {
                input[i] = (uint8_t)next_random();
            }
        } else {
            size = seed_len;
            memcpy(input, seed, seed_len);
            flips = next_random() % 8;
            for (i = 0; i < flips && size > 0; i++) {
                input[next_random() % size] = (uint8_t)next_random();
            }
            /* sometimes glue on a second copy or random tail */
            if (next_random() % 2 && size * 2 < sizeof(input)) {
                memcpy(input + size, input, size);
                size *= 2;
            }
            {
                size_t tail = next_random() % 64;
                for (i = 0; i < tail && size < sizeof(input); i++) {
                    input[size++] = (uint8_t)next_random();
                }
            }
        }
        LLVMFuzzerTestOneInput(input, size);
        runs++;
    }
    printf("fuzz_frames_random: %lu inputs in %.0f s, no crash\n", runs, seconds);
    return 0;
}
