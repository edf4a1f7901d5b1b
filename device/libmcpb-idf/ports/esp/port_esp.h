/* The ESP-IDF port: mcpb/port.h over esp_transport (TCP, TLS for wss) or a UART, esp_timer,
 * ESP_LOG and esp_random; and the MQTT message port over esp-mqtt (mcpb/mqtt.h). */
#ifndef MCPB_PORT_ESP_H
#define MCPB_PORT_ESP_H

#include <stddef.h>
#include <stdint.h>

#include "esp_transport.h"
#include "freertos/FreeRTOS.h"
#include "freertos/queue.h"
#include "freertos/semphr.h"
#include "mqtt_client.h"

#include "mcpb/mqtt.h"
#include "mcpb/port.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int tls;                      /* wss: the server's certificate is checked against the bundle */
    int uart_num;                 /* connect() with port 0 opens this UART */
    int tx_pin;
    int rx_pin;
    int baud;
    uint32_t connect_ms;
    esp_transport_handle_t transport;
    int uart_open;
} mcpb_esp_t;

/* Fills port with the functions working on esp (which must outlive it). */
void mcpb_esp_port_init(mcpb_port_t *port, mcpb_esp_t *esp);

uint32_t mcpb_esp_now_ms(void *ctx);
void mcpb_esp_log(void *ctx, int level, const char *message);
uint32_t mcpb_esp_random32(void *ctx);
void mcpb_esp_sleep_ms(void *ctx, uint32_t ms);

/* The esp-mqtt message port: the event handler runs in esp-mqtt's task and hands events to
 * receive() through a queue; a message is assembled from its fragments in inbox. */
typedef struct {
    esp_mqtt_client_handle_t client;
    QueueHandle_t events;
    SemaphoreHandle_t inbox_free;  /* taken while inbox holds a message receive has not copied */
    char *inbox;                   /* frame_max bytes, allocated once by mcpb_esp_mqtt_init */
    size_t inbox_cap;
    size_t inbox_len;
    size_t size;
    int retained;
    int qos;
    int assembling;                /* fragments of one message are arriving */
    char topic[MCPB_MQTT_TOPIC_MAX];
    size_t topic_len;
} mcpb_esp_mqtt_t;

/* 0, or -1 when the inbox, queue or semaphore cannot be had. */
int mcpb_esp_mqtt_init(mcpb_esp_mqtt_t *mqtt, mcpb_mqtt_port *port, size_t frame_max);

#ifdef __cplusplus
}
#endif

#endif
