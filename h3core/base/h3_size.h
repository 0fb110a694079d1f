/* h3_size.h - sizes computed from values a model folder states.
 *
 * A count read from a config or a header (layers, channels, rates, a shape)
 * is checked against its range where it is read (h3_config_int_range); what
 * is computed from several of them (a product of rates, a tensor's bytes)
 * goes through these, so a hostile file gets an H3_ERR_FORMAT naming what
 * overflowed instead of a wrapped size, a zero divisor or a short buffer.
 * The format describes the quantity ("%s: \"upsample_rates\"", path) and
 * the message adds both operands. */
#ifndef H3_SIZE_H
#define H3_SIZE_H

#include <stddef.h>
#include <stdint.h>

#include "base/h3_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define H3_SIZE_FORMAT(i) __attribute__((format(printf, i, i + 1)))
#else
#define H3_SIZE_FORMAT(i)
#endif

/* *out = a * b, or H3_ERR_FORMAT "<what>: a x b overflows" (*out untouched). */
h3_status_code h3_size_mul(uint64_t a, uint64_t b, uint64_t *out, h3_status *status, const char *fmt, ...)
    H3_SIZE_FORMAT(5);
/* *out = a + b, or H3_ERR_FORMAT "<what>: a + b overflows". */
h3_status_code h3_size_add(uint64_t a, uint64_t b, uint64_t *out, h3_status *status, const char *fmt, ...)
    H3_SIZE_FORMAT(5);
/* *out = a * b, which must also be at most max (a size the caller can hold:
 * SIZE_MAX, INT32_MAX, a component's limit): else H3_ERR_FORMAT
 * "<what>: a x b exceeds max". */
h3_status_code h3_size_mul_max(uint64_t a, uint64_t b, uint64_t max, uint64_t *out, h3_status *status,
                               const char *fmt, ...) H3_SIZE_FORMAT(6);

#ifdef __cplusplus
}
#endif
#endif
