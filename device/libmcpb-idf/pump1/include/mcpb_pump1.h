/*
 * pump-1, the reference device (docs/pump-1.md), as a C99 provider handler.
 *
 * One JSON-RPC message in, at most one answer out, with the behaviour of the MicroPython firmware
 * (device/micropython/mcpdevice/dispatcher.py, pump1/tools.py, pump1/controller.py): the same tools
 * and schemas (device/schemas/pump-1.json, embedded at build time), the same results, refusals and
 * error texts, the same physics. No heap, no globals, no clock: the caller owns the pump object and
 * tells it the time through mcpb_pump1_tick().
 *
 * Use:
 *     mcpb_pump1_t pump;                       (about 2.7 KB; static storage on a board)
 *     mcpb_pump1_init(&pump, NULL);            (NULL: the MicroPython config defaults)
 *     every ~100 ms:   mcpb_pump1_tick(&pump, now_ms);
 *     every message:   mcpb_pump1_clock(&pump, now_ms);  (the time the message is handled)
 *                      n = mcpb_pump1_handle(&pump, in, in_len, out, out_cap);
 *                      n > 0: send out[0..n); n == 0: nothing to send; n < 0: out holds less than -n
 *     a WebSocket ping from the gateway:  mcpb_pump1_heard(&pump);
 *     a new WebSocket connection:         mcpb_pump1_new_link(&pump);  (not serial, not MQTT)
 *     a message over the frame cap:       mcpb_pump1_oversize(&pump, size, head, head_len, out, cap);
 *                                         (only with a transport of your own: libmcpb's client
 *                                         answers an oversize request itself, with the same text)
 *     the register frame's hello:         "schema": mcpb_pump1_schema_hash()
 */
#ifndef MCPB_PUMP1_H
#define MCPB_PUMP1_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MCPB_PUMP1_SERVER_NAME "pump-1"            /* serverInfo.name, the slot's usual name */
#define MCPB_PUMP1_FIRMWARE_NAME "pump-1-idf"      /* hello.firmware.name of the C firmware */
#define MCPB_PUMP1_FIRMWARE_VERSION "0.1.0"        /* default serverInfo.version */

#define MCPB_PUMP1_CACHE_SIZE 4                    /* tools/call answers kept for repeated ids */
/* Bytes of one kept answer, its result text folded (the escaped copy of structuredContent is not
 * kept). 544 holds the largest tools/call answer of pump-1 with an id of up to 64 bytes: a
 * get_status (or start, stop, set_speed) result with a fault text (at most 167 bytes) and readings
 * under 1e6 in magnitude folds to at most 543 bytes; refusals stay under 450. A larger answer (a
 * hardware backend reporting absurd values, a refusal echoing a long argument) is sent but not kept. */
#define MCPB_PUMP1_CACHE_ANSWER_MAX 544
#define MCPB_PUMP1_CACHE_ID_MAX 64                 /* an id longer than this (as JSON) is not kept */
/* The largest answer of a command (start, set_speed, stop, reset_fault) without its id: a status
 * result with a 255-byte fault text and readings under 1e6 in magnitude is at most 1069 bytes. A
 * command whose id (as JSON) is longer than frame_max minus this is refused before it acts, since
 * its answer might not fit the frame (a -32603 after acting would hide that the pump acted). */
#define MCPB_PUMP1_COMMAND_ANSWER_MAX 1100
#define MCPB_PUMP1_FAULT_TEXT_MAX 256

/* A sensor reading: each value counts only while its bit is set in `valid`. */
#define MCPB_PUMP1_FLOW_VALID 1u
#define MCPB_PUMP1_PRESSURE_VALID 2u
#define MCPB_PUMP1_TEMP_VALID 4u

typedef struct mcpb_pump1_reading {
    double flow_lpm;
    double pressure_bar;
    double motor_temp_c;
    unsigned valid;
} mcpb_pump1_reading_t;

/*
 * A hardware backend (PWM out, 4-20 mA loops in). Without one the pump runs on its built-in
 * physics model, as the simulator and the MicroPython Unix port do.
 */
typedef struct mcpb_pump1_hardware {
    void *context;
    /* Apply the ramped speed reference (0 = off) for the last dt_s seconds. */
    void (*drive)(void *context, double rpm, double dt_s);
    void (*read)(void *context, mcpb_pump1_reading_t *reading);
    /* Nonzero while the backend knows the suction side is still dry; NULL: it cannot tell. */
    int (*dry_run_persists)(void *context);
} mcpb_pump1_hardware_t;

typedef struct mcpb_pump1_config {
    double deadman_s;            /* 90: silence after which a turning motor stops (link_lost) */
    double dry_run_s;            /* 5: running dry this long latches dry_run */
    int default_setpoint_rpm;    /* 1450: setpoint after boot, 300..2900 */
    double thermal_tau_s;        /* 60: winding temperature lag of the built-in model */
    size_t frame_max;            /* 4096: largest frame either way; tools/list is paged to fit;
                                    raised to what the largest tool needs (3221) */
    const char *firmware_version;/* serverInfo.version; "0.1.0" */
    const mcpb_pump1_hardware_t *hardware; /* NULL: the built-in physics model */
} mcpb_pump1_config_t;

/* Conditions of the built-in physics model, for a simulator's fault injection and for tests. */
typedef enum mcpb_pump1_condition {
    MCPB_PUMP1_DRY_RUN = 1,
    MCPB_PUMP1_SENSOR_FAILURE = 2,
    MCPB_PUMP1_OVERTEMP = 4
} mcpb_pump1_condition_t;

typedef struct mcpb_pump1_counts {
    uint32_t requests;
    uint32_t duplicates;
    uint32_t errors;
} mcpb_pump1_counts_t;

/* Everything below is the pump's state; read it through the functions, never write it. */

typedef struct mcpb_pump1_physics {
    double speed_rpm;
    double motor_temp_c;
    double thermal_tau_s;
    unsigned injected;           /* mcpb_pump1_condition_t bits */
} mcpb_pump1_physics_t;

typedef struct mcpb_pump1_cache_entry {
    uint64_t fingerprint;        /* of the request's bytes */
    uint16_t id_len;             /* the id as JSON (a string keeps its quotes), inside the answer */
    uint16_t text_at;            /* 0, or where the escaped structuredContent goes back in */
    uint16_t answer_len;         /* bytes kept in answer */
    char answer[MCPB_PUMP1_CACHE_ANSWER_MAX];  /* the answer, its result text folded (src/dispatcher.c) */
} mcpb_pump1_cache_entry_t;

typedef struct mcpb_pump1 {
    mcpb_pump1_config_t config;
    mcpb_pump1_physics_t physics;
    uint32_t now_ms;             /* the time of the last tick or mcpb_pump1_clock */
    uint32_t last_ms;            /* the time the model was last advanced to */
    uint32_t heard_ms;           /* the last message from the gateway */
    int clock_started;
    uint32_t deadman_ms;
    uint32_t dry_run_ms;
    int state;                   /* enum pump_state of src/pump_controller.h */
    int setpoint_rpm;
    double speed;                /* the ramped speed reference, which the motor follows */
    mcpb_pump1_reading_t reading;
    int fault;                   /* 0 or enum pump_fault of src/pump_controller.h */
    char fault_text[MCPB_PUMP1_FAULT_TEXT_MAX];
    uint32_t uptime_s, uptime_rem_ms;
    uint32_t run_s, run_rem_ms;
    uint32_t dry_ms;
    mcpb_pump1_counts_t counts;
    size_t cache_used;           /* entries, oldest first */
    mcpb_pump1_cache_entry_t cache[MCPB_PUMP1_CACHE_SIZE];
} mcpb_pump1_t;

/* The MicroPython config defaults (device/micropython/pump1/config.py). */
void mcpb_pump1_config_default(mcpb_pump1_config_t *config);

/* A stopped pump with the setpoint of the config (NULL: defaults; invalid values: their default). */
void mcpb_pump1_init(mcpb_pump1_t *pump, const mcpb_pump1_config_t *config);

/*
 * Answer one JSON-RPC message from the gateway (pump: a mcpb_pump1_t). Returns the answer's
 * length, 0 when there is no answer (notifications, responses), or a negative number when
 * out_cap is too small (minus the bytes needed; the call has still acted).
 * Every message counts as contact for the dead-man.
 */
int mcpb_pump1_handle(void *pump, const char *in, size_t in_len, char *out, size_t out_cap);

/*
 * The answer to a message of `size` bytes that was too large to read; `head` (its first bytes,
 * e.g. 96) gives the request id when it is there. Same return values as mcpb_pump1_handle.
 */
int mcpb_pump1_oversize(void *pump, size_t size, const char *head, size_t head_len, char *out,
                        size_t out_cap);

/* Advance ramp, sensors, counters, fault detection and dead-man to now_ms (wraps, 32 bit). */
void mcpb_pump1_tick(void *pump, uint32_t now_ms);

/*
 * The time now, told right before mcpb_pump1_handle: the command it carries brings the model up to
 * now_ms (counting as contact first, as controller.py does) instead of to the last tick, so two
 * commands in one tick answer as the MicroPython board does. Does not advance the model itself; told
 * before the first tick, it sets the time base as that tick would.
 */
void mcpb_pump1_clock(void *pump, uint32_t now_ms);

/* A sign of life from the gateway that is no message (a WebSocket ping): feeds the dead-man. */
void mcpb_pump1_heard(void *pump);

/*
 * A new WebSocket connection (MCPB_LINK_CONNECTED on the dedicated or /providers way): a new
 * gateway session, whose request ids may start at 1 again, so the repeat cache is emptied. Not on
 * a serial line or MQTT: their gateway never repeats an id, and a redelivery after a reconnect or
 * a new initialize must still be answered from the cache (mcpdevice's Dispatcher.new_link).
 */
void mcpb_pump1_new_link(void *pump);

/* Nonzero while the drive stands still and nothing starts it without a new command. */
int mcpb_pump1_at_rest(const mcpb_pump1_t *pump);

/* The canonical hash of the tools this pump lists, as the hello's "schema" carries it. */
const char *mcpb_pump1_schema_hash(void);

/* The built-in physics model's fault conditions (no effect with a hardware backend). */
void mcpb_pump1_inject(mcpb_pump1_t *pump, mcpb_pump1_condition_t condition);
void mcpb_pump1_clear(mcpb_pump1_t *pump, mcpb_pump1_condition_t condition);

const mcpb_pump1_counts_t *mcpb_pump1_counts(const mcpb_pump1_t *pump);

#ifdef __cplusplus
}
#endif

#endif /* MCPB_PUMP1_H */
