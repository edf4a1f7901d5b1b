/* Reading one JSON text in place (json_scan.h). */
#include "json_scan.h"

#include <string.h>

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
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

static size_t skip_space(const char *s, size_t n, size_t at)
{
    while (at < n && is_space(s[at])) {
        at++;
    }
    return at;
}

/* Length of a valid UTF-8 sequence at s[at] (lone surrogates pass, as CPython's surrogatepass), or 0. */
static size_t utf8_length(const char *s, size_t n, size_t at)
{
    const unsigned char *u = (const unsigned char *)s + at;
    size_t left = n - at;
    unsigned char lo = 0x80, hi = 0xBF;
    size_t len, i;
    if (u[0] >= 0xC2 && u[0] <= 0xDF) {
        len = 2;
    } else if (u[0] >= 0xE0 && u[0] <= 0xEF) {
        len = 3;
        if (u[0] == 0xE0) {
            lo = 0xA0;
        }
    } else if (u[0] >= 0xF0 && u[0] <= 0xF4) {
        len = 4;
        if (u[0] == 0xF0) {
            lo = 0x90;
        } else if (u[0] == 0xF4) {
            hi = 0x8F;
        }
    } else {
        return 0;
    }
    if (left < len || u[1] < lo || u[1] > hi) {
        return 0;
    }
    for (i = 2; i < len; i++) {
        if (u[i] < 0x80 || u[i] > 0xBF) {
            return 0;
        }
    }
    return len;
}

/* End of the string starting at s[at] (the opening quote), or 0 when it is not valid. */
static size_t scan_string(const char *s, size_t n, size_t at)
{
    at++;
    while (at < n) {
        unsigned char c = (unsigned char)s[at];
        if (c == '"') {
            return at + 1;
        }
        if (c < 0x20) {
            return 0;
        }
        if (c == '\\') {
            if (at + 1 >= n) {
                return 0;
            }
            c = (unsigned char)s[at + 1];
            if (c == 'u') {
                size_t i;
                if (at + 6 > n) {
                    return 0;
                }
                for (i = 2; i < 6; i++) {
                    if (hex_value(s[at + i]) < 0) {
                        return 0;
                    }
                }
                at += 6;
            } else if (c != 0 && strchr("\"\\/bfnrt", c) != NULL) {
                at += 2;
            } else {
                return 0;
            }
        } else if (c >= 0x80) {
            size_t len = utf8_length(s, n, at);
            if (len == 0) {
                return 0;
            }
            at += len;
        } else {
            at++;
        }
    }
    return 0;
}

static size_t scan_digits(const char *s, size_t n, size_t at)
{
    while (at < n && is_digit(s[at])) {
        at++;
    }
    return at;
}

static int starts_with(const char *s, size_t n, size_t at, const char *word)
{
    size_t len = strlen(word);
    return n - at >= len && memcmp(s + at, word, len) == 0;
}

/* End of the number or literal starting at s[at], or 0. */
static size_t scan_scalar(const char *s, size_t n, size_t at)
{
    static const char *const words[] = {"true", "false", "null", "NaN", "Infinity", "-Infinity"};
    size_t i;
    for (i = 0; i < sizeof words / sizeof words[0]; i++) {
        if (starts_with(s, n, at, words[i])) {
            return at + strlen(words[i]);
        }
    }
    if (s[at] == '-') {
        at++;
    }
    if (at >= n || !is_digit(s[at])) {
        return 0;
    }
    at = s[at] == '0' ? at + 1 : scan_digits(s, n, at);
    if (at + 1 < n && s[at] == '.' && is_digit(s[at + 1])) {
        at = scan_digits(s, n, at + 1);
    }
    if (at < n && (s[at] == 'e' || s[at] == 'E')) {
        size_t exp = at + 1;
        if (exp < n && (s[exp] == '+' || s[exp] == '-')) {
            exp++;
        }
        if (exp < n && is_digit(s[exp])) {
            at = scan_digits(s, n, exp);
        }
    }
    return at;
}

/* The container stack as bits: 1 for an object, 0 for an array. */
static void push(unsigned char *stack, size_t depth, int object)
{
    if (object) {
        stack[depth / 8] |= (unsigned char)(1u << (depth % 8));
    } else {
        stack[depth / 8] &= (unsigned char)~(1u << (depth % 8));
    }
}

static int top_is_object(const unsigned char *stack, size_t depth)
{
    return (stack[(depth - 1) / 8] >> ((depth - 1) % 8)) & 1u;
}

/* After "," or "{" in an object: a key, a colon; returns the position of the value or 0. */
static size_t scan_key(const char *s, size_t n, size_t at)
{
    at = skip_space(s, n, at);
    if (at >= n || s[at] != '"') {
        return 0;
    }
    at = scan_string(s, n, at);
    if (at == 0) {
        return 0;
    }
    at = skip_space(s, n, at);
    if (at >= n || s[at] != ':') {
        return 0;
    }
    return at + 1;
}

int p1_json_parse(const char *text, size_t len, json_span_t *root)
{
    unsigned char stack[JSON_MAX_DEPTH / 8];
    size_t depth = 0, at = 0, start;
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) {
        at = 3; /* json.loads takes bytes with a UTF-8 BOM */
    }
    at = skip_space(text, len, at);
    start = at;
    for (;;) {
        /* a value at `at` */
        at = skip_space(text, len, at);
        if (at >= len) {
            return 0;
        }
        if (text[at] == '{' || text[at] == '[') {
            int object = text[at] == '{';
            if (depth == JSON_MAX_DEPTH) {
                return 0;
            }
            push(stack, depth++, object);
            at = skip_space(text, len, at + 1);
            if (at < len && text[at] == (object ? '}' : ']')) {
                depth--;
                at++;
            } else {
                if (object && (at = scan_key(text, len, at)) == 0) {
                    return 0;
                }
                continue;
            }
        } else if (text[at] == '"') {
            if ((at = scan_string(text, len, at)) == 0) {
                return 0;
            }
        } else if ((at = scan_scalar(text, len, at)) == 0) {
            return 0;
        }
        /* after a value: close containers, or find the next value */
        for (;;) {
            at = skip_space(text, len, at);
            if (depth == 0) {
                if (at != len) {
                    return 0;
                }
                root->p = text + start;
                root->n = len - start;
                while (root->n > 0 && is_space(root->p[root->n - 1])) {
                    root->n--;
                }
                return 1;
            }
            if (at >= len) {
                return 0;
            }
            if (text[at] == (top_is_object(stack, depth) ? '}' : ']')) {
                depth--;
                at++;
                continue;
            }
            if (text[at] != ',') {
                return 0;
            }
            at++;
            if (top_is_object(stack, depth) && (at = scan_key(text, len, at)) == 0) {
                return 0;
            }
            break;
        }
    }
}

json_kind_t p1_json_kind(json_span_t value)
{
    size_t i;
    if (value.n == 0) {
        return JSON_ABSENT;
    }
    switch (value.p[0]) {
    case '{':
        return JSON_OBJECT;
    case '[':
        return JSON_ARRAY;
    case '"':
        return JSON_STRING;
    case 't':
        return JSON_TRUE;
    case 'f':
        return JSON_FALSE;
    case 'n':
        return JSON_NULL;
    default:
        break;
    }
    for (i = 0; i < value.n; i++) {
        char c = value.p[i];
        if (!is_digit(c) && c != '-') {
            return JSON_FLOAT;
        }
    }
    return JSON_INT;
}

/* End of the (valid) value starting at s[at]. */
static size_t skip_value(const char *s, size_t n, size_t at)
{
    size_t depth = 0;
    do {
        char c = s[at];
        if (c == '"') {
            at = scan_string(s, n, at);
        } else if (c == '{' || c == '[') {
            depth++;
            at++;
        } else if (c == '}' || c == ']') {
            depth--;
            at++;
        } else if (c == ',' || c == ':' || is_space(c)) {
            at++;
        } else {
            at = scan_scalar(s, n, at);
        }
    } while (depth > 0);
    return at;
}

int p1_json_next_member(json_span_t object, size_t *at, json_span_t *key, json_span_t *value)
{
    const char *s = object.p;
    size_t n = object.n, i = *at == 0 ? 1 : *at;
    i = skip_space(s, n, i);
    if (s[i] == ',') {
        i = skip_space(s, n, i + 1);
    }
    if (s[i] != '"') {
        return 0;
    }
    key->p = s + i;
    i = scan_string(s, n, i);
    key->n = (size_t)(s + i - key->p);
    i = skip_space(s, n, i) + 1; /* the colon */
    i = skip_space(s, n, i);
    value->p = s + i;
    i = skip_value(s, n, i);
    value->n = (size_t)(s + i - value->p);
    *at = i;
    return 1;
}

int p1_json_next_item(json_span_t array, size_t *at, json_span_t *item)
{
    const char *s = array.p;
    size_t n = array.n, i = *at == 0 ? 1 : *at;
    i = skip_space(s, n, i);
    if (s[i] == ',') {
        i = skip_space(s, n, i + 1);
    }
    if (s[i] == ']') {
        return 0;
    }
    item->p = s + i;
    i = skip_value(s, n, i);
    item->n = (size_t)(s + i - item->p);
    *at = i;
    return 1;
}

json_span_t p1_json_get(json_span_t object, const char *key)
{
    json_span_t found = {NULL, 0}, name, value;
    size_t at = 0;
    if (p1_json_kind(object) != JSON_OBJECT) {
        return found;
    }
    while (p1_json_next_member(object, &at, &name, &value)) {
        if (p1_json_string_is(name, key)) {
            found = value;
        }
    }
    return found;
}

static uint32_t read_hex4(const char *s)
{
    uint32_t v = 0;
    int i;
    for (i = 0; i < 4; i++) {
        v = (v << 4) | (uint32_t)hex_value(s[i]);
    }
    return v;
}

int p1_json_next_char(json_span_t string, size_t *at, uint32_t *cp)
{
    static const char escapes[] = "b\bf\fn\nr\rt\t"; /* a letter, then what it stands for */
    const char *s = string.p;
    size_t i = *at == 0 ? 1 : *at, end = string.n - 1, len, k;
    const unsigned char *u;
    if (i >= end) {
        return 0;
    }
    u = (const unsigned char *)s + i;
    if (u[0] == '\\') {
        const char *hit = strchr(escapes, u[1]); /* a letter: the text was validated */
        *cp = hit != NULL ? (uint32_t)(unsigned char)hit[1] : u[1];
        if (u[1] == 'u') {
            *cp = read_hex4(s + i + 2);
            if (*cp >= 0xD800 && *cp <= 0xDBFF && i + 12 <= end && s[i + 6] == '\\' && s[i + 7] == 'u') {
                uint32_t low = read_hex4(s + i + 8);
                if (low >= 0xDC00 && low <= 0xDFFF) {
                    *cp = 0x10000 + ((*cp - 0xD800) << 10) + (low - 0xDC00);
                    i += 6;
                }
            }
            i += 4;
        }
        *at = i + 2;
        return 1;
    }
    len = u[0] < 0x80 ? 1 : u[0] < 0xE0 ? 2 : u[0] < 0xF0 ? 3 : 4;
    *cp = len == 1 ? u[0] : u[0] & (0x7Fu >> len);
    for (k = 1; k < len; k++) {
        *cp = (*cp << 6) | (u[k] & 0x3Fu);
    }
    *at = i + len;
    return 1;
}

int p1_json_string_is(json_span_t string, const char *text)
{
    size_t at = 0;
    uint32_t cp;
    if (p1_json_kind(string) != JSON_STRING) {
        return 0;
    }
    while (p1_json_next_char(string, &at, &cp)) {
        if (*text == '\0' || cp != (uint32_t)(unsigned char)*text) {
            return 0;
        }
        text++;
    }
    return *text == '\0';
}

int p1_json_strings_equal(json_span_t a, json_span_t b)
{
    size_t at_a = 0, at_b = 0;
    uint32_t cp_a, cp_b;
    int more_a, more_b;
    for (;;) {
        more_a = p1_json_next_char(a, &at_a, &cp_a);
        more_b = p1_json_next_char(b, &at_b, &cp_b);
        if (!more_a || !more_b) {
            return more_a == more_b;
        }
        if (cp_a != cp_b) {
            return 0;
        }
    }
}

size_t p1_json_string_length(json_span_t string)
{
    size_t at = 0, count = 0;
    uint32_t cp;
    while (p1_json_next_char(string, &at, &cp)) {
        count++;
    }
    return count;
}
