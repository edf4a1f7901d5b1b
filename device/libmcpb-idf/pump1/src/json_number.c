/* Numbers judged and printed as CPython does (json_number.h). */
#include "json_number.h"

#include <float.h>
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
    double v = 0.0;
    size_t used = d->count < 19 ? d->count : 19, i;
    unsigned long long m = 0;
    long scale = d->point - (long)used;
    if (d->special == 'n') {
        return NAN;
    }
    if (d->special == 'i' || (d->count > 0 && d->point > 400)) {
        v = INFINITY;
    } else if (d->count > 0 && d->point >= -400) {
        for (i = 0; i < used; i++) {
            m = m * 10 + (unsigned long long)(d->digits[i] - '0');
        }
        v = (double)m;
        /* m below 2^53 and an exact power of ten: one correctly rounded operation, as strtod gives */
        if (scale >= -22 && scale <= 22) {
            double p = exact_power((int)(scale < 0 ? -scale : scale)); /* one loop for both ways */
            v = scale < 0 ? v / p : v * p;
        } else {
            if (scale < -300) {
                v *= 1e-300; /* first, so that pow's factor stays a normal number */
                scale += 300;
            }
            v *= pow(10.0, (double)scale); /* (v * 1e-300) * pow(10, scale + 300) when it was that small */
        }
    }
    return d->negative ? -v : v; /* zero, too, keeps its sign */
}

double p1_json_number_value(json_span_t number)
{
    decimal_t d;
    read_decimal(number, &d);
    return decimal_value(&d);
}

/* Python's float repr from digits and point: fixed between 1e-4 and 1e16, else scientific. One walk
 * over the digit positions prints both: leading zeros and "0" before the point, the digits, trailing
 * zeros up to the point, and at least one digit after it ("1200.0", "0.0012", "1.5e+16", "-0.0"). */
static void sink_repr_digits(json_sink_t *sink, const decimal_t *d)
{
    long point = d->point, count = (long)d->count;
    int scientific = !(point > -4 && point <= 16);
    long dot = scientific ? 1 : point, k;
    long last = count > dot || scientific ? count : dot + 1;
    if (d->negative) {
        p1_json_sink_char(sink, '-');
    }
    for (k = dot > 0 ? 0 : dot - 1; k < last; k++) {
        if (k == dot) {
            p1_json_sink_char(sink, '.');
        }
        p1_json_sink_char(sink, k >= 0 && k < count ? (uint32_t)d->digits[k] : '0');
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

void p1_json_number_float(json_sink_t *sink, json_span_t number, int for_dumps)
{
    decimal_t d;
    double v;
    char text[40];
    read_decimal(number, &d);
    v = decimal_value(&d);
    /* decimal_value gives NaN for a NaN token only (its m is never 0 when it scales), so the
       special says it; with NaN out, fabs and one comparison say infinity (isnan and isinf are
       soft-float calls each) */
    if (d.special == 'n') {
        p1_json_sink_text(sink, for_dumps ? "NaN" : "nan");
        return;
    }
    if (fabs(v) > DBL_MAX) {
        /* the sign decimal_value gave v: the text from its minus, or from after it */
        p1_json_sink_text(sink, (for_dumps ? "-Infinity" : "-inf") + !d.negative);
        return;
    }
    if (v == 0.0) {
        d.count = 0; /* also what underflowed: "0.0" or "-0.0" */
        d.point = 0;
    } else if (d.count > 15) {
        /* the double's 17 significant digits, read back as a number (trailing zeros go); up to 15
           digits the shortest text that reads back as the double is the input's own */
        number.p = text;
        number.n = (size_t)snprintf(text, sizeof text, "%.16e", v);
        read_decimal(number, &d);
    }
    sink_repr_digits(sink, &d);
}

void p1_json_number_as_int(json_sink_t *sink, json_span_t number)
{
    if (p1_json_kind(number) == JSON_INT) {
        p1_json_sink_dumps(sink, number);
        return;
    }
    /* + 0.0 turns -0.0 into 0.0: Python prints int(-0.0) as "0" */
    p1_json_fixed(sink, p1_json_number_value(number) + 0.0, 0, 0);
}

void p1_json_fixed(json_sink_t *sink, double value, int digits, int trim)
{
    char text[320]; /* the largest double has 309 digits */
    size_t len = (size_t)snprintf(text, sizeof text, "%.*f", digits, value);
    if (len >= sizeof text) {
        len = sizeof text - 1;
    }
    while (trim && len > 2 && text[len - 1] == '0' && text[len - 2] != '.') {
        len--;
    }
    text[len] = '\0';
    p1_json_sink_text(sink, text);
}
