/*
 * The device's texts, those of device/micropython/pump1/tools.py, controller.py and
 * mcpdevice/dispatcher.py word for word: refusals, fault texts, error messages, the status object
 * and the answers' JSON around their values. Each is one constant string (pump_texts.h, generated
 * by generate_texts.py) in which a byte below 0x20 stands for a value (T_*) and a byte from 0x80
 * up for a pair of bytes, so one small writer replaces code that builds each text piece by piece.
 */
#ifndef MCPB_PUMP1_REFUSAL_H
#define MCPB_PUMP1_REFUSAL_H

#include "json_out.h"
#include "json_scan.h"
#include "mcpb_pump1.h"
#include "pump_texts.h"

typedef struct pump_text_args {
    const mcpb_pump1_t *pump;
    json_span_t value;
    unsigned long number;
    int number_ms;             /* 1: number is milliseconds, written as seconds the way Python's "%g" writes them */
} pump_text_args_t;

/* Writes `text` with its codes replaced (the sink's limit cuts it, as for any text). */
void p1_pump_write_text(json_sink_t *sink, const char *text, const pump_text_args_t *args);

/* Writes `text`, which has no value codes, to `out` as it is. */
void p1_pump_out_text(json_out_t *out, const char *text);

/* The k-th entry of a list of texts (P1_STATE_NAMES, ...), for p1_pump_write_text. */
const char *p1_text_nth(const char *list, int k);

/* Why a tool did not act: one of the refusal texts and the value it quotes. */
typedef struct pump_refusal {
    const char *text;          /* NULL: the call was carried out */
    json_span_t value;
} pump_refusal_t;

#endif
