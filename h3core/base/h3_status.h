/* h3_status.h - error reporting for every fallible h3core call.
 *
 * Every public function that can fail returns an h3_status_code and, when
 * given a non-NULL h3_status, fills it with a message that names the file,
 * tensor or value at fault. Nothing in h3core aborts on bad input. */
#ifndef H3_STATUS_H
#define H3_STATUS_H

#include <stddef.h>

#include "base/h3_api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum h3_status_code {
    H3_OK = 0,
    H3_ERR_INVALID_ARGUMENT, /* a request or option value is out of range */
    H3_ERR_NOT_FOUND,        /* a file, directory or tensor is missing */
    H3_ERR_FORMAT,           /* a file is malformed, truncated or mismatched */
    H3_ERR_IO,               /* open/read/mmap failed */
    H3_ERR_NO_MEMORY,        /* host or device allocation failed */
    H3_ERR_UNSUPPORTED,      /* valid but not implemented by this build/backend */
    H3_ERR_CANCELLED,        /* h3_engine_cancel() was called */
    H3_ERR_DEVICE,           /* CUDA / NCCL failure */
    H3_ERR_INTERNAL,         /* a bug: an invariant did not hold */
    H3_ERR_NONFINITE         /* NaN or Inf where values must be finite: a weight, or a stage's output */
} h3_status_code;

#define H3_STATUS_MESSAGE_SIZE 1024

typedef struct h3_status {
    h3_status_code code;
    char message[H3_STATUS_MESSAGE_SIZE];
} h3_status;

/* Sets status (if non-NULL) and returns code, so callers can write
 *   return h3_fail(status, H3_ERR_FORMAT, "%s: bad header", path); */
H3_API h3_status_code h3_fail(h3_status *status, h3_status_code code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Prefixes an existing message with context ("loading vae: ..."). */
H3_API h3_status_code h3_status_prefix(h3_status *status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

H3_API void h3_status_clear(h3_status *status);
H3_API const char *h3_status_code_name(h3_status_code code);

#ifdef __cplusplus
}
#endif
#endif
