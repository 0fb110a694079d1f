/* h3_backend_measure.c - the measuring backend: a backend that stands for a
 * real one (its target, h3_backend_impl.h) and computes nothing.
 *
 * Its memory is addresses without bytes: every allocation gets a fresh
 * address range that nothing will ever read, so a model of any size "loads"
 * in the time its headers take. The arena and the persistent allocations are
 * h3_backend.c's, the same code the real backends run, so the memory tally
 * (h3_backend_memory) counts exactly the chunks and weights the real backend
 * would allocate for the same calls; what the real backend allocates for
 * itself (CUDA: the cuBLASLt workspace at creation, the op scratch it grows)
 * comes from the target's rules, which the real backend shares with its own
 * ops. Uploads do nothing, downloads give zeros, and every op the target has
 * is a no-op here after the interface's shape checks (an op the target
 * lacks stays missing, so the interface's fallback runs as it would there).
 *
 * The memory plan (engine/h3_memory_plan.c) opens an engine on these and
 * runs a whole request through it. */
#include "backend/h3_backend_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Fake addresses start high and never repeat within a backend; a page
 * apart, so every alignment test a kernel chooser makes passes as it would
 * on a real allocation. */
#define FAKE_BASE ((uintptr_t)1 << 44)
#define FAKE_ALIGN ((uintptr_t)4096)

typedef struct measure_impl {
    h3_measure_target t;
    h3_backend_ops ops; /* this backend's table: the target's entries, as no-ops */
    char name[64];
    uintptr_t next;     /* the next fake address */
    size_t scratch;     /* the scratch the real backend would hold now */
} measure_impl;

static measure_impl *impl_of(h3_backend *b) { return b->impl; }

/* A call that needs `need` bytes of scratch: the real backend grows its
 * buffer when it holds less (freeing the old one first). */
static void take_scratch(h3_backend *b, size_t need) {
    measure_impl *m = impl_of(b);
    if (need <= m->scratch || !m->t.scratch_grown) return;
    size_t grown = m->t.scratch_grown(need);
    h3_backend_track_scratch(b, -(int64_t)m->scratch);
    h3_backend_track_scratch(b, (int64_t)grown);
    m->scratch = grown;
}

/* ---- memory ---------------------------------------------------------------- */

/* As the real backend's trim: its grown scratch is given back. */
static void measure_trim_scratch(h3_backend *b) {
    measure_impl *m = impl_of(b);
    h3_backend_track_scratch(b, -(int64_t)m->scratch);
    m->scratch = 0;
}

static void measure_destroy(h3_backend *b) {
    free(b->impl);
    free(b);
}

static h3_dtype measure_weight_dtype(h3_backend *b, h3_weight_type type, h3_dtype file_dtype) {
    measure_impl *m = impl_of(b);
    return m->t.weight_dtype ? m->t.weight_dtype(&m->t, type, file_dtype) : m->t.compute_dtype;
}

static void *measure_alloc(h3_backend *b, size_t bytes) {
    measure_impl *m = impl_of(b);
    void *p = (void *)m->next;
    m->next += ((uintptr_t)(bytes ? bytes : 1) + FAKE_ALIGN - 1) & ~(FAKE_ALIGN - 1);
    return p;
}

static void measure_free(h3_backend *b, void *p) {
    (void)b;
    (void)p;
}

static int measure_upload(h3_backend *b, void *dst, const void *src, size_t bytes) {
    (void)b;
    (void)dst;
    (void)src;
    (void)bytes;
    return 0;
}

static int measure_download(h3_backend *b, void *dst, const void *src, size_t bytes) {
    (void)b;
    (void)src;
    memset(dst, 0, bytes);
    return 0;
}

static int measure_synchronize(h3_backend *b) {
    (void)b;
    return 0;
}

/* ---- ops: nothing computed; the ones with scratch take it ------------------ */

static void op_linear(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias) {
    measure_impl *m = impl_of(b);
    (void)bias;
    if (m->t.linear_scratch) take_scratch(b, m->t.linear_scratch(&m->t, y, x, w));
}

static h3_status_code measure_fp8_check(h3_backend *b, h3_status *status) {
    measure_impl *m = impl_of(b);
    return m->t.fp8_check(&m->t, status);
}

/* precision=fp8: the codes and scales were allocated by h3_backend.c, as
 * on the real backend; quantising them computes nothing. */
static void op_quantize_fp8(h3_backend *b, h3_tensor *dst, const h3_tensor *src) {
    (void)b, (void)dst, (void)src;
}

static void op_attention(h3_backend *b, h3_tensor *o, const h3_tensor *q, const h3_tensor *k, const h3_tensor *v,
                         int n_heads, int n_kv_heads, int head_dim, int causal, float scale) {
    measure_impl *m = impl_of(b);
    (void)scale;
    if (m->t.attention_scratch)
        take_scratch(b, m->t.attention_scratch(&m->t, o, q, k, v, n_heads, n_kv_heads, head_dim, causal));
}

static void op_vsa_attention(h3_backend *b, h3_tensor *o, const h3_tensor *q, const h3_tensor *k,
                             const h3_tensor *v, const h3_tensor *gate, const h3_vsa_tiles *tiles, int n_heads,
                             int head_dim) {
    measure_impl *m = impl_of(b);
    if (m->t.vsa_scratch) take_scratch(b, m->t.vsa_scratch(&m->t, o, q, k, v, gate, tiles, n_heads, head_dim));
}

static void op_conv1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                      int stride, int padding, int dilation, int groups) {
    measure_impl *m = impl_of(b);
    (void)stride;
    (void)padding;
    (void)dilation;
    if (m->t.conv1d_scratch) take_scratch(b, m->t.conv1d_scratch(&m->t, y, x, w, bias, groups));
}

static void op_snake_beta_antialiased(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha,
                                      const h3_tensor *beta, const h3_tensor *up_filter,
                                      const h3_tensor *down_filter, int ratio) {
    measure_impl *m = impl_of(b);
    (void)alpha;
    (void)beta;
    (void)up_filter;
    (void)down_filter;
    (void)ratio;
    if (m->t.snake_scratch) take_scratch(b, m->t.snake_scratch(&m->t, y, x));
}

static void op_rms_norm(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, int64_t width,
                        float eps) {
    (void)b, (void)y, (void)x, (void)w, (void)width, (void)eps;
}
static void op_layer_norm(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w,
                          const h3_tensor *bias, float eps) {
    (void)b, (void)y, (void)x, (void)w, (void)bias, (void)eps;
}
static void op_binary(h3_backend *b, int op, h3_tensor *y, const h3_tensor *x0, const h3_tensor *x1) {
    (void)b, (void)op, (void)y, (void)x0, (void)x1;
}
static void op_row_vector(h3_backend *b, int op, h3_tensor *y, const h3_tensor *x, const h3_tensor *v) {
    (void)b, (void)op, (void)y, (void)x, (void)v;
}
static void op_scale(h3_backend *b, h3_tensor *y, const h3_tensor *x, float alpha) {
    (void)b, (void)y, (void)x, (void)alpha;
}
static void op_unary(h3_backend *b, int op, h3_tensor *y, const h3_tensor *x) { (void)b, (void)op, (void)y, (void)x; }
static void op_swiglu(h3_backend *b, h3_tensor *y, const h3_tensor *u, int value_first) {
    (void)b, (void)y, (void)u, (void)value_first;
}
static void op_modulate(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *shift,
                        const h3_tensor *scale, const h3_tensor *sel) {
    (void)b, (void)y, (void)x, (void)shift, (void)scale, (void)sel;
}
static void op_gated_residual(h3_backend *b, h3_tensor *x, const h3_tensor *gate, const h3_tensor *y,
                              const h3_tensor *sel) {
    (void)b, (void)x, (void)gate, (void)y, (void)sel;
}
static void op_rope(h3_backend *b, h3_tensor *x, const h3_tensor *cos, const h3_tensor *sin, int n_heads,
                    int head_dim, int rot_dim) {
    (void)b, (void)x, (void)cos, (void)sin, (void)n_heads, (void)head_dim, (void)rot_dim;
}
static void op_rows(h3_backend *b, h3_tensor *dst, const h3_tensor *src, const h3_tensor *idx) {
    (void)b, (void)dst, (void)src, (void)idx;
}
static void op_copy(h3_backend *b, h3_tensor *dst, const h3_tensor *src) { (void)b, (void)dst, (void)src; }
static void op_fill(h3_backend *b, h3_tensor *dst, float value) { (void)b, (void)dst, (void)value; }
static void op_rms_norm_modulate(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, float eps,
                                 const h3_tensor *shift, const h3_tensor *scale, const h3_tensor *sel) {
    (void)b, (void)y, (void)x, (void)w, (void)eps, (void)shift, (void)scale, (void)sel;
}
static void op_qk_norm_rope(h3_backend *b, h3_tensor *x, const h3_tensor *w, float eps, const h3_tensor *cos,
                            const h3_tensor *sin, int n_heads, int head_dim, int rot_dim) {
    (void)b, (void)x, (void)w, (void)eps, (void)cos, (void)sin, (void)n_heads, (void)head_dim, (void)rot_dim;
}
static void op_copy_view(h3_backend *b, h3_tensor *dst, const h3_view *dv, const h3_tensor *src,
                         const h3_view *sv) {
    (void)b, (void)dst, (void)dv, (void)src, (void)sv;
}
static void op_blend_view(h3_backend *b, h3_tensor *dst, const h3_view *dv, const h3_tensor *a, const h3_view *av,
                          const h3_tensor *x, const h3_view *xv, int axis, int extent) {
    (void)b, (void)dst, (void)dv, (void)a, (void)av, (void)x, (void)xv, (void)axis, (void)extent;
}
static void op_rgb8_from_planar(h3_backend *b, h3_tensor *dst, const h3_tensor *src, int64_t frame0,
                                int64_t nframes, const float *mean, const float *std) {
    (void)b, (void)dst, (void)src, (void)frame0, (void)nframes, (void)mean, (void)std;
}
static void op_im2col3d(h3_backend *b, h3_tensor *col, const h3_tensor *x, const h3_conv3d_geom *g, int64_t n0) {
    (void)b, (void)col, (void)x, (void)g, (void)n0;
}
static void op_group_norm(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                          int groups, float eps, int silu) {
    (void)b, (void)y, (void)x, (void)w, (void)bias, (void)groups, (void)eps, (void)silu;
}
static void op_conv_transpose1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w,
                                const h3_tensor *bias, int stride, int padding) {
    (void)b, (void)y, (void)x, (void)w, (void)bias, (void)stride, (void)padding;
}
static void op_resample1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *filter, int ratio) {
    (void)b, (void)y, (void)x, (void)filter, (void)ratio;
}
static void op_snake_beta(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha,
                          const h3_tensor *beta) {
    (void)b, (void)y, (void)x, (void)alpha, (void)beta;
}
static void op_snake(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha) {
    (void)b, (void)y, (void)x, (void)alpha;
}
static void op_clamp(h3_backend *b, h3_tensor *y, const h3_tensor *x, float lo, float hi) {
    (void)b, (void)y, (void)x, (void)lo, (void)hi;
}
static void op_fill_random(h3_backend *b, h3_tensor *dst, const h3_st_random *v, h3_st_dtype round_to) {
    (void)b, (void)dst, (void)v, (void)round_to;
}

/* Nothing is computed, so nothing is non-finite; the CUDA counter word is
 * in the target's fixed_scratch (H3_CUDA_FIXED_BYTES), taken at creation. */
static int64_t op_count_nonfinite(h3_backend *b, const h3_tensor *t) {
    (void)b, (void)t;
    return 0;
}

/* Every op of the target, as a no-op here; what the target lacks stays NULL. */
#define MIRROR(field, fn) ops->field = target->field ? fn : NULL

static void mirror_ops(h3_backend_ops *ops, const h3_backend_ops *target) {
    MIRROR(linear, op_linear);
    MIRROR(quantize_fp8, op_quantize_fp8);
    MIRROR(rms_norm, op_rms_norm);
    MIRROR(layer_norm, op_layer_norm);
    MIRROR(binary, op_binary);
    MIRROR(row_vector, op_row_vector);
    MIRROR(scale, op_scale);
    MIRROR(unary, op_unary);
    MIRROR(swiglu, op_swiglu);
    MIRROR(modulate, op_modulate);
    MIRROR(gated_residual, op_gated_residual);
    MIRROR(rope, op_rope);
    MIRROR(attention, op_attention);
    MIRROR(vsa_attention, op_vsa_attention);
    MIRROR(gather_rows, op_rows);
    MIRROR(scatter_rows, op_rows);
    MIRROR(copy, op_copy);
    MIRROR(fill, op_fill);
    MIRROR(fill_random, op_fill_random);
    MIRROR(rms_norm_modulate, op_rms_norm_modulate);
    MIRROR(qk_norm_rope, op_qk_norm_rope);
    MIRROR(copy_view, op_copy_view);
    MIRROR(blend_view, op_blend_view);
    MIRROR(rgb8_from_planar, op_rgb8_from_planar);
    MIRROR(im2col3d, op_im2col3d);
    MIRROR(group_norm, op_group_norm);
    MIRROR(conv1d, op_conv1d);
    MIRROR(conv_transpose1d, op_conv_transpose1d);
    MIRROR(upsample1d, op_resample1d);
    MIRROR(downsample1d, op_resample1d);
    MIRROR(snake_beta, op_snake_beta);
    MIRROR(snake, op_snake);
    MIRROR(snake_beta_antialiased, op_snake_beta_antialiased);
    MIRROR(clamp, op_clamp);
    MIRROR(count_nonfinite, op_count_nonfinite);
}

h3_status_code h3_backend_measure_create(const h3_measure_target *target, h3_backend **out, h3_status *status) {
    *out = NULL;
    if (!target || !target->ops)
        return h3_fail(status, H3_ERR_INTERNAL, "measuring backend: no target to stand for");
    h3_backend *b = calloc(1, sizeof *b);
    measure_impl *m = calloc(1, sizeof *m);
    if (!b || !m) {
        free(b);
        free(m);
        return h3_fail(status, H3_ERR_NO_MEMORY, "measuring backend: out of memory");
    }
    m->t = *target;
    snprintf(m->name, sizeof m->name, "%s", target->name ? target->name : "measure");
    m->next = FAKE_BASE;
    h3_backend_ops *ops = &m->ops;
    ops->name = m->name;
    ops->compute_dtype = target->compute_dtype;
    ops->no_data = 1;
    ops->destroy = measure_destroy;
    ops->weight_dtype = measure_weight_dtype;
    ops->alloc = measure_alloc;
    ops->free = measure_free;
    ops->upload = measure_upload;
    ops->download = measure_download;
    ops->synchronize = measure_synchronize;
    ops->trim_scratch = measure_trim_scratch;
    ops->fp8_check = target->fp8_check ? measure_fp8_check : NULL;
    ops->pins_host = target->ops->pins_host; /* host copies pinned as the target would (h3_weight_stream.c) */
    mirror_ops(ops, target->ops);
    h3_backend_init(b, ops, m);
    b->compute_dtype = target->compute_dtype;
    if (target->chunk_min_size) b->chunk_min_size = target->chunk_min_size;
    if (target->fixed_scratch) h3_backend_track_scratch(b, (int64_t)target->fixed_scratch);
    *out = b;
    return H3_OK;
}
