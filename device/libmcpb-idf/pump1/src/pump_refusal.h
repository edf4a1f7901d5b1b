/*
 * The device's texts, those of device/micropython/pump1/tools.py, controller.py and
 * mcpdevice/dispatcher.py word for word: refusals, fault texts and error messages. Each is one
 * constant string in which a byte below 0x20 stands for a value (T_*) or a shared phrase, so one
 * small writer replaces code that builds each text piece by piece.
 */
#ifndef MCPB_PUMP1_REFUSAL_H
#define MCPB_PUMP1_REFUSAL_H

#include "json_out.h"
#include "json_scan.h"
#include "mcpb_pump1.h"

#define T_FAULT_CODE "\1" /* the pump's fault code */
#define T_FAULT_TEXT "\2" /* the pump's fault text */
#define T_STATE "\3"      /* the pump's state */
#define T_SENSORS "\4"    /* the sensors that read nothing valid, joined by " and " */
#define T_TEMP "\5"       /* the motor temperature, "%.1f" */
#define T_FLOW "\6"       /* the flow expected at the pump's speed, "%.0f" */
#define T_DUMPS "\7"      /* json.dumps(args->value) */
#define T_STRING "\10"    /* the text of the string args->value */
#define T_REPR "\11"      /* repr() of the float args->value */
#define T_INT "\12"       /* "%d" of the whole number args->value */
#define T_NUMBER "\13"    /* args->number */
#define T_TOOLS "\14"     /* the tools' names, joined by ", " */
#define T_FRAME_MAX "\15" /* the pump's frame cap */

typedef struct pump_text_args {
    const mcpb_pump1_t *pump;
    json_span_t value;
    unsigned long number;
} pump_text_args_t;

/* Writes `text` with its codes replaced (the sink's limit cuts it, as for any text). */
void p1_pump_write_text(json_sink_t *sink, const char *text, const pump_text_args_t *args);

/* Why a tool did not act: one of the refusal texts and the value it quotes. */
typedef struct pump_refusal {
    const char *text;          /* NULL: the call was carried out */
    json_span_t value;
} pump_refusal_t;

extern const char P1_UNKNOWN_ARGUMENT_SPEED[];  /* value: the key */
extern const char P1_UNKNOWN_ARGUMENT_NONE[];   /* value: the key */
extern const char P1_SPEED_NOT_NUMBER[];        /* value: what was given (absent: null) */
extern const char P1_SPEED_NOT_WHOLE[];         /* value: a float token */
extern const char P1_SPEED_OUT_OF_RANGE[];      /* value: a whole number */
extern const char P1_IN_FAULT[];
extern const char P1_NOT_RUNNING[];
extern const char P1_SPEED_MISSING[];
extern const char P1_OVERTEMP_UNREADABLE[];
extern const char P1_OVERTEMP_PERSISTS[];
extern const char P1_SENSOR_PERSISTS[];
extern const char P1_DRY_RUN_PERSISTS[];

/* The fault texts, written into the pump's fault_text when a fault latches. */
extern const char P1_LINK_LOST_TEXT[];          /* number: the dead-man in seconds */
extern const char P1_SENSOR_FAILURE_TEXT[];
extern const char P1_OVERTEMP_TEXT[];
extern const char P1_DRY_RUN_TEXT[];

/* The dispatcher's error messages. */
extern const char P1_PARSE_ERROR[];             /* number: the frame's size */
extern const char P1_REQUEST_TOO_LARGE[];       /* number: the size */
extern const char P1_RESPONSE_TOO_LARGE[];      /* number: the answer's size */
extern const char P1_NOT_AN_OBJECT[];
extern const char P1_BAD_ID[];
extern const char P1_NO_METHOD[];
extern const char P1_PARAMS_NOT_OBJECT[];
extern const char P1_ARGUMENTS_NOT_OBJECT[];
extern const char P1_UNKNOWN_CURSOR[];          /* value: the cursor */
extern const char P1_UNKNOWN_TOOL[];            /* value: the name */
extern const char P1_UNKNOWN_METHOD[];          /* value: the method (a string) */

#endif
