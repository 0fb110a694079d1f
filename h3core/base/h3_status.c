/* h3_status.c - error reporting helpers. */
#include "base/h3_status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

h3_status_code h3_fail(h3_status *status, h3_status_code code, const char *fmt, ...) {
    if (status) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(status->message, sizeof status->message, fmt, ap);
        va_end(ap);
        status->code = code;
    }
    return code;
}

h3_status_code h3_status_prefix(h3_status *status, const char *fmt, ...) {
    if (!status) return H3_ERR_INTERNAL;
    char prefix[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    char old[H3_STATUS_MESSAGE_SIZE];
    memcpy(old, status->message, sizeof old);
    size_t n = strlen(prefix);
    if (n > sizeof status->message - 3) n = sizeof status->message - 3;
    memcpy(status->message, prefix, n);
    memcpy(status->message + n, ": ", 2);
    size_t rest = sizeof status->message - n - 3;
    strncpy(status->message + n + 2, old, rest);
    status->message[sizeof status->message - 1] = '\0';
    return status->code;
}

void h3_status_clear(h3_status *status) {
    if (!status) return;
    status->code = H3_OK;
    status->message[0] = '\0';
}

const char *h3_status_code_name(h3_status_code code) {
    switch (code) {
    case H3_OK: return "ok";
    case H3_ERR_INVALID_ARGUMENT: return "invalid argument";
    case H3_ERR_NOT_FOUND: return "not found";
    case H3_ERR_FORMAT: return "bad format";
    case H3_ERR_IO: return "i/o error";
    case H3_ERR_NO_MEMORY: return "out of memory";
    case H3_ERR_UNSUPPORTED: return "unsupported";
    case H3_ERR_CANCELLED: return "cancelled";
    case H3_ERR_DEVICE: return "device error";
    case H3_ERR_INTERNAL: return "internal error";
    case H3_ERR_NONFINITE: return "non-finite values";
    }
    return "unknown";
}
