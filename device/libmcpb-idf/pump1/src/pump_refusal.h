/*
 * Why a tool did not act, kept as a kind and its value until the answer is written; the texts are
 * those of device/micropython/pump1/tools.py and controller.py, word for word.
 */
#ifndef MCPB_PUMP1_REFUSAL_H
#define MCPB_PUMP1_REFUSAL_H

#include "json_out.h"
#include "json_scan.h"
#include "mcpb_pump1.h"

typedef enum pump_refusal_kind {
    REFUSE_NONE,
    REFUSE_UNKNOWN_ARGUMENT,    /* value: the key; takes_speed: the tool takes speed_rpm */
    REFUSE_SPEED_NOT_NUMBER,    /* value: what was given (absent: null) */
    REFUSE_SPEED_NOT_WHOLE,     /* value: a float token */
    REFUSE_SPEED_OUT_OF_RANGE,  /* value: a whole number */
    REFUSE_IN_FAULT,
    REFUSE_NOT_RUNNING,
    REFUSE_SPEED_MISSING,
    REFUSE_OVERTEMP_UNREADABLE,
    REFUSE_OVERTEMP_PERSISTS,
    REFUSE_SENSOR_PERSISTS,
    REFUSE_DRY_RUN_PERSISTS
} pump_refusal_kind_t;

typedef struct pump_refusal {
    pump_refusal_kind_t kind;
    json_span_t value;
    int takes_speed;
} pump_refusal_t;

pump_refusal_t p1_pump_refusal(pump_refusal_kind_t kind, json_span_t value);

/* The refusal's text, from the pump as it is now. */
void p1_pump_write_refusal(const mcpb_pump1_t *pump, const pump_refusal_t *refusal, json_sink_t *sink);

#endif
