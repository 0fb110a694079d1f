/* h3_backend.c - the backend object, whichever backend: the sticky error,
 * lifetime, the activation arena, weight upload and host copies. The ops'
 * checks are h3_ops_check.c's (and h3_ops_*_check.c's). */
#include "backend/h3_backend_impl.h"
#include "backend/h3_fp8.h"

#include <glib.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_ALIGN 256
#define ARENA_DEFAULT_CHUNK ((size_t)64 << 20)

/* ---- fault injection (tests) ------------------------------------------------- */

/* Process-wide, as allocations are: an engine's ranks allocate on their own
 * threads, and a test counts one whole run's allocations. */
static atomic_long alloc_seen, alloc_fail_at;

void h3_backend_inject_alloc_fault(long nth) {
    atomic_store(&alloc_fail_at, nth > 0 ? atomic_load(&alloc_seen) + nth : 0);
}

long h3_backend_alloc_count(void) { return atomic_load(&alloc_seen); }

int h3_backend_alloc_refused(const h3_backend *b) {
    if (b->ops->no_data) return 0;
    long n = atomic_fetch_add(&alloc_seen, 1) + 1, at = atomic_load(&alloc_fail_at);
    return at > 0 && n == at;
}

void h3_backend_inject_fault(h3_backend *b, long ops) { b->fault_ops = ops > 0 ? ops : 0; }

void h3_backend_fault_due(h3_backend *b) {
    if (b->fault_ops <= 0 || --b->fault_ops > 0) return;
    if (b->ops->inject_fault) b->ops->inject_fault(b);
    else h3_backend_fail(b, H3_ERR_DEVICE, "%s: device failure in the middle of the work (injected by the test hook)",
                         b->ops->name);
}

/* Every allocation this file makes goes through here, so that the test
 * hook can fail any one of them. */
static void *backend_alloc(h3_backend *b, size_t bytes) {
    return h3_backend_alloc_refused(b) ? NULL : b->ops->alloc(b, bytes);
}

static void *host_alloc(const h3_backend *b, size_t bytes) { return h3_backend_alloc_refused(b) ? NULL : malloc(bytes); }

/* ---- errors ------------------------------------------------------------------ */

void h3_backend_init(h3_backend *b, const h3_backend_ops *ops, void *impl) {
    memset(b, 0, sizeof *b);
    b->ops = ops;
    b->impl = impl;
    b->compute_dtype = ops->compute_dtype;
    b->chunk_min_size = ARENA_DEFAULT_CHUNK;
    b->persistent = g_hash_table_new(g_direct_hash, g_direct_equal);
}

/* ---- memory tally ------------------------------------------------------------ */

static void mem_update(h3_backend *b) {
    uint64_t total = b->mem_weights + b->mem_arena + b->mem_scratch;
    uint64_t above = b->mem_weights > b->mem_mark_weights ? b->mem_weights - b->mem_mark_weights : 0;
    if (total > b->mem_peak) b->mem_peak = total;
    if (b->mem_arena + above > b->mem_peak_activations) b->mem_peak_activations = b->mem_arena + above;
    if (b->mem_scratch > b->mem_peak_scratch) b->mem_peak_scratch = b->mem_scratch;
}

static void mem_add(uint64_t *counter, int64_t delta) {
    *counter = delta < 0 && (uint64_t)-delta > *counter ? 0 : *counter + (uint64_t)delta;
}

void h3_backend_set_memory_limit(h3_backend *b, uint64_t bytes) { b->mem_limit = bytes; }

int h3_backend_limit_refuses(h3_backend *b, size_t bytes, size_t released, const char *what) {
    if (!b->mem_limit) return 0;
    uint64_t held = b->mem_weights + b->mem_arena + b->mem_scratch;
    held = held > released ? held - released : 0;
    if (held + bytes <= b->mem_limit) return 0;
    h3_backend_fail(b, H3_ERR_NO_MEMORY,
                    "%s: %.2f GiB more for %s would pass the memory limit of %.2f GiB (max-gpu-memory; %.2f GiB held)",
                    b->ops->name, (double)bytes / 1073741824.0, what, (double)b->mem_limit / 1073741824.0,
                    (double)held / 1073741824.0);
    return 1;
}

void h3_backend_track_scratch(h3_backend *b, int64_t delta) {
    mem_add(&b->mem_scratch, delta);
    mem_update(b);
}

void h3_backend_memory_get(const h3_backend *b, h3_backend_memory *out) {
    out->weights = b->mem_weights;
    out->arena = b->mem_arena;
    out->scratch = b->mem_scratch;
    out->peak = b->mem_peak;
    out->peak_activations = b->mem_peak_activations;
    out->peak_scratch = b->mem_peak_scratch;
}

void h3_backend_memory_mark(h3_backend *b) {
    b->mem_mark_weights = b->mem_weights;
    b->mem_peak = b->mem_weights + b->mem_arena + b->mem_scratch;
    b->mem_peak_activations = b->mem_arena;
    b->mem_peak_scratch = b->mem_scratch;
}

int h3_backend_holds_data(const h3_backend *b) { return !b->ops->no_data; }

/* Every persistent allocation goes through these two, so the tally knows
 * each one's size when it is freed. */
static void *persistent_new(h3_backend *b, size_t bytes) {
    if (h3_backend_limit_refuses(b, bytes, 0, "weights")) return NULL;
    void *p = backend_alloc(b, bytes);
    if (!p) return NULL;
    g_hash_table_insert(b->persistent, p, (gpointer)(uintptr_t)bytes);
    mem_add(&b->mem_weights, (int64_t)bytes);
    mem_update(b);
    return p;
}

void *h3_backend_persistent_alloc(h3_backend *b, size_t bytes, const char *what) {
    void *p = persistent_new(b, bytes); /* it applies the memory limit */
    if (!p) h3_backend_fail(b, H3_ERR_NO_MEMORY, "%s: cannot allocate %zu bytes for %s", b->ops->name, bytes, what);
    return p;
}

static void persistent_delete(h3_backend *b, void *p);
void h3_backend_persistent_free(h3_backend *b, void *p) {
    if (p) persistent_delete(b, p);
    mem_update(b);
}

static void persistent_delete(h3_backend *b, void *p) {
    gpointer bytes;
    if (g_hash_table_lookup_extended(b->persistent, p, NULL, &bytes)) {
        mem_add(&b->mem_weights, -(int64_t)(uintptr_t)bytes);
        g_hash_table_remove(b->persistent, p);
    }
    b->ops->free(b, p);
}

static void vfail(h3_backend *b, h3_status_code code, const char *fmt, va_list ap) {
    if (b->error.code != H3_OK) return;
    vsnprintf(b->error.message, sizeof b->error.message, fmt, ap);
    b->error.code = code;
}

void h3_backend_fail(h3_backend *b, h3_status_code code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(b, code, fmt, ap);
    va_end(ap);
}

void h3_backend_set_error(h3_backend *b, h3_status_code code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(b, code, fmt, ap);
    va_end(ap);
}

void h3_backend_clear_error(h3_backend *b) { h3_status_clear(&b->error); }

int h3_backend_failed(const h3_backend *b) { return b->error.code != H3_OK; }

h3_status_code h3_backend_check(h3_backend *b, h3_status *status) {
    if (b->error.code == H3_OK) return H3_OK;
    if (status) *status = b->error;
    return b->error.code;
}

h3_status_code h3_backend_synchronize(h3_backend *b, h3_status *status) {
    if (b->ops->synchronize && b->ops->synchronize(b) != 0 && !h3_backend_failed(b))
        h3_backend_fail(b, H3_ERR_DEVICE, "%s: synchronize failed", b->ops->name);
    return h3_backend_check(b, status);
}

const char *h3_backend_name(const h3_backend *b) { return b->ops->name; }
h3_dtype h3_backend_compute_dtype(const h3_backend *b) { return b->compute_dtype; }

void h3_backend_destroy(h3_backend *b) {
    if (!b) return;
    for (int i = 0; i < b->n_chunks; i++) b->ops->free(b, b->chunks[i].data);
    free(b->chunks);
    h3_weight_host_free_all(b);
    g_hash_table_destroy(b->persistent);
    b->ops->destroy(b); /* frees impl and b */
}

/* ---- arena --------------------------------------------------------------------- */

size_t h3_arena_mark(h3_backend *b) {
    size_t m = 0;
    for (int i = 0; i < b->cur_chunk; i++) m += b->chunks[i].size;
    return m + b->cur_offset;
}

void h3_arena_reset(h3_backend *b, size_t mark) {
    int i = 0;
    while (i < b->n_chunks && mark > b->chunks[i].size) mark -= b->chunks[i++].size;
    if (i >= b->n_chunks) { i = b->n_chunks ? b->n_chunks - 1 : 0; mark = b->n_chunks ? b->chunks[i].size : 0; }
    b->cur_chunk = i;
    b->cur_offset = mark;
}

size_t h3_arena_high_water(const h3_backend *b) { return b->high_water; }

void h3_backend_trim(h3_backend *b) {
    int keep = h3_arena_mark(b) == 0 ? 0 : b->cur_chunk + 1;
    for (int i = keep; i < b->n_chunks; i++) {
        b->ops->free(b, b->chunks[i].data);
        mem_add(&b->mem_arena, -(int64_t)b->chunks[i].size);
    }
    if (keep < b->n_chunks) b->n_chunks = keep;
    if (keep == 0) b->cur_chunk = 0, b->cur_offset = 0;
    mem_update(b);
    if (b->ops->trim_scratch) b->ops->trim_scratch(b);
}

static void *arena_alloc(h3_backend *b, size_t bytes) {
    bytes = (bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    if (bytes == 0) bytes = ARENA_ALIGN;
    for (;;) {
        if (b->cur_chunk < b->n_chunks) {
            h3_arena_chunk *c = &b->chunks[b->cur_chunk];
            if (b->cur_offset + bytes <= c->size) {
                void *p = (char *)c->data + b->cur_offset;
                b->cur_offset += bytes;
                size_t used = h3_arena_mark(b);
                if (used > b->high_water) b->high_water = used;
                return p;
            }
            if (b->cur_chunk + 1 < b->n_chunks && b->chunks[b->cur_chunk + 1].size >= bytes) {
                b->cur_chunk++;
                b->cur_offset = 0;
                continue;
            }
        }
        /* Grow: a new chunk right after the current one. Later chunks that
         * are too small are dropped; this only happens while warming up. */
        size_t size = bytes > b->chunk_min_size ? bytes : b->chunk_min_size;
        if (h3_backend_limit_refuses(b, size, 0, "activations")) return NULL;
        /* the chunk table first: a failure then leaves the arena as it was */
        h3_arena_chunk *table = realloc(b->chunks, (size_t)(b->n_chunks + 1) * sizeof *b->chunks);
        if (table) b->chunks = table;
        void *data = table ? backend_alloc(b, size) : NULL;
        if (!data) {
            h3_backend_fail(b, H3_ERR_NO_MEMORY, "%s: cannot allocate %zu bytes of activations", b->ops->name, size);
            return NULL;
        }
        mem_add(&b->mem_arena, (int64_t)size);
        mem_update(b); /* the new chunk is live before the dropped ones are freed */
        int at = b->n_chunks ? b->cur_chunk + 1 : 0;
        if (at > b->n_chunks) at = b->n_chunks;
        for (int i = at; i < b->n_chunks; i++) {
            b->ops->free(b, b->chunks[i].data);
            mem_add(&b->mem_arena, -(int64_t)b->chunks[i].size);
        }
        b->n_chunks = at;
        b->chunks[b->n_chunks].data = data;
        b->chunks[b->n_chunks].size = size;
        b->n_chunks++;
        b->cur_chunk = at;
        b->cur_offset = 0;
    }
}

h3_tensor h3_new(h3_backend *b, h3_dtype dtype, int ndim, const int64_t *shape) {
    h3_tensor t = {0};
    if (ndim < 1 || ndim > H3_MAX_DIMS) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "h3_new: %d dims", ndim);
        return t;
    }
    t.dtype = dtype;
    t.ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            h3_backend_fail(b, H3_ERR_INTERNAL, "h3_new: negative dim %lld", (long long)shape[i]);
            t.ndim = 0;
            return t;
        }
        t.shape[i] = shape[i];
    }
    if (h3_backend_failed(b)) return t;
    t.data = arena_alloc(b, h3_tensor_nbytes(&t));
    return t;
}

h3_tensor h3_new_2d(h3_backend *b, h3_dtype dtype, int64_t rows, int64_t cols) {
    int64_t s[2] = {rows, cols};
    return h3_new(b, dtype, 2, s);
}

h3_tensor h3_new_1d(h3_backend *b, h3_dtype dtype, int64_t n) { return h3_new(b, dtype, 1, &n); }

/* ---- weights and host copies ------------------------------------------------------ */

static void convert_from_f32(void *dst, h3_dtype dtype, const float *src, size_t n) {
    if (dtype == H3_F32) {
        memcpy(dst, src, n * 4);
    } else if (dtype == H3_BF16) {
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = h3_f32_to_bf16(src[i]);
    } else if (dtype == H3_F16) {
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = h3_f32_to_f16(src[i]);
    }
}

static void convert_to_f32(float *dst, h3_dtype dtype, const void *src, size_t n) {
    if (dtype == H3_F32) {
        memcpy(dst, src, n * 4);
    } else if (dtype == H3_BF16) {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = h3_bf16_to_f32(s[i]);
    } else if (dtype == H3_F16) {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = h3_f16_to_f32(s[i]);
    } else if (dtype == H3_I32) {
        const int32_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = (float)s[i];
    }
}

static h3_status_code persistent_alloc(h3_backend *b, h3_dtype dtype, int ndim, const int64_t *shape, h3_tensor *out,
                                       h3_status *status) {
    memset(out, 0, sizeof *out);
    if (ndim < 1 || ndim > H3_MAX_DIMS)
        return h3_fail(status, H3_ERR_UNSUPPORTED, "tensor with %d dims (max %d)", ndim, H3_MAX_DIMS);
    out->dtype = dtype;
    out->ndim = ndim;
    memcpy(out->shape, shape, (size_t)ndim * sizeof *shape);
    /* an FP8 weight's scales follow its codes in the same allocation (h3_fp8.h) */
    int fp8 = dtype == H3_F8E4M3;
    size_t bytes = fp8 ? h3_fp8_weight_bytes(h3_tensor_rows(out), h3_tensor_cols(out)) : h3_tensor_nbytes(out);
    out->data = persistent_new(b, bytes ? bytes : 1);
    if (!out->data && h3_backend_failed(b)) return h3_backend_check(b, status); /* the limit's message */
    if (!out->data) return h3_fail(status, H3_ERR_NO_MEMORY, "%s: cannot allocate %zu bytes", b->ops->name, bytes);
    if (fp8) out->scale = (char *)out->data + h3_fp8_scale_offset(h3_tensor_numel(out));
    return H3_OK;
}

/* A table made on the host is checked there, before it is uploaded; the
 * caller's prefix names what it was made from. */
static int64_t count_nonfinite_host(const float *x, size_t n) {
    int64_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += !isfinite(x[i]);
    return bad;
}

h3_status_code h3_weight_from_f32(h3_backend *b, const float *host, h3_dtype dtype, int ndim, const int64_t *shape,
                                  h3_tensor *out, h3_status *status) {
    if (host && ndim >= 1 && ndim <= H3_MAX_DIMS) {
        size_t n = 1;
        for (int i = 0; i < ndim; i++) n *= (size_t)(shape[i] > 0 ? shape[i] : 0);
        int64_t bad = count_nonfinite_host(host, n);
        if (bad > 0)
            return h3_fail(status, H3_ERR_NONFINITE, "a table of %zu values holds %lld NaN or Inf", n, (long long)bad);
    }
    h3_status_code rc = persistent_alloc(b, dtype, ndim, shape, out, status);
    if (rc != H3_OK) return rc;
    rc = h3_tensor_upload_f32(b, out, host, status);
    if (rc != H3_OK) h3_weight_free(b, out);
    return rc;
}

h3_status_code h3_weight_zeros(h3_backend *b, h3_dtype dtype, int ndim, const int64_t *shape, h3_tensor *out,
                               h3_status *status) {
    h3_status_code rc = persistent_alloc(b, dtype, ndim, shape, out, status);
    if (rc != H3_OK) return rc;
    h3_op_fill(b, out, 0.0f);
    rc = h3_backend_check(b, status);
    if (rc != H3_OK) h3_weight_free(b, out);
    return rc;
}

h3_status_code h3_weight_from_i32(h3_backend *b, const int32_t *host, int64_t n, h3_tensor *out, h3_status *status) {
    h3_status_code rc = persistent_alloc(b, H3_I32, 1, &n, out, status);
    if (rc != H3_OK) return rc;
    if (b->ops->upload(b, out->data, host, (size_t)n * 4) != 0) {
        h3_weight_free(b, out);
        return h3_fail(status, H3_ERR_DEVICE, "%s: upload failed", b->ops->name);
    }
    return H3_OK;
}

/* The load-time pass over a weight as it lies on the backend, so a NaN or
 * Inf in a file (or one made by the conversion, e.g. a value past f16's
 * range) is refused here, by name, instead of turning the clip black. */
static h3_status_code check_weight_finite(h3_backend *b, const h3_st_tensor *src, const h3_tensor *w,
                                          h3_status *status) {
    int64_t bad = 0;
    h3_status_code rc = h3_tensor_count_nonfinite(b, w, &bad, status);
    if (rc == H3_OK && bad > 0)
        rc = h3_fail(status, H3_ERR_NONFINITE, "%s: tensor '%s' holds %lld NaN or Inf values (of %lld)",
                     src->file_path, src->name, (long long)bad, (long long)h3_tensor_numel(w));
    return rc;
}

h3_status_code h3_backend_set_linear_fp8(h3_backend *b, int on, h3_status *status) {
    if (on && !b->ops->quantize_fp8)
        return h3_fail(status, H3_ERR_UNSUPPORTED, "%s: no FP8 linear on this backend (precision=fp8 needs the CPU "
                       "backend or CUDA in bf16 on a GPU with FP8 tensor cores)", b->ops->name);
    if (on && b->ops->fp8_check) {
        h3_status_code rc = b->ops->fp8_check(b, status);
        if (rc != H3_OK) return rc;
    }
    b->linear_fp8 = on != 0;
    return H3_OK;
}

int h3_backend_linear_fp8(const h3_backend *b) { return b->linear_fp8; }

void h3_backend_fp8_counts(const h3_backend *b, int *quantised, int *kept) {
    *quantised = b->fp8_weights;
    *kept = b->fp8_kept;
}

/* precision=fp8: the loaded float weight w becomes E4M3 codes with per-row
 * scales, quantised where it lives; the float copy is freed, so the peak is
 * one weight in both forms (the measuring backend tallies the same). */
static h3_status_code weight_to_fp8(h3_backend *b, const h3_st_tensor *src, h3_tensor *w, h3_status *status) {
    h3_tensor q;
    h3_status_code rc = persistent_alloc(b, H3_F8E4M3, w->ndim, w->shape, &q, status);
    if (rc == H3_OK) {
        b->ops->quantize_fp8(b, &q, w);
        rc = h3_backend_check(b, status);
        if (rc != H3_OK) h3_weight_free(b, &q);
    }
    h3_weight_free(b, w);
    if (rc != H3_OK) return h3_status_prefix(status, "%s: tensor '%s' to fp8", src->file_path, src->name);
    *w = q;
    return H3_OK;
}

static h3_status_code weight_load_float(h3_backend *b, const h3_st_tensor *src, h3_weight_type type, h3_tensor *out,
                                        h3_status *status);

h3_status_code h3_weight_quantize_fp8(h3_backend *b, const h3_tensor *src, h3_tensor *out, h3_status *status) {
    memset(out, 0, sizeof *out);
    if (!b->ops->quantize_fp8)
        return h3_fail(status, H3_ERR_UNSUPPORTED, "%s: no FP8 linear on this backend", b->ops->name);
    if (src->ndim != 2 || src->dtype == H3_I32 || src->dtype == H3_F8E4M3 || !src->data)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "quantize_fp8: a %d-D %s tensor (want a float matrix)",
                       src->ndim, h3_dtype_name(src->dtype));
    h3_status_code rc = persistent_alloc(b, H3_F8E4M3, 2, src->shape, out, status);
    if (rc != H3_OK) return rc;
    b->ops->quantize_fp8(b, out, src);
    rc = h3_backend_check(b, status);
    if (rc != H3_OK) h3_weight_free(b, out);
    return rc;
}

h3_status_code h3_weight_load(h3_backend *b, const h3_st_tensor *src, h3_weight_type type, h3_tensor *out,
                              h3_status *status) {
    h3_status_code rc = weight_load_float(b, src, type, out, status);
    if (rc != H3_OK || type != H3_WEIGHT_LINEAR || !b->linear_fp8 || out->ndim != 2) return rc;
    /* The FP8 GEMMs take shapes in multiples of 16 (16-byte rows of E4M3
     * codes for cuBLASLt's FP8 kernels; out-features too, as torch's
     * _scaled_mm asks; every linear of the release qualifies, its TP shards
     * too). The others keep the compute type on every backend alike, so the
     * CPU and the GPU agree, counted for the engine's log. */
    if (out->shape[1] % 16 != 0 || out->shape[0] % 16 != 0) {
        b->fp8_kept++;
        return H3_OK;
    }
    rc = weight_to_fp8(b, src, out, status);
    if (rc == H3_OK) b->fp8_weights++;
    return rc;
}

static h3_status_code weight_load_float(h3_backend *b, const h3_st_tensor *src, h3_weight_type type, h3_tensor *out,
                                        h3_status *status) {
    h3_dtype file_dtype;
    switch (src->dtype) {
    case H3_ST_F32: file_dtype = H3_F32; break;
    case H3_ST_BF16: file_dtype = H3_BF16; break;
    case H3_ST_F16: file_dtype = H3_F16; break;
    default:
        return h3_fail(status, H3_ERR_FORMAT, "%s: tensor '%s' has dtype %s; weights must be F32, BF16 or F16",
                       src->file_path, src->name, h3_st_dtype_name(src->dtype));
    }
    if (src->ndim < 1 || src->ndim > H3_MAX_DIMS)
        return h3_fail(status, H3_ERR_FORMAT, "%s: tensor '%s' has %d dims", src->file_path, src->name, src->ndim);
    h3_dtype dtype = b->ops->weight_dtype(b, type, file_dtype);
    h3_status_code rc = persistent_alloc(b, dtype, src->ndim, src->shape, out, status);
    if (rc != H3_OK) return h3_status_prefix(status, "%s: tensor '%s'", src->file_path, src->name);
    size_t n = (size_t)src->numel;
    if (!b->ops->no_data && h3_st_is_dummy(src)) {
        /* load-format dummy: drawn where it lives, no host copy */
        h3_op_fill_random(b, out, &src->random, src->dtype);
        rc = h3_backend_check(b, status);
        if (rc == H3_OK && (rc = check_weight_finite(b, src, out, status)) == H3_ERR_NONFINITE) {
            h3_weight_free(b, out);
            return rc; /* it names the tensor */
        }
        if (rc != H3_OK) {
            h3_weight_free(b, out);
            return h3_status_prefix(status, "%s: tensor '%s'", src->file_path, src->name);
        }
        return H3_OK;
    }
    if (b->ops->no_data) {
        /* measuring: the weight's place is taken, its bytes are not read */
    } else if (dtype == file_dtype) {
        if (b->ops->upload(b, out->data, src->data, src->nbytes) != 0) rc = H3_ERR_DEVICE;
    } else {
        float *tmp = host_alloc(b, n * 4 + 4);
        void *conv = host_alloc(b, n * h3_dtype_size(dtype) + 4);
        if (!tmp || !conv) {
            rc = H3_ERR_NO_MEMORY;
        } else {
            rc = h3_st_to_f32(src, tmp, n, status);
            if (rc == H3_OK) {
                convert_from_f32(conv, dtype, tmp, n);
                if (b->ops->upload(b, out->data, conv, n * h3_dtype_size(dtype)) != 0) rc = H3_ERR_DEVICE;
            }
        }
        free(tmp);
        free(conv);
    }
    if (rc != H3_OK) {
        h3_weight_free(b, out);
        if (rc == H3_ERR_NO_MEMORY || rc == H3_ERR_DEVICE)
            return h3_fail(status, rc, "%s: tensor '%s': %s while loading", src->file_path, src->name,
                           h3_status_code_name(rc));
        return rc;
    }
    rc = check_weight_finite(b, src, out, status);
    if (rc != H3_OK) {
        h3_weight_free(b, out);
        if (rc != H3_ERR_NONFINITE) h3_status_prefix(status, "%s: tensor '%s'", src->file_path, src->name);
    }
    return rc;
}

void h3_weight_free(h3_backend *b, h3_tensor *t) {
    if (t && t->data && t->on_host) h3_weight_host_free(b, t->data); /* a streamed weight (h3_weight_stream.c) */
    else if (t && t->data) persistent_delete(b, t->data);
    if (t) memset(t, 0, sizeof *t);
}

/* A tensor whose arena allocation failed has no data; the sticky error says
 * why, so report that instead of copying into NULL. */
static h3_status_code check_copy_target(h3_backend *b, const h3_tensor *t, h3_status *status) {
    if (h3_backend_failed(b)) return h3_backend_check(b, status);
    if (!t || !t->data) return h3_fail(status, H3_ERR_INTERNAL, "%s: copy to or from an unallocated tensor", b->ops->name);
    if (t->on_host)
        return h3_fail(status, H3_ERR_INTERNAL, "%s: copy to or from a host-resident weight (memory=stream)", b->ops->name);
    return H3_OK;
}

h3_status_code h3_tensor_upload_f32(h3_backend *b, h3_tensor *dst, const float *host, h3_status *status) {
    h3_status_code check = check_copy_target(b, dst, status);
    if (check != H3_OK) return check;
    size_t n = (size_t)h3_tensor_numel(dst);
    if (dst->dtype == H3_I32) return h3_fail(status, H3_ERR_INTERNAL, "upload_f32 into an i32 tensor");
    if (dst->dtype == H3_F8E4M3) return h3_fail(status, H3_ERR_INTERNAL, "upload_f32 into an f8e4m3 tensor (quantise a loaded weight instead)");
    if (b->ops->no_data) return H3_OK;
    void *tmp = (void *)host;
    if (dst->dtype != H3_F32) {
        tmp = host_alloc(b, n * h3_dtype_size(dst->dtype) + 4);
        if (!tmp) return h3_fail(status, H3_ERR_NO_MEMORY, "upload: out of host memory");
        convert_from_f32(tmp, dst->dtype, host, n);
    }
    int rc = b->ops->upload(b, dst->data, tmp, n * h3_dtype_size(dst->dtype));
    if (tmp != host) free(tmp);
    return rc ? h3_fail(status, H3_ERR_DEVICE, "%s: upload failed", b->ops->name) : H3_OK;
}

h3_status_code h3_tensor_upload_i32(h3_backend *b, h3_tensor *dst, const int32_t *host, h3_status *status) {
    h3_status_code check = check_copy_target(b, dst, status);
    if (check != H3_OK) return check;
    if (dst->dtype != H3_I32) return h3_fail(status, H3_ERR_INTERNAL, "upload_i32 into a %s tensor", h3_dtype_name(dst->dtype));
    int rc = b->ops->upload(b, dst->data, host, h3_tensor_nbytes(dst));
    return rc ? h3_fail(status, H3_ERR_DEVICE, "%s: upload failed", b->ops->name) : H3_OK;
}

/* An FP8 tensor's values: its codes times its rows' scales. */
static h3_status_code download_fp8(h3_backend *b, const h3_tensor *src, float *host, h3_status *status) {
    size_t n = (size_t)h3_tensor_numel(src), rows = (size_t)h3_tensor_rows(src), cols = (size_t)h3_tensor_cols(src);
    if (!src->scale) return h3_fail(status, H3_ERR_INTERNAL, "%s: download of an f8e4m3 tensor without scales", b->ops->name);
    uint8_t *codes = host_alloc(b, n + rows * sizeof(float) + 4);
    if (!codes) return h3_fail(status, H3_ERR_NO_MEMORY, "download: out of host memory");
    float *scales = (float *)(void *)(codes + ((n + 3) & ~(size_t)3));
    int rc = b->ops->download(b, codes, src->data, n) || b->ops->download(b, scales, src->scale, rows * sizeof(float));
    for (size_t i = 0; rc == 0 && i < n; i++) host[i] = h3_fp8_to_f32(codes[i]) * scales[i / cols];
    free(codes);
    return rc ? h3_fail(status, H3_ERR_DEVICE, "%s: download failed", b->ops->name) : H3_OK;
}

h3_status_code h3_tensor_download_f32(h3_backend *b, const h3_tensor *src, float *host, h3_status *status) {
    h3_status_code check = check_copy_target(b, src, status);
    if (check != H3_OK) return check;
    size_t n = (size_t)h3_tensor_numel(src);
    if (b->ops->no_data) {
        memset(host, 0, n * sizeof(float)); /* measuring: nothing was computed */
        return H3_OK;
    }
    if (src->dtype == H3_F8E4M3) return download_fp8(b, src, host, status);
    if (src->dtype == H3_F32) {
        if (b->ops->download(b, host, src->data, n * 4) != 0)
            return h3_fail(status, H3_ERR_DEVICE, "%s: download failed", b->ops->name);
        return H3_OK;
    }
    void *tmp = host_alloc(b, n * h3_dtype_size(src->dtype) + 4);
    if (!tmp) return h3_fail(status, H3_ERR_NO_MEMORY, "download: out of host memory");
    int rc = b->ops->download(b, tmp, src->data, n * h3_dtype_size(src->dtype));
    if (rc == 0) convert_to_f32(host, src->dtype, tmp, n);
    free(tmp);
    return rc ? h3_fail(status, H3_ERR_DEVICE, "%s: download failed", b->ops->name) : H3_OK;
}

/* ---- values that must be finite ------------------------------------------------------ */

/* No kernel of its own: count a host copy (small tensors, other backends). */
static h3_status_code count_on_host(h3_backend *b, const h3_tensor *t, int64_t *count, h3_status *status) {
    size_t n = (size_t)h3_tensor_numel(t);
    float *host = host_alloc(b, n * sizeof(float) + 4);
    if (!host) return h3_fail(status, H3_ERR_NO_MEMORY, "count_nonfinite: no host memory for %zu values", n);
    h3_status_code rc = h3_tensor_download_f32(b, t, host, status);
    if (rc == H3_OK) *count = count_nonfinite_host(host, n);
    free(host);
    return rc;
}

h3_status_code h3_tensor_count_nonfinite(h3_backend *b, const h3_tensor *t, int64_t *count, h3_status *status) {
    *count = 0;
    h3_status_code rc = check_copy_target(b, t, status);
    if (rc != H3_OK) return rc;
    if (t->dtype == H3_I32) return h3_fail(status, H3_ERR_INTERNAL, "count_nonfinite: an i32 tensor");
    if (b->ops->no_data || h3_tensor_numel(t) == 0) return H3_OK; /* measuring: nothing to count */
    if (!b->ops->count_nonfinite || t->dtype == H3_F8E4M3) return count_on_host(b, t, count, status);
    int64_t n = b->ops->count_nonfinite(b, t);
    if (n < 0) {
        if (!h3_backend_failed(b)) h3_backend_fail(b, H3_ERR_DEVICE, "%s: count_nonfinite failed", b->ops->name);
        return h3_backend_check(b, status);
    }
    *count = n;
    return H3_OK;
}
