/* h3_engine_log.c - the engine's log and clock, which every engine/ file
 * uses: the bottom of the engine's files (it calls none of them). */
#include "engine/h3_engine_impl.h"

#include <glib.h>
#include <stdarg.h>
#include <stdio.h>

void h3_engine_log(h3_engine *e, h3_log_level level, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (e->log) e->log(e->log_opaque, level, msg);
    else if (level <= H3_LOG_WARNING) fprintf(stderr, "h3: %s\n", msg);
}

double h3_engine_now(void) { return (double)g_get_monotonic_time() / 1e6; }
