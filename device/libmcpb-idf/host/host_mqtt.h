/* pump1-host --mqtt: pump-1 served over the MQTT plain profile (docs/device-mqtt.md) through the
 * host's MQTT 3.1.1 client (ports/posix/mqtt_posix.h). Built in when mqtt.cmake's
 * mcpb_mqtt_host_hook() defines MCPB_HOST_MQTT for pump1-host. */
#ifndef PUMP1_HOST_MQTT_H
#define PUMP1_HOST_MQTT_H

#include <signal.h>

#include "host_args.h"
#include "mcpb/client.h"
#include "mcpb/port.h"
#include "mcpb_pump1.h"

/* Serves pumps[0] into slots[0] over args->mqtt_url ("HOST:PORT" or "mqtt://HOST[:PORT]", port 1883
 * by default), with --mqtt-user and --mqtt-password-file when given, until *stop is set; then
 * clears the retained status. port is the POSIX port (its log). Returns the process's exit status:
 * 0 on a clean stop, 2 for an option the profile cannot use. */
int host_mqtt_run(const host_args_t *args, mcpb_port_t *port, mcpb_pump1_t *pumps, mcpb_slot_t *slots,
                  int slot_count, volatile sig_atomic_t *stop);

#endif
