/* Numbers judged and printed as CPython does (json_number.h). */
#include "json_number.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define KEPT_DIGITS 40

/* A number as sign, significant digits and the place of the decimal point: 0.DIGITS x 10^point. */
typedef struct decimal {
    int negative;
    int special;            /* 0, or 'n' (NaN), 'i' (infinity) */
    char digits[KEPT_DIGITS + 1];
    size_t count;           /* significant digits, also those beyond KEPT_DIGITS */
    long point;
} decimal_t;

static void read_decimal(json_span_t number, decimal_t *d)
{
    const char *s = number.p;
    size_t n = number.n, i = 0, kept = 0, zeros = 0;
    long int_digits = 0, exponent = 0;
    int leading = 1, fraction = 0;
    memset(d, 0, sizeof *d);
    if (s[0] == '-') {
        d->negative = 1;
        i = 1;
    }
    if (s[i] == 'N' || s[i] == 'I') {
        d->special = s[i] == 'N' ? 'n' : 'i';
        return;
    }
    for (; i < n && s[i] != 'e' && s[i] != 'E'; i++) {
        if (s[i] == '.') {
            fraction = 1;
            continue;
        }
        if (!fraction) {
            int_digits++;
        }
        if (leading && s[i] == '0') {
            d->point--;
            continue;
        }
        leading = 0;
        if (s[i] == '0') {
            zeros++; /* kept only if a nonzero digit follows */
            continue;
        }
        for (; zeros > 0; zeros--, d->count++) {
            if (kept < KEPT_DIGITS) {
                d->digits[kept++] = '0';
            }
        }
        if (kept < KEPT_DIGITS) {
            d->digits[kept++] = s[i];
        }
        d->count++;
    }
    if (i < n) {
        int negative_exponent = 0;
        i++;
        if (s[i] == '+' || s[i] == '-') {
            negative_exponent = s[i] == '-';
            i++;
        }
        for (; i < n; i++) {
            if (exponent < 100000) {
                exponent = exponent * 10 + (s[i] - '0');
            }
        }
        if (negative_exponent) {
            exponent = -exponent;
        }
    }
    if (d->count == 0) {
        d->point = 0;
        return;
    }
    d->point += int_digits + exponent;
}

/* 10^k for the k whose powers of ten doubles hold exactly. */
static double exact_power(int k)
{
    double p = 1.0;
    while (k-- > 0) {
        p *= 10.0;
    }
    return p;
}

static double decimal_value(const decimal_t *d)
{
    double v;
    size_t used = d->count < 19 ? d->count : 19, i;
    unsigned long long m = 0;
    long scale;
    if (d->special == 'n') {
        return NAN;
    }
    if (d->special == 'i') {
        return d->negative ? -INFINITY : INFINITY;
    }
    if (d->count == 0) {
        return d->negative ? -0.0 : 0.0;
    }
    if (d->point > 400) {
        return d->negative ? -INFINITY : INFINITY;
    }
    if (d->point < -400) {
        return d->negative ? -0.0 : 0.0;
    }
    for (i = 0; i < used; i++) {
        m = m * 10 + (unsigned long long)(d->digits[i] - '0');
    }
    scale = d->point - (long)used;
    v = (double)m;
    /* m below 2^53 and an exact power of ten: one correctly rounded operation, as strtod gives */
    if (scale >= 0 && scale <= 22) {
        v *= exact_power((int)scale);
    } else if (scale < 0 && scale >= -22) {
        v /= exact_power((int)-scale);
    } else if (scale < -300) {
        v = v * 1e-300 * pow(10.0, (double)(scale + 300));
    } else {
        v *= pow(10.0, (double)scale);
    }
    return d->negative ? -v : v;
}

double p1_json_number_value(json_span_t number)
{
    decimal_t d;
    read_decimal(number, &d);
    return decimal_value(&d);
}

/* Python's float repr from digits and point: fixed between 1e-4 and 1e16, else scientific. One walk
 * over the digit positions prints both: leading zeros and "0" before the point, the digits, trailing
 * zeros up to the point, and at least one digit after it ("1200.0", "0.0012", "1.5e+16"). */
static void sink_repr_digits(json_sink_t *sink, int negative, const char *digits, size_t count, long point)
{
    int scientific = !(point > -4 && point <= 16);
    long dot = scientific ? 1 : point, k;
    long last = (long)count > dot || scientific ? (long)count : dot + 1;
    if (negative) {
        p1_json_sink_char(sink, '-');
    }
    for (k = dot > 0 ? 0 : dot - 1; k < last; k++) {
        if (k == dot) {
            p1_json_sink_char(sink, '.');
        }
        p1_json_sink_char(sink, k >= 0 && k < (long)count ? (uint32_t)digits[k] : '0');
    }
    if (!scientific) {
        return;
    }
    p1_json_sink_char(sink, 'e');
    p1_json_sink_char(sink, point - 1 < 0 ? '-' : '+');
    k = point - 1 < 0 ? 1 - point : point - 1;
    if (k < 10) {
        p1_json_sink_char(sink, '0');
    }
    p1_json_sink_int(sink, k);
}

/* repr of a finite nonzero double from its 17 significant digits (inputs longer than 15 digits). */
static void sink_repr_double(json_sink_t *sink, double v)
{
    char text[40], digits[20];
    size_t count = 0, i;
    long point;
    char *e;
    snprintf(text, sizeof text, "%.16e", fabs(v));
    for (i = 0; text[i] != 'e'; i++) {
        if (text[i] != '.') {
            digits[count++] = text[i];
        }
    }
    e = text + i + 1;
    point = 0;
    {
        int negative = *e == '-';
        for (e++; *e != '\0'; e++) {
            point = point * 10 + (*e - '0');
        }
        point = (negative ? -point : point) + 1;
    }
    while (count > 1 && digits[count - 1] == '0') {
        count--;
    }
    sink_repr_digits(sink, v < 0, digits, count, point);
}

static void sink_float(json_sink_t *sink, json_span_t number, int for_dumps)
{
    decimal_t d;
    double v;
    read_decimal(number, &d);
    v = decimal_value(&d);
    if (isnan(v)) {
        p1_json_sink_text(sink, for_dumps ? "NaN" : "nan");
    } else if (isinf(v)) {
        p1_json_sink_text(sink, v < 0 ? (for_dumps ? "-Infinity" : "-inf") : (for_dumps ? "Infinity" : "inf"));
    } else if (v == 0.0) {
        p1_json_sink_text(sink, d.negative ? "-0.0" : "0.0");
    } else if (d.count <= 15) {
        /* up to 15 digits the shortest text that reads back as the double is the input's own */
        sink_repr_digits(sink, d.negative, d.digits, d.count, d.point);
    } else {
        sink_repr_double(sink, v);
    }
}

void p1_json_number_repr(json_sink_t *sink, json_span_t number)
{
    sink_float(sink, number, 0);
}

void p1_json_number_dumps(json_sink_t *sink, json_span_t number)
{
    sink_float(sink, number, 1);
}

void p1_json_number_as_int(json_sink_t *sink, json_span_t number)
{
    char text[320]; /* the largest double has 309 digits */
    double v;
    if (p1_json_kind(number) == JSON_INT) {
        p1_json_sink_dumps(sink, number);
        return;
    }
    v = p1_json_number_value(number);
    if (v == 0.0) {
        p1_json_sink_char(sink, '0');
        return;
    }
    snprintf(text, sizeof text, "%.0f", v);
    p1_json_sink_text(sink, text);
}

void p1_json_float_rounded(json_sink_t *sink, double value, int digits)
{
    char text[64];
    size_t len;
    snprintf(text, sizeof text, "%.*f", digits, value);
    len = strlen(text);
    while (len > 2 && text[len - 1] == '0' && text[len - 2] != '.') {
        text[--len] = '\0';
    }
    if (digits == 0) {
        text[len++] = '.';
        text[len++] = '0';
        text[len] = '\0';
    }
    p1_json_sink_text(sink, text);
}
