/* The JSON scanner: spans of values and members, string decoding and encoding, ids in a head, and the
 * small formatter that writes them. */
#include "mcpb/json_scan.h"

#include <stdint.h>
#include <string.h>

#include "client_internal.h"
#include "mcpb/features.h"

static size_t skip_space(const char *json, size_t len, size_t at)
{
    while (at < len && (json[at] == ' ' || json[at] == '\t' || json[at] == '\n' || json[at] == '\r')) {
        at++;
    }
    return at;
}

/* Past the character c at json[at] and the whitespace after it; 0 when json[at] is not c. */
static size_t past(const char *json, size_t len, size_t at, char c)
{
    return at < len && json[at] == c ? skip_space(json, len, at + 1) : 0;
}

/* The end of the string literal starting at json[at] (a quote), or 0. */
static size_t skip_string(const char *json, size_t len, size_t at)
{
    at++;
    while (at < len) {
        unsigned char c = (unsigned char)json[at];
        if (c == '"') {
            return at + 1;
        }
        if (c < 0x20) {
            return 0;
        }
        at += c == '\\' ? 2 : 1;
    }
    return 0;
}

size_t mcpb_json_skip_value(const char *json, size_t len, size_t at)
{
    char closers[MCPB_JSON_MAX_DEPTH]; /* what each open container ends with: '{' + 2, '[' + 2 */
    unsigned depth = 0;
    do {
        char c;
        at = skip_space(json, len, at);
        if (at >= len) {
            return 0;
        }
        c = json[at];
        if (c == '"') {
            at = skip_string(json, len, at);
            if (at == 0) {
                return 0;
            }
            continue;
        }
        if (c == '{' || c == '[') {
            if (depth == MCPB_JSON_MAX_DEPTH) {
                return 0;
            }
            closers[depth++] = (char)(c + 2);
        } else if (c == '}' || c == ']') {
            if (depth == 0 || closers[--depth] != c) {
                return 0;
            }
        } else if (c == ',' || c == ':') {
            if (depth == 0) {
                return 0;
            }
        } else {
            /* a scalar (number, true, false, null): its characters, at least one */
            size_t start = at;
            while (at < len && (((c = json[at]) >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '-' ||
                                c == '+' || c == '.' || c == 'E')) {
                at++;
            }
            if (at == start) {
                return 0;
            }
            continue;
        }
        at++;
    } while (depth > 0);
    return at;
}

int mcpb_json_member(const char *json, size_t len, const char *key, size_t *value_at, size_t *value_len)
{
    size_t key_len = strlen(key);
    size_t at = past(json, len, skip_space(json, len, 0), '{');
    if (at == 0) {
        return -1;
    }
    if (at < len && json[at] == '}') {
        return 0;
    }
    for (;;) {
        size_t key_at = at, key_end = at < len && json[at] == '"' ? skip_string(json, len, at) : 0, end;
        if (key_end == 0 || (at = past(json, len, skip_space(json, len, key_end), ':')) == 0 ||
            (end = mcpb_json_skip_value(json, len, at)) == 0) {
            return -1;
        }
        if (key_end - key_at - 2 == key_len && memcmp(json + key_at + 1, key, key_len) == 0) {
            *value_at = at;
            *value_len = end - at;
            return 1;
        }
        at = skip_space(json, len, end);
        if (at < len && json[at] == '}') {
            return 0;
        }
        at = past(json, len, at, ',');
        if (at == 0) {
            return -1;
        }
    }
}

/* The four hex digits at json[at] (inside a checked string, so no control bytes), or -1. */
static long read_hex4(const char *json, size_t len, size_t at)
{
    long value = 0;
    size_t end = at + 4;
    if (end > len) {
        return -1;
    }
    for (; at < end; at++) {
        int c = json[at] | 0x20; /* lower case; digits keep their value */
        int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (digit < 0) {
            return -1;
        }
        value = value * 16 + digit;
    }
    return value;
}

int mcpb_json_string(const char *json, size_t len, char *out, size_t out_cap)
{
    static const char escapes[] = "\"\"\\\\//b\bf\fn\nr\rt\t"; /* a letter, what it stands for */
    size_t at = 1, n = 0;
    if (len < 2 || json[0] != '"' || skip_string(json, len, 0) != len || out_cap == 0) {
        return -1;
    }
    while (at < len - 1) {
        unsigned long cp = (unsigned char)json[at++];
        size_t count = 1, i;
        if (cp == '\\' && json[at] == 'u') {
            long high = read_hex4(json, len - 1, at + 1), low;
            at += 5;
            if (high >= 0xD800 && high < 0xDC00) { /* a surrogate pair */
                low = at + 1 < len - 1 && json[at] == '\\' && json[at + 1] == 'u' ? read_hex4(json, len - 1, at + 2)
                                                                                 : -1;
                if (low < 0xDC00 || low > 0xDFFF) {
                    return -1;
                }
                at += 6;
                high = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00);
            } else if (high <= 0 || (high >= 0xDC00 && high <= 0xDFFF)) { /* no NUL inside: see json_scan.h */
                return -1;
            }
            cp = (unsigned long)high;
            count = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        } else if (cp == '\\') {
            const char *hit = strchr(escapes, json[at++]); /* json[at] is not the closing quote's NUL */
            if (hit == NULL || (hit - escapes) % 2 != 0) {
                return -1;
            }
            cp = (unsigned char)hit[1];
        }
        if (n + count >= out_cap) {
            return -1;
        }
        for (i = count - 1; i > 0; i--) { /* UTF-8 continuation bytes, last first */
            out[n + i] = (char)(0x80 | (cp & 0x3F));
            cp >>= 6;
        }
        out[n] = (char)(count == 1 ? cp : ((0xFFu << (8 - count)) & 0xFFu) | cp);
        n += count;
    }
    out[n] = '\0';
    return (int)n;
}

int mcpb__json_text(const char *literal, char *out, size_t out_cap)
{
    size_t n = 0;
    if (*literal != '"') {
        return -1;
    }
    while (*++literal != '\0' && *literal != '"') {
        literal += *literal == '\\' && literal[1] != '\0';
        if (n + 1 >= out_cap) {
            out[n] = '\0';
            return -1;
        }
        out[n++] = *literal;
    }
    out[n] = '\0';
    return (int)n;
}

int mcpb_json_put_raw(char *out, size_t out_cap, size_t *at, const char *text, size_t len)
{
    if (*at > out_cap || out_cap - *at < len) {
        return -1;
    }
    memcpy(out + *at, text, len);
    *at += len;
    return 0;
}

static size_t put_char(char *out, size_t limit, size_t n, char c)
{
    if (n < limit) {
        out[n] = c;
    }
    return n + 1;
}

/* Writes text at out[n] as `how` says ('s' as it is, 'j' as a JSON string literal, 'P' percent-encoded
 * as a URL path segment) as far as limit allows; returns where the whole text ends, so that a caller
 * learns its length also when it was cut. */
static size_t put_text(char *out, size_t limit, size_t n, const char *text, char how)
{
    static const char special[] = "\"\\\n\r\t\b\f";
    static const char letter[] = "\"\\nrtbf";
    const unsigned char *c;
    int quoted = how == 'j';
    if (quoted) {
        n = put_char(out, limit, n, '"');
    }
    for (c = (const unsigned char *)text; *c != 0; c++) {
        const char *hit = quoted ? strchr(special, *c) : NULL;
        unsigned char low = *c | 0x20;
        char piece[6];
        size_t len = 1, i;
        piece[0] = (char)*c;
        if (hit != NULL) {
            piece[0] = '\\';
            piece[1] = letter[hit - special];
            len = 2;
        } else if (quoted && *c < 0x20) {
            memcpy(piece, "\\u00", 4);
            len = 6;
        } else if (MCPB_WITH_WEBSOCKET && how == 'P' && (low < 'a' || low > 'z') && (*c < '0' || *c > '9') &&
                   strchr("-._~", *c) == NULL) {
            /* not unreserved (RFC 3986): percent-encoded */
            piece[0] = '%';
            len = 3;
        }
        if (len > 2) { /* \u00XX or %XX: the byte's two hex digits last */
            piece[len - 2] = MCPB_HEX_DIGITS[*c >> 4];
            piece[len - 1] = MCPB_HEX_DIGITS[*c & 15];
        }
        for (i = 0; i < len; i++) {
            n = put_char(out, limit, n, piece[i]);
        }
    }
    return quoted ? put_char(out, limit, n, '"') : n;
}

int mcpb_json_put_string(char *out, size_t out_cap, size_t *at, const char *text)
{
    size_t n = put_text(out, out_cap, *at, text, 'j');
    if (n > out_cap) {
        return -1;
    }
    *at = n;
    return 0;
}

size_t mcpb_json_id_in(const char *head, size_t len, char *out, size_t out_cap)
{
    size_t at, end;
    for (at = 0; at + 4 <= len && memcmp(head + at, "\"id\"", 4) != 0; at++) {
    }
    at = past(head, len, skip_space(head, len, at + 4), ':');
    if (at == 0) {
        return 0;
    }
    if (at < len && head[at] == '"') {
        end = skip_string(head, len, at); /* 0 when cut */
    } else {
        end = at + (at < len && head[at] == '-');
        while (end < len && head[end] >= '0' && head[end] <= '9') {
            end++;
        }
        /* cut off by the end of the head, a fraction, or not a number: not the request's id */
        if (end == len || head[end - 1] < '0' || head[end - 1] > '9' || head[end] == '\0' ||
            strchr(" \t\r\n,}", head[end]) == NULL) {
            return 0;
        }
    }
    if (end <= at || end - at + 1 > out_cap) {
        return 0;
    }
    memcpy(out, head + at, end - at);
    out[end - at] = '\0';
    return end - at;
}

size_t mcpb_vformat(char *out, size_t cap, const char *format, va_list args)
{
    size_t n = 0, limit = cap > 0 ? cap - 1 : 0;
    for (; *format != '\0'; format++) {
        char digits[24];
        char *p = digits + sizeof(digits) - 1;
        *p = '\0';
        if (*format != '%') {
            n = put_char(out, limit, n, *format);
        } else if (*++format == 's' || *format == 'j' || *format == 'P') {
            const char *text = va_arg(args, const char *);
            n = text != NULL ? put_text(out, limit, n, text, *format) : n;
        } else {
            unsigned long value; /* 32 bits on the device: its own division, nothing from libgcc */
            int negative = 0;
            if (*format == 'l') {
                format++; /* %ld and %lu; plain int and unsigned are widened */
                value = *format == 'd' ? (unsigned long)va_arg(args, long) : va_arg(args, unsigned long);
            } else {
                value = *format == 'd' ? (unsigned long)(long)va_arg(args, int) : va_arg(args, unsigned);
            }
            if (*format == 'd' && (long)value < 0) {
                negative = 1;
                value = 0u - value;
            }
            do {
                *--p = (char)('0' + (int)(value % 10u));
                value /= 10u;
            } while (value != 0);
            if (negative) {
                *--p = '-';
            }
            n = put_text(out, limit, n, p, 's');
        }
    }
    if (cap > 0) {
        out[n < cap ? n : cap - 1] = '\0';
    }
    return n;
}

size_t mcpb_format(char *out, size_t cap, const char *format, ...)
{
    va_list args;
    size_t n;
    va_start(args, format);
    n = mcpb_vformat(out, cap, format, args);
    va_end(args);
    return n;
}

size_t mcpb_format_fit(char *out, size_t out_cap, const char *format, ...)
{
    va_list args;
    size_t n;
    va_start(args, format);
    n = mcpb_vformat(out, out_cap, format, args);
    va_end(args);
    return n < out_cap ? n : 0;
}
