/* The provider link's state machine: dial, upgrade (WebSocket) or open (serial), register, serve,
 * and after every loss wait a jittered back-off before dialling again. */
#include <stdarg.h>
#include <string.h>

#include "client_internal.h"
#include "mcpb/json_scan.h"

#define DEFAULT_SILENCE_MS 90000u
#define DEFAULT_HANDSHAKE_MS 10000u

void mcpb__log(mcpb_client_t *client, int level, const char *format, ...)
{
    char line[224];
    va_list args;
    va_start(args, format);
    mcpb_vformat(line, sizeof(line), format, args);
    va_end(args);
    client->port.log(client->port.ctx, level, line);
}

static uint32_t now(mcpb_client_t *client)
{
    return client->port.now_ms(client->port.ctx);
}

/* Milliseconds from now until `when` (0 when it has passed). */
static uint32_t until(mcpb_client_t *client, uint32_t when)
{
    int32_t left = (int32_t)(when - now(client));
    return left > 0 ? (uint32_t)left : 0;
}

static const char *const kind_names[] = {"", "connected", "refused", "closed", "error"};

/* Every reason is a string: a close frame's payload has a NUL after it (mcpb/ws_frame.h). */
static void emit(mcpb_client_t *client, mcpb_link_kind_t kind, int close_code, int http_status, const char *slot,
                 const char *reason, uint32_t retry_in_ms)
{
    mcpb_link_event_t *event = &client->last_event;
    event->kind = kind;
    event->close_code = close_code;
    event->http_status = http_status;
    mcpb_format(event->slot, sizeof(event->slot), "%s", slot);
    mcpb_format(event->reason, sizeof(event->reason), "%s", reason);
    event->retry_in_ms = retry_in_ms;
    mcpb__log(client, kind == MCPB_LINK_CONNECTED ? MCPB_LOG_INFO : MCPB_LOG_WARN,
              "link %s%s%s code=%d http=%d retry_in_ms=%lu: %s", kind_names[kind], slot[0] ? " slot=" : "", slot,
              close_code, http_status, (unsigned long)retry_in_ms, event->reason);
    if (client->config.on_event != NULL) {
        client->config.on_event(client->config.event_ctx, event);
    }
}

/* The link is gone: close the stream, pick the wait, tell the application why. */
static void link_down(mcpb_client_t *client, mcpb_link_kind_t kind, int close_code, int http_status,
                      const char *reason)
{
    uint32_t random = client->port.random32(client->port.ctx);
    uint32_t wait, at = now(client);
    client->port.close(client->port.ctx);
    client->pending = 0;
    /* The ceiling starts over only after a link that proved useful: one that carried a message and
     * stayed up backoff_max_ms (dial_at_ms holds when it came up). The gateway speaks first on every
     * link (initialize), so a board it closes during the handshake (tools/list fails) would otherwise
     * redial every second for ever; the MicroPython board and the MQTT profile keep the same rule. */
    if (client->carried && at - client->dial_at_ms >= client->backoff.max_ms) {
        mcpb_backoff_reset(&client->backoff);
    }
    /* A refusal at the door (busy slot, bad secret) will not change in a second: never a tight loop.
     * Every caller names a loss REFUSED only before the link carried a message. */
    wait = kind == MCPB_LINK_REFUSED ? mcpb_backoff_refused(&client->backoff, random)
                                     : mcpb_backoff_next(&client->backoff, random);
    client->carried = 0; /* failed dials after this loss keep doubling */
    client->state = MCPB_STATE_IDLE;
    client->dial_at_ms = at + wait;
    emit(client, kind, close_code, http_status, "", reason, wait);
}

static void link_failed(mcpb_client_t *client, const char *reason)
{
    link_down(client, MCPB_LINK_ERROR, 0, 0, reason);
}

/* Every byte stream ends up here when a send fails. */
static int sent(mcpb_client_t *client, int result)
{
    if (result < 0 && client->state == MCPB_STATE_OPEN) {
        link_failed(client, "send failed");
    }
    return result;
}

static int send_register(mcpb_client_t *client, size_t slot_index)
{
    const mcpb_client_config_t *config = &client->config;
    const mcpb_slot_t *slot = &config->slots[slot_index];
    mcpb_hello_t hello;
    size_t len;
    hello.device_id = config->device_id;
    hello.firmware_name = config->firmware_name;
    hello.firmware_version = config->firmware_version;
    hello.schema = slot->schema;
    /* Only a bare frame on a serial line names its slot: a URL or an envelope names it elsewhere. */
    len = mcpb_register_frame(client->buffers.answer, client->buffers.answer_cap, &hello,
                              WAY_SERIAL(client) && !ENVELOPED(client) ? slot->name : NULL, slot->aggregate);
    if (len == 0) {
        mcpb__log(client, MCPB_LOG_ERROR, "register frame too long");
        return 0;
    }
    return sent(client, mcpb__send_message(client, slot_index, client->buffers.answer, len));
}

static int send_registers(mcpb_client_t *client)
{
    size_t i;
    for (i = 0; i < client->config.slot_count; i++) {
        if (send_register(client, i) < 0) {
            return -1;
        }
    }
    return 0;
}

/* A failed dial's reason; its tail ("%s:%u") is a connected link's: one string, not two (a
 * serial-only build keeps the tail alone). */
static const char cannot_connect[] = "cannot connect to %s:%u";
#define HOST_PORT (MCPB_WITH_WEBSOCKET ? cannot_connect + 18 : "%s:%u")

static void link_up(mcpb_client_t *client)
{
    char where[96];
    client->state = MCPB_STATE_OPEN;
    client->links++;
    client->carried = 0;
    client->dial_at_ms = client->since_ms = now(client); /* OPEN: when the link came up (link_down) */
    if (WAY_SERIAL(client)) {
        mcpb_cobs_decoder_init(&client->cobs, client->buffers.message, client->buffers.message_cap);
    } else {
        mcpb_ws_rx_init(&client->ws, client->buffers.message, client->buffers.message_cap);
    }
    if (send_registers(client) < 0) {
        return;
    }
    mcpb_format(where, sizeof(where), HOST_PORT, client->config.host, (unsigned)client->config.port);
    emit(client, MCPB_LINK_CONNECTED, 0, 0, "", where, 0);
}

static void heard(mcpb_client_t *client)
{
    client->since_ms = now(client);
    if (client->config.on_heard != NULL) {
        client->config.on_heard(client->config.heard_ctx);
    }
}

static size_t slot_named(const mcpb_client_t *client, const char *name)
{
    size_t i;
    for (i = 0; i < client->config.slot_count; i++) {
        if (strcmp(client->config.slots[i].name, name) == 0) {
            return i;
        }
    }
    return MCPB_NO_SLOT;
}

/* Hands one message (NUL-terminated in a writable buffer) to its slot's handler and sends the answer. */
static void run_handler(mcpb_client_t *client, size_t slot_index, char *message, size_t len)
{
    const mcpb_slot_t *slot = &client->config.slots[slot_index];
    int answer;
    if (ENVELOPED(client)) {
        /* deliver leaves it to here on /providers; one bit a slot: a refusal of a slot that served
         * is the gateway letting it go (deliver) */
        client->carried |= 2 << slot_index;
    }
    client->messages_in++;
    answer = slot->handler(slot->handler_ctx, message, len, client->buffers.answer, client->buffers.answer_cap);
    /* A length past out_cap is no answer either: sending the buffer would send stale bytes of earlier
     * messages. The caller learns it now, not at its deadline, as from the MicroPython board. */
    if (answer < 0 || (size_t)answer > client->buffers.answer_cap) {
        answer = (int)mcpb_too_large_response(client->buffers.answer, client->buffers.answer_cap, message, len);
    }
    if (answer > 0) {
        sent(client, mcpb__send_message(client, slot_index, client->buffers.answer, (size_t)answer));
    }
}

/* The slot an envelope's "provider" names: MCPB_NO_SLOT when it names none of ours or is no envelope.
 * *end: where the name's literal ends. */
static size_t envelope_slot(const mcpb_client_t *client, const char *message, size_t len, size_t *end)
{
    char name[MCPB_SLOT_MAX + 1];
    size_t at, value_len;
    if (mcpb_json_member(message, len, "provider", &at, &value_len) != 1 ||
        mcpb__json_text(message + at, name, sizeof(name)) <= 0) {
        return MCPB_NO_SLOT;
    }
    *end = at + value_len;
    return slot_named(client, name);
}

static void deliver(mcpb_client_t *client, char *message, size_t len)
{
    size_t slot_index = 0, payload_at, payload_len;
    if (WAY_SERIAL(client) && mcpb_is_register_request(message, len)) {
        send_registers(client); /* the gateway asks; it has accepted nothing yet */
        return;
    }
    /* On /providers the gateway refuses a slot with an error envelope and, when it serves none, closes
     * with 1008: a link that carried nothing but refusals (or strays it drops) was refused at the door
     * and waits the longest back-off. Only a message for a slot counts there (run_handler, refuse_oversize). */
    if (!WAY_MULTIPLEX(client)) {
        client->carried = 1;
    }
    if (ENVELOPED(client)) {
        /* A refusal of a slot comes in its envelope; the gateway's bare refusal (of an envelope it
         * could not read) names none. Anything else not for a slot of ours is a stray. */
        const char *refused = "";
        char reason[MCPB_REASON_MAX + 1];
        slot_index = envelope_slot(client, message, len, &payload_at);
        if (slot_index != MCPB_NO_SLOT &&
            mcpb_json_member(message, len, "payload", &payload_at, &payload_len) == 1) {
            message[payload_at + payload_len] = '\0'; /* the envelope's closing brace or a space */
            message += payload_at;
            len = payload_len;
            refused = client->config.slots[slot_index].name;
        } else {
            slot_index = MCPB_NO_SLOT;
        }
        if (mcpb_refusal_in(message, len, reason, sizeof(reason))) {
            /* a slot that served is let go (a takeover, the gateway's shutdown), not refused */
            emit(client, refused[0] && (client->carried >> slot_index & 2) ? MCPB_LINK_CLOSED : MCPB_LINK_REFUSED,
                 0, 0, refused, reason, 0);
            return;
        }
        if (slot_index == MCPB_NO_SLOT) {
            client->dropped++;
            return;
        }
    }
    run_handler(client, slot_index, message, len);
}

/* A message over the cap was skipped; its request still gets an answer naming the cap, under the id in
 * the request's first MCPB_HEAD_BYTES (as the MicroPython board looks for it; deeper, an "id" may be a
 * nested one). `head` holds what fitted the buffer: on an enveloped link, the envelope first. */
static void refuse_oversize(mcpb_client_t *client, const uint8_t *head, size_t head_len, uint32_t size)
{
    size_t slot_index = 0, len, at = 0, window = MCPB_HEAD_BYTES;
    client->carried |= 1; /* |=: the slots' served bits (run_handler) stay for deliver */
    client->dropped++;
    if (ENVELOPED(client)) {
        slot_index = envelope_slot(client, (const char *)head, head_len, &at);
        if (slot_index == MCPB_NO_SLOT) {
            return;
        }
        client->carried |= 2 << slot_index; /* the gateway sent this slot a request: it holds it */
        window += sizeof(",\"payload\":") - 1; /* the request starts after the slot name and this */
    }
    head_len -= at;
    len = mcpb_too_large_answer(client->buffers.answer, client->buffers.answer_cap, (const char *)head + at,
                                head_len < window ? head_len : window, size, client->buffers.message_cap - 5);
    if (len > 0) {
        sent(client, mcpb__send_message(client, slot_index, client->buffers.answer, len));
    }
}

/* A serial line has no close code: on a bare line the gateway's error with id null ends the link,
 * as a close would. Before the gateway sent anything it is a refusal at the door (held, forbidden or
 * invalid slot): the longest back-off. After, the gateway let the slot go (a missed heartbeat, a
 * takeover, its shutdown): the back-off starts over. Either way the register frame goes out again
 * when the line is opened after the wait. Not contact: it feeds neither on_heard nor the silence. */
static int line_refused(mcpb_client_t *client, const mcpb_ws_event_t *event)
{
    char reason[MCPB_REASON_MAX + 1];
    if (!mcpb_refusal_in((const char *)event->data, event->len, reason, sizeof(reason))) {
        return 0;
    }
    link_down(client, client->carried ? MCPB_LINK_CLOSED : MCPB_LINK_REFUSED, 0, 0, reason);
    return 1;
}

static void on_ws_event(mcpb_client_t *client, const mcpb_ws_event_t *event)
{
    if (!WAY_WS(client) && event->kind > MCPB_WS_OVERSIZE) {
        return; /* a serial link makes no WebSocket events: a serial-only build drops their code */
    }
    if (WAY_SERIAL(client) && !ENVELOPED(client) && event->kind == MCPB_WS_MESSAGE && line_refused(client, event)) {
        return;
    }
    if (event->kind >= MCPB_WS_MESSAGE && event->kind <= MCPB_WS_PONG) {
        heard(client);
    }
    switch (event->kind) {
    case MCPB_WS_MESSAGE:
        deliver(client, (char *)event->data, event->len);
        break;
    case MCPB_WS_OVERSIZE:
        refuse_oversize(client, event->head, event->head_len, event->size);
        break;
    case MCPB_WS_PING:
        sent(client, mcpb__send_control(client, MCPB_WS_PONG_FRAME, event->data, event->len));
        break;
    case MCPB_WS_CLOSE: {
        /* 1008 before the gateway said anything is a refusal at the door (held slot, bad name). */
        mcpb_link_kind_t kind =
            event->close_code == 1008 && !client->carried ? MCPB_LINK_REFUSED : MCPB_LINK_CLOSED;
        /* 1000 whatever came: an echo could send a code no endpoint may send (1005, 1006, 1015) */
        mcpb__send_close(client, 1000, "");
        link_down(client, kind, event->close_code, 0, (const char *)event->data);
        break;
    }
    case MCPB_WS_PROTOCOL_ERROR: {
        char reason[MCPB_REASON_MAX + 1];
        mcpb_format(reason, sizeof(reason), "protocol error: %s", event->error);
        mcpb__send_close(client, 1002, event->error);
        link_down(client, MCPB_LINK_ERROR, 1002, 0, reason);
        break;
    }
    default:
        break;
    }
}

typedef char mcpb_kinds_agree[MCPB_WS_MESSAGE == (int)MCPB_FRAME_MESSAGE &&
                              MCPB_WS_OVERSIZE == (int)MCPB_FRAME_OVERSIZE ? 1 : -1];

/* Feeds what rx[] still holds, one event at a time, while the link stays open. A serial frame
 * becomes the same event as a WebSocket message: the kinds NONE, MESSAGE and OVERSIZE agree. */
static void feed_pending(mcpb_client_t *client)
{
    while (client->pending > 0 && client->state == MCPB_STATE_OPEN) {
        const uint8_t *bytes = client->buffers.rx + client->pending_at;
        mcpb_ws_event_t event;
        size_t used;
        if (WAY_SERIAL(client)) {
            mcpb_frame_t frame;
            used = mcpb_cobs_decoder_feed(&client->cobs, bytes, client->pending, &frame);
            memset(&event, 0, sizeof(event));
            event.kind = (mcpb_ws_event_kind_t)frame.kind;
            event.data = client->buffers.message;
            event.len = frame.size;
            event.size = frame.size;
            event.head = frame.head;
            event.head_len = frame.head_len;
        } else {
            used = mcpb_ws_rx_feed(&client->ws, bytes, client->pending, &event);
        }
        client->pending_at += used;
        client->pending -= used;
        on_ws_event(client, &event);
    }
}

static void dial(mcpb_client_t *client)
{
    const mcpb_client_config_t *config = &client->config;
    char reason[MCPB_REASON_MAX + 1];
    char path[16 + MCPB_SLOT_MAX * 3];
    const char *target = "/providers";
    uint8_t nonce[16];
    size_t i, len;
    if (client->port.connect(client->port.ctx, config->host, config->port) < 0) {
        if (WAY_SERIAL(client)) {
            mcpb_format(reason, sizeof(reason), "cannot open %s", config->host);
        } else {
            mcpb_format(reason, sizeof(reason), cannot_connect, config->host, (unsigned)config->port);
        }
        link_failed(client, reason);
        return;
    }
    if (!WAY_WS(client)) {
        link_up(client);
        return;
    }
    if (!WAY_MULTIPLEX(client)) {
        mcpb_ws_provider_path(config->slots[0].name, path, sizeof(path));
        target = path;
    }
    for (i = 0; i < 16; i += 4) {
        uint32_t bits = client->port.random32(client->port.ctx);
        memcpy(nonce + i, &bits, 4); /* random bytes: their order does not matter */
    }
    mcpb_ws_make_key(nonce, client->key);
    len = mcpb_ws_request(client->buffers.answer, client->buffers.answer_cap, config->host, config->port, target,
                          client->key, config->token, config->agent != NULL ? config->agent : "libmcpb-idf");
    if (len == 0 || client->port.send(client->port.ctx, (const uint8_t *)client->buffers.answer, len) < 0) {
        link_failed(client, len == 0 ? "upgrade request too long" : "send failed");
        return;
    }
    client->state = MCPB_STATE_UPGRADING;
    client->since_ms = now(client);
    client->head_len = 0;
}

/* A refused upgrade: the status and the JSON body's error_description (the gateway's advice), else
 * the body as it is. The whole body is read first (upgrade_step waits for its Content-Length). */
static void refused_upgrade(mcpb_client_t *client, const mcpb_http_response_t *response)
{
    char reason[MCPB_REASON_MAX + 1];
    char *body = (char *)client->buffers.message + response->head_len, *text;
    size_t body_len = client->head_len - response->head_len;
    if (body_len > response->content_length) {
        body_len = response->content_length;
    }
    body[body_len] = '\0'; /* within the buffer: upgrade_step keeps a byte for it */
    text = strstr(body, "error_description\"");
    if (text != NULL && (text = strchr(text + 18, '"')) != NULL) { /* the value's opening quote */
        /* the string's inside, decoded where it lies by mcpb__json_text's rule, written out here:
         * the call costs the dedicated-WebSocket core more than the loop */
        char *end = body;
        for (text++; *text != '\0' && *text != '"'; text++) {
            text += *text == '\\' && text[1] != '\0';
            *end++ = *text;
        }
        *end = '\0';
    }
    mcpb_format(reason, sizeof(reason), "HTTP %d: %s", response->status, body);
    link_down(client, response->status >= 400 && response->status < 500 ? MCPB_LINK_REFUSED : MCPB_LINK_ERROR, 0,
              response->status, reason);
}

static void upgrade_step(mcpb_client_t *client, uint32_t timeout_ms)
{
    mcpb_http_response_t response;
    const char *failure = NULL; /* set when no more bytes will come */
    uint32_t wait = until(client, client->since_ms + client->config.handshake_ms);
    size_t room = client->buffers.message_cap - 1 - client->head_len;
    int got = 0, parsed;
    if (room > client->buffers.rx_cap) {
        room = client->buffers.rx_cap;
    }
    if (wait == 0) {
        failure = "no upgrade answer in time";
    } else if (room == 0) {
        failure = "upgrade answer too long";
    } else {
        got = client->port.recv(client->port.ctx, client->buffers.rx, room, timeout_ms < wait ? timeout_ms : wait);
        if (got == 0) {
            return;
        }
        if (got < 0) {
            failure = "connection lost"; /* the text of a loss once open; the kind (error) tells them apart */
        } else {
            memcpy(client->buffers.message + client->head_len, client->buffers.rx, (size_t)got);
            client->head_len += (size_t)got;
        }
    }
    /* an interim answer (1xx, such as 100 Continue) goes before the real one: dropped, the rest read on */
    while ((parsed = mcpb_ws_parse_response((const char *)client->buffers.message, client->head_len, client->key,
                                            &response)) > 0 &&
           response.status < 200 && response.status != 101) {
        client->head_len -= response.head_len;
        memmove(client->buffers.message, client->buffers.message + response.head_len, client->head_len);
    }
    if (parsed < 0) {
        failure = "upgrade answer not HTTP";
    } else if (parsed > 0 && response.status != 101) {
        /* A refusal: its body is the reason, and may come in later reads than the head. */
        size_t body = client->head_len - response.head_len;
        if (failure == NULL && body < response.content_length) {
            return;
        }
        refused_upgrade(client, &response);
        return;
    } else if (failure == NULL && parsed > 0 && !response.accept_ok) {
        failure = "wrong Sec-WebSocket-Accept";
    }
    if (failure != NULL) {
        link_failed(client, failure);
        return;
    }
    if (parsed == 0) {
        return;
    }
    /* Frames that came with the 101 are the tail of the last read. */
    client->pending = client->head_len - response.head_len;
    client->pending_at = (size_t)got - client->pending;
    link_up(client);
}

static void open_step(mcpb_client_t *client, uint32_t timeout_ms)
{
    uint32_t silence_left = until(client, client->since_ms + client->config.silence_ms);
    int got;
    if (silence_left == 0) {
        char reason[MCPB_REASON_MAX + 1];
        mcpb_format(reason, sizeof(reason), "no frame or ping from the gateway for %lu s",
                 (unsigned long)(client->config.silence_ms / 1000));
        if (WAY_WS(client)) {
            mcpb__send_close(client, 1001, reason); /* the gateway logs why the device left */
        }
        link_failed(client, reason);
        return;
    }
    got = client->port.recv(client->port.ctx, client->buffers.rx, client->buffers.rx_cap,
                            timeout_ms < silence_left ? timeout_ms : silence_left);
    if (got < 0) {
        link_down(client, MCPB_LINK_CLOSED, WAY_WS(client) ? 1006 : 0, 0,
                  "connection lost");
        return;
    }
    client->pending = (size_t)got;
    client->pending_at = 0;
    feed_pending(client);
}

/* A way the client cannot take, named with the switches the build was made without: one text. */
#if MCPB_WITH_WEBSOCKET
#define LEFT_OUT_WEBSOCKET ""
#else
#define LEFT_OUT_WEBSOCKET " MCPB_WITH_WEBSOCKET"
#endif
#if MCPB_WITH_MULTIPLEX
#define LEFT_OUT_MULTIPLEX ""
#else
#define LEFT_OUT_MULTIPLEX " MCPB_WITH_MULTIPLEX"
#endif
#if MCPB_WITH_SERIAL
#define LEFT_OUT_SERIAL ""
#else
#define LEFT_OUT_SERIAL " MCPB_WITH_SERIAL"
#endif
#if MCPB_WITH_WEBSOCKET && MCPB_WITH_MULTIPLEX && MCPB_WITH_SERIAL
#define WAY_MISSING "unknown way"
#else
#define WAY_MISSING "unknown way, or built without" LEFT_OUT_WEBSOCKET LEFT_OUT_MULTIPLEX LEFT_OUT_SERIAL
#endif

/* 1 when the way is known and built in. */
static int way_built_in(mcpb_way_t way)
{
    return way == MCPB_WAY_WS_DEDICATED   ? MCPB_WITH_WEBSOCKET
           : way == MCPB_WAY_WS_MULTIPLEX ? MCPB_WITH_MULTIPLEX
           : way == MCPB_WAY_SERIAL       ? MCPB_WITH_SERIAL
                                          : 0;
}

#if MCPB_WITH_MULTIPLEX || MCPB_WITH_SERIAL
/* On /providers and serial the slot names travel in JSON (an envelope, the register frame), where the
 * gateway drops a frame that is not UTF-8 whole as unparsable and holds a name once per link: what is
 * wrong with slot i's name (a format naming the slot), else NULL. A name it parses and refuses (a
 * format or private-use character, mcpb_name_ok) comes back as a refusal the link events carry. */
static const char *name_problem(const mcpb_client_t *client, size_t i)
{
    const char *name = client->config.slots[i].name;
    if (client->config.way == MCPB_WAY_WS_DEDICATED) {
        return NULL; /* one slot, named by the URL */
    }
    /* the first slot of that name is an earlier one: the lookup that routes envelopes finds it */
    return !mcpb_name_utf8_ok(name) ? "slots[%u] is not printable UTF-8"
           : slot_named(client, name) != i ? "slots[%u] repeats a name"
                                           : NULL;
}
#else
#define name_problem(client, i) NULL /* one slot, named by the URL */
#endif

/* The name of the first of host, token and agent that holds a control character, else NULL: the
 * token and the agent go into the upgrade's header lines and the host into its Host line, where a
 * CR or LF would end the line early (the serial device path has no use for one either). */
static const char *control_in(const mcpb_client_config_t *config)
{
    static const char names[] = "host\0\0token\0agent"; /* six bytes apart */
    const char *const texts[] = {config->host, config->token, config->agent};
    const char *name = names;
    size_t i;
    for (i = 0; i < 3; i++, name += 6) {
        const unsigned char *s = (const unsigned char *)texts[i];
        for (; s != NULL && *s != 0; s++) {
            if (*s < 0x20 || *s == 0x7F) {
                return name;
            }
        }
    }
    return NULL;
}

int mcpb_client_init(mcpb_client_t *client, const mcpb_client_config_t *config, const mcpb_port_t *port,
                     const mcpb_buffers_t *buffers)
{
    const char *problem = NULL, *field = NULL;
    size_t i, named = MCPB_NO_SLOT;
    memset(client, 0, sizeof(*client));
    client->config = *config;
    client->port = *port;
    client->buffers = *buffers;
    if (client->config.silence_ms == 0) {
        client->config.silence_ms = DEFAULT_SILENCE_MS;
    }
    if (client->config.handshake_ms == 0) {
        client->config.handshake_ms = DEFAULT_HANDSHAKE_MS;
    }
    if (client->config.firmware_name == NULL) {
        client->config.firmware_name = "libmcpb-idf";
    }
    if (client->config.firmware_version == NULL) {
        client->config.firmware_version = MCPB_VERSION;
    }
    if (config->host == NULL || config->slots == NULL || config->slot_count == 0 ||
        config->slot_count > MCPB_MAX_SLOTS || (config->way == MCPB_WAY_WS_DEDICATED && config->slot_count != 1)) {
        problem = "needs a host and 1 to 8 slots, a dedicated link exactly one slot";
    } else if (buffers->message == NULL || buffers->message_cap < 1024 || buffers->answer == NULL ||
               buffers->answer_cap < 512 || buffers->rx == NULL || buffers->rx_cap < 16 || buffers->tx == NULL ||
               buffers->tx_cap < 64) {
        problem = "buffers too small";
    } else if (!way_built_in(config->way)) {
        problem = WAY_MISSING;
    } else if ((field = control_in(config)) != NULL) {
        problem = "%s holds a control character";
    }
    for (i = 0; problem == NULL && i < config->slot_count; i++) {
        size_t len = config->slots[i].name != NULL ? strlen(config->slots[i].name) : 0;
        if (len == 0 || len > MCPB_SLOT_MAX || config->slots[i].handler == NULL) {
            problem = "slot needs a name (1-64 bytes) and a handler";
        } else if ((problem = name_problem(client, i)) != NULL) {
            named = i;
        }
    }
    if (problem != NULL) {
        /* a format: a slot's takes the slot's index, the field's its name */
        if (named != MCPB_NO_SLOT) {
            mcpb__log(client, MCPB_LOG_ERROR, problem, (unsigned)named);
        } else {
            mcpb__log(client, MCPB_LOG_ERROR, problem, field);
        }
        client->state = MCPB_STATE_STOPPED;
        return -1;
    }
    /* a maximum below the minimum is raised to it (mcpb_backoff_init) */
    mcpb_backoff_init(&client->backoff, config->backoff_min_ms ? config->backoff_min_ms : 1000u,
                      config->backoff_max_ms ? config->backoff_max_ms : 30000u);
    client->state = MCPB_STATE_IDLE;
    client->dial_at_ms = now(client);
    return 0;
}

uint32_t mcpb_client_poll(mcpb_client_t *client, uint32_t timeout_ms)
{
    switch (client->state) {
    case MCPB_STATE_IDLE: {
        uint32_t wait = until(client, client->dial_at_ms);
        if (wait > 0) {
            return wait;
        }
        dial(client);
        return 0;
    }
    case MCPB_STATE_UPGRADING:
        if (!WAY_WS(client)) {
            return timeout_ms;
        }
        upgrade_step(client, timeout_ms);
        if (client->state == MCPB_STATE_OPEN) {
            feed_pending(client);
        }
        return 0;
    case MCPB_STATE_OPEN:
        if (client->pending > 0) {
            feed_pending(client);
            return 0;
        }
        open_step(client, timeout_ms);
        return 0;
    default:
        return timeout_ms;
    }
}

int mcpb_client_send(mcpb_client_t *client, size_t slot_index, const char *message, size_t len)
{
    if (client->state != MCPB_STATE_OPEN || slot_index >= client->config.slot_count) {
        return -1;
    }
    return sent(client, mcpb__send_message(client, slot_index, message, len));
}

void mcpb_client_stop(mcpb_client_t *client, const char *reason)
{
    if (client->state == MCPB_STATE_OPEN && WAY_WS(client)) {
        mcpb__send_close(client, 1001, reason != NULL ? reason : "device shutting down");
    }
    if (client->state != MCPB_STATE_STOPPED) {
        client->port.close(client->port.ctx);
    }
    client->state = MCPB_STATE_STOPPED;
}

int mcpb_client_connected(const mcpb_client_t *client)
{
    return client->state == MCPB_STATE_OPEN;
}
