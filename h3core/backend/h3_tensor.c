/* h3_tensor.c - tensor helpers: sizes, names, shapes and views (h3_tensor.h). */
#include "backend/h3_tensor.h"

#include "backend/h3_fp8.h"

#include <string.h>

size_t h3_dtype_size(h3_dtype dtype) {
    switch (dtype) {
    case H3_F32: return 4;
    case H3_BF16: return 2;
    case H3_F16: return 2;
    case H3_I32: return 4;
    case H3_F8E4M3: return 1;
    }
    return 0;
}

const char *h3_dtype_name(h3_dtype dtype) {
    switch (dtype) {
    case H3_F32: return "f32";
    case H3_BF16: return "bf16";
    case H3_F16: return "f16";
    case H3_I32: return "i32";
    case H3_F8E4M3: return "f8e4m3";
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
    /* per-row scales stay valid while the rows are the same rows */
    v.scale = t->scale && shape[ndim - 1] == h3_tensor_cols(t) ? t->scale : NULL;
    v.on_host = t->on_host;
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
    v.on_host = t->on_host;
    v.scale = t->scale ? (float *)t->scale + row0 : NULL;
    return v;
}

size_t h3_tensor_storage_bytes(const h3_tensor *t) {
    if (t->dtype == H3_F8E4M3 && t->scale) return h3_fp8_weight_bytes(h3_tensor_rows(t), h3_tensor_cols(t));
    return h3_tensor_nbytes(t);
}

h3_tensor h3_tensor_at(const h3_tensor *t, void *data) {
    h3_tensor v = *t;
    v.data = data;
    if (t->scale) v.scale = (char *)data + ((const char *)t->scale - (const char *)t->data);
    return v;
}
