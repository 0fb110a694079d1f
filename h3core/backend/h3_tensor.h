/* h3_tensor.h - the tensor value type and its helpers, which involve no
 * backend. Every header of the op interface (h3_backend.h, h3_ops_*.h)
 * builds on it; include h3_backend.h to use the ops. */
#ifndef H3_TENSOR_H
#define H3_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* H3_F8E4M3: FP8 E4M3 (OCP "fn": no infinities, max 448) codes of a weight
 * quantised per row (precision=fp8, backend/h3_fp8.h); such a tensor also
 * carries its rows' float32 scales (h3_tensor.scale). */
typedef enum h3_dtype { H3_F32 = 0, H3_BF16, H3_F16, H3_I32, H3_F8E4M3 } h3_dtype;

#define H3_MAX_DIMS 5

/* A dense, contiguous, row-major tensor living in a backend's memory.
 * Tensors are small value types: views copy the struct and share data. */
typedef struct h3_tensor {
    h3_dtype dtype;
    int ndim;
    int64_t shape[H3_MAX_DIMS];
    void *data;
    /* H3_F8E4M3 only: float32 [rows] where the tensor lives, row r's value
     * = code · scale[r]; NULL for every other dtype. Views by rows carry
     * their rows' scales, so q/k/v views of a packed qkv keep theirs. */
    void *scale;
    /* 1: data is host memory, a streamed weight (h3_weight_stream.h) that
     * no op may read; views keep it. 0 for everything else. */
    int on_host;
} h3_tensor;

/* The backend a tensor lives on; opaque outside the backends (h3_backend.h). */
typedef struct h3_backend h3_backend;

int64_t h3_tensor_numel(const h3_tensor *t);
size_t h3_tensor_nbytes(const h3_tensor *t);
size_t h3_dtype_size(h3_dtype dtype);
const char *h3_dtype_name(h3_dtype dtype);
/* Rows = product of all dims but the last; cols = last dim. */
int64_t h3_tensor_rows(const h3_tensor *t);
int64_t h3_tensor_cols(const h3_tensor *t);
/* A view of rows [row0, row0+nrows) of t seen as 2-D [rows, cols]. */
h3_tensor h3_tensor_rows_view(const h3_tensor *t, int64_t row0, int64_t nrows);
/* The same data with another shape (numel must match; else a zero tensor). */
h3_tensor h3_tensor_reshape(const h3_tensor *t, int ndim, const int64_t *shape);
h3_tensor h3_tensor_2d(const h3_tensor *t, int64_t rows, int64_t cols);
/* The bytes a whole tensor's storage spans from its data: its values, and
 * for an H3_F8E4M3 weight its scales after them (backend/h3_fp8.h). A copy
 * of these bytes is a copy of the tensor (a weight streamer's unit). */
size_t h3_tensor_storage_bytes(const h3_tensor *t);
/* t over storage copied to `data` (its scale pointer moved along). */
h3_tensor h3_tensor_at(const h3_tensor *t, void *data);

#ifdef __cplusplus
}
#endif
#endif
