/* pump-1 on ESP-IDF: Wi-Fi station, then one task that serves the slot over the way in chosen in
 * menuconfig (WebSocket, serial or MQTT) and ticks the pump every 100 ms. */
#include <stdio.h>
#include <string.h>

#include "esp_log.h"
#include "esp_mac.h"
#include "freertos/FreeRTOS.h"
#include "freertos/task.h"
#include "mcpb/client.h"
#include "mcpb/mqtt.h"
#include "mcpb_pump1.h"
#include "port_esp.h"
#include "sdkconfig.h"

#include "gateway_url.h"
#include "wifi_station.h"

#define FRAME_MAX CONFIG_MCPB_FRAME_MAX
#define TICK_MS 100
#define TASK_STACK 8192

static const char *TAG = "pump1";

/* The static RAM of the example: one message each way, the port's I/O slices, the pump; sized by
 * the macros of mcpb/client.h, as pump1-host and scripts/size-c size theirs. */
static uint8_t message_buf[MCPB_MESSAGE_CAP(FRAME_MAX)];
static char answer_buf[MCPB_ANSWER_CAP(FRAME_MAX)];
static uint8_t rx_buf[MCPB_RX_CAP];
static uint8_t tx_buf[MCPB_TX_CAP];
static mcpb_pump1_t pump;
static char device_id[18];

static void pick_device_id(void)
{
    uint8_t mac[6];
    if (CONFIG_PUMP1_DEVICE_ID[0] != '\0' || esp_read_mac(mac, ESP_MAC_WIFI_STA) != ESP_OK) {
        snprintf(device_id, sizeof device_id, "%s", CONFIG_PUMP1_DEVICE_ID);
        return;
    }
    snprintf(device_id, sizeof device_id, "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3],
             mac[4], mac[5]);
}

/* mcpb_pump1_handle at the time now: a command brings the model up to it, not to the last tick. */
static int handle_now(void *ctx, const char *in, size_t in_len, char *out, size_t out_cap)
{
    mcpb_pump1_clock(ctx, mcpb_esp_now_ms(NULL));
    return mcpb_pump1_handle(ctx, in, in_len, out, out_cap);
}

#if CONFIG_MCPB_TRANSPORT_MQTT
static void serve_mqtt(void)
{
    static mcpb_esp_mqtt_t esp_mqtt;
    static mcpb_mqtt_port port;
    static mcpb_mqtt_config config;
    static mcpb_hello_t hello;
    static mcpb_mqtt m;
    static volatile int stop;
    hello.device_id = device_id;
    hello.firmware_name = MCPB_PUMP1_FIRMWARE_NAME;
    hello.firmware_version = MCPB_PUMP1_FIRMWARE_VERSION;
    hello.schema = mcpb_pump1_schema_hash();
    mcpb_mqtt_config_defaults(&config);
    config.host = CONFIG_MCPB_MQTT_HOST;
    config.port = CONFIG_MCPB_MQTT_PORT;
    config.prefix = CONFIG_MCPB_MQTT_PREFIX;
    config.slot = CONFIG_MCPB_SLOT;
    config.username = CONFIG_MCPB_MQTT_USER[0] != '\0' ? CONFIG_MCPB_MQTT_USER : NULL;
    config.password = config.username != NULL && CONFIG_MCPB_MQTT_PASSWORD[0] != '\0' ? CONFIG_MCPB_MQTT_PASSWORD : NULL;
    config.keepalive_s = CONFIG_MCPB_MQTT_KEEPALIVE_S;
    config.backoff_min_ms = CONFIG_MCPB_BACKOFF_MIN_MS;
    config.backoff_max_ms = CONFIG_MCPB_BACKOFF_MAX_MS;
    config.slice_ms = TICK_MS;
    config.hello = &hello;
    if (mcpb_esp_mqtt_init(&esp_mqtt, &port, FRAME_MAX) != 0 ||
        mcpb_mqtt_init(&m, &config, &port, (char *)message_buf, FRAME_MAX, answer_buf, sizeof answer_buf) != 0) {
        ESP_LOGE(TAG, "config_error: check the MQTT slot, prefix and credential in menuconfig");
        return;
    }
    mcpb_mqtt_run(&m, handle_now, &pump, mcpb_pump1_tick, &pump, &stop);
}
#else
/* Set when the gateway let the slot go (or refused it) on /providers, where its pings go on while the
 * link stays: they feed the dead-man no more until the next link registers the slot again. */
static int let_go;

static void heard(void *ctx)
{
    if (!let_go) {
        mcpb_pump1_heard(ctx);
    }
}

#if !CONFIG_MCPB_TRANSPORT_SERIAL
/* A new WebSocket is a new gateway session whose request ids may start over: the pump forgets its
 * repeated answers. A serial line (and MQTT) keeps them: that gateway never repeats an id. An event
 * naming the slot (only on /providers) is the gateway refusing or letting it go: the pump is fed no
 * more, and its dead-man stops it unless the next link comes in time (a quick gateway restart). */
static void on_event(void *ctx, const mcpb_link_event_t *event)
{
    if (event->kind == MCPB_LINK_CONNECTED) {
        let_go = 0;
        mcpb_pump1_new_link(ctx);
    }
    if (event->slot[0] != '\0') {
        let_go = 1;
    }
}
#endif

static void serve_link(void)
{
    static mcpb_esp_t esp;
    static mcpb_port_t port;
    static mcpb_client_t client;
    static mcpb_slot_t slot;
    static mcpb_client_config_t config;
    static gateway_url_t url;
    mcpb_buffers_t buffers = {message_buf, sizeof message_buf, answer_buf, sizeof answer_buf,
                              rx_buf, sizeof rx_buf, tx_buf, sizeof tx_buf};
    slot.name = CONFIG_MCPB_SLOT;
    slot.aggregate = 1;
    slot.schema = mcpb_pump1_schema_hash();
    slot.handler = handle_now;
    slot.handler_ctx = &pump;
    memset(&config, 0, sizeof config);
#if CONFIG_MCPB_TRANSPORT_SERIAL
    esp.uart_num = CONFIG_MCPB_UART_NUM;
    esp.tx_pin = CONFIG_MCPB_UART_TX_PIN;
    esp.rx_pin = CONFIG_MCPB_UART_RX_PIN;
    esp.baud = CONFIG_MCPB_UART_BAUD;
    config.way = MCPB_WAY_SERIAL;
    config.host = "uart";
    config.port = 0;
#else
    if (gateway_url_parse(CONFIG_MCPB_GATEWAY_URL, &url) != 0) {
        ESP_LOGE(TAG, "config_error: the gateway URL must be ws://host[:port]/... or wss://...");
        return;
    }
    esp.tls = url.tls;
    config.way = url.multiplex ? MCPB_WAY_WS_MULTIPLEX : MCPB_WAY_WS_DEDICATED;
    config.host = url.host;
    config.port = url.port;
    config.token = CONFIG_MCPB_PROVIDER_TOKEN[0] != '\0' ? CONFIG_MCPB_PROVIDER_TOKEN : NULL;
    config.on_event = on_event;
    config.event_ctx = &pump;
#endif
    config.device_id = device_id;
    config.firmware_name = MCPB_PUMP1_FIRMWARE_NAME;
    config.firmware_version = MCPB_PUMP1_FIRMWARE_VERSION;
    config.slots = &slot;
    config.slot_count = 1;
    config.backoff_min_ms = CONFIG_MCPB_BACKOFF_MIN_MS;
    config.backoff_max_ms = CONFIG_MCPB_BACKOFF_MAX_MS;
    config.on_heard = heard;
    config.heard_ctx = &pump;
    mcpb_esp_port_init(&port, &esp);
    if (mcpb_client_init(&client, &config, &port, &buffers) != 0) {
        return;
    }
    for (;;) {
        uint32_t idle = mcpb_client_poll(&client, TICK_MS);
        mcpb_pump1_tick(&pump, mcpb_esp_now_ms(NULL));
        if (idle > 0) {
            vTaskDelay(pdMS_TO_TICKS(idle < TICK_MS ? idle : TICK_MS));
        }
    }
}
#endif

static void provider_task(void *arg)
{
    (void)arg;
#if CONFIG_MCPB_TRANSPORT_MQTT
    serve_mqtt();
#else
    serve_link();
#endif
    ESP_LOGE(TAG, "the provider stopped");
    vTaskDelete(NULL);
}

void app_main(void)
{
    mcpb_pump1_init(&pump, NULL);
    pick_device_id();
#if !CONFIG_MCPB_TRANSPORT_SERIAL
    wifi_station_start();
#endif
    xTaskCreate(provider_task, "mcpb", TASK_STACK, NULL, 5, NULL);
}
