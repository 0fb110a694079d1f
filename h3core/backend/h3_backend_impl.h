/* h3_backend_impl.h - what a backend implements. Private to h3core.
 *
 * h3_backend.c and h3_ops_*.c validate every op's shapes and dtypes once,
 * then call the backend through this table; a backend may assume valid
 * arguments. */
#ifndef H3_BACKEND_IMPL_H
#define H3_BACKEND_IMPL_H

#include "backend/h3_backend.h"

typedef struct h3_backend_ops {
    const char *name;
    h3_dtype compute_dtype;
    /* 1: a measuring backend (backend/measure/): its allocations are
     * addresses without bytes, uploads and ops do nothing, downloads give
     * zeros (h3_backend_holds_data). */
    int no_data;
    void (*destroy)(h3_backend *b);
    /* Storage dtype of a weight of this kind on this backend. */
    h3_dtype (*weight_dtype)(h3_backend *b, h3_weight_type type, h3_dtype file_dtype);
    void *(*alloc)(h3_backend *b, size_t bytes); /* NULL on failure */
    void (*free)(h3_backend *b, void *p);
    /* Raw byte copies; return 0 on success. */
    int (*upload)(h3_backend *b, void *dst, const void *src, size_t bytes);
    int (*download)(h3_backend *b, void *dst, const void *src, size_t bytes);
    int (*synchronize)(h3_backend *b);
    /* Frees the backend's op scratch (it grows again on the next op that
     * needs it); NULL: the backend keeps none worth freeing. */
    void (*trim_scratch)(h3_backend *b);

    void (*linear)(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias);
    /* precision=fp8: dst (H3_F8E4M3 with its scale) = src quantised per row
     * (h3_fp8.h), src a float weight of the same shape; a non-finite value
     * sets the sticky H3_ERR_NONFINITE. NULL: the backend has no FP8
     * linear (and linear never sees an F8 weight). */
    void (*quantize_fp8)(h3_backend *b, h3_tensor *dst, const h3_tensor *src);
    /* Whether this backend's device can run the FP8 linear (CUDA: FP8 tensor
     * cores, not the exact mode); the refusal names why. NULL: it can. */
    h3_status_code (*fp8_check)(h3_backend *b, h3_status *status);
    void (*rms_norm)(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, int64_t width, float eps);
    void (*layer_norm)(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                       float eps);
    /* op: 0 add, 1 mul */
    void (*binary)(h3_backend *b, int op, h3_tensor *y, const h3_tensor *x0, const h3_tensor *x1);
    /* op: 0 mul, 1 add */
    void (*row_vector)(h3_backend *b, int op, h3_tensor *y, const h3_tensor *x, const h3_tensor *v);
    void (*scale)(h3_backend *b, h3_tensor *y, const h3_tensor *x, float alpha);
    /* op: 0 silu, 1 gelu exact, 2 gelu tanh */
    void (*unary)(h3_backend *b, int op, h3_tensor *y, const h3_tensor *x);
    void (*swiglu)(h3_backend *b, h3_tensor *y, const h3_tensor *u, int value_first);
    void (*modulate)(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *shift, const h3_tensor *scale,
                     const h3_tensor *sel);
    void (*gated_residual)(h3_backend *b, h3_tensor *x, const h3_tensor *gate, const h3_tensor *y,
                           const h3_tensor *sel);
    void (*rope)(h3_backend *b, h3_tensor *x, const h3_tensor *cos, const h3_tensor *sin, int n_heads, int head_dim,
                 int rot_dim);
    void (*attention)(h3_backend *b, h3_tensor *o, const h3_tensor *q, const h3_tensor *k, const h3_tensor *v,
                      int n_heads, int n_kv_heads, int head_dim, int causal, float scale);
    /* VSA-H3 (h3_ops_vsa.h); NULL when the backend has no kernel for it. */
    void (*vsa_attention)(h3_backend *b, h3_tensor *o, const h3_tensor *q, const h3_tensor *k, const h3_tensor *v,
                          const h3_tensor *gate, const h3_vsa_tiles *tiles, int n_heads, int head_dim);
    void (*gather_rows)(h3_backend *b, h3_tensor *dst, const h3_tensor *src, const h3_tensor *idx);
    void (*scatter_rows)(h3_backend *b, h3_tensor *dst, const h3_tensor *src, const h3_tensor *idx);
    void (*copy)(h3_backend *b, h3_tensor *dst, const h3_tensor *src);
    void (*fill)(h3_backend *b, h3_tensor *dst, float value);
    /* h3_op_fill_random; the arguments are checked (dst float, range finite). */
    void (*fill_random)(h3_backend *b, h3_tensor *dst, const h3_st_random *values, h3_st_dtype round_to);
    /* Fused ops; NULL: h3_backend.c runs the unfused sequence. */
    void (*rms_norm_modulate)(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, float eps,
                              const h3_tensor *shift, const h3_tensor *scale, const h3_tensor *sel);
    void (*qk_norm_rope)(h3_backend *b, h3_tensor *x, const h3_tensor *w, float eps, const h3_tensor *cos,
                         const h3_tensor *sin, int n_heads, int head_dim, int rot_dim);

    /* The video VAE's ops (h3_ops_video_vae.h); NULL: not implemented. */
    void (*copy_view)(h3_backend *b, h3_tensor *dst, const h3_view *dv, const h3_tensor *src, const h3_view *sv);
    void (*blend_view)(h3_backend *b, h3_tensor *dst, const h3_view *dv, const h3_tensor *a, const h3_view *av,
                       const h3_tensor *x, const h3_view *xv, int axis, int extent);
    /* mean/std hold C = src->shape[0] values. */
    void (*rgb8_from_planar)(h3_backend *b, h3_tensor *dst, const h3_tensor *src, int64_t frame0, int64_t nframes,
                             const float *mean, const float *std);
    /* The video VAE encoder's ops; NULL: not implemented. */
    void (*im2col3d)(h3_backend *b, h3_tensor *col, const h3_tensor *x, const h3_conv3d_geom *g, int64_t n0);
    void (*group_norm)(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                       int groups, float eps, int silu);
    /* The audio VAE's ops (h3_ops_audio_vae.h); NULL: not implemented. */
    void (*conv1d)(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                   int stride, int padding, int dilation, int groups);
    void (*conv_transpose1d)(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w,
                             const h3_tensor *bias, int stride, int padding);
    void (*upsample1d)(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *filter, int ratio);
    void (*downsample1d)(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *filter, int ratio);
    void (*snake_beta)(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha,
                       const h3_tensor *beta);
    void (*snake)(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha); /* the encoder's Snake1d */
    void (*snake_beta_antialiased)(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha,
                                   const h3_tensor *beta, const h3_tensor *up_filter, const h3_tensor *down_filter,
                                   int ratio);
    void (*clamp)(h3_backend *b, h3_tensor *y, const h3_tensor *x, float lo, float hi);

    /* h3_tensor_count_nonfinite on a float tensor: the count, or -1 with
     * the sticky error set. NULL: h3_backend.c counts a host copy. */
    int64_t (*count_nonfinite)(h3_backend *b, const h3_tensor *t);
    /* h3_backend_inject_fault came due: fail as this backend's device fails
     * (CUDA arms its launch check). NULL: a plain H3_ERR_DEVICE. */
    void (*inject_fault)(h3_backend *b);

    /* Weight streaming (h3_weight_stream.h, h3_weight_stream.c). pins_host:
     * the backend copies from page-locked host memory faster (CUDA; a
     * measuring backend copies its target's flag). NULL entries: host
     * memory is malloc's and a ring's copy is a synchronous upload (CPU,
     * measuring backends). */
    int pins_host;
    void *(*host_alloc)(h3_backend *b, size_t bytes, int pinned); /* NULL on failure */
    void (*host_free)(h3_backend *b, void *p, int pinned);
    /* The copy stream and n_slots pairs of events; NULL on failure. */
    void *(*stream_create)(h3_backend *b, int n_slots);
    void (*stream_destroy)(h3_backend *b, void *s);
    /* On the copy stream: wait for the slot's release, then the copies,
     * then the slot's copy-done mark. Each returns 0 on success. */
    int (*stream_copy_begin)(h3_backend *b, void *s, int slot);
    int (*stream_copy)(h3_backend *b, void *s, void *dst, const void *src, size_t bytes);
    int (*stream_copy_end)(h3_backend *b, void *s, int slot);
    /* On the compute stream: wait for the slot's copy; mark its release. */
    int (*stream_acquire)(h3_backend *b, void *s, int slot);
    int (*stream_release)(h3_backend *b, void *s, int slot);
    /* GPU time compute stood waiting in acquires so far (ms), and how many
     * such waits passed 0.1 ms; NULL: not measured. */
    void (*stream_stalls)(h3_backend *b, void *s, double *ms, uint64_t *count);
} h3_backend_ops;

typedef struct h3_arena_chunk {
    void *data;
    size_t size;
} h3_arena_chunk;

struct h3_backend {
    const h3_backend_ops *ops;
    void *impl;
    h3_dtype compute_dtype; /* ops->compute_dtype unless the backend chose another (CUDA's exact mode) */
    h3_status error; /* sticky: first error wins */
    /* activation arena */
    h3_arena_chunk *chunks;
    int n_chunks, cur_chunk;
    size_t cur_offset;
    size_t high_water, in_use;
    size_t chunk_min_size;
    /* device memory held (h3_backend_memory): persistent allocations by
     * address (their sizes), arena chunks, the backend's own buffers */
    void *persistent;      /* GHashTable: data -> bytes */
    uint64_t mem_weights, mem_arena, mem_scratch;
    uint64_t mem_mark_weights; /* mem_weights at the last h3_backend_memory_mark */
    uint64_t mem_peak, mem_peak_activations, mem_peak_scratch;
    uint64_t mem_limit;        /* h3_backend_set_memory_limit; 0: none */
    int linear_fp8;             /* h3_backend_set_linear_fp8 */
    int fp8_weights, fp8_kept;  /* h3_backend_fp8_counts */
    long fault_ops; /* h3_backend_inject_fault: ops left until the injected failure; 0 none */
    /* streamed weights in host memory (h3_weight_stream.c): data -> bytes·2 + pinned */
    void *host_weights;    /* GHashTable, made at the first h3_weight_to_host */
    uint64_t mem_host_pinned, mem_host_pageable;
};

/* For backends: set the sticky error if none is set yet. */
void h3_backend_fail(h3_backend *b, h3_status_code code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
int h3_backend_failed(const h3_backend *b);
/* For the op checks (GUARD): counts an op against h3_backend_inject_fault
 * and fails the backend when the injected fault comes due. */
void h3_backend_fault_due(h3_backend *b);
/* For every allocation site of a backend (and h3_backend.c's host staging):
 * 1 when h3_backend_inject_alloc_fault says this allocation fails. Counts
 * only on backends that hold data (a measuring backend allocates nothing). */
int h3_backend_alloc_refused(const h3_backend *b);
/* A persistent device allocation in the tally (as a weight's), and its
 * free: for the ring's slots (h3_weight_stream.c). NULL with the sticky
 * error set on failure or past the memory limit. */
void *h3_backend_persistent_alloc(h3_backend *b, size_t bytes, const char *what);
void h3_backend_persistent_free(h3_backend *b, void *p);
/* h3_weight_stream.c: frees a host-resident weight's memory; all of them at
 * backend destroy. */
void h3_weight_host_free(h3_backend *b, void *p);
void h3_weight_host_free_all(h3_backend *b);
/* Common initialisation of the struct (arena, error, memory tally). */
void h3_backend_init(h3_backend *b, const h3_backend_ops *ops, void *impl);
/* For backends: their own device buffers (GEMM workspace, scratch) grew
 * (delta > 0) or shrank, for h3_backend_memory. */
void h3_backend_track_scratch(h3_backend *b, int64_t delta);
/* For a backend's own buffers (CUDA's scratch): 1, with the sticky error
 * set, when holding `bytes` more, after giving back `released`, would pass
 * the memory limit (h3_backend_set_memory_limit). */
int h3_backend_limit_refuses(h3_backend *b, size_t bytes, size_t released, const char *what);

/* ---- measuring backends (backend/measure/) ---------------------------------
 * A measuring backend stands for a real one, described by its target: the
 * same op table entries (an op the real backend lacks is missing here too,
 * so the interface runs the same fallback and its temporaries), the same
 * weight dtypes, arena chunks, buffers made at creation and op scratch,
 * over addresses that hold no bytes. Its ops compute nothing; its memory
 * tally (h3_backend_memory) is the real backend's for the same calls. Each
 * real backend builds its target (h3_backend_cpu_create_measure,
 * h3_backend_cuda_create_measure). */
typedef struct h3_measure_target h3_measure_target;
struct h3_measure_target {
    const char *name;             /* "measure:cpu", "measure:cuda" */
    const h3_backend_ops *ops;    /* the real backend's table: which ops exist */
    h3_dtype compute_dtype;
    size_t chunk_min_size;        /* the real backend's arena chunks */
    uint64_t fixed_scratch;       /* its own buffers made at creation */
    int sm, exact;                /* facts the rules below read (CUDA) */
    h3_dtype (*weight_dtype)(const h3_measure_target *t, h3_weight_type type, h3_dtype file_dtype);
    /* The scratch a call needs outside the arena (0: none); each may be NULL
     * (that op takes none). The backend keeps its scratch and grows it to
     * scratch_grown(need) when a call needs more than it holds. */
    size_t (*scratch_grown)(size_t need);
    /* h3_backend_ops.fp8_check for the device stood for; NULL: it can. */
    h3_status_code (*fp8_check)(const h3_measure_target *t, h3_status *status);
    size_t (*linear_scratch)(const h3_measure_target *t, const h3_tensor *y, const h3_tensor *x,
                             const h3_tensor *w);
    size_t (*attention_scratch)(const h3_measure_target *t, const h3_tensor *o, const h3_tensor *q,
                                const h3_tensor *k, const h3_tensor *v, int n_heads, int n_kv_heads, int head_dim,
                                int causal);
    size_t (*vsa_scratch)(const h3_measure_target *t, const h3_tensor *o, const h3_tensor *q, const h3_tensor *k,
                          const h3_tensor *v, const h3_tensor *gate, const h3_vsa_tiles *tiles, int n_heads,
                          int head_dim);
    size_t (*conv1d_scratch)(const h3_measure_target *t, const h3_tensor *y, const h3_tensor *x,
                             const h3_tensor *w, const h3_tensor *bias, int groups);
    size_t (*snake_scratch)(const h3_measure_target *t, const h3_tensor *y, const h3_tensor *x);
};
/* The target is copied. */
h3_status_code h3_backend_measure_create(const h3_measure_target *target, h3_backend **out, h3_status *status);

#endif
