/*
 * JSON-RPC answers as device/micropython/mcpdevice/dispatcher.py writes them: compact, ensure_ascii,
 * results refused over the frame cap, error messages cut to fit it.
 */
#ifndef MCPB_PUMP1_RPC_ANSWER_H
#define MCPB_PUMP1_RPC_ANSWER_H

#include "json_out.h"
#include "json_scan.h"
#include "mcpb_pump1.h"
#include "pump_refusal.h"

#define RPC_PARSE_ERROR (-32700)
#define RPC_INVALID_REQUEST (-32600)
#define RPC_METHOD_NOT_FOUND (-32601)
#define RPC_INVALID_PARAMS (-32602)
#define RPC_INTERNAL_ERROR (-32603)

/* Writes a result value (raw JSON) to `out`; called again for each measurement. */
typedef void (*rpc_result_fn)(const mcpb_pump1_t *pump, const void *context, json_out_t *out);

/*
 * An error answer with one of the texts of pump_refusal.h and what it quotes (value may be
 * NULL); `id` absent means null. Counts the error. A message that would take the answer
 * past the frame cap is cut and ends in "...", as the MicroPython dispatcher cuts it.
 */
void p1_rpc_error(mcpb_pump1_t *pump, json_span_t id, int code, const char *text, const json_span_t *value,
                  unsigned long number, json_out_t *out);

/* The start of a result answer: '{"jsonrpc":"2.0","id":ID,"result":'. */
void p1_rpc_result_head(json_out_t *out, json_span_t id);

/* A result answer, or error -32603 "Response too large" when it would pass the frame cap. */
void p1_rpc_result(mcpb_pump1_t *pump, json_span_t id, rpc_result_fn result, const void *context, json_out_t *out);

#endif
