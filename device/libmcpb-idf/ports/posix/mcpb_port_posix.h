/* The POSIX port: TCP sockets, serial devices and PTYs, the monotonic clock, stderr, the kernel's entropy. */
#ifndef MCPB_PORT_POSIX_H
#define MCPB_PORT_POSIX_H

#include "mcpb/port.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int fd;                 /* the open stream, or -1 */
    int is_serial;
    unsigned baud;          /* serial speed (default 115200) */
    unsigned connect_ms;    /* TCP connect timeout (default 5000) */
    int log_level;          /* lines above this level are not written: MCPB_LOG_ERROR (0) .. MCPB_LOG_DEBUG */
    const char *log_name;   /* prefix of every log line (default "mcpb") */
} mcpb_posix_t;

/* Fills `port` with the POSIX functions working on `posix` (which must outlive the port). */
void mcpb_posix_port_init(mcpb_port_t *port, mcpb_posix_t *posix);

#ifdef __cplusplus
}
#endif

#endif
