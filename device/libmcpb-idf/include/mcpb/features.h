/* The ways in a firmware is built with. Each is on unless defined to 0 (with -D, or by ESP-IDF from
 * Kconfig); a way left out costs no flash: its runtime tests become constant-false and the linker
 * drops the code. mcpb_client_init refuses a configuration that asks for a way left out (with none,
 * as in an MQTT-only firmware, it refuses them all). */
#ifndef MCPB_FEATURES_H
#define MCPB_FEATURES_H

#ifndef MCPB_WITH_WEBSOCKET
#define MCPB_WITH_WEBSOCKET 1 /* ws://host:port/provider/<slot>: SHA-1, frames, the upgrade */
#endif
#ifndef MCPB_WITH_MULTIPLEX
#define MCPB_WITH_MULTIPLEX MCPB_WITH_WEBSOCKET /* ws://host:port/providers: envelopes, many slots */
#endif
#ifndef MCPB_WITH_SERIAL
#define MCPB_WITH_SERIAL 1 /* COBS + CRC-32 frames on a serial line, the broker/register answer */
#endif

#if MCPB_WITH_MULTIPLEX && !MCPB_WITH_WEBSOCKET
#error "MCPB_WITH_MULTIPLEX needs MCPB_WITH_WEBSOCKET"
#endif

#endif
