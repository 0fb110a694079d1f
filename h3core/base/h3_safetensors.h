/* h3_safetensors.h - strict, mmap-based reader of safetensors files and of
 * sharded "*.safetensors.index.json" checkpoints.
 *
 * The header is validated before any tensor is handed out: 8-byte length
 * inside the file, valid JSON object, known dtypes, shape x dtype size equal
 * to the byte range, ranges inside the data section and not overlapping.
 * Tensor data stays in the page cache (mmap); nothing is copied. */
#ifndef H3_SAFETENSORS_H
#define H3_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/h3_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum h3_st_dtype {
    H3_ST_F32, H3_ST_F16, H3_ST_BF16, H3_ST_F64,
    H3_ST_I64, H3_ST_I32, H3_ST_I16, H3_ST_I8, H3_ST_U8, H3_ST_BOOL
} h3_st_dtype;

#define H3_ST_MAX_DIMS 8

/* The values of a dummy tensor (load-format dummy: a tensor with a name,
 * dtype and shape but no bytes, data == NULL), drawn on the backend where it
 * is loaded. With the tensor viewed as [rows, cols] = [shape[0], numel /
 * shape[0]], element (r, c) is the counter-based uniform value
 * h3_counter_uniform(key, index, lo, hi) (base/h3_random.h) rounded to the
 * tensor's dtype, at
 *   index = offset + (r / part_rows)·part_stride + (r % part_rows)·row_stride + c
 * (row_stride 0: cols; part_rows 0: rows). A slice of a dummy tensor (rows,
 * columns, the stacked parts of a tensor-parallel shard) is then a dummy
 * tensor with another offset and strides that holds the very values of the
 * whole, as a view into a file would. */
typedef struct h3_st_random {
    uint64_t key;                   /* from (seed, tensor name): h3_counter_key */
    float lo, hi;                   /* uniform in [lo, hi); lo == hi: the constant lo */
    int64_t offset, row_stride;
    int64_t part_rows, part_stride;
} h3_st_random;

typedef struct h3_st_tensor {
    const char *name;         /* owned by the file */
    h3_st_dtype dtype;
    int ndim;
    int64_t shape[H3_ST_MAX_DIMS];
    int64_t numel;
    const void *data;         /* points into the mapping; NULL: a dummy tensor (random) */
    size_t nbytes;            /* numel x dtype size, also for a dummy tensor */
    const char *file_path;    /* owned by the file, for error messages */
    h3_st_random random;      /* a dummy tensor's values */
} h3_st_tensor;

/* A tensor of a dummy checkpoint: its values exist only where it is loaded. */
static inline int h3_st_is_dummy(const h3_st_tensor *t) { return t->data == NULL; }
/* Rows [first, first + count) of t (its first dimension), a view of either
 * kind: into the mapping, or a dummy tensor with its offset moved. The
 * caller checks the range. */
h3_st_tensor h3_st_rows(const h3_st_tensor *t, int64_t first, int64_t count);

typedef struct h3_st_file h3_st_file;

h3_status_code h3_st_open(const char *path, h3_st_file **out, h3_status *status);
void h3_st_close(h3_st_file *f);
size_t h3_st_count(const h3_st_file *f);
const h3_st_tensor *h3_st_at(const h3_st_file *f, size_t i);
const h3_st_tensor *h3_st_find(const h3_st_file *f, const char *name);
/* Value of a "__metadata__" string entry, or NULL. */
const char *h3_st_metadata(const h3_st_file *f, const char *key);
const char *h3_st_path(const h3_st_file *f);

size_t h3_st_dtype_size(h3_st_dtype dtype);
const char *h3_st_dtype_name(h3_st_dtype dtype);

/* Converts n elements of a float tensor (F32/F16/BF16/F64) to float32. A
 * dummy tensor has no host values: H3_ERR_UNSUPPORTED naming it. */
h3_status_code h3_st_to_f32(const h3_st_tensor *t, float *dst, size_t n, h3_status *status);
/* Reads a whole float tensor into a new malloc'd float32 array. */
h3_status_code h3_st_read_f32(const h3_st_file *f, const char *name, float **out,
                              const h3_st_tensor **info, h3_status *status);

float h3_bf16_to_f32(uint16_t v);
uint16_t h3_f32_to_bf16(float v); /* round to nearest even, NaN kept */
float h3_f16_to_f32(uint16_t v);
uint16_t h3_f32_to_f16(float v);

/* Writing: describe each tensor (name, dtype, shape, data) and write them
 * into one file with an optional __metadata__ (key/value string pairs,
 * NULL-terminated array, may be NULL). Data is 8-byte aligned. */
typedef struct h3_st_write_tensor {
    const char *name;
    h3_st_dtype dtype;
    int ndim;
    int64_t shape[H3_ST_MAX_DIMS];
    const void *data;
} h3_st_write_tensor;

h3_status_code h3_st_write(const char *path, const h3_st_write_tensor *tensors, size_t count,
                           const char *const *metadata_kv, h3_status *status);

/* A checkpoint: one safetensors file, or the shards named by an index json.
 * Tensor names are looked up across shards. */
typedef struct h3_checkpoint h3_checkpoint;

/* path may be a directory (looks for *.safetensors.index.json, then a single
 * *.safetensors), an index json, or a .safetensors file. */
h3_status_code h3_checkpoint_open(const char *path, h3_checkpoint **out, h3_status *status);
void h3_checkpoint_close(h3_checkpoint *c);
const h3_st_tensor *h3_checkpoint_find(const h3_checkpoint *c, const char *name);
/* Like find, but a missing tensor or a shape other than the expected one is an
 * error naming the tensor and file. shape may be NULL to skip the shape check. */
h3_status_code h3_checkpoint_get(const h3_checkpoint *c, const char *name, int ndim,
                                 const int64_t *shape, const h3_st_tensor **out,
                                 h3_status *status);
size_t h3_checkpoint_count(const h3_checkpoint *c);
const h3_st_tensor *h3_checkpoint_at(const h3_checkpoint *c, size_t i);
const char *h3_checkpoint_path(const h3_checkpoint *c);
/* The bytes of all its tensors (numel x dtype size), dummy ones included. */
uint64_t h3_checkpoint_nbytes(const h3_checkpoint *c);

/* A dummy checkpoint (load-format dummy): tensors with names, dtypes and
 * shapes but no bytes (data NULL), which the loaders find and shape-check
 * like a file's and whose values the weight loads draw on the backend
 * (h3_st_random), each from its own generator keyed by (seed, name). `label`
 * stands for the path in messages. Nothing is read from disk. */
h3_status_code h3_checkpoint_dummy_new(const char *label, uint64_t seed, h3_checkpoint **out, h3_status *status);
/* Adds a dummy tensor of values uniform in [lo, hi) (lo == hi: constant).
 * A name already present is an H3_ERR_INVALID_ARGUMENT. */
h3_status_code h3_checkpoint_dummy_add(h3_checkpoint *c, const char *name, h3_st_dtype dtype, int ndim,
                                       const int64_t *shape, float lo, float hi, h3_status *status);
/* Adds a real tensor with these bytes (copied): a fixed buffer that is no
 * weight to draw (a resampling filter). */
h3_status_code h3_checkpoint_dummy_add_data(h3_checkpoint *c, const char *name, h3_st_dtype dtype, int ndim,
                                            const int64_t *shape, const void *data, h3_status *status);

#ifdef __cplusplus
}
#endif
#endif
