/* The POSIX port: a TCP connection (getaddrinfo, TCP_NODELAY, bounded connect) or a serial device
 * opened raw with termios, its stale input dropped; clock_gettime(CLOCK_MONOTONIC); one line per log
 * to stderr, control bytes escaped; getrandom. */
#define _DEFAULT_SOURCE 1
#define _GNU_SOURCE 1

#include "mcpb_port_posix.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

static speed_t speed_for(unsigned baud)
{
    switch (baud) {
    case 9600: return B9600;
    case 19200: return B19200;
    case 38400: return B38400;
    case 57600: return B57600;
    case 230400: return B230400;
    case 460800: return B460800;
    case 921600: return B921600;
    default: return B115200;
    }
}

static int open_serial(mcpb_posix_t *posix, const char *path)
{
    struct termios tio;
    int lines = TIOCM_DTR | TIOCM_RTS;
    int fd = open(path, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    /* Both modem lines de-asserted in one call, so opening never resets a board through a devkit's
     * auto-reset circuit; a PTY has no modem lines and refuses (ENOTTY), which is fine. */
    (void)ioctl(fd, TIOCMBIC, &lines);
    if (tcgetattr(fd, &tio) == 0) {
        cfmakeraw(&tio);
        tio.c_cflag |= CLOCAL | CREAD;
        tio.c_cc[VMIN] = 0;
        tio.c_cc[VTIME] = 0;
        cfsetispeed(&tio, speed_for(posix->baud));
        cfsetospeed(&tio, speed_for(posix->baud));
        if (tcsetattr(fd, TCSANOW, &tio) != 0) {
            close(fd);
            return -1;
        }
        /* What the line held before this open is stale (frames the gateway wrote while the board did
         * not listen, such as a refusal of the last link's register frame): drop it, as a UART
         * driver installed afresh does on a board. */
        (void)tcflush(fd, TCIFLUSH);
    }
    posix->fd = fd;
    posix->is_serial = 1;
    return 0;
}

/* A non-blocking connect bounded by connect_ms, then back to blocking-free use through poll(). */
static int connect_bounded(int fd, const struct sockaddr *addr, socklen_t len, unsigned timeout_ms)
{
    struct pollfd waiter;
    int error = 0;
    socklen_t error_len = sizeof(error);
    if (connect(fd, addr, len) == 0) {
        return 0;
    }
    if (errno != EINPROGRESS) {
        return -1;
    }
    waiter.fd = fd;
    waiter.events = POLLOUT;
    if (poll(&waiter, 1, (int)timeout_ms) <= 0) {
        return -1;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &error_len) != 0 || error != 0) {
        return -1;
    }
    return 0;
}

static int open_tcp(mcpb_posix_t *posix, const char *host, uint16_t port)
{
    struct addrinfo hints, *found = NULL, *each;
    char service[8];
    int fd = -1, one = 1;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(service, sizeof(service), "%u", (unsigned)port);
    if (getaddrinfo(host, service, &hints, &found) != 0) {
        return -1;
    }
    for (each = found; each != NULL; each = each->ai_next) {
        fd = socket(each->ai_family, each->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, each->ai_protocol);
        if (fd < 0) {
            continue;
        }
        if (connect_bounded(fd, each->ai_addr, each->ai_addrlen, posix->connect_ms) == 0) {
            break;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(found);
    if (fd < 0) {
        return -1;
    }
    /* Small answers go out at once instead of waiting for the peer's delayed ACK. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    posix->fd = fd;
    posix->is_serial = 0;
    return 0;
}

static void posix_close(void *ctx)
{
    mcpb_posix_t *posix = (mcpb_posix_t *)ctx;
    if (posix->fd >= 0) {
        close(posix->fd);
        posix->fd = -1;
    }
}

static int posix_connect(void *ctx, const char *host, uint16_t port)
{
    mcpb_posix_t *posix = (mcpb_posix_t *)ctx;
    posix_close(ctx);
    return port == 0 ? open_serial(posix, host) : open_tcp(posix, host, port);
}

static int posix_send(void *ctx, const uint8_t *data, size_t len)
{
    mcpb_posix_t *posix = (mcpb_posix_t *)ctx;
    while (len > 0) {
        ssize_t wrote;
        if (posix->fd < 0) {
            return -1;
        }
        wrote = posix->is_serial ? write(posix->fd, data, len) : send(posix->fd, data, len, MSG_NOSIGNAL);
        if (wrote > 0) {
            data += wrote;
            len -= (size_t)wrote;
            continue;
        }
        if (wrote < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            struct pollfd waiter;
            waiter.fd = posix->fd;
            waiter.events = POLLOUT;
            /* a peer that stopped reading for 5 s is as good as gone */
            if (poll(&waiter, 1, 5000) <= 0) {
                return -1;
            }
            continue;
        }
        return -1;
    }
    return 0;
}

static int posix_recv(void *ctx, uint8_t *buf, size_t cap, uint32_t timeout_ms)
{
    mcpb_posix_t *posix = (mcpb_posix_t *)ctx;
    struct pollfd waiter;
    ssize_t got;
    int ready;
    if (posix->fd < 0) {
        return -1;
    }
    waiter.fd = posix->fd;
    waiter.events = POLLIN;
    ready = poll(&waiter, 1, (int)timeout_ms);
    if (ready == 0 || (ready < 0 && errno == EINTR)) {
        return 0;
    }
    if (ready < 0) {
        return -1;
    }
    if (cap > 0x7FFFFFFF) {
        cap = 0x7FFFFFFF;
    }
    got = read(posix->fd, buf, cap);
    if (got > 0) {
        return (int)got;
    }
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        return 0;
    }
    /* 0 on a socket is the peer's FIN; a PTY whose other side closed answers EIO or POLLHUP */
    return -1;
}

static uint32_t posix_now_ms(void *ctx)
{
    struct timespec now;
    (void)ctx;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint32_t)((uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u);
}

static void posix_log(void *ctx, int level, const char *message)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    mcpb_posix_t *posix = (mcpb_posix_t *)ctx;
    char text[1024]; /* the core's lines (at most 223 bytes) whole, every byte escaped */
    if (level > posix->log_level || level < 0 || level > MCPB_LOG_DEBUG) {
        return;
    }
    mcpb_log_text(text, sizeof(text), message);
    fprintf(stderr, "%s %s: %s\n", posix->log_name, names[level], text);
}

static uint32_t posix_random32(void *ctx)
{
    uint32_t bits = 0;
    (void)ctx;
    if (getrandom(&bits, sizeof(bits), 0) != (ssize_t)sizeof(bits)) {
        FILE *urandom = fopen("/dev/urandom", "rb");
        if (urandom != NULL) {
            if (fread(&bits, sizeof(bits), 1, urandom) != 1) {
                bits = 0;
            }
            fclose(urandom);
        }
        if (bits == 0) {
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            bits = (uint32_t)now.tv_nsec ^ (uint32_t)getpid() * 2654435761u;
        }
    }
    return bits;
}

void mcpb_posix_port_init(mcpb_port_t *port, mcpb_posix_t *posix)
{
    posix->fd = -1;
    posix->is_serial = 0;
    if (posix->baud == 0) {
        posix->baud = 115200;
    }
    if (posix->connect_ms == 0) {
        posix->connect_ms = 5000;
    }
    if (posix->log_name == NULL) {
        posix->log_name = "mcpb";
    }
    port->ctx = posix;
    port->connect = posix_connect;
    port->send = posix_send;
    port->recv = posix_recv;
    port->close = posix_close;
    port->now_ms = posix_now_ms;
    port->log = posix_log;
    port->random32 = posix_random32;
}
