/* pump1-host: pump-1 (a simulated pump) served into the gateway from a computer, over WebSocket
 * (dedicated or multiplexed) or a serial line, through the same core a board runs. */
#define _DEFAULT_SOURCE 1

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "host_args.h"
#include "mcpb/client.h"
#include "mcpb_port_posix.h"
#include "mcpb_pump1.h"

#ifdef MCPB_HOST_MQTT
/* MQTT hook: the MQTT plain-profile work provides host_mqtt.h and host_mqtt_run(), and defines
 * MCPB_HOST_MQTT through mcpb_mqtt_host_hook() in mqtt.cmake. It runs until *stop is set. */
#include "host_mqtt.h"
#endif

#define FRAME_MAX 4096
#define TICK_MS 100

static volatile sig_atomic_t stop_requested = 0;

static void on_signal(int signal_number)
{
    (void)signal_number;
    stop_requested = 1;
}

static void install_signals(void)
{
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_handler = on_signal; /* no SA_RESTART: a blocking poll() returns at once */
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, NULL);
    sigaction(SIGTERM, &action, NULL);
    signal(SIGPIPE, SIG_IGN);
}

static void sleep_ms(uint32_t ms)
{
    struct timespec wait;
    wait.tv_sec = (time_t)(ms / 1000);
    wait.tv_nsec = (long)(ms % 1000) * 1000000L;
    nanosleep(&wait, NULL);
}


typedef struct {
    mcpb_pump1_t *pumps;
    int count;
    mcpb_way_t way;
    const mcpb_port_t *port; /* for the duplicate lines */
    const mcpb_slot_t *slots;
    unsigned let_go; /* bit i: the gateway let slot i go or refused it; its pump is not fed till the next link */
} pumps_t;

static pumps_t pump_set;

/* Every frame from the gateway, WebSocket pings included, feeds the dead-man of the pumps whose
 * slots the gateway holds: a slot it let go hears nothing meant for it. */
static void heard_all(void *ctx)
{
    pumps_t *pumps = (pumps_t *)ctx;
    int i;
    for (i = 0; i < pumps->count; i++) {
        if (!(pumps->let_go >> i & 1u)) {
            mcpb_pump1_heard(&pumps->pumps[i]);
        }
    }
}

static void on_event(void *ctx, const mcpb_link_event_t *event)
{
    /* The core logs every event; a board would drive its status LED from here. A new WebSocket is
     * a new gateway session whose ids may start over: the pumps forget their repeated answers. A
     * serial line keeps them, as MQTT does: that gateway never repeats an id. */
    pumps_t *pumps = (pumps_t *)ctx;
    int i;
    if (event->kind == MCPB_LINK_CONNECTED) {
        pumps->let_go = 0; /* every slot registered again */
        for (i = 0; i < pumps->count && pumps->way != MCPB_WAY_SERIAL; i++) {
            mcpb_pump1_new_link(&pumps->pumps[i]);
        }
    }
    /* An event naming a slot (on /providers or a multi-slot serial line): the gateway refused or let
     * go that slot while the link stays. Its pump hears nothing more (heard_all) till the next link:
     * its dead-man stops it, with its own text, unless that link comes in time (a quick restart). */
    for (i = 0; i < pumps->count && event->slot[0] != '\0'; i++) {
        if (strcmp(pumps->slots[i].name, event->slot) == 0) {
            pumps->let_go |= 1u << i;
        }
    }
}

/* mcpb_pump1_handle at the time now, and with --verbose a debug line for a request answered from the repeat cache
 * (the pump counts it and says nothing: its code is what a board flashes). */
static int handle(void *ctx, const char *in, size_t in_len, char *out, size_t out_cap)
{
    static const char head[] = "{\"jsonrpc\":\"2.0\",\"id\":"; /* an answer's start, then its id */
    mcpb_pump1_t *pump = (mcpb_pump1_t *)ctx;
    uint32_t duplicates = mcpb_pump1_counts(pump)->duplicates;
    int n;
    mcpb_pump1_clock(pump, pump_set.port->now_ms(pump_set.port->ctx)); /* a command acts at this time, not the last tick's */
    n = mcpb_pump1_handle(pump, in, in_len, out, out_cap);
    if (mcpb_pump1_counts(pump)->duplicates != duplicates && n > (int)sizeof head) {
        const char *id = out + sizeof head - 1, *end = id;
        char line[200]; /* a slot name and an id of up to 64 bytes each */
        while (end + 9 <= out + n && memcmp(end, ",\"result\"", 9) != 0) {
            end++;
        }
        snprintf(line, sizeof line, "slot %s: duplicate_request, id %.*s answered from the cache",
                 pump_set.slots[pump - pump_set.pumps].name, (int)(end - id > 64 ? 64 : end - id), id);
        pump_set.port->log(pump_set.port->ctx, MCPB_LOG_DEBUG, line);
    }
    return n;
}

int main(int argc, char **argv)
{
    static mcpb_pump1_t pumps[HOST_MAX_SLOTS];
    static uint8_t message[MCPB_MESSAGE_CAP(FRAME_MAX)];
    static char answer[MCPB_ANSWER_CAP(FRAME_MAX)];
    static uint8_t rx[MCPB_RX_CAP];
    static uint8_t tx[MCPB_TX_CAP];
    host_args_t args;
    mcpb_pump1_config_t pump_config;
    mcpb_slot_t slots[HOST_MAX_SLOTS];
    mcpb_client_config_t config;
    mcpb_buffers_t buffers;
    mcpb_posix_t posix;
    mcpb_port_t port;
    mcpb_client_t client;
    uint32_t last_tick;
    int i;

    if (host_args_parse(&args, argc, argv) < 0) {
        return 2;
    }
    install_signals();

    mcpb_pump1_config_default(&pump_config);
    pump_config.frame_max = FRAME_MAX;
    if (args.deadman_s > 0) {
        pump_config.deadman_s = args.deadman_s;
    }
    memset(slots, 0, sizeof(slots));
    for (i = 0; i < args.slot_count; i++) {
        mcpb_pump1_init(&pumps[i], &pump_config);
        slots[i].name = args.slots[i];
        slots[i].aggregate = args.aggregate;
        slots[i].schema = mcpb_pump1_schema_hash();
        slots[i].handler = handle;
        slots[i].handler_ctx = &pumps[i];
    }
    pump_set.pumps = pumps;
    pump_set.count = args.slot_count;
    pump_set.slots = slots;
    pump_set.port = &port;

    memset(&posix, 0, sizeof(posix));
    posix.baud = args.baud;
    posix.log_level = args.verbose ? MCPB_LOG_DEBUG : MCPB_LOG_INFO;
    posix.log_name = "pump1-host";
    mcpb_posix_port_init(&port, &posix);

    if (args.mqtt_url != NULL) {
#ifdef MCPB_HOST_MQTT
        return host_mqtt_run(&args, &port, pumps, slots, args.slot_count, &stop_requested);
#else
        fprintf(stderr, "pump1-host: built without the MQTT plain profile (mqtt.cmake)\n");
        return 2;
#endif
    }

    memset(&config, 0, sizeof(config));
    config.way = args.serial ? MCPB_WAY_SERIAL : args.multiplex ? MCPB_WAY_WS_MULTIPLEX : MCPB_WAY_WS_DEDICATED;
    pump_set.way = config.way;
    config.host = args.host;
    config.port = args.port;
    config.token = args.token[0] != '\0' ? args.token : NULL;
    config.agent = "pump1-host libmcpb-idf/" MCPB_VERSION;
    config.device_id = args.device_id;
    config.firmware_name = "libmcpb-idf";
    config.firmware_version = MCPB_VERSION;
    config.slots = slots;
    config.slot_count = (size_t)args.slot_count;
    config.on_event = on_event;
    config.event_ctx = &pump_set;
    config.on_heard = heard_all;
    config.heard_ctx = &pump_set;

    buffers.message = message;
    buffers.message_cap = sizeof(message);
    buffers.answer = answer;
    buffers.answer_cap = sizeof(answer);
    buffers.rx = rx;
    buffers.rx_cap = sizeof(rx);
    buffers.tx = tx;
    buffers.tx_cap = sizeof(tx);

    if (mcpb_client_init(&client, &config, &port, &buffers) < 0) {
        return 2;
    }
    last_tick = port.now_ms(port.ctx);
    while (!stop_requested) {
        uint32_t now, idle = mcpb_client_poll(&client, TICK_MS);
        if (idle > 0) {
            sleep_ms(idle < TICK_MS ? idle : TICK_MS);
        }
        now = port.now_ms(port.ctx);
        if ((uint32_t)(now - last_tick) >= TICK_MS) {
            last_tick = now;
            for (i = 0; i < args.slot_count; i++) {
                mcpb_pump1_tick(&pumps[i], now);
            }
        }
    }
    mcpb_client_stop(&client, "device shutting down");
    port.log(port.ctx, MCPB_LOG_INFO, "stopped by signal");
    return 0;
}
