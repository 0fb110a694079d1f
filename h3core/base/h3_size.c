/* h3_size.c - overflow-checked sizes (h3_size.h). */
#include "base/h3_size.h"

#include <stdarg.h>
#include <stdio.h>

static h3_status_code fail_va(h3_status *status, const char *op, uint64_t a, uint64_t b, const char *limit,
                              uint64_t max, const char *fmt, va_list ap) {
    char what[512];
    vsnprintf(what, sizeof what, fmt, ap);
    if (limit)
        return h3_fail(status, H3_ERR_FORMAT, "%s: %llu %s %llu %s %llu", what, (unsigned long long)a, op,
                       (unsigned long long)b, limit, (unsigned long long)max);
    return h3_fail(status, H3_ERR_FORMAT, "%s: %llu %s %llu overflows", what, (unsigned long long)a, op,
                   (unsigned long long)b);
}

h3_status_code h3_size_mul(uint64_t a, uint64_t b, uint64_t *out, h3_status *status, const char *fmt, ...) {
    uint64_t r;
    if (!__builtin_mul_overflow(a, b, &r)) {
        *out = r;
        return H3_OK;
    }
    va_list ap;
    va_start(ap, fmt);
    h3_status_code rc = fail_va(status, "x", a, b, NULL, 0, fmt, ap);
    va_end(ap);
    return rc;
}

h3_status_code h3_size_add(uint64_t a, uint64_t b, uint64_t *out, h3_status *status, const char *fmt, ...) {
    uint64_t r;
    if (!__builtin_add_overflow(a, b, &r)) {
        *out = r;
        return H3_OK;
    }
    va_list ap;
    va_start(ap, fmt);
    h3_status_code rc = fail_va(status, "+", a, b, NULL, 0, fmt, ap);
    va_end(ap);
    return rc;
}

h3_status_code h3_size_mul_max(uint64_t a, uint64_t b, uint64_t max, uint64_t *out, h3_status *status,
                               const char *fmt, ...) {
    uint64_t r;
    int over = __builtin_mul_overflow(a, b, &r);
    if (!over && r <= max) {
        *out = r;
        return H3_OK;
    }
    va_list ap;
    va_start(ap, fmt);
    h3_status_code rc = fail_va(status, "x", a, b, over ? NULL : "exceeds", max, fmt, ap);
    va_end(ap);
    return rc;
}
