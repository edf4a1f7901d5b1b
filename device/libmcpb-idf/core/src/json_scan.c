/* The JSON scanner: spans of values and members, string decoding and encoding, ids in a head. */
#include "mcpb/json_scan.h"

#include <stdint.h>
#include <string.h>

static size_t skip_space(const char *json, size_t len, size_t at)
{
    while (at < len && (json[at] == ' ' || json[at] == '\t' || json[at] == '\n' || json[at] == '\r')) {
        at++;
    }
    return at;
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

static int is_scalar_char(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '-' || c == '+' || c == '.' ||
           c == 'E';
}

size_t mcpb_json_skip_value(const char *json, size_t len, size_t at)
{
    uint64_t is_array = 0; /* one bit per open container: 1 array, 0 object */
    unsigned depth = 0;
    at = skip_space(json, len, at);
    if (at >= len) {
        return 0;
    }
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
        } else if (c == '{' || c == '[') {
            if (depth == MCPB_JSON_MAX_DEPTH) {
                return 0;
            }
            is_array = (is_array << 1) | (c == '[' ? 1u : 0u);
            depth++;
            at++;
        } else if (c == '}' || c == ']') {
            if (depth == 0 || (int)(is_array & 1u) != (c == ']')) {
                return 0;
            }
            is_array >>= 1;
            depth--;
            at++;
        } else if (c == ',' || c == ':') {
            if (depth == 0) {
                return 0;
            }
            at++;
        } else if (is_scalar_char(c)) {
            while (at < len && is_scalar_char(json[at])) {
                at++;
            }
        } else {
            return 0;
        }
    } while (depth > 0);
    return at;
}

int mcpb_json_member(const char *json, size_t len, const char *key, size_t *value_at, size_t *value_len)
{
    size_t key_len = strlen(key);
    size_t at = skip_space(json, len, 0);
    if (at >= len || json[at] != '{') {
        return -1;
    }
    at = skip_space(json, len, at + 1);
    if (at < len && json[at] == '}') {
        return 0;
    }
    while (at < len) {
        size_t key_start = at, key_end, end;
        if (json[at] != '"') {
            return -1;
        }
        key_end = skip_string(json, len, at);
        if (key_end == 0) {
            return -1;
        }
        at = skip_space(json, len, key_end);
        if (at >= len || json[at] != ':') {
            return -1;
        }
        at = skip_space(json, len, at + 1);
        end = mcpb_json_skip_value(json, len, at);
        if (end == 0) {
            return -1;
        }
        if (key_end - key_start - 2 == key_len && memcmp(json + key_start + 1, key, key_len) == 0) {
            *value_at = at;
            *value_len = end - at;
            return 1;
        }
        at = skip_space(json, len, end);
        if (at < len && json[at] == '}') {
            return 0;
        }
        if (at >= len || json[at] != ',') {
            return -1;
        }
        at = skip_space(json, len, at + 1);
    }
    return -1;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

static long read_hex4(const char *json, size_t len, size_t at)
{
    long value = 0;
    size_t i;
    if (at + 4 > len) {
        return -1;
    }
    for (i = 0; i < 4; i++) {
        int digit = hex_value(json[at + i]);
        if (digit < 0) {
            return -1;
        }
        value = value * 16 + digit;
    }
    return value;
}

/* Appends a code point as UTF-8; 0 on success. */
static int put_utf8(char *out, size_t out_cap, size_t *n, unsigned long cp)
{
    size_t count = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4, i;
    if (*n + count >= out_cap) {
        return -1;
    }
    for (i = count - 1; i > 0; i--) {
        out[*n + i] = (char)(0x80 | (cp & 0x3F));
        cp >>= 6;
    }
    out[*n] = (char)(count == 1 ? cp : ((0xFFu << (8 - count)) & 0xFFu) | cp);
    *n += count;
    return 0;
}

int mcpb_json_string(const char *json, size_t len, char *out, size_t out_cap)
{
    size_t at = 1, n = 0;
    if (len < 2 || json[0] != '"' || skip_string(json, len, 0) != len || out_cap == 0) {
        return -1;
    }
    while (at < len - 1) {
        char c = json[at++];
        if (c != '\\') {
            if (n + 1 >= out_cap) {
                return -1;
            }
            out[n++] = c;
            continue;
        }
        c = json[at++];
        if (c == 'u') {
            long cp = read_hex4(json, len - 1, at);
            if (cp < 0) {
                return -1;
            }
            at += 4;
            if (cp >= 0xD800 && cp < 0xDC00) {
                long low;
                if (at + 1 >= len - 1 || json[at] != '\\' || json[at + 1] != 'u') {
                    return -1;
                }
                low = read_hex4(json, len - 1, at + 2);
                if (low < 0xDC00 || low > 0xDFFF) {
                    return -1;
                }
                at += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return -1;
            }
            if (put_utf8(out, out_cap, &n, (unsigned long)cp) < 0) {
                return -1;
            }
            continue;
        }
        {
            static const char escapes[] = "\"\"\\\\//b\bf\fn\nr\rt\t"; /* a letter, what it stands for */
            const char *hit = c != 0 ? strchr(escapes, c) : NULL;
            if (hit == NULL || (hit - escapes) % 2 != 0) {
                return -1;
            }
            c = hit[1];
        }
        if (n + 1 >= out_cap) {
            return -1;
        }
        out[n++] = c;
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

int mcpb_json_put_string(char *out, size_t out_cap, size_t *at, const char *text)
{
    static const char hex[] = "0123456789abcdef";
    static const char special[] = "\"\\\n\r\t\b\f";
    static const char letter[] = "\"\\nrtbf";
    size_t n = *at;
    const unsigned char *c;
    if (n >= out_cap) {
        return -1;
    }
    out[n++] = '"';
    for (c = (const unsigned char *)text; *c != 0; c++) {
        const char *hit = strchr(special, *c);
        char escaped[6];
        size_t len = 1, i;
        escaped[0] = (char)*c;
        if (hit != NULL) {
            escaped[0] = '\\';
            escaped[1] = letter[hit - special];
            len = 2;
        } else if (*c < 0x20) {
            memcpy(escaped, "\\u00", 4);
            escaped[4] = hex[*c >> 4];
            escaped[5] = hex[*c & 15];
            len = 6;
        }
        if (out_cap - n < len) {
            return -1;
        }
        for (i = 0; i < len; i++) {
            out[n++] = escaped[i];
        }
    }
    if (n >= out_cap) {
        return -1;
    }
    out[n++] = '"';
    *at = n;
    return 0;
}

size_t mcpb_json_id_in(const char *head, size_t len, char *out, size_t out_cap)
{
    size_t at, end;
    const char *found = NULL;
    for (at = 0; at + 4 <= len; at++) {
        if (memcmp(head + at, "\"id\"", 4) == 0) {
            found = head + at;
            break;
        }
    }
    if (found == NULL) {
        return 0;
    }
    at = skip_space(head, len, at + 4);
    if (at >= len || head[at] != ':') {
        return 0;
    }
    at = skip_space(head, len, at + 1);
    if (at >= len) {
        return 0;
    }
    if (head[at] == '"') {
        end = skip_string(head, len, at);
        if (end == 0) {
            return 0;
        }
    } else {
        end = at;
        if (end < len && head[end] == '-') {
            end++;
        }
        while (end < len && head[end] >= '0' && head[end] <= '9') {
            end++;
        }
        /* cut off by the end of the head, a fraction, or not a number: not the request's id */
        if (end == at || head[end - 1] == '-' || end == len ||
            strchr(" \t\r\n,}", head[end]) == NULL || head[end] == '\0') {
            return 0;
        }
    }
    if (end - at + 1 > out_cap) {
        return 0;
    }
    memcpy(out, head + at, end - at);
    out[end - at] = '\0';
    return end - at;
}

size_t mcpb_vformat(char *out, size_t cap, const char *format, va_list args)
{
    size_t n = 0;
    for (; *format != '\0'; format++) {
        char digits[24];
        char *p = digits + sizeof(digits) - 1;
        const char *piece;
        *p = '\0';
        if (*format != '%') {
            *--p = *format;
            piece = p;
        } else if (*++format == 's') {
            piece = va_arg(args, const char *);
        } else {
            unsigned long long value;
            int negative = 0, longs = 0;
            while (*format == 'l') {
                format++;
                longs++;
            }
            if (*format == 'd') {
                long long v = longs == 0   ? va_arg(args, int)
                              : longs == 1 ? va_arg(args, long)
                                           : va_arg(args, long long);
                negative = v < 0;
                value = negative ? 0u - (unsigned long long)v : (unsigned long long)v;
            } else if (longs == 0) {
                value = va_arg(args, unsigned);
            } else if (longs == 1) {
                value = va_arg(args, unsigned long);
            } else {
                value = va_arg(args, unsigned long long);
            }
            do {
                *--p = (char)('0' + (int)(value % 10u));
                value /= 10u;
            } while (value != 0);
            if (negative) {
                *--p = '-';
            }
            piece = p;
        }
        for (; *piece != '\0'; piece++, n++) {
            if (n + 1 < cap) {
                out[n] = *piece;
            }
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
