/* What the client's source files share: sending, logging and the way of the link. Not part of the API. */
#ifndef MCPB_CLIENT_INTERNAL_H
#define MCPB_CLIENT_INTERNAL_H

#include "mcpb/client.h"

#define MCPB_NO_SLOT ((size_t)-1) /* a bare message: no envelope */

/* The way of the link: constant when the build has one way only (mcpb/features.h), so the other
 * ways' code is dropped. mcpb_client_init refuses the ways that are not built in. */
#define WAY_SERIAL(c) (MCPB_WITH_SERIAL && (!MCPB_WITH_WEBSOCKET || (c)->config.way == MCPB_WAY_SERIAL))
#define WAY_WS(c) (MCPB_WITH_WEBSOCKET && !WAY_SERIAL(c))
#define WAY_MULTIPLEX(c) (MCPB_WITH_MULTIPLEX && (c)->config.way == MCPB_WAY_WS_MULTIPLEX)
/* Messages on this link are wrapped in {"provider":…,"payload":…}. An error with id null is how the
 * gateway refuses a slot, or lets it go, on the links without a close code for it: in its envelope
 * on these, a refusal of that slot; bare on a single-slot serial line, the end of the link. The
 * dedicated WebSocket is refused by HTTP status and close code only, and the gateway sends no such
 * error there: its messages all go to the handler, unscanned. */
#define ENVELOPED(c) (WAY_MULTIPLEX(c) || (WAY_SERIAL(c) && (c)->config.slot_count > 1))

/* One message, enveloped for slot_index when the link wants envelopes: 0, or -1 when the port failed. */
int mcpb__send_message(mcpb_client_t *client, size_t slot_index, const char *message, size_t len);
/* A WebSocket control frame (close, pong) with its payload: 0 or -1. */
int mcpb__send_control(mcpb_client_t *client, uint8_t opcode, const uint8_t *payload, size_t len);
/* A close frame with code and reason (cut to 123 bytes). */
void mcpb__send_close(mcpb_client_t *client, int code, const char *reason);

/* The text of the JSON string literal at `literal` (its opening quote) into out (out_cap > 0),
 * NUL-terminated; out may be the literal itself. A backslash takes the byte after it as it is: exact
 * for what the gateway escapes in slot names and refusal reasons (its JSON writer escapes only `"`,
 * `\` and control characters, which neither holds), and the rule the scanner skips strings by, so
 * the text ends at the literal's closing quote (or a NUL). Its length; -1 when `literal` is no string
 * or the text was cut to out_cap - 1 bytes. mcpb_json_string decodes every escape, at more cost. */
int mcpb__json_text(const char *literal, char *out, size_t out_cap);

void mcpb__log(mcpb_client_t *client, int level, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#endif
