/* The host's MQTT 3.1.1 client (see mqtt_posix.h): the packet codec, a blocking socket client
 * bounded by poll() deadlines, and the --mqtt loop of pump1-host. */
#define _POSIX_C_SOURCE 200809L

#include "mqtt_posix.h"

#include "mcpb/port.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define CONNECT 0x10
#define CONNACK 0x20
#define PUBLISH 0x30
#define PUBACK 0x40
#define SUBSCRIBE_FIRST 0x82 /* SUBSCRIBE carries flags 0010 */
#define SUBACK 0x90
#define PINGREQ 0xC0
#define PINGRESP 0xD0
#define DISCONNECT 0xE0
#define SKIP_SLICE 256
#define HOST_FRAME 4096
#define SLOW_PACKET "mqtt error: a packet from the broker took longer than io_timeout_ms (3 s by default) to arrive"
#define SLOW_SUBACK "mqtt error: no SUBACK from the broker within connect_timeout_ms (10 s by default)"
#define CLOSED_BEFORE_CONNACK "mqtt error: the broker closed the connection before CONNACK (check client id and ACL)"
#define SLOW_CONNACK "mqtt error: no CONNACK from the broker within connect_timeout_ms (10 s by default)"

#ifdef MSG_NOSIGNAL
#define SEND_FLAGS MSG_NOSIGNAL
#else
#define SEND_FLAGS 0
#endif

/* ---- codec ---- */

size_t mcpb_mqtt_put_length(uint8_t *out, uint32_t length)
{
    size_t n = 0;
    if (length > MCPB_MQTT_LENGTH_MAX) {
        return 0;
    }
    do {
        uint8_t byte = (uint8_t)(length & 0x7Fu);
        length >>= 7;
        out[n++] = length != 0 ? (uint8_t)(byte | 0x80u) : byte;
    } while (length != 0);
    return n;
}

int mcpb_mqtt_get_length(const uint8_t *in, size_t len, uint32_t *length, size_t *used)
{
    uint32_t value = 0;
    size_t i;
    for (i = 0; i < 4; i++) {
        if (i == len) {
            return MCPB_MQTT_PKT_SHORT;
        }
        value |= (uint32_t)(in[i] & 0x7Fu) << (7 * i);
        if ((in[i] & 0x80u) == 0) {
            *length = value;
            *used = i + 1;
            return 0;
        }
    }
    return MCPB_MQTT_PKT_MALFORMED;
}

/* A bounded packet being written. */
typedef struct out {
    uint8_t *buf;
    size_t cap;
    size_t len;
    int over;
} out;

static void put_bytes(out *o, const void *data, size_t n)
{
    if (o->over || n > o->cap - o->len) {
        o->over = 1;
        return;
    }
    if (n != 0) {
        memcpy(o->buf + o->len, data, n);
    }
    o->len += n;
}

static void put_u8(out *o, unsigned value)
{
    uint8_t byte = (uint8_t)value;
    put_bytes(o, &byte, 1);
}

static void put_u16(out *o, size_t value)
{
    put_u8(o, (unsigned)(value >> 8) & 0xFFu);
    put_u8(o, (unsigned)value & 0xFFu);
}

/* A UTF-8 string or binary field: two length bytes, then the bytes. */
static void put_field(out *o, const void *data, size_t n)
{
    if (n > 0xFFFFu) {
        o->over = 1;
        return;
    }
    put_u16(o, n);
    put_bytes(o, data, n);
}

static void put_header(out *o, unsigned first, size_t remaining)
{
    uint8_t length[4];
    size_t n = remaining > MCPB_MQTT_LENGTH_MAX ? 0 : mcpb_mqtt_put_length(length, (uint32_t)remaining);
    if (n == 0) {
        o->over = 1;
        return;
    }
    put_u8(o, first);
    put_bytes(o, length, n);
}

static int finished(const out *o)
{
    return o->over || o->len > 0x7FFFFFFFu ? MCPB_MQTT_PKT_SPACE : (int)o->len;
}

int mcpb_mqtt_encode_connect(uint8_t *buf, size_t cap, const mcpb_mqtt_connect_options *options)
{
    out o = {0, 0, 0, 0};
    size_t id_len = strlen(options->client_id);
    size_t remaining = 10 + 2 + id_len;
    unsigned flags = 0x02; /* clean session: a request sent while the board was away is stale */
    o.buf = buf;
    o.cap = cap;
    if (options->will_topic != NULL) {
        remaining += 2 + strlen(options->will_topic) + 2 + options->will_len;
        flags |= 0x04u | (unsigned)(options->will_qos & 3) << 3 | (options->will_retain ? 0x20u : 0);
    }
    if (options->username != NULL) {
        remaining += 2 + strlen(options->username);
        flags |= 0x80u;
        if (options->password != NULL) {
            remaining += 2 + strlen(options->password);
            flags |= 0x40u;
        }
    }
    put_header(&o, CONNECT, remaining);
    put_field(&o, "MQTT", 4);
    put_u8(&o, 4); /* protocol level: 3.1.1 */
    put_u8(&o, flags);
    put_u16(&o, options->keepalive_s);
    put_field(&o, options->client_id, id_len);
    if (options->will_topic != NULL) {
        put_field(&o, options->will_topic, strlen(options->will_topic));
        put_field(&o, options->will_payload, options->will_len);
    }
    if (options->username != NULL) {
        put_field(&o, options->username, strlen(options->username));
        if (options->password != NULL) {
            put_field(&o, options->password, strlen(options->password));
        }
    }
    return finished(&o);
}

int mcpb_mqtt_encode_subscribe(uint8_t *buf, size_t cap, uint16_t packet_id, const char *topic, int qos)
{
    out o = {0, 0, 0, 0};
    size_t topic_len = strlen(topic);
    o.buf = buf;
    o.cap = cap;
    put_header(&o, SUBSCRIBE_FIRST, 2 + 2 + topic_len + 1);
    put_u16(&o, packet_id);
    put_field(&o, topic, topic_len);
    put_u8(&o, (unsigned)qos & 3u);
    return finished(&o);
}

int mcpb_mqtt_encode_publish_head(uint8_t *buf, size_t cap, const char *topic, size_t payload_len,
                                  int qos, int retain, uint16_t packet_id)
{
    out o = {0, 0, 0, 0};
    size_t topic_len = strlen(topic);
    size_t remaining = 2 + topic_len + (qos != 0 ? 2 : 0);
    o.buf = buf;
    o.cap = cap;
    if (payload_len > MCPB_MQTT_LENGTH_MAX - remaining) {
        return MCPB_MQTT_PKT_SPACE;
    }
    put_header(&o, PUBLISH | (unsigned)(qos & 3) << 1 | (retain ? 1u : 0u), remaining + payload_len);
    put_field(&o, topic, topic_len);
    if (qos != 0) {
        put_u16(&o, packet_id);
    }
    return finished(&o);
}

int mcpb_mqtt_publish_layout(uint8_t first, uint32_t remaining, uint16_t topic_len, mcpb_mqtt_publish_view *view)
{
    size_t head;
    memset(view, 0, sizeof *view);
    if ((first & 0xF0u) != PUBLISH) {
        return MCPB_MQTT_PKT_MALFORMED;
    }
    view->qos = (first >> 1) & 3;
    view->retained = first & 1;
    if (view->qos > 1) {
        return MCPB_MQTT_PKT_MALFORMED; /* a QoS 1 subscription never receives QoS 2 (MQTT-3.8.4-6) */
    }
    head = 2u + topic_len + (view->qos != 0 ? 2u : 0u);
    if (head > remaining) {
        return MCPB_MQTT_PKT_MALFORMED;
    }
    view->topic_len = topic_len;
    view->payload_len = remaining - head;
    return 0;
}

int mcpb_mqtt_decode_publish(const uint8_t *pkt, size_t len, mcpb_mqtt_publish_view *view)
{
    uint32_t remaining;
    size_t used;
    size_t at;
    int rc;
    if (len == 0) {
        return MCPB_MQTT_PKT_SHORT;
    }
    rc = mcpb_mqtt_get_length(pkt + 1, len - 1, &remaining, &used);
    if (rc != 0) {
        return rc;
    }
    at = 1 + used;
    if (len - at < remaining) {
        return MCPB_MQTT_PKT_SHORT;
    }
    if (remaining < 2) {
        return MCPB_MQTT_PKT_MALFORMED;
    }
    rc = mcpb_mqtt_publish_layout(pkt[0], remaining, (uint16_t)(pkt[at] << 8 | pkt[at + 1]), view);
    if (rc != 0) {
        return rc;
    }
    view->topic = pkt + at + 2;
    at += 2 + view->topic_len;
    if (view->qos != 0) {
        view->packet_id = (uint16_t)(pkt[at] << 8 | pkt[at + 1]);
        at += 2;
    }
    view->payload = pkt + at;
    return 0;
}

int mcpb_mqtt_decode_connack(const uint8_t *pkt, size_t len)
{
    if (len >= 1 && pkt[0] != CONNACK) {
        return MCPB_MQTT_PKT_MALFORMED;
    }
    if (len >= 2 && pkt[1] != 2) {
        return MCPB_MQTT_PKT_MALFORMED;
    }
    if (len < 4) {
        return MCPB_MQTT_PKT_SHORT;
    }
    return pkt[3] <= 5 ? pkt[3] : MCPB_MQTT_PKT_MALFORMED;
}

int mcpb_mqtt_decode_suback(const uint8_t *pkt, size_t len, uint16_t packet_id)
{
    if (len >= 1 && pkt[0] != SUBACK) {
        return MCPB_MQTT_PKT_MALFORMED;
    }
    if (len >= 2 && pkt[1] != 3) {
        return MCPB_MQTT_PKT_MALFORMED; /* one topic, one return code */
    }
    if (len < 5) {
        return MCPB_MQTT_PKT_SHORT;
    }
    if ((uint16_t)(pkt[2] << 8 | pkt[3]) != packet_id || (pkt[4] > 2 && pkt[4] != 0x80)) {
        return MCPB_MQTT_PKT_MALFORMED;
    }
    return pkt[4];
}

/* ---- the socket client ---- */

static uint32_t now_ms(void *ctx)
{
    struct timespec ts;
    (void)ctx;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint32_t)((uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u);
}

static void log_line(void *ctx, int level, const char *message)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    char text[1024]; /* the core's lines (at most 223 bytes) whole, every byte escaped */
    (void)ctx;
    mcpb_log_text(text, sizeof(text), message);
    fprintf(stderr, "mcpb %s %s\n", names[level >= 0 && level <= 3 ? level : 3], text);
}

static void note(void *ctx, const char *message)
{
    log_line(ctx, MCPB_LOG_WARN, message);
}

static void sleep_ms(void *ctx, uint32_t ms)
{
    struct timespec ts;
    (void)ctx;
    ts.tv_sec = (time_t)(ms / 1000u);
    ts.tv_nsec = (long)(ms % 1000u) * 1000000L;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static uint32_t random32(void *ctx)
{
    mcpb_mqtt_posix *c = ctx;
    uint32_t x = c->random_state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    c->random_state = x;
    return x;
}

/* Waits for fd to be readable (or writable) for up to ms: 1 ready, 0 not yet, -1 failed. */
static int wait_fd(int fd, short events, uint32_t ms)
{
    struct pollfd p;
    int rc;
    p.fd = fd;
    p.events = events;
    p.revents = 0;
    do {
        rc = poll(&p, 1, ms > 0x7FFFFFFFu ? 0x7FFFFFFF : (int)ms);
    } while (rc < 0 && errno == EINTR);
    if (rc < 0) {
        return -1;
    }
    return rc > 0 ? 1 : 0;
}

/* wait_fd on the connection until deadline (a now_ms value); past it, 0. Whole packets and whole
 * operations have deadlines, not single reads: a broker that dribbles a byte now and then would
 * otherwise hold the caller's loop, and with it the pump's ticks and dead-man, for as long as it likes. */
static int wait_until(mcpb_mqtt_posix *c, short events, uint32_t deadline)
{
    int32_t left = (int32_t)(deadline - now_ms(c));
    return left > 0 ? wait_fd(c->fd, events, (uint32_t)left) : 0;
}

/* Reads exactly n bytes before deadline: 0, or -1 when the peer closed or was too slow. */
static int read_exact(mcpb_mqtt_posix *c, void *buf, size_t n, uint32_t deadline)
{
    uint8_t *at = buf;
    while (n > 0) {
        ssize_t got;
        if (wait_until(c, POLLIN, deadline) != 1) {
            return -1;
        }
        got = recv(c->fd, at, n, 0);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            return -1;
        }
        at += got;
        n -= (size_t)got;
    }
    return 0;
}

static int skip(mcpb_mqtt_posix *c, size_t n, uint32_t deadline)
{
    uint8_t sink[SKIP_SLICE];
    while (n > 0) {
        size_t part = n < sizeof sink ? n : sizeof sink;
        if (read_exact(c, sink, part, deadline) != 0) {
            return -1;
        }
        n -= part;
    }
    return 0;
}

/* Writes the parts as one message, all of it within the I/O timeout. */
static int write_parts(mcpb_mqtt_posix *c, struct iovec *parts, int count)
{
    uint32_t deadline = now_ms(c) + c->io_timeout_ms;
    while (count > 0) {
        struct msghdr msg;
        ssize_t sent;
        size_t done;
        if (parts->iov_len == 0) {
            parts++;
            count--;
            continue;
        }
        if (wait_until(c, POLLOUT, deadline) != 1) {
            return -1;
        }
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = parts;
        msg.msg_iovlen = (size_t)count;
        sent = sendmsg(c->fd, &msg, SEND_FLAGS);
        if (sent < 0 && errno == EINTR) {
            continue;
        }
        if (sent < 0) {
            return -1;
        }
        for (done = (size_t)sent; count > 0 && done >= parts->iov_len; count--, parts++) {
            done -= parts->iov_len;
        }
        if (count > 0) {
            parts->iov_base = (uint8_t *)parts->iov_base + done;
            parts->iov_len -= done;
        }
    }
    c->sent_ms = now_ms(c);
    return 0;
}

static int write_all(mcpb_mqtt_posix *c, const void *data, size_t len)
{
    struct iovec part;
    part.iov_base = (void *)(uintptr_t)data;
    part.iov_len = len;
    return write_parts(c, &part, 1);
}

/* The first byte and remaining length of the next packet (the first byte already read). */
static int read_length(mcpb_mqtt_posix *c, uint32_t *remaining, uint32_t deadline)
{
    uint8_t bytes[4];
    size_t used;
    size_t n;
    for (n = 0; n < sizeof bytes; n++) {
        int rc;
        if (read_exact(c, bytes + n, 1, deadline) != 0) {
            return -1;
        }
        rc = mcpb_mqtt_get_length(bytes, n + 1, remaining, &used);
        if (rc == 0) {
            return 0;
        }
    }
    return -1;
}

static int dial(mcpb_mqtt_posix *c, const char *host, uint16_t port)
{
    struct addrinfo hints;
    struct addrinfo *found = NULL;
    struct addrinfo *a;
    char service[6];
    int one = 1;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(service, sizeof service, "%u", (unsigned)port);
    if (getaddrinfo(host, service, &hints, &found) != 0) {
        return -1;
    }
    for (a = found; a != NULL; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        int flags;
        int error = 0;
        socklen_t error_len = sizeof error;
        if (fd < 0) {
            continue;
        }
        flags = fcntl(fd, F_GETFL, 0);
        fcntl(fd, F_SETFL, flags | O_NONBLOCK);
        if ((connect(fd, a->ai_addr, a->ai_addrlen) == 0 ||
             (errno == EINPROGRESS && wait_fd(fd, POLLOUT, c->connect_timeout_ms) == 1 &&
              getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &error_len) == 0 && error == 0))) {
            fcntl(fd, F_SETFL, flags);
            /* Answers are small and go out at once; Nagle would hold them for the peer's ACK. */
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            freeaddrinfo(found);
            return fd;
        }
        close(fd);
    }
    freeaddrinfo(found);
    return -1;
}

/* A failed read loses the link; one past its deadline is named, as the broker did not hang up. */
static int lost(mcpb_mqtt_posix *c, uint32_t deadline, const char *too_slow)
{
    if ((int32_t)(now_ms(c) - deadline) >= 0) {
        note(c, too_slow);
    }
    return MCPB_MQTT_E_LINK;
}

static void drop(mcpb_mqtt_posix *c)
{
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
}

static const char *refusal(int code)
{
    static const char *const why[] = {
        "accepted",
        "mqtt error: the broker refused the connection: unacceptable protocol version (CONNACK 1)",
        "mqtt error: the broker refused the connection: client id rejected (CONNACK 2)",
        "mqtt error: the broker refused the connection: server unavailable (CONNACK 3)",
        "mqtt error: the broker refused the connection: bad user name or password (CONNACK 4)",
        "mqtt error: the broker refused the connection: not authorized (CONNACK 5)",
    };
    return why[code];
}

static int port_connect(void *ctx, const mcpb_mqtt_connect_options *options)
{
    mcpb_mqtt_posix *c = ctx;
    uint8_t packet[600];
    uint8_t answer[4];
    int len = mcpb_mqtt_encode_connect(packet, sizeof packet, options);
    int code;
    uint32_t deadline;
    drop(c);
    if (len < 0) {
        note(c, "mqtt error: the CONNECT packet does not fit (client id, will or credential too long)");
        return MCPB_MQTT_E_CONFIG;
    }
    c->keepalive_s = options->keepalive_s;
    c->pinging = 0;
    c->fd = dial(c, options->host, options->port);
    if (c->fd < 0) {
        return MCPB_MQTT_E_LINK;
    }
    deadline = now_ms(c) + c->connect_timeout_ms;
    if (write_all(c, packet, (size_t)len) != 0 || read_exact(c, answer, sizeof answer, deadline) != 0) {
        /* past the deadline the connection is open: the broker said nothing, it did not hang up */
        note(c, (int32_t)(now_ms(c) - deadline) >= 0 ? SLOW_CONNACK : CLOSED_BEFORE_CONNACK);
        drop(c);
        return MCPB_MQTT_E_LINK;
    }
    code = mcpb_mqtt_decode_connack(answer, sizeof answer);
    if (code != 0) {
        note(c, code > 0 ? refusal(code) : "mqtt error: not an MQTT 3.1.1 broker: its answer to CONNECT is no CONNACK");
        drop(c);
        return MCPB_MQTT_E_REFUSED;
    }
    return MCPB_MQTT_OK;
}

static uint16_t next_packet_id(mcpb_mqtt_posix *c)
{
    c->packet_id = (uint16_t)(c->packet_id % 65535u + 1u); /* packet ids are 1 to 65535 */
    return c->packet_id;
}

static int port_subscribe(void *ctx, const char *topic, int qos)
{
    mcpb_mqtt_posix *c = ctx;
    uint8_t packet[MCPB_MQTT_TOPIC_MAX + 8];
    uint16_t id = next_packet_id(c);
    int len = mcpb_mqtt_encode_subscribe(packet, sizeof packet, id, topic, qos);
    uint32_t deadline;
    if (len < 0 || c->fd < 0 || write_all(c, packet, (size_t)len) != 0) {
        return MCPB_MQTT_E_LINK;
    }
    /* With a clean session nothing but the SUBACK comes first; anything else is skipped. All of it
     * within connect_timeout_ms: a broker sending other packets forever must not hold the loop. */
    deadline = now_ms(c) + c->connect_timeout_ms;
    for (;;) {
        uint8_t first;
        uint32_t remaining;
        uint8_t ack[5];
        int granted;
        if (read_exact(c, &first, 1, deadline) != 0 || read_length(c, &remaining, deadline) != 0 ||
            (first != SUBACK && skip(c, remaining, deadline) != 0) ||
            (first == SUBACK && (remaining != 3 || read_exact(c, ack + 2, 3, deadline) != 0))) {
            return lost(c, deadline, SLOW_SUBACK);
        }
        if (first != SUBACK) {
            continue;
        }
        ack[0] = SUBACK;
        ack[1] = 3;
        granted = mcpb_mqtt_decode_suback(ack, sizeof ack, id);
        if (granted == 0x80) {
            note(c, "mqtt error: the broker refused the subscription (check the ACL)");
            return MCPB_MQTT_E_REFUSED;
        }
        return granted < 0 ? MCPB_MQTT_E_LINK : MCPB_MQTT_OK;
    }
}

static int port_publish(void *ctx, const char *topic, const void *data, size_t len, int qos, int retain)
{
    mcpb_mqtt_posix *c = ctx;
    uint8_t head[MCPB_MQTT_TOPIC_MAX + 16];
    struct iovec parts[2];
    int head_len;
    if (c->fd < 0) {
        return MCPB_MQTT_E_LINK;
    }
    head_len = mcpb_mqtt_encode_publish_head(head, sizeof head, topic, len, qos, retain,
                                             qos != 0 ? next_packet_id(c) : 0);
    if (head_len < 0) {
        return MCPB_MQTT_E_SPACE;
    }
    /* QoS 1 is not waited for: its PUBACK arrives later and receive consumes it. */
    parts[0].iov_base = head;
    parts[0].iov_len = (size_t)head_len;
    parts[1].iov_base = (void *)(uintptr_t)data;
    parts[1].iov_len = len;
    return write_parts(c, parts, 2) == 0 ? MCPB_MQTT_OK : MCPB_MQTT_E_LINK;
}

/* The rest of a PUBLISH whose first byte and remaining length are read, before deadline. */
static int read_publish(mcpb_mqtt_posix *c, uint8_t first, uint32_t remaining, mcpb_mqtt_message *m,
                        uint32_t deadline)
{
    uint8_t field[2];
    mcpb_mqtt_publish_view view;
    size_t keep;
    if (remaining < 2 || read_exact(c, field, 2, deadline) != 0) {
        return lost(c, deadline, SLOW_PACKET);
    }
    if (mcpb_mqtt_publish_layout(first, remaining, (uint16_t)(field[0] << 8 | field[1]), &view) != 0) {
        note(c, "mqtt error: malformed PUBLISH from the broker");
        return MCPB_MQTT_E_LINK;
    }
    keep = view.topic_len < m->topic_cap ? view.topic_len : m->topic_cap;
    if (read_exact(c, m->topic, keep, deadline) != 0 || skip(c, view.topic_len - keep, deadline) != 0 ||
        (view.qos != 0 && read_exact(c, field, 2, deadline) != 0)) {
        return lost(c, deadline, SLOW_PACKET);
    }
    keep = view.payload_len < m->payload_cap ? view.payload_len : m->payload_cap;
    if (read_exact(c, m->payload, keep, deadline) != 0 || skip(c, view.payload_len - keep, deadline) != 0) {
        return lost(c, deadline, SLOW_PACKET);
    }
    m->topic_len = view.topic_len;
    m->payload_len = keep;
    m->size = view.payload_len;
    m->retained = view.retained;
    m->qos = view.qos;
    if (view.qos != 0) {
        uint8_t ack[4];
        ack[0] = PUBACK;
        ack[1] = 2;
        ack[2] = field[0];
        ack[3] = field[1];
        if (write_all(c, ack, sizeof ack) != 0) {
            return MCPB_MQTT_E_LINK;
        }
    }
    return MCPB_MQTT_MESSAGE;
}

/* How long until the keepalive wants something: a PINGREQ, or the end of the wait for its answer. */
static uint32_t until_keepalive(const mcpb_mqtt_posix *c, uint32_t now)
{
    uint32_t half = (uint32_t)c->keepalive_s * 500u;
    uint32_t since = now - (c->pinging ? c->pinged_ms : c->sent_ms);
    return since >= half ? 0 : half - since;
}

static int port_receive(void *ctx, mcpb_mqtt_message *message, uint32_t timeout_ms)
{
    mcpb_mqtt_posix *c = ctx;
    uint32_t start = now_ms(c);
    if (c->fd < 0) {
        return MCPB_MQTT_E_LINK;
    }
    for (;;) {
        uint32_t now = now_ms(c);
        uint32_t left = now - start >= timeout_ms ? 0 : timeout_ms - (now - start);
        uint32_t wait = left;
        uint8_t first;
        uint32_t remaining;
        uint32_t deadline;
        int ready;
        if (c->keepalive_s != 0 && until_keepalive(c, now) < wait) {
            wait = until_keepalive(c, now);
        }
        ready = wait_fd(c->fd, POLLIN, wait);
        if (ready < 0) {
            return MCPB_MQTT_E_LINK;
        }
        if (ready == 0) {
            now = now_ms(c);
            if (c->keepalive_s != 0 && until_keepalive(c, now) == 0) {
                uint8_t ping[2];
                if (c->pinging) {
                    note(c, "mqtt error: no answer from the broker to PINGREQ");
                    return MCPB_MQTT_E_LINK;
                }
                ping[0] = PINGREQ;
                ping[1] = 0;
                if (write_all(c, ping, sizeof ping) != 0) {
                    return MCPB_MQTT_E_LINK;
                }
                c->pinging = 1;
                c->pinged_ms = now;
            }
            if (now - start >= timeout_ms) {
                return 0;
            }
            continue;
        }
        /* The whole packet, from its first byte, within the I/O timeout (see wait_until). */
        deadline = now_ms(c) + c->io_timeout_ms;
        if (read_exact(c, &first, 1, deadline) != 0 || read_length(c, &remaining, deadline) != 0) {
            return lost(c, deadline, SLOW_PACKET);
        }
        c->pinging = 0; /* any packet shows the broker is there */
        if ((first & 0xF0u) == PUBLISH) {
            return read_publish(c, first, remaining, message, deadline);
        }
        /* PINGRESP, the PUBACKs of our answers, anything else unasked */
        if (skip(c, remaining, deadline) != 0) {
            return lost(c, deadline, SLOW_PACKET);
        }
        if (now_ms(c) - start >= timeout_ms) {
            return 0; /* a stream of such packets must not hold off the caller's ticks either */
        }
    }
}

static void port_close(void *ctx, int clean)
{
    mcpb_mqtt_posix *c = ctx;
    if (c->fd >= 0 && clean) {
        uint8_t bye[2];
        bye[0] = DISCONNECT;
        bye[1] = 0;
        (void)write_all(c, bye, sizeof bye);
    }
    drop(c);
}

void mcpb_mqtt_posix_port(mcpb_mqtt_posix *client, mcpb_mqtt_port *port)
{
    memset(client, 0, sizeof *client);
    client->fd = -1;
    client->io_timeout_ms = 3000;
    client->connect_timeout_ms = 10000;
    client->random_state = (now_ms(client) ^ (uint32_t)getpid() * 2654435761u) | 1u;
    memset(port, 0, sizeof *port);
    port->ctx = client;
    port->connect = port_connect;
    port->subscribe = port_subscribe;
    port->publish = port_publish;
    port->receive = port_receive;
    port->close = port_close;
    port->now_ms = now_ms;
    port->log = log_line;
    port->random32 = random32;
    port->sleep_ms = sleep_ms;
}

int mcpb_mqtt_read_password_file(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    size_t len;
    if (f == NULL || cap < 2) {
        if (f != NULL) {
            fclose(f);
        }
        return -1;
    }
    if (fgets(buf, (int)(cap > 0x7FFFFFFF ? 0x7FFFFFFF : cap), f) == NULL) {
        fclose(f);
        return -1;
    }
    len = strcspn(buf, "\r\n");
    if (buf[len] == '\0' && len == cap - 1) {
        /* the line filled buf: it fits only when it ends here */
        int next = fgetc(f);
        if (next != EOF && next != '\n' && next != '\r') {
            fclose(f);
            memset(buf, 0, cap);
            return MCPB_MQTT_PASSWORD_TOO_LONG;
        }
    }
    fclose(f);
    buf[len] = '\0';
    return (int)len;
}

int mcpb_mqtt_host_serve(const mcpb_mqtt_host_options *options)
{
    char in[HOST_FRAME];
    char answer[HOST_FRAME];
    mcpb_mqtt_posix client;
    mcpb_mqtt_port port;
    mcpb_mqtt_config config;
    mcpb_mqtt m;
    int rc;
    if (options->port <= 0 || options->port > 65535) {
        return MCPB_MQTT_E_CONFIG;
    }
    mcpb_mqtt_posix_port(&client, &port);
    mcpb_mqtt_config_defaults(&config);
    config.host = options->host;
    config.port = (uint16_t)options->port;
    config.slot = options->slot;
    config.username = options->user;
    config.password = options->password;
    config.hello = options->hello;
    rc = mcpb_mqtt_init(&m, &config, &port, in, sizeof in, answer, sizeof answer);
    if (rc != MCPB_MQTT_OK) {
        return rc; /* init logged what it cannot use */
    }
    return mcpb_mqtt_run(&m, options->handler, options->handler_ctx, options->tick, options->tick_ctx,
                         options->stop);
}

int mcpb_mqtt_host_run(const char *host, int port, const char *slot, const char *user, const char *password,
                       mcpb_handler_fn handler, void *handler_ctx, void (*tick)(void *, uint32_t),
                       void *tick_ctx, volatile int *stop)
{
    mcpb_mqtt_host_options options;
    memset(&options, 0, sizeof options);
    options.host = host;
    options.port = port;
    options.slot = slot;
    options.user = user;
    options.password = password;
    options.handler = handler;
    options.handler_ctx = handler_ctx;
    options.tick = tick;
    options.tick_ctx = tick_ctx;
    options.stop = stop;
    return mcpb_mqtt_host_serve(&options);
}
