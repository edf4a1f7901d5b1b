/* mcpb/port.h on ESP-IDF: esp_transport for TCP and TLS, the UART driver for serial lines. */
#include "port_esp.h"

#include "driver/uart.h"
#include "esp_crt_bundle.h"
#include "esp_log.h"
#include "esp_random.h"
#include "esp_timer.h"
#include "esp_transport_ssl.h"
#include "esp_transport_tcp.h"
#include "freertos/task.h"

#define UART_RX_BUFFER 2048
#define WRITE_TIMEOUT_MS 3000

static const char *TAG = "mcpb";

uint32_t mcpb_esp_now_ms(void *ctx)
{
    (void)ctx;
    return (uint32_t)(esp_timer_get_time() / 1000);
}

void mcpb_esp_log(void *ctx, int level, const char *message)
{
    char text[512]; /* the core's lines (at most 223 bytes) whole when they hold few control bytes */
    (void)ctx;
    mcpb_log_text(text, sizeof(text), message);
    message = text;
    switch (level) {
    case MCPB_LOG_ERROR:
        ESP_LOGE(TAG, "%s", message);
        break;
    case MCPB_LOG_WARN:
        ESP_LOGW(TAG, "%s", message);
        break;
    case MCPB_LOG_INFO:
        ESP_LOGI(TAG, "%s", message);
        break;
    default:
        ESP_LOGD(TAG, "%s", message);
        break;
    }
}

uint32_t mcpb_esp_random32(void *ctx)
{
    (void)ctx;
    return esp_random();
}

void mcpb_esp_sleep_ms(void *ctx, uint32_t ms)
{
    (void)ctx;
    vTaskDelay(pdMS_TO_TICKS(ms) > 0 ? pdMS_TO_TICKS(ms) : 1);
}

static void port_close(void *ctx)
{
    mcpb_esp_t *esp = ctx;
    if (esp->transport != NULL) {
        esp_transport_close(esp->transport);
        esp_transport_destroy(esp->transport);
        esp->transport = NULL;
    }
    if (esp->uart_open) {
        uart_driver_delete((uart_port_t)esp->uart_num);
        esp->uart_open = 0;
    }
}

static int open_uart(mcpb_esp_t *esp)
{
    uart_config_t config = {
        .baud_rate = esp->baud,
        .data_bits = UART_DATA_8_BITS,
        .parity = UART_PARITY_DISABLE,
        .stop_bits = UART_STOP_BITS_1,
        .flow_ctrl = UART_HW_FLOWCTRL_DISABLE,
        .source_clk = UART_SCLK_DEFAULT,
    };
    uart_port_t uart = (uart_port_t)esp->uart_num;
    if (uart_driver_install(uart, UART_RX_BUFFER, 0, 0, NULL, 0) != ESP_OK) {
        return -1;
    }
    esp->uart_open = 1;
    if (uart_param_config(uart, &config) != ESP_OK ||
        uart_set_pin(uart, esp->tx_pin, esp->rx_pin, UART_PIN_NO_CHANGE, UART_PIN_NO_CHANGE) != ESP_OK) {
        port_close(esp);
        return -1;
    }
    return 0;
}

static int port_connect(void *ctx, const char *host, uint16_t port)
{
    mcpb_esp_t *esp = ctx;
    port_close(esp);
    if (port == 0) {
        return open_uart(esp);
    }
    esp->transport = esp->tls ? esp_transport_ssl_init() : esp_transport_tcp_init();
    if (esp->transport == NULL) {
        return -1;
    }
    if (esp->tls) {
        esp_transport_ssl_crt_bundle_attach(esp->transport, esp_crt_bundle_attach);
    }
    if (esp_transport_connect(esp->transport, host, port, (int)esp->connect_ms) != 0) {
        port_close(esp);
        return -1;
    }
    return 0;
}

static int port_send(void *ctx, const uint8_t *data, size_t len)
{
    mcpb_esp_t *esp = ctx;
    if (esp->uart_open) {
        return uart_write_bytes((uart_port_t)esp->uart_num, data, len) == (int)len ? 0 : -1;
    }
    while (len > 0 && esp->transport != NULL) {
        int sent = esp_transport_write(esp->transport, (const char *)data, (int)len, WRITE_TIMEOUT_MS);
        if (sent <= 0) {
            return -1;
        }
        data += sent;
        len -= (size_t)sent;
    }
    return len == 0 ? 0 : -1;
}

static int port_recv(void *ctx, uint8_t *buf, size_t cap, uint32_t timeout_ms)
{
    mcpb_esp_t *esp = ctx;
    if (esp->uart_open) {
        /* whatever arrived, up to cap: a short wait first, then what is buffered */
        size_t ready = 0;
        uart_get_buffered_data_len((uart_port_t)esp->uart_num, &ready);
        if (ready == 0) {
            int got = uart_read_bytes((uart_port_t)esp->uart_num, buf, 1, pdMS_TO_TICKS(timeout_ms));
            if (got <= 0) {
                return got < 0 ? -1 : 0;
            }
            uart_get_buffered_data_len((uart_port_t)esp->uart_num, &ready);
            ready = ready < cap - 1 ? ready : cap - 1;
            return 1 + (ready > 0 ? uart_read_bytes((uart_port_t)esp->uart_num, buf + 1, ready, 0) : 0);
        }
        return uart_read_bytes((uart_port_t)esp->uart_num, buf, ready < cap ? ready : cap, 0);
    }
    if (esp->transport == NULL) {
        return -1;
    }
    return esp_transport_read(esp->transport, (char *)buf, (int)cap, (int)timeout_ms);
}

void mcpb_esp_port_init(mcpb_port_t *port, mcpb_esp_t *esp)
{
    if (esp->connect_ms == 0) {
        esp->connect_ms = 10000;
    }
    port->ctx = esp;
    port->connect = port_connect;
    port->send = port_send;
    port->recv = port_recv;
    port->close = port_close;
    port->now_ms = mcpb_esp_now_ms;
    port->log = mcpb_esp_log;
    port->random32 = mcpb_esp_random32;
}
