/* h3_ops_check_impl.h - the argument checks every op validator shares
 * (h3_ops_check.c for the core ops, h3_ops_vsa_check.c,
 * h3_ops_video_vae_check.c, h3_ops_audio_vae_check.c). Private to backend/:
 * the backends never see it, they may assume valid arguments.
 *
 * A failed check sets the backend's sticky error and returns from the op,
 * so that the backend is never called with arguments it may not assume. */
#ifndef H3_OPS_CHECK_IMPL_H
#define H3_OPS_CHECK_IMPL_H

#include "backend/h3_backend_impl.h"

static inline int is_float(const h3_tensor *t) { return t->dtype != H3_I32; }

/* A streamed weight left on the host (h3_weight_stream.h) is refused
 * before a backend can read host memory as its own. */
static inline int host_ok(h3_backend *b, const char *op, const char *what, const h3_tensor *t) {
    if (t && t->on_host) {
        h3_backend_fail(b, H3_ERR_INTERNAL,
                        "%s: %s is a host-resident weight (memory=stream): it must be acquired in a device slot "
                        "(h3_weight_ring_acquire) before an op reads it", op, what);
        return 0;
    }
    return 1;
}

static inline int ok_tensor(h3_backend *b, const char *op, const char *what, const h3_tensor *t) {
    if (!t || !t->data || t->ndim < 1) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "%s: %s is missing or unallocated", op, what);
        return 0;
    }
    return host_ok(b, op, what, t);
}

static inline int same_numel(h3_backend *b, const char *op, const h3_tensor *a, const h3_tensor *c) {
    if (h3_tensor_numel(a) != h3_tensor_numel(c)) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "%s: element counts differ (%lld vs %lld)", op,
                        (long long)h3_tensor_numel(a), (long long)h3_tensor_numel(c));
        return 0;
    }
    return 1;
}

/* An earlier failure makes every later op a no-op; an injected fault
 * (h3_backend_inject_fault) is counted here, so it lands on any op. */
#define GUARD(b) \
    do { \
        if ((b)->fault_ops > 0) h3_backend_fault_due(b); \
        if (h3_backend_failed(b)) return; \
    } while (0)
#define NEED(b, op, what, t) do { if (!ok_tensor(b, op, what, t)) return; } while (0)
/* An optional argument (NULL allowed) that, when given, must not be on the host. */
#define NOT_HOST(b, op, what, t) do { if (!host_ok(b, op, what, t)) return; } while (0)
#define REQUIRE(b, cond, ...) do { if (!(cond)) { h3_backend_fail(b, H3_ERR_INTERNAL, __VA_ARGS__); return; } } while (0)
#define REQUIRE_CODE(b, cond, code, ...) \
    do { if (!(cond)) { h3_backend_fail(b, code, __VA_ARGS__); return; } } while (0)
/* The subsystem ops are optional in the table: a backend without one fails cleanly. */
#define NEED_IMPL(b, op, fn) \
    REQUIRE_CODE(b, (b)->ops->fn != NULL, H3_ERR_UNSUPPORTED, "%s: not implemented by the %s backend", op, (b)->ops->name)

#endif
