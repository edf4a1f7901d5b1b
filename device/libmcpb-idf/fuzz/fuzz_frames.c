/* Fuzz target for the frame layers: the WebSocket decoder, the COBS decoder, the upgrade answer
 * parser and the JSON scanning the core does on what a gateway sends. libFuzzer's entry point;
 * random_driver.c calls it with random inputs where libFuzzer is not available. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "mcpb/json_scan.h"
#include "mcpb/messages.h"
#include "mcpb/serial_frame.h"
#include "mcpb/ws_frame.h"
#include "mcpb/ws_handshake.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void scan_message(const uint8_t *message, size_t len)
{
    char slot[MCPB_SLOT_MAX + 1], reason[124], id[80], answer[512];
    size_t at, payload_len;
    mcpb_is_register_request((const char *)message, len);
    mcpb_refusal_in((const char *)message, len, reason, sizeof(reason));
    if (mcpb_envelope_parse((const char *)message, len, slot, &at, &payload_len) == 0) {
        if (at + payload_len > len) {
            __builtin_trap();
        }
        mcpb_refusal_in((const char *)message + at, payload_len, reason, sizeof(reason));
    }
    mcpb_json_id_in((const char *)message, len < MCPB_HEAD_BYTES ? len : MCPB_HEAD_BYTES, id, sizeof(id));
    mcpb_too_large_answer(answer, sizeof(answer), (const char *)message, len < 96 ? len : 96, len, 1024);
}

static void fuzz_ws(const uint8_t *data, size_t size, size_t chunk)
{
    static uint8_t buf[1024 + 5];
    mcpb_ws_rx_t rx;
    size_t at = 0;
    mcpb_ws_rx_init(&rx, buf, sizeof(buf));
    while (at < size) {
        mcpb_ws_event_t event;
        size_t give = size - at < chunk ? size - at : chunk;
        size_t used = mcpb_ws_rx_feed(&rx, data + at, give, &event);
        if (used > give || (used == 0 && event.kind == MCPB_WS_NONE)) {
            __builtin_trap(); /* must consume or report */
        }
        at += used;
        if (event.kind == MCPB_WS_MESSAGE) {
            if (event.len >= sizeof(buf) || event.data[event.len] != 0) {
                __builtin_trap();
            }
            scan_message(event.data, event.len);
        } else if (event.kind == MCPB_WS_OVERSIZE) {
            /* the head: what fitted the buffer, NUL-terminated, scanned as the client scans it */
            if (event.head != buf || event.head_len >= sizeof(buf) || event.head[event.head_len] != 0) {
                __builtin_trap();
            }
            scan_message(event.head, event.head_len);
        } else if (event.kind == MCPB_WS_PROTOCOL_ERROR) {
            break;
        }
    }
}

static void fuzz_cobs(const uint8_t *data, size_t size, size_t chunk)
{
    static uint8_t buf[512 + 5];
    mcpb_cobs_decoder_t dec;
    size_t at = 0;
    mcpb_cobs_decoder_init(&dec, buf, sizeof(buf));
    while (at < size) {
        mcpb_frame_t frame;
        size_t give = size - at < chunk ? size - at : chunk;
        size_t used = mcpb_cobs_decoder_feed(&dec, data + at, give, &frame);
        if (used == 0 || used > give) {
            __builtin_trap();
        }
        at += used;
        if (frame.kind == MCPB_FRAME_MESSAGE) {
            uint8_t wire[1200];
            size_t n = mcpb_serial_frame_encode(buf, frame.size, wire, sizeof(wire));
            if (n == 0 || mcpb_crc32(0, buf, frame.size) == 0x12345678u) {
                /* a decoded message always re-encodes; the CRC call keeps the compiler honest */
            }
            scan_message(buf, frame.size);
        } else if (frame.kind == MCPB_FRAME_OVERSIZE) {
            if (frame.head != buf || frame.head_len >= sizeof(buf) || frame.head[frame.head_len] != 0) {
                __builtin_trap();
            }
            scan_message(frame.head, frame.head_len);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mcpb_http_response_t response;
    size_t chunk = size > 0 ? (size_t)(data[0] % 17) + 1 : 1;
    fuzz_ws(data, size, size);
    fuzz_ws(data, size, chunk);
    fuzz_cobs(data, size, size);
    fuzz_cobs(data, size, chunk);
    mcpb_ws_parse_response((const char *)data, size, "dGhlIHNhbXBsZSBub25jZQ==", &response);
    scan_message(data, size);
    return 0;
}
