/* What the client's source files share: sending, logging and events. Not part of the API. */
#ifndef MCPB_CLIENT_INTERNAL_H
#define MCPB_CLIENT_INTERNAL_H

#include "mcpb/client.h"

#define MCPB_NO_SLOT ((size_t)-1) /* a bare message: no envelope */

/* 1 when messages on this link are wrapped in {"provider":…,"payload":…}. */
int mcpb__enveloped(const mcpb_client_t *client);

/* One message, enveloped for slot_index when the link wants envelopes: 0, or -1 when the port failed. */
int mcpb__send_message(mcpb_client_t *client, size_t slot_index, const char *message, size_t len);
/* A WebSocket control frame (close, pong) with its payload: 0 or -1. */
int mcpb__send_control(mcpb_client_t *client, uint8_t opcode, const uint8_t *payload, size_t len);
/* A close frame with code and reason (cut to 123 bytes). */
void mcpb__send_close(mcpb_client_t *client, int code, const char *reason);

void mcpb__log(mcpb_client_t *client, int level, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#endif
