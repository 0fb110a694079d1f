/* h3_backend.c - backend-independent half of the op interface: tensor
 * helpers, the activation arena, weight upload, and the shape checks that
 * every op goes through before reaching a backend. */
#include "backend/h3_backend_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_ALIGN 256
#define ARENA_DEFAULT_CHUNK ((size_t)64 << 20)

/* ---- tensors ---------------------------------------------------------------- */

size_t h3_dtype_size(h3_dtype dtype) {
    switch (dtype) {
    case H3_F32: return 4;
    case H3_BF16: return 2;
    case H3_F16: return 2;
    case H3_I32: return 4;
    }
    return 0;
}

const char *h3_dtype_name(h3_dtype dtype) {
    switch (dtype) {
    case H3_F32: return "f32";
    case H3_BF16: return "bf16";
    case H3_F16: return "f16";
    case H3_I32: return "i32";
    }
    return "?";
}

int64_t h3_tensor_numel(const h3_tensor *t) {
    if (t->ndim <= 0) return 0;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

size_t h3_tensor_nbytes(const h3_tensor *t) { return (size_t)h3_tensor_numel(t) * h3_dtype_size(t->dtype); }

int64_t h3_tensor_cols(const h3_tensor *t) { return t->ndim > 0 ? t->shape[t->ndim - 1] : 0; }

int64_t h3_tensor_rows(const h3_tensor *t) {
    int64_t c = h3_tensor_cols(t);
    return c ? h3_tensor_numel(t) / c : 0;
}

h3_tensor h3_tensor_2d(const h3_tensor *t, int64_t rows, int64_t cols) {
    int64_t shape[2] = {rows, cols};
    return h3_tensor_reshape(t, 2, shape);
}

h3_tensor h3_tensor_reshape(const h3_tensor *t, int ndim, const int64_t *shape) {
    h3_tensor v = {0};
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    if (ndim < 1 || ndim > H3_MAX_DIMS || n != h3_tensor_numel(t)) return v;
    v.dtype = t->dtype;
    v.ndim = ndim;
    memcpy(v.shape, shape, (size_t)ndim * sizeof *shape);
    v.data = t->data;
    return v;
}

h3_tensor h3_tensor_rows_view(const h3_tensor *t, int64_t row0, int64_t nrows) {
    h3_tensor v = {0};
    int64_t rows = h3_tensor_rows(t), cols = h3_tensor_cols(t);
    if (row0 < 0 || nrows < 0 || row0 + nrows > rows) return v;
    v.dtype = t->dtype;
    v.ndim = 2;
    v.shape[0] = nrows;
    v.shape[1] = cols;
    v.data = t->data ? (char *)t->data + (size_t)(row0 * cols) * h3_dtype_size(t->dtype) : NULL;
    return v;
}

/* ---- errors ------------------------------------------------------------------ */

void h3_backend_init(h3_backend *b, const h3_backend_ops *ops, void *impl) {
    memset(b, 0, sizeof *b);
    b->ops = ops;
    b->impl = impl;
    b->compute_dtype = ops->compute_dtype;
    b->chunk_min_size = ARENA_DEFAULT_CHUNK;
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
        void *data = b->ops->alloc(b, size);
        if (!data) {
            h3_backend_fail(b, H3_ERR_NO_MEMORY, "%s: cannot allocate %zu bytes of activations", b->ops->name, size);
            return NULL;
        }
        int at = b->n_chunks ? b->cur_chunk + 1 : 0;
        if (at > b->n_chunks) at = b->n_chunks;
        for (int i = at; i < b->n_chunks; i++) b->ops->free(b, b->chunks[i].data);
        b->n_chunks = at;
        b->chunks = realloc(b->chunks, (size_t)(b->n_chunks + 1) * sizeof *b->chunks);
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
    size_t bytes = h3_tensor_nbytes(out);
    out->data = b->ops->alloc(b, bytes ? bytes : 1);
    if (!out->data) return h3_fail(status, H3_ERR_NO_MEMORY, "%s: cannot allocate %zu bytes", b->ops->name, bytes);
    return H3_OK;
}

h3_status_code h3_weight_from_f32(h3_backend *b, const float *host, h3_dtype dtype, int ndim, const int64_t *shape,
                                  h3_tensor *out, h3_status *status) {
    h3_status_code rc = persistent_alloc(b, dtype, ndim, shape, out, status);
    if (rc != H3_OK) return rc;
    rc = h3_tensor_upload_f32(b, out, host, status);
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

h3_status_code h3_weight_load(h3_backend *b, const h3_st_tensor *src, h3_weight_type type, h3_tensor *out,
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
    if (dtype == file_dtype) {
        if (b->ops->upload(b, out->data, src->data, src->nbytes) != 0) rc = H3_ERR_DEVICE;
    } else {
        float *tmp = malloc(n * 4 + 4);
        void *conv = malloc(n * h3_dtype_size(dtype) + 4);
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
    return H3_OK;
}

void h3_weight_free(h3_backend *b, h3_tensor *t) {
    if (t && t->data) b->ops->free(b, t->data);
    if (t) memset(t, 0, sizeof *t);
}

/* A tensor whose arena allocation failed has no data; the sticky error says
 * why, so report that instead of copying into NULL. */
static h3_status_code check_copy_target(h3_backend *b, const h3_tensor *t, h3_status *status) {
    if (h3_backend_failed(b)) return h3_backend_check(b, status);
    if (!t || !t->data) return h3_fail(status, H3_ERR_INTERNAL, "%s: copy to or from an unallocated tensor", b->ops->name);
    return H3_OK;
}

h3_status_code h3_tensor_upload_f32(h3_backend *b, h3_tensor *dst, const float *host, h3_status *status) {
    h3_status_code check = check_copy_target(b, dst, status);
    if (check != H3_OK) return check;
    size_t n = (size_t)h3_tensor_numel(dst);
    if (dst->dtype == H3_I32) return h3_fail(status, H3_ERR_INTERNAL, "upload_f32 into an i32 tensor");
    void *tmp = (void *)host;
    if (dst->dtype != H3_F32) {
        tmp = malloc(n * h3_dtype_size(dst->dtype) + 4);
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

h3_status_code h3_tensor_download_f32(h3_backend *b, const h3_tensor *src, float *host, h3_status *status) {
    h3_status_code check = check_copy_target(b, src, status);
    if (check != H3_OK) return check;
    size_t n = (size_t)h3_tensor_numel(src);
    if (src->dtype == H3_F32) {
        if (b->ops->download(b, host, src->data, n * 4) != 0)
            return h3_fail(status, H3_ERR_DEVICE, "%s: download failed", b->ops->name);
        return H3_OK;
    }
    void *tmp = malloc(n * h3_dtype_size(src->dtype) + 4);
    if (!tmp) return h3_fail(status, H3_ERR_NO_MEMORY, "download: out of host memory");
    int rc = b->ops->download(b, tmp, src->data, n * h3_dtype_size(src->dtype));
    if (rc == 0) convert_to_f32(host, src->dtype, tmp, n);
    free(tmp);
    return rc ? h3_fail(status, H3_ERR_DEVICE, "%s: download failed", b->ops->name) : H3_OK;
}

/* ---- op validation and dispatch ----------------------------------------------------- */

static int is_float(const h3_tensor *t) { return t->dtype != H3_I32; }

static int ok_tensor(h3_backend *b, const char *op, const char *what, const h3_tensor *t) {
    if (!t || !t->data || t->ndim < 1) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "%s: %s is missing or unallocated", op, what);
        return 0;
    }
    return 1;
}

static int same_numel(h3_backend *b, const char *op, const h3_tensor *a, const h3_tensor *c) {
    if (h3_tensor_numel(a) != h3_tensor_numel(c)) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "%s: element counts differ (%lld vs %lld)", op,
                        (long long)h3_tensor_numel(a), (long long)h3_tensor_numel(c));
        return 0;
    }
    return 1;
}

#define GUARD(b) do { if (h3_backend_failed(b)) return; } while (0)
#define NEED(b, op, what, t) do { if (!ok_tensor(b, op, what, t)) return; } while (0)
#define REQUIRE(b, cond, ...) do { if (!(cond)) { h3_backend_fail(b, H3_ERR_INTERNAL, __VA_ARGS__); return; } } while (0)

void h3_op_linear(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias) {
    GUARD(b);
    NEED(b, "linear", "y", y); NEED(b, "linear", "x", x); NEED(b, "linear", "w", w);
    int64_t K = h3_tensor_cols(x), M = h3_tensor_rows(x);
    REQUIRE(b, w->ndim == 2 && w->shape[1] == K, "linear: w is [%lld,%lld], x has %lld cols", (long long)w->shape[0],
            (long long)(w->ndim > 1 ? w->shape[1] : 0), (long long)K);
    int64_t N = w->shape[0];
    REQUIRE(b, h3_tensor_rows(y) == M && h3_tensor_cols(y) == N, "linear: y is %lldx%lld, want %lldx%lld",
            (long long)h3_tensor_rows(y), (long long)h3_tensor_cols(y), (long long)M, (long long)N);
    REQUIRE(b, !bias || h3_tensor_numel(bias) == N, "linear: bias has %lld elements, want %lld",
            (long long)h3_tensor_numel(bias), (long long)N);
    REQUIRE(b, y->data != x->data, "linear: y aliases x");
    b->ops->linear(b, y, x, w, bias);
}

void h3_op_rms_norm(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, int64_t width, float eps) {
    GUARD(b);
    NEED(b, "rms_norm", "y", y); NEED(b, "rms_norm", "x", x);
    if (!same_numel(b, "rms_norm", y, x)) return;
    REQUIRE(b, width > 0 && h3_tensor_cols(x) % width == 0, "rms_norm: width %lld does not divide %lld",
            (long long)width, (long long)h3_tensor_cols(x));
    REQUIRE(b, !w || h3_tensor_numel(w) == width, "rms_norm: weight has %lld elements, width %lld",
            (long long)h3_tensor_numel(w), (long long)width);
    b->ops->rms_norm(b, y, x, w, width, eps);
}

void h3_op_layer_norm(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                      float eps) {
    GUARD(b);
    NEED(b, "layer_norm", "y", y); NEED(b, "layer_norm", "x", x);
    if (!same_numel(b, "layer_norm", y, x)) return;
    int64_t D = h3_tensor_cols(x);
    REQUIRE(b, (!w || h3_tensor_numel(w) == D) && (!bias || h3_tensor_numel(bias) == D),
            "layer_norm: weight/bias size differs from %lld", (long long)D);
    b->ops->layer_norm(b, y, x, w, bias, eps);
}

static void binary(h3_backend *b, int op, h3_tensor *y, const h3_tensor *x0, const h3_tensor *x1) {
    GUARD(b);
    NEED(b, "binary", "y", y); NEED(b, "binary", "x0", x0); NEED(b, "binary", "x1", x1);
    if (!same_numel(b, op ? "mul" : "add", y, x0) || !same_numel(b, op ? "mul" : "add", y, x1)) return;
    b->ops->binary(b, op, y, x0, x1);
}
void h3_op_add(h3_backend *b, h3_tensor *y, const h3_tensor *x0, const h3_tensor *x1) { binary(b, 0, y, x0, x1); }
void h3_op_mul(h3_backend *b, h3_tensor *y, const h3_tensor *x0, const h3_tensor *x1) { binary(b, 1, y, x0, x1); }

static void row_vector(h3_backend *b, int op, h3_tensor *y, const h3_tensor *x, const h3_tensor *v) {
    GUARD(b);
    NEED(b, "row_vector", "y", y); NEED(b, "row_vector", "x", x); NEED(b, "row_vector", "v", v);
    if (!same_numel(b, "row_vector", y, x)) return;
    REQUIRE(b, h3_tensor_numel(v) == h3_tensor_cols(x), "row_vector: vector has %lld elements, rows have %lld",
            (long long)h3_tensor_numel(v), (long long)h3_tensor_cols(x));
    b->ops->row_vector(b, op, y, x, v);
}
void h3_op_mul_row_vector(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *v) { row_vector(b, 0, y, x, v); }
void h3_op_add_row_vector(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *v) { row_vector(b, 1, y, x, v); }

void h3_op_scale(h3_backend *b, h3_tensor *y, const h3_tensor *x, float alpha) {
    GUARD(b);
    NEED(b, "scale", "y", y); NEED(b, "scale", "x", x);
    if (!same_numel(b, "scale", y, x)) return;
    b->ops->scale(b, y, x, alpha);
}

static void unary(h3_backend *b, int op, h3_tensor *y, const h3_tensor *x) {
    GUARD(b);
    NEED(b, "unary", "y", y); NEED(b, "unary", "x", x);
    if (!same_numel(b, "unary", y, x)) return;
    b->ops->unary(b, op, y, x);
}
void h3_op_silu(h3_backend *b, h3_tensor *y, const h3_tensor *x) { unary(b, 0, y, x); }
void h3_op_gelu(h3_backend *b, h3_tensor *y, const h3_tensor *x, int approximate) { unary(b, approximate ? 2 : 1, y, x); }

void h3_op_swiglu(h3_backend *b, h3_tensor *y, const h3_tensor *u, int value_first) {
    GUARD(b);
    NEED(b, "swiglu", "y", y); NEED(b, "swiglu", "u", u);
    REQUIRE(b, h3_tensor_rows(y) == h3_tensor_rows(u) && 2 * h3_tensor_cols(y) == h3_tensor_cols(u),
            "swiglu: u is %lldx%lld, y is %lldx%lld", (long long)h3_tensor_rows(u), (long long)h3_tensor_cols(u),
            (long long)h3_tensor_rows(y), (long long)h3_tensor_cols(y));
    b->ops->swiglu(b, y, u, value_first);
}

static int check_sel(h3_backend *b, const char *op, const h3_tensor *sel, int64_t S, int64_t table_rows) {
    if (!ok_tensor(b, op, "sel", sel)) return 0;
    if (sel->dtype != H3_I32 || h3_tensor_numel(sel) != S) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "%s: selector must be i32 [%lld]", op, (long long)S);
        return 0;
    }
    (void)table_rows; /* values are checked where the selector is built */
    return 1;
}

void h3_op_modulate(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *shift, const h3_tensor *scale,
                    const h3_tensor *sel) {
    GUARD(b);
    NEED(b, "modulate", "y", y); NEED(b, "modulate", "x", x);
    NEED(b, "modulate", "shift", shift); NEED(b, "modulate", "scale", scale);
    if (!same_numel(b, "modulate", y, x)) return;
    int64_t D = h3_tensor_cols(x);
    REQUIRE(b, h3_tensor_cols(shift) == D && h3_tensor_cols(scale) == D, "modulate: table width differs from %lld",
            (long long)D);
    if (!check_sel(b, "modulate", sel, h3_tensor_rows(x), h3_tensor_rows(shift))) return;
    b->ops->modulate(b, y, x, shift, scale, sel);
}

void h3_op_gated_residual(h3_backend *b, h3_tensor *x, const h3_tensor *gate, const h3_tensor *y, const h3_tensor *sel) {
    GUARD(b);
    NEED(b, "gated_residual", "x", x); NEED(b, "gated_residual", "gate", gate); NEED(b, "gated_residual", "y", y);
    if (!same_numel(b, "gated_residual", x, y)) return;
    REQUIRE(b, h3_tensor_cols(gate) == h3_tensor_cols(x), "gated_residual: gate width differs");
    if (!check_sel(b, "gated_residual", sel, h3_tensor_rows(x), h3_tensor_rows(gate))) return;
    b->ops->gated_residual(b, x, gate, y, sel);
}

void h3_op_rope(h3_backend *b, h3_tensor *x, const h3_tensor *cos, const h3_tensor *sin, int n_heads, int head_dim,
                int rot_dim) {
    GUARD(b);
    NEED(b, "rope", "x", x); NEED(b, "rope", "cos", cos); NEED(b, "rope", "sin", sin);
    int64_t S = h3_tensor_rows(x);
    REQUIRE(b, h3_tensor_cols(x) == (int64_t)n_heads * head_dim, "rope: x has %lld cols, want %d heads x %d",
            (long long)h3_tensor_cols(x), n_heads, head_dim);
    REQUIRE(b, rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= head_dim, "rope: bad rot_dim %d", rot_dim);
    REQUIRE(b, cos->dtype == H3_F32 && sin->dtype == H3_F32, "rope: cos/sin must be f32");
    REQUIRE(b, h3_tensor_rows(cos) == S && h3_tensor_cols(cos) == rot_dim && h3_tensor_rows(sin) == S &&
                   h3_tensor_cols(sin) == rot_dim,
            "rope: cos/sin must be [%lld, %d]", (long long)S, rot_dim);
    b->ops->rope(b, x, cos, sin, n_heads, head_dim, rot_dim);
}

void h3_op_attention(h3_backend *b, h3_tensor *o, const h3_tensor *q, const h3_tensor *k, const h3_tensor *v,
                     int n_heads, int n_kv_heads, int head_dim, int causal, float scale) {
    GUARD(b);
    NEED(b, "attention", "o", o); NEED(b, "attention", "q", q);
    NEED(b, "attention", "k", k); NEED(b, "attention", "v", v);
    REQUIRE(b, n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0 && head_dim > 0,
            "attention: bad heads %d/%d", n_heads, n_kv_heads);
    REQUIRE(b, h3_tensor_cols(q) == (int64_t)n_heads * head_dim && h3_tensor_cols(o) == h3_tensor_cols(q) &&
                   h3_tensor_rows(o) == h3_tensor_rows(q),
            "attention: q/o shape mismatch");
    REQUIRE(b, h3_tensor_cols(k) == (int64_t)n_kv_heads * head_dim && h3_tensor_cols(v) == h3_tensor_cols(k) &&
                   h3_tensor_rows(v) == h3_tensor_rows(k),
            "attention: k/v shape mismatch");
    REQUIRE(b, !causal || h3_tensor_rows(q) == h3_tensor_rows(k), "attention: causal needs Sq == Skv");
    REQUIRE(b, o->data != q->data && o->data != k->data && o->data != v->data, "attention: o aliases an input");
    b->ops->attention(b, o, q, k, v, n_heads, n_kv_heads, head_dim, causal, scale);
}

/* H3_OPS_VSA_BEGIN */
int h3_backend_has_vsa_attention(const h3_backend *b) { return b->ops->vsa_attention != NULL; }

/* The tile tables' shapes and the scalars; their values are the plan
 * builder's invariants (h3_vsa.c), checked again by the CPU kernel. */
static int vsa_tiles_ok(h3_backend *b, const h3_vsa_tiles *t, int64_t S) {
    if (!t) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "vsa_attention: no tile tables");
        return 0;
    }
    int64_t n = t->num_tiles, P = t->num_prefix_tiles;
    if (n < 1 || P < 0 || P > n || t->tile_elems < 1 || (n > P && (t->topk < 1 || t->topk > n - P)) ||
        n * t->tile_elems < S) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "vsa_attention: %lld tiles (%lld prefix) of %d rows, top-k %lld for %lld rows",
                        (long long)n, (long long)P, t->tile_elems, (long long)t->topk, (long long)S);
        return 0;
    }
    const h3_tensor *tables[] = {&t->tile_sizes, &t->tile_order, &t->untile_index};
    const int64_t want[] = {n, S, S};
    for (int i = 0; i < 3; i++)
        if (!ok_tensor(b, "vsa_attention", "a tile table", tables[i])) return 0;
        else if (tables[i]->dtype != H3_I32 || h3_tensor_numel(tables[i]) != want[i]) {
            h3_backend_fail(b, H3_ERR_INTERNAL, "vsa_attention: tile table %d must be i32 [%lld]", i, (long long)want[i]);
            return 0;
        }
    return 1;
}

void h3_op_vsa_attention(h3_backend *b, h3_tensor *o, const h3_tensor *q, const h3_tensor *k, const h3_tensor *v,
                         const h3_tensor *gate, const h3_vsa_tiles *tiles, int n_heads, int head_dim) {
    GUARD(b);
    if (!b->ops->vsa_attention) {
        h3_backend_fail(b, H3_ERR_UNSUPPORTED, "vsa_attention: the %s backend has no VSA-H3 kernel", b->ops->name);
        return;
    }
    NEED(b, "vsa_attention", "o", o); NEED(b, "vsa_attention", "q", q);
    NEED(b, "vsa_attention", "k", k); NEED(b, "vsa_attention", "v", v);
    if (gate) NEED(b, "vsa_attention", "gate", gate);
    int64_t S = h3_tensor_rows(q), W = (int64_t)n_heads * head_dim;
    REQUIRE(b, n_heads > 0 && head_dim > 0, "vsa_attention: %d heads of %d", n_heads, head_dim);
    const h3_tensor *all[] = {o, k, v, gate};
    for (int i = 0; i < 4; i++)
        REQUIRE(b, !all[i] || (h3_tensor_rows(all[i]) == S && h3_tensor_cols(all[i]) == W && all[i]->dtype == q->dtype),
                "vsa_attention: o, k, v and gate must be %s [%lld, %lld] like q", h3_dtype_name(q->dtype), (long long)S,
                (long long)W);
    REQUIRE(b, h3_tensor_cols(q) == W && is_float(q), "vsa_attention: q is not a float [S, %d x %d]", n_heads, head_dim);
    REQUIRE(b, o->data != q->data && o->data != k->data && o->data != v->data && (!gate || o->data != gate->data),
            "vsa_attention: o aliases an input");
    if (!vsa_tiles_ok(b, tiles, S)) return;
    b->ops->vsa_attention(b, o, q, k, v, gate, tiles, n_heads, head_dim);
}
/* H3_OPS_VSA_END */

void h3_op_gather_rows(h3_backend *b, h3_tensor *dst, const h3_tensor *src, const h3_tensor *idx) {
    GUARD(b);
    NEED(b, "gather_rows", "dst", dst); NEED(b, "gather_rows", "src", src); NEED(b, "gather_rows", "idx", idx);
    REQUIRE(b, idx->dtype == H3_I32 && h3_tensor_numel(idx) == h3_tensor_rows(dst) &&
                   h3_tensor_cols(dst) == h3_tensor_cols(src),
            "gather_rows: shapes do not fit");
    b->ops->gather_rows(b, dst, src, idx);
}

void h3_op_scatter_rows(h3_backend *b, h3_tensor *dst, const h3_tensor *src, const h3_tensor *idx) {
    GUARD(b);
    NEED(b, "scatter_rows", "dst", dst); NEED(b, "scatter_rows", "src", src); NEED(b, "scatter_rows", "idx", idx);
    REQUIRE(b, idx->dtype == H3_I32 && h3_tensor_numel(idx) == h3_tensor_rows(src) &&
                   h3_tensor_cols(dst) == h3_tensor_cols(src),
            "scatter_rows: shapes do not fit");
    b->ops->scatter_rows(b, dst, src, idx);
}

void h3_op_copy(h3_backend *b, h3_tensor *dst, const h3_tensor *src) {
    GUARD(b);
    NEED(b, "copy", "dst", dst); NEED(b, "copy", "src", src);
    if (!same_numel(b, "copy", dst, src)) return;
    REQUIRE(b, is_float(dst) == is_float(src), "copy: between int and float");
    b->ops->copy(b, dst, src);
}

void h3_op_fill(h3_backend *b, h3_tensor *dst, float value) {
    GUARD(b);
    NEED(b, "fill", "dst", dst);
    b->ops->fill(b, dst, value);
}

/* ---- fused ops: validated like the ops they replace -------------------------------- */

void h3_op_rms_norm_modulate(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, float eps,
                             const h3_tensor *shift, const h3_tensor *scale, const h3_tensor *sel) {
    GUARD(b);
    if (!b->ops->rms_norm_modulate) {
        h3_op_rms_norm(b, y, x, w, h3_tensor_cols(x), eps);
        h3_op_modulate(b, y, y, shift, scale, sel);
        return;
    }
    NEED(b, "rms_norm_modulate", "y", y); NEED(b, "rms_norm_modulate", "x", x);
    NEED(b, "rms_norm_modulate", "shift", shift); NEED(b, "rms_norm_modulate", "scale", scale);
    if (!same_numel(b, "rms_norm_modulate", y, x)) return;
    int64_t D = h3_tensor_cols(x);
    REQUIRE(b, !w || h3_tensor_numel(w) == D, "rms_norm_modulate: weight has %lld elements, rows %lld",
            (long long)h3_tensor_numel(w), (long long)D);
    REQUIRE(b, h3_tensor_cols(shift) == D && h3_tensor_cols(scale) == D,
            "rms_norm_modulate: table width differs from %lld", (long long)D);
    if (!check_sel(b, "rms_norm_modulate", sel, h3_tensor_rows(x), h3_tensor_rows(shift))) return;
    b->ops->rms_norm_modulate(b, y, x, w, eps, shift, scale, sel);
}

void h3_op_qk_norm_rope(h3_backend *b, h3_tensor *x, const h3_tensor *w, float eps, const h3_tensor *cos,
                        const h3_tensor *sin, int n_heads, int head_dim, int rot_dim) {
    GUARD(b);
    if (!b->ops->qk_norm_rope) {
        h3_op_rms_norm(b, x, x, w, head_dim, eps);
        h3_op_rope(b, x, cos, sin, n_heads, head_dim, rot_dim);
        return;
    }
    NEED(b, "qk_norm_rope", "x", x); NEED(b, "qk_norm_rope", "cos", cos); NEED(b, "qk_norm_rope", "sin", sin);
    int64_t S = h3_tensor_rows(x);
    REQUIRE(b, head_dim > 0 && h3_tensor_cols(x) == (int64_t)n_heads * head_dim,
            "qk_norm_rope: x has %lld cols, want %d heads x %d", (long long)h3_tensor_cols(x), n_heads, head_dim);
    REQUIRE(b, !w || h3_tensor_numel(w) == head_dim, "qk_norm_rope: weight has %lld elements, head_dim %d",
            (long long)h3_tensor_numel(w), head_dim);
    REQUIRE(b, rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= head_dim, "qk_norm_rope: bad rot_dim %d", rot_dim);
    REQUIRE(b, cos->dtype == H3_F32 && sin->dtype == H3_F32, "qk_norm_rope: cos/sin must be f32");
    REQUIRE(b, h3_tensor_rows(cos) == S && h3_tensor_cols(cos) == rot_dim && h3_tensor_rows(sin) == S &&
                   h3_tensor_cols(sin) == rot_dim,
            "qk_norm_rope: cos/sin must be [%lld, %d]", (long long)S, rot_dim);
    b->ops->qk_norm_rope(b, x, w, eps, cos, sin, n_heads, head_dim, rot_dim);
}

/* ---- audio VAE ops (1-D signals [B, C, L]) ------------------------------------------ */

#define NEED_IMPL(b, op, fn) \
    REQUIRE_CODE(b, (b)->ops->fn != NULL, H3_ERR_UNSUPPORTED, "%s: not implemented by the %s backend", op, (b)->ops->name)
#define REQUIRE_CODE(b, cond, code, ...) \
    do { if (!(cond)) { h3_backend_fail(b, code, __VA_ARGS__); return; } } while (0)

static int same_float_dtype(const h3_tensor *a, const h3_tensor *c) { return !c || a->dtype == c->dtype; }

void h3_op_conv1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                  int stride, int padding, int dilation, int groups) {
    GUARD(b);
    NEED(b, "conv1d", "y", y); NEED(b, "conv1d", "x", x); NEED(b, "conv1d", "w", w);
    NEED_IMPL(b, "conv1d", conv1d);
    REQUIRE(b, x->ndim == 3 && y->ndim == 3 && w->ndim == 3, "conv1d: x, y and w must be 3-D (got %d, %d, %d dims)",
            x->ndim, y->ndim, w->ndim);
    REQUIRE(b, stride >= 1 && dilation >= 1 && padding >= 0 && groups >= 1,
            "conv1d: bad stride %d / padding %d / dilation %d / groups %d", stride, padding, dilation, groups);
    int64_t B = x->shape[0], Cin = x->shape[1], Lin = x->shape[2];
    int64_t Cout = w->shape[0], K = w->shape[2];
    REQUIRE(b, Cin % groups == 0 && Cout % groups == 0 && w->shape[1] == Cin / groups,
            "conv1d: w is [%lld,%lld,%lld] for %lld input channels in %d groups", (long long)Cout,
            (long long)w->shape[1], (long long)K, (long long)Cin, groups);
    int64_t span = Lin + 2 * (int64_t)padding - (int64_t)dilation * (K - 1) - 1;
    REQUIRE(b, K >= 1 && span >= 0, "conv1d: input length %lld too short for kernel %lld, dilation %d, padding %d",
            (long long)Lin, (long long)K, dilation, padding);
    int64_t Lout = span / stride + 1;
    REQUIRE(b, y->shape[0] == B && y->shape[1] == Cout && y->shape[2] == Lout,
            "conv1d: y is [%lld,%lld,%lld], want [%lld,%lld,%lld]", (long long)y->shape[0], (long long)y->shape[1],
            (long long)y->shape[2], (long long)B, (long long)Cout, (long long)Lout);
    REQUIRE(b, !bias || h3_tensor_numel(bias) == Cout, "conv1d: bias has %lld elements, want %lld",
            (long long)h3_tensor_numel(bias), (long long)Cout);
    REQUIRE(b, same_float_dtype(x, y), "conv1d: x is %s, y is %s", h3_dtype_name(x->dtype), h3_dtype_name(y->dtype));
    REQUIRE(b, y->data != x->data, "conv1d: y aliases x");
    b->ops->conv1d(b, y, x, w, bias, stride, padding, dilation, groups);
}

void h3_op_conv_transpose1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w,
                            const h3_tensor *bias, int stride, int padding) {
    GUARD(b);
    NEED(b, "conv_transpose1d", "y", y); NEED(b, "conv_transpose1d", "x", x); NEED(b, "conv_transpose1d", "w", w);
    NEED_IMPL(b, "conv_transpose1d", conv_transpose1d);
    REQUIRE(b, x->ndim == 3 && y->ndim == 3 && w->ndim == 3,
            "conv_transpose1d: x, y and w must be 3-D (got %d, %d, %d dims)", x->ndim, y->ndim, w->ndim);
    REQUIRE(b, stride >= 1 && padding >= 0, "conv_transpose1d: bad stride %d / padding %d", stride, padding);
    int64_t B = x->shape[0], Cin = x->shape[1], Lin = x->shape[2];
    int64_t Cout = w->shape[1], K = w->shape[2];
    REQUIRE(b, w->shape[0] == Cin && K >= 1, "conv_transpose1d: w is [%lld,%lld,%lld] for %lld input channels",
            (long long)w->shape[0], (long long)Cout, (long long)K, (long long)Cin);
    int64_t Lout = (Lin - 1) * stride - 2 * (int64_t)padding + K;
    REQUIRE(b, Lin >= 1 && Lout >= 1, "conv_transpose1d: empty output (input length %lld)", (long long)Lin);
    REQUIRE(b, y->shape[0] == B && y->shape[1] == Cout && y->shape[2] == Lout,
            "conv_transpose1d: y is [%lld,%lld,%lld], want [%lld,%lld,%lld]", (long long)y->shape[0],
            (long long)y->shape[1], (long long)y->shape[2], (long long)B, (long long)Cout, (long long)Lout);
    REQUIRE(b, !bias || h3_tensor_numel(bias) == Cout, "conv_transpose1d: bias has %lld elements, want %lld",
            (long long)h3_tensor_numel(bias), (long long)Cout);
    REQUIRE(b, same_float_dtype(x, y), "conv_transpose1d: x is %s, y is %s", h3_dtype_name(x->dtype),
            h3_dtype_name(y->dtype));
    REQUIRE(b, y->data != x->data, "conv_transpose1d: y aliases x");
    b->ops->conv_transpose1d(b, y, x, w, bias, stride, padding);
}

/* Common checks of the resampling filters: 1-D after squeezing, K >= ratio. */
static int check_filter(h3_backend *b, const char *op, const char *what, const h3_tensor *f, int ratio) {
    if (!ok_tensor(b, op, what, f)) return 0;
    int64_t K = h3_tensor_numel(f);
    if (ratio < 1 || K < ratio || K != h3_tensor_cols(f)) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "%s: %s has %lld taps (shape ending in %lld) for ratio %d", op, what,
                        (long long)K, (long long)h3_tensor_cols(f), ratio);
        return 0;
    }
    return 1;
}

void h3_op_upsample1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *filter, int ratio) {
    GUARD(b);
    NEED(b, "upsample1d", "y", y); NEED(b, "upsample1d", "x", x);
    NEED_IMPL(b, "upsample1d", upsample1d);
    if (!check_filter(b, "upsample1d", "filter", filter, ratio)) return;
    int64_t L = h3_tensor_cols(x);
    REQUIRE(b, L >= 1 && h3_tensor_rows(y) == h3_tensor_rows(x) && h3_tensor_cols(y) == L * ratio,
            "upsample1d: y is %lldx%lld, want %lldx%lld", (long long)h3_tensor_rows(y), (long long)h3_tensor_cols(y),
            (long long)h3_tensor_rows(x), (long long)(L * ratio));
    REQUIRE(b, y->data != x->data, "upsample1d: y aliases x");
    b->ops->upsample1d(b, y, x, filter, ratio);
}

void h3_op_downsample1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *filter, int ratio) {
    GUARD(b);
    NEED(b, "downsample1d", "y", y); NEED(b, "downsample1d", "x", x);
    NEED_IMPL(b, "downsample1d", downsample1d);
    if (!check_filter(b, "downsample1d", "filter", filter, ratio)) return;
    int64_t L = h3_tensor_cols(x), Lout = (L + ratio - 1) / ratio;
    REQUIRE(b, L >= 1 && h3_tensor_rows(y) == h3_tensor_rows(x) && h3_tensor_cols(y) == Lout,
            "downsample1d: y is %lldx%lld, want %lldx%lld", (long long)h3_tensor_rows(y),
            (long long)h3_tensor_cols(y), (long long)h3_tensor_rows(x), (long long)Lout);
    REQUIRE(b, y->data != x->data, "downsample1d: y aliases x");
    b->ops->downsample1d(b, y, x, filter, ratio);
}

static int check_snake(h3_backend *b, const char *op, const h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha,
                       const h3_tensor *beta) {
    if (!ok_tensor(b, op, "y", y) || !ok_tensor(b, op, "x", x) || !ok_tensor(b, op, "alpha", alpha) ||
        !ok_tensor(b, op, "beta", beta))
        return 0;
    if (x->ndim != 3 || !same_numel(b, op, y, x) || h3_tensor_cols(y) != x->shape[2]) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "%s: x must be [B, C, L] and y the same shape", op);
        return 0;
    }
    if (h3_tensor_numel(alpha) != x->shape[1] || h3_tensor_numel(beta) != x->shape[1]) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "%s: alpha/beta have %lld/%lld elements for %lld channels", op,
                        (long long)h3_tensor_numel(alpha), (long long)h3_tensor_numel(beta), (long long)x->shape[1]);
        return 0;
    }
    return 1;
}

void h3_op_snake_beta(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha, const h3_tensor *beta) {
    GUARD(b);
    NEED_IMPL(b, "snake_beta", snake_beta);
    if (!check_snake(b, "snake_beta", y, x, alpha, beta)) return;
    b->ops->snake_beta(b, y, x, alpha, beta);
}

void h3_op_snake_beta_antialiased(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha,
                                  const h3_tensor *beta, const h3_tensor *up_filter, const h3_tensor *down_filter,
                                  int ratio) {
    GUARD(b);
    NEED_IMPL(b, "snake_beta_antialiased", snake_beta_antialiased);
    if (!check_snake(b, "snake_beta_antialiased", y, x, alpha, beta)) return;
    if (!check_filter(b, "snake_beta_antialiased", "up_filter", up_filter, ratio)) return;
    if (!check_filter(b, "snake_beta_antialiased", "down_filter", down_filter, ratio)) return;
    REQUIRE(b, x->shape[2] >= 1, "snake_beta_antialiased: empty signal");
    b->ops->snake_beta_antialiased(b, y, x, alpha, beta, up_filter, down_filter, ratio);
}

void h3_op_clamp(h3_backend *b, h3_tensor *y, const h3_tensor *x, float lo, float hi) {
    GUARD(b);
    NEED(b, "clamp", "y", y); NEED(b, "clamp", "x", x);
    NEED_IMPL(b, "clamp", clamp);
    if (!same_numel(b, "clamp", y, x)) return;
    REQUIRE(b, lo <= hi, "clamp: lo %g > hi %g", (double)lo, (double)hi);
    b->ops->clamp(b, y, x, lo, hi);
}

/* ---- video VAE: strided views, cross-fade, RGB conversion ---------------------------- */

/* A view is valid when every element it names lies inside its tensor. */
static int view_ok(h3_backend *b, const char *op, const char *what, const h3_tensor *t, const h3_view *v) {
    if (!ok_tensor(b, op, what, t)) return 0;
    if (!v || v->ndim < 1 || v->ndim > H3_VIEW_MAX_DIMS) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "%s: view of %s has %d dims (1..%d)", op, what, v ? v->ndim : 0,
                        H3_VIEW_MAX_DIMS);
        return 0;
    }
    int64_t last = v->offset;
    int empty = 0;
    for (int i = 0; i < v->ndim; i++) {
        if (v->shape[i] < 0 || v->stride[i] < 0) {
            h3_backend_fail(b, H3_ERR_INTERNAL, "%s: view of %s has a negative size or stride in dim %d", op, what, i);
            return 0;
        }
        if (v->shape[i] == 0) empty = 1;
        else last += (v->shape[i] - 1) * v->stride[i];
    }
    if (v->offset < 0 || (!empty && last >= h3_tensor_numel(t))) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "%s: view of %s reaches element %lld of %lld", op, what, (long long)last,
                        (long long)h3_tensor_numel(t));
        return 0;
    }
    return 1;
}

static int view_same_shape(const h3_view *a, const h3_view *c) {
    if (a->ndim != c->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != c->shape[i]) return 0;
    return 1;
}

static int view_identical(const h3_tensor *ta, const h3_view *a, const h3_tensor *tc, const h3_view *c) {
    if (ta->data != tc->data || ta->dtype != tc->dtype || a->offset != c->offset || !view_same_shape(a, c)) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] > 1 && a->stride[i] != c->stride[i]) return 0;
    return 1;
}

/* Byte ranges [lo, hi) spanned by two views; they overlap if they intersect. */
static void view_bytes(const h3_tensor *t, const h3_view *v, uintptr_t *lo, uintptr_t *hi) {
    size_t es = h3_dtype_size(t->dtype);
    int64_t last = v->offset;
    for (int i = 0; i < v->ndim; i++)
        if (v->shape[i] > 0) last += (v->shape[i] - 1) * v->stride[i];
    *lo = (uintptr_t)t->data + (uintptr_t)v->offset * es;
    *hi = (uintptr_t)t->data + (uintptr_t)(last + 1) * es;
}

static int view_disjoint(const h3_tensor *ta, const h3_view *a, const h3_tensor *tc, const h3_view *c) {
    uintptr_t alo, ahi, clo, chi;
    view_bytes(ta, a, &alo, &ahi);
    view_bytes(tc, c, &clo, &chi);
    return ahi <= clo || chi <= alo;
}

#define NEED_VIEW_OP(b, op, fn)                                                                                       \
    do {                                                                                                              \
        if ((b)->ops->fn == NULL) {                                                                                   \
            h3_backend_fail(b, H3_ERR_UNSUPPORTED, "%s: not implemented by the %s backend", op, (b)->ops->name);      \
            return;                                                                                                   \
        }                                                                                                             \
    } while (0)

void h3_op_copy_view(h3_backend *b, h3_tensor *dst, const h3_view *dv, const h3_tensor *src, const h3_view *sv) {
    GUARD(b);
    NEED_VIEW_OP(b, "copy_view", copy_view);
    if (!view_ok(b, "copy_view", "dst", dst, dv) || !view_ok(b, "copy_view", "src", src, sv)) return;
    REQUIRE(b, view_same_shape(dv, sv), "copy_view: dst and src views differ in shape");
    REQUIRE(b, dst->dtype == src->dtype, "copy_view: dtypes differ (%s vs %s)", h3_dtype_name(dst->dtype),
            h3_dtype_name(src->dtype));
    REQUIRE(b, view_identical(dst, dv, src, sv) || view_disjoint(dst, dv, src, sv),
            "copy_view: dst and src windows overlap");
    b->ops->copy_view(b, dst, dv, src, sv);
}

void h3_op_blend_view(h3_backend *b, h3_tensor *dst, const h3_view *dv, const h3_tensor *a, const h3_view *av,
                      const h3_tensor *x, const h3_view *xv, int axis, int extent) {
    GUARD(b);
    NEED_VIEW_OP(b, "blend_view", blend_view);
    if (!view_ok(b, "blend_view", "dst", dst, dv) || !view_ok(b, "blend_view", "a", a, av) ||
        !view_ok(b, "blend_view", "x", x, xv))
        return;
    REQUIRE(b, view_same_shape(dv, av) && view_same_shape(dv, xv), "blend_view: views differ in shape");
    REQUIRE(b, dst->dtype == a->dtype && dst->dtype == x->dtype && is_float(dst), "blend_view: dtypes differ");
    REQUIRE(b, axis >= 0 && axis < dv->ndim, "blend_view: axis %d outside %d dims", axis, dv->ndim);
    REQUIRE(b, extent > 0 && dv->shape[axis] <= extent, "blend_view: %lld positions along the axis, extent %d",
            (long long)dv->shape[axis], extent);
    REQUIRE(b, view_identical(dst, dv, x, xv) || view_disjoint(dst, dv, x, xv), "blend_view: dst overlaps x");
    REQUIRE(b, view_disjoint(dst, dv, a, av), "blend_view: dst overlaps a");
    b->ops->blend_view(b, dst, dv, a, av, x, xv, axis, extent);
}

void h3_op_rgb8_from_planar(h3_backend *b, h3_tensor *dst, const h3_tensor *src, int64_t frame0, int64_t nframes,
                            const float *mean, const float *std) {
    GUARD(b);
    NEED_VIEW_OP(b, "rgb8_from_planar", rgb8_from_planar);
    NEED(b, "rgb8_from_planar", "dst", dst); NEED(b, "rgb8_from_planar", "src", src);
    REQUIRE(b, mean && std, "rgb8_from_planar: mean/std missing");
    REQUIRE(b, src->ndim == 4 && src->shape[0] >= 1 && src->shape[0] <= 4 && is_float(src),
            "rgb8_from_planar: src must be float [C<=4, F, H, W]");
    REQUIRE(b, frame0 >= 0 && nframes >= 0 && frame0 + nframes <= src->shape[1],
            "rgb8_from_planar: frames [%lld, %lld) outside %lld", (long long)frame0, (long long)(frame0 + nframes),
            (long long)src->shape[1]);
    REQUIRE(b, dst->dtype == H3_I32, "rgb8_from_planar: dst must be an I32 byte buffer");
    size_t need = (size_t)(nframes * src->shape[0] * src->shape[2] * src->shape[3]);
    REQUIRE(b, h3_tensor_nbytes(dst) >= need, "rgb8_from_planar: dst holds %zu bytes, need %zu",
            h3_tensor_nbytes(dst), need);
    b->ops->rgb8_from_planar(b, dst, src, frame0, nframes, mean, std);
}

h3_status_code h3_tensor_download_bytes(h3_backend *b, const h3_tensor *src, void *host, size_t nbytes,
                                        h3_status *status) {
    if (!src || !src->data || nbytes > h3_tensor_nbytes(src))
        return h3_fail(status, H3_ERR_INTERNAL, "download_bytes: %zu bytes from a tensor of %zu", nbytes,
                       src ? h3_tensor_nbytes(src) : 0);
    if (nbytes && b->ops->download(b, host, src->data, nbytes) != 0)
        return h3_fail(status, H3_ERR_DEVICE, "%s: download failed", b->ops->name);
    return H3_OK;
}
