/*
 * The five pump-1 tools of device/micropython/pump1/tools.py: argument checks, the command, and
 * the CallToolResult (the status object as structuredContent and as JSON text, or an isError text).
 */
#ifndef MCPB_PUMP1_TOOLS_H
#define MCPB_PUMP1_TOOLS_H

#include "json_out.h"
#include "json_scan.h"
#include "mcpb_pump1.h"
#include "pump_refusal.h"

/* The tool's index in the schema file (pump1_schema.h), or -1 when `name` names none. */
int p1_pump_tool_index(json_span_t name);

/* Carry out a call; `arguments` is an object or absent. */
pump_refusal_t p1_pump_tool_call(mcpb_pump1_t *pump, int tool, json_span_t arguments);

/* The CallToolResult object of a call that ended with `refusal` (REFUSE_NONE: the status). */
void p1_pump_write_tool_result(const mcpb_pump1_t *pump, const pump_refusal_t *refusal, json_out_t *out);

#endif
