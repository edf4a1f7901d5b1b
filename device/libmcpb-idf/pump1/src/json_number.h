/*
 * Numbers read from a message, judged the way CPython judges the float or int that json.loads
 * makes of them, and printed the way Python prints them (repr, "%d", round).
 */
#ifndef MCPB_PUMP1_JSON_NUMBER_H
#define MCPB_PUMP1_JSON_NUMBER_H

#include <stddef.h>

#include "json_out.h"
#include "json_scan.h"

/* The value of a number (a close approximation beyond 15 significant digits). */
double p1_json_number_value(json_span_t number);

/* Python's repr() of the float a number token becomes: "1200.5", "1e-07", "inf", "nan"; with
 * for_dumps, what json.dumps prints for that float: "NaN" and "Infinity" instead of "nan" and "inf". */
void p1_json_number_float(json_sink_t *sink, json_span_t number, int for_dumps);

/* Python's "%d" % value of an int token or of an integral float token. */
void p1_json_number_as_int(json_sink_t *sink, json_span_t number);

/* "%.*f" % (digits, value); with trim, the zeros after the first decimal dropped: then it is
 * repr(round(value, digits)) of a finite value, "62.1", "0.0", "4.0". */
void p1_json_fixed(json_sink_t *sink, double value, int digits, int trim);

#endif
