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

/* A hex digit: 0-9, or a-f in either case (setting bit 5 lowers A-F and no other byte into a-f). */
static int is_hex(char c)
{
    unsigned lower = (unsigned char)c | 0x20u;
    return is_digit(c) || (lower >= 'a' && lower <= 'f');
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
    unsigned c = u[0];
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2, i;
    /* the second byte's range rules out overlong forms and code points past U+10FFFF */
    unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    if (c < 0xC2 || c > 0xF4 || n - at < len || u[1] < lo || u[1] > hi) {
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
                    if (!is_hex(s[at + i])) {
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

P1_NOINLINE static size_t scan_digits(const char *s, size_t n, size_t at)
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
    /* the literals, one after another, an empty one last */
    static const char words[] = "true\0false\0null\0NaN\0Infinity\0-Infinity\0";
    const char *word;
    for (word = words; *word != '\0'; word += strlen(word) + 1) {
        if (starts_with(s, n, at, word)) {
            return at + strlen(word);
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

/* scan_value keeps one bit per open container in a uint32_t */
typedef char json_depth_fits_stack[JSON_MAX_DEPTH <= 32 ? 1 : -1];

/*
 * End of the one value at s[at] (spaces before it skipped), or 0 when it is not valid JSON. One
 * loop for any nesting: a bit per open container (1: an object) says what closes it.
 */
static size_t scan_value(const char *s, size_t n, size_t at)
{
    uint32_t stack = 0; /* a shift register: bit 0 says the innermost open container is an object */
    size_t depth = 0;
    int object = 0;
    for (;;) {
        /* a value at `at`, or a key when `object` */
        at = skip_space(s, n, at);
        if (at >= n) {
            return 0;
        }
        if (!object && (s[at] == '{' || s[at] == '[')) {
            object = s[at] == '{';
            if (depth == JSON_MAX_DEPTH) {
                return 0;
            }
            at = skip_space(s, n, at + 1);
            if (at >= n || s[at] != (object ? '}' : ']')) {
                stack = (stack << 1) | (uint32_t)object;
                depth++;
                continue;
            }
            at++; /* empty */
            object = 0;
        } else if (s[at] == '"') {
            at = scan_string(s, n, at);
        } else if (!object) {
            at = scan_scalar(s, n, at);
        } else {
            return 0;
        }
        if (at == 0) {
            return 0;
        }
        if (object) { /* after a key: its colon, then the value */
            at = skip_space(s, n, at);
            if (at >= n || s[at] != ':') {
                return 0;
            }
            at++;
            object = 0;
            continue;
        }
        /* after a value: close containers, or on to the next value */
        for (;;) {
            if (depth == 0) {
                return at;
            }
            object = (int)(stack & 1u);
            at = skip_space(s, n, at);
            if (at < n && s[at] == (object ? '}' : ']')) {
                depth--;
                stack >>= 1;
                at++;
                continue;
            }
            if (at >= n || s[at] != ',') {
                return 0;
            }
            at++;
            break;
        }
    }
}

int p1_json_parse(const char *text, size_t len, json_span_t *root)
{
    size_t at = 0, end;
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) {
        at = 3; /* json.loads takes bytes with a UTF-8 BOM */
    }
    at = skip_space(text, len, at);
    end = scan_value(text, len, at);
    if (end == 0 || skip_space(text, len, end) != len) {
        return 0;
    }
    root->p = text + at;
    root->n = end - at;
    return 1;
}

json_kind_t p1_json_kind(json_span_t value)
{
    static const char starts[] = "{[\"tfn"; /* in the order of json_kind_t */
    const char *hit;
    size_t i;
    if (value.n == 0) {
        return JSON_ABSENT;
    }
    hit = strchr(starts, value.p[0]);
    if (hit != NULL) {
        return (json_kind_t)(JSON_OBJECT + (hit - starts));
    }
    for (i = 0; i < value.n; i++) {
        if (!is_digit(value.p[i]) && value.p[i] != '-') {
            return JSON_FLOAT;
        }
    }
    return JSON_INT;
}

int p1_json_next_member(json_span_t container, size_t *at, json_span_t *key, json_span_t *value)
{
    const char *s = container.p;
    size_t n = container.n, i = skip_space(s, n, *at == 0 ? 1 : *at);
    if (s[i] == ',') {
        i = skip_space(s, n, i + 1);
    }
    if (s[i] == '}' || s[i] == ']') {
        return 0;
    }
    if (key != NULL) {
        key->p = s + i;
        i = scan_string(s, n, i);
        key->n = (size_t)(s + i - key->p);
        i = skip_space(s, n, skip_space(s, n, i) + 1); /* past the colon */
    }
    value->p = s + i;
    i = scan_value(s, n, i);
    value->n = (size_t)(s + i - value->p);
    *at = i;
    return 1;
}

json_span_t p1_json_get(json_span_t object, const char *key)
{
    json_span_t found = {NULL, 0}, name, value;
    size_t at = 0;
    int more = p1_json_kind(object) == JSON_OBJECT;
    while (more && p1_json_next_member(object, &at, &name, &value)) {
        if (p1_json_string_is(name, key)) {
            found = value;
        }
    }
    return found;
}

/* Four hex digits the scan has validated: the low nibble is the value of 0-9, nine less than that of
 * a-f and A-F. */
static uint32_t read_hex4(const char *s)
{
    uint32_t v = 0;
    int i;
    for (i = 0; i < 4; i++) {
        v = (v << 4) | ((uint32_t)(s[i] & 0xF) + (s[i] > '9' ? 9u : 0u));
    }
    return v;
}

int p1_json_next_char(json_span_t string, size_t *at, uint32_t *cp)
{
    static const char escapes[] = "b\bf\fn\nr\rt\t"; /* a letter, then what it stands for */
    const char *s = string.p;
    size_t i = *at == 0 ? 1 : *at, end = string.n - 1, len, k;
    const unsigned char *u;
    uint32_t c; /* a local, stored once: a store through cp could alias the text */
    if (i >= end) {
        return 0;
    }
    u = (const unsigned char *)s + i;
    if (u[0] == '\\') {
        const char *hit = strchr(escapes, u[1]); /* a letter: the text was validated */
        c = hit != NULL ? (uint32_t)(unsigned char)hit[1] : u[1];
        len = 2;
        if (u[1] == 'u') {
            c = read_hex4(s + i + 2);
            len = 6;
            if (c >= 0xD800 && c <= 0xDBFF && i + 12 <= end && s[i + 6] == '\\' && s[i + 7] == 'u') {
                uint32_t low = read_hex4(s + i + 8);
                if (low >= 0xDC00 && low <= 0xDFFF) {
                    c = 0x10000 + ((c - 0xD800) << 10) + (low - 0xDC00);
                    len = 12;
                }
            }
        }
    } else {
        len = u[0] < 0x80 ? 1 : u[0] < 0xE0 ? 2 : u[0] < 0xF0 ? 3 : 4;
        c = len == 1 ? u[0] : u[0] & (0x7Fu >> len);
        for (k = 1; k < len; k++) {
            c = (c << 6) | (u[k] & 0x3Fu);
        }
    }
    *cp = c;
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
