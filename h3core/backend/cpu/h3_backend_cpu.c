/* h3_backend_cpu.c - the float32 CPU reference backend.
 *
 * Everything is float32: weights stored in bf16 in the files are widened
 * exactly, so this backend reproduces the official reference run in float32
 * (the goldens) to rounding. GEMMs go through OpenBLAS; the rest are plain
 * loops written for clarity first. This file holds the backend itself and
 * the core ops; the subsystems' ops are in h3_cpu_video_vae.c,
 * h3_cpu_audio_vae.c and h3_cpu_vsa.c (h3_backend_cpu_impl.h). */
#include "backend/cpu/h3_backend_cpu_impl.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/h3_random.h"
#define CPU_ARENA_CHUNK ((size_t)16 << 20)

typedef struct cpu_impl {
    int n_threads;
    float *scratch; /* attention scores, grown on first use and kept */
    size_t scratch_size;
} cpu_impl;

static cpu_impl *impl_of(h3_backend *b) { return b->impl; }

int h3_cpu_need_f32(h3_backend *b, const char *op, const h3_tensor *t) {
    if (t && t->dtype != H3_F32) {
        h3_backend_fail(b, H3_ERR_UNSUPPORTED, "cpu %s: %s tensor (the CPU backend computes in f32)", op,
                        h3_dtype_name(t->dtype));
        return 0;
    }
    return 1;
}

float *h3_cpu_scratch(h3_backend *b, size_t n) {
    cpu_impl *c = impl_of(b);
    if (n > c->scratch_size) {
        free(c->scratch);
        c->scratch = h3_backend_alloc_refused(b) ? NULL : malloc(n * sizeof(float));
        c->scratch_size = c->scratch ? n : 0;
        if (!c->scratch) h3_backend_fail(b, H3_ERR_NO_MEMORY, "cpu: no memory for %zu scratch floats", n);
    }
    return c->scratch;
}

static void cpu_destroy(h3_backend *b) {
    cpu_impl *c = impl_of(b);
    free(c->scratch);
    free(c);
    free(b);
}

static h3_dtype cpu_weight_dtype(h3_backend *b, h3_weight_type type, h3_dtype file_dtype) { return H3_F32; }

static int64_t cpu_count_nonfinite(h3_backend *b, const h3_tensor *t) {
    if (!h3_cpu_need_f32(b, "count_nonfinite", t)) return -1;
    const float *x = t->data;
    int64_t n = h3_tensor_numel(t), bad = 0;
    for (int64_t i = 0; i < n; i++) bad += !isfinite(x[i]);
    return bad;
}

static void *cpu_alloc(h3_backend *b, size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) return NULL;
    return p;
}

static void cpu_free(h3_backend *b, void *p) { free(p); }

static int cpu_copy_bytes(h3_backend *b, void *dst, const void *src, size_t bytes) {
    memcpy(dst, src, bytes);
    return 0;
}

static int cpu_synchronize(h3_backend *b) { return 0; }

static void cpu_linear(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias) {
    if (w->dtype == H3_F8E4M3) {
        h3_cpu_linear_fp8(b, y, x, w, bias); /* precision=fp8: h3_cpu_fp8.c */
        return;
    }
    if (!h3_cpu_need_f32(b, "linear", y) || !h3_cpu_need_f32(b, "linear", x) || !h3_cpu_need_f32(b, "linear", w) ||
        !h3_cpu_need_f32(b, "linear", bias))
        return;
    int M = (int)h3_tensor_rows(x), K = (int)h3_tensor_cols(x), N = (int)w->shape[0];
    float *Y = y->data;
    if (bias) {
        const float *bb = bias->data;
        for (int i = 0; i < M; i++) memcpy(Y + (size_t)i * N, bb, (size_t)N * sizeof(float));
    }
    if (M == 0 || N == 0) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x->data, K, w->data, K, bias ? 1.0f : 0.0f,
                Y, N);
}

static void cpu_rms_norm(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, int64_t width,
                         float eps) {
    if (!h3_cpu_need_f32(b, "rms_norm", y) || !h3_cpu_need_f32(b, "rms_norm", x) || !h3_cpu_need_f32(b, "rms_norm", w)) return;
    int64_t groups = h3_tensor_numel(x) / width;
    const float *X = x->data, *W = w ? w->data : NULL;
    float *Y = y->data;
    for (int64_t g = 0; g < groups; g++) {
        const float *xr = X + g * width;
        float *yr = Y + g * width;
        double ss = 0;
        for (int64_t i = 0; i < width; i++) ss += (double)xr[i] * xr[i];
        float inv = 1.0f / sqrtf((float)(ss / (double)width) + eps);
        for (int64_t i = 0; i < width; i++) yr[i] = W ? xr[i] * inv * W[i] : xr[i] * inv;
    }
}

static void cpu_layer_norm(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w,
                           const h3_tensor *bias, float eps) {
    if (!h3_cpu_need_f32(b, "layer_norm", y) || !h3_cpu_need_f32(b, "layer_norm", x)) return;
    int64_t rows = h3_tensor_rows(x), D = h3_tensor_cols(x);
    const float *X = x->data, *W = w ? w->data : NULL, *B = bias ? bias->data : NULL;
    float *Y = y->data;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = X + r * D;
        float *yr = Y + r * D;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < D; i++) mean += xr[i];
        mean /= (double)D;
        for (int64_t i = 0; i < D; i++) var += ((double)xr[i] - mean) * ((double)xr[i] - mean);
        var /= (double)D;
        float inv = 1.0f / sqrtf((float)var + eps);
        for (int64_t i = 0; i < D; i++) {
            float v = (xr[i] - (float)mean) * inv;
            if (W) v *= W[i];
            if (B) v += B[i];
            yr[i] = v;
        }
    }
}

static void cpu_binary(h3_backend *b, int op, h3_tensor *y, const h3_tensor *x0, const h3_tensor *x1) {
    if (!h3_cpu_need_f32(b, "binary", y) || !h3_cpu_need_f32(b, "binary", x0) || !h3_cpu_need_f32(b, "binary", x1)) return;
    int64_t n = h3_tensor_numel(y);
    const float *a = x0->data, *c = x1->data;
    float *Y = y->data;
    if (op == 0)
        for (int64_t i = 0; i < n; i++) Y[i] = a[i] + c[i];
    else
        for (int64_t i = 0; i < n; i++) Y[i] = a[i] * c[i];
}

static void cpu_row_vector(h3_backend *b, int op, h3_tensor *y, const h3_tensor *x, const h3_tensor *v) {
    if (!h3_cpu_need_f32(b, "row_vector", y) || !h3_cpu_need_f32(b, "row_vector", x) || !h3_cpu_need_f32(b, "row_vector", v)) return;
    int64_t rows = h3_tensor_rows(x), D = h3_tensor_cols(x);
    const float *X = x->data, *V = v->data;
    float *Y = y->data;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < D; i++) Y[r * D + i] = op == 0 ? X[r * D + i] * V[i] : X[r * D + i] + V[i];
}

static void cpu_scale(h3_backend *b, h3_tensor *y, const h3_tensor *x, float alpha) {
    if (!h3_cpu_need_f32(b, "scale", y) || !h3_cpu_need_f32(b, "scale", x)) return;
    int64_t n = h3_tensor_numel(y);
    const float *X = x->data;
    float *Y = y->data;
    for (int64_t i = 0; i < n; i++) Y[i] = X[i] * alpha;
}

static float silu(float v) { return v / (1.0f + expf(-v)); }

static void cpu_unary(h3_backend *b, int op, h3_tensor *y, const h3_tensor *x) {
    if (!h3_cpu_need_f32(b, "unary", y) || !h3_cpu_need_f32(b, "unary", x)) return;
    int64_t n = h3_tensor_numel(y);
    const float *X = x->data;
    float *Y = y->data;
    for (int64_t i = 0; i < n; i++) {
        float v = X[i];
        if (op == 0) Y[i] = silu(v);
        else if (op == 1) Y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
        else Y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    }
}

static void cpu_swiglu(h3_backend *b, h3_tensor *y, const h3_tensor *u, int value_first) {
    if (!h3_cpu_need_f32(b, "swiglu", y) || !h3_cpu_need_f32(b, "swiglu", u)) return;
    int64_t rows = h3_tensor_rows(y), F = h3_tensor_cols(y);
    const float *U = u->data;
    float *Y = y->data;
    for (int64_t r = 0; r < rows; r++) {
        const float *first = U + r * 2 * F, *second = first + F;
        const float *value = value_first ? first : second, *gate = value_first ? second : first;
        for (int64_t i = 0; i < F; i++) Y[r * F + i] = value[i] * silu(gate[i]);
    }
}

static void cpu_modulate(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *shift,
                         const h3_tensor *scale, const h3_tensor *sel) {
    if (!h3_cpu_need_f32(b, "modulate", y) || !h3_cpu_need_f32(b, "modulate", x) || !h3_cpu_need_f32(b, "modulate", shift) ||
        !h3_cpu_need_f32(b, "modulate", scale))
        return;
    int64_t S = h3_tensor_rows(x), D = h3_tensor_cols(x), T = h3_tensor_rows(shift);
    const float *X = x->data, *SH = shift->data, *SC = scale->data;
    const int32_t *R = sel->data;
    float *Y = y->data;
    for (int64_t s = 0; s < S; s++) {
        if (R[s] < 0 || R[s] >= T) {
            h3_backend_fail(b, H3_ERR_INTERNAL, "modulate: selector %d outside table of %lld rows", R[s], (long long)T);
            return;
        }
        const float *sh = SH + (int64_t)R[s] * D, *sc = SC + (int64_t)R[s] * D;
        for (int64_t i = 0; i < D; i++) Y[s * D + i] = X[s * D + i] * (1.0f + sc[i]) + sh[i];
    }
}

static void cpu_gated_residual(h3_backend *b, h3_tensor *x, const h3_tensor *gate, const h3_tensor *y,
                               const h3_tensor *sel) {
    if (!h3_cpu_need_f32(b, "gated_residual", x) || !h3_cpu_need_f32(b, "gated_residual", gate) ||
        !h3_cpu_need_f32(b, "gated_residual", y))
        return;
    int64_t S = h3_tensor_rows(x), D = h3_tensor_cols(x), T = h3_tensor_rows(gate);
    const float *G = gate->data, *Yv = y->data;
    const int32_t *R = sel->data;
    float *X = x->data;
    for (int64_t s = 0; s < S; s++) {
        if (R[s] < 0 || R[s] >= T) {
            h3_backend_fail(b, H3_ERR_INTERNAL, "gated_residual: selector %d outside table of %lld rows", R[s],
                            (long long)T);
            return;
        }
        const float *g = G + (int64_t)R[s] * D;
        for (int64_t i = 0; i < D; i++) X[s * D + i] += g[i] * Yv[s * D + i];
    }
}

static void cpu_rope(h3_backend *b, h3_tensor *x, const h3_tensor *cos, const h3_tensor *sin, int n_heads,
                     int head_dim, int rot_dim) {
    if (!h3_cpu_need_f32(b, "rope", x)) return;
    int64_t S = h3_tensor_rows(x);
    int half = rot_dim / 2;
    float *X = x->data;
    const float *C = cos->data, *Sn = sin->data;
    for (int64_t s = 0; s < S; s++) {
        const float *c = C + s * rot_dim, *sn = Sn + s * rot_dim;
        for (int h = 0; h < n_heads; h++) {
            float *v = X + s * (int64_t)n_heads * head_dim + (int64_t)h * head_dim;
            for (int i = 0; i < half; i++) {
                float a = v[i], d = v[i + half];
                v[i] = a * c[i] - d * sn[i];
                v[i + half] = d * c[i + half] + a * sn[i + half];
            }
        }
    }
}

/* Attention one head and one block of queries at a time: scores via GEMM,
 * a numerically safe softmax, then P·V via GEMM. */
static void cpu_attention(h3_backend *b, h3_tensor *o, const h3_tensor *q, const h3_tensor *k, const h3_tensor *v,
                          int n_heads, int n_kv_heads, int head_dim, int causal, float scale) {
    if (!h3_cpu_need_f32(b, "attention", o) || !h3_cpu_need_f32(b, "attention", q) || !h3_cpu_need_f32(b, "attention", k) ||
        !h3_cpu_need_f32(b, "attention", v))
        return;
    int Sq = (int)h3_tensor_rows(q), Skv = (int)h3_tensor_rows(k);
    int ldq = n_heads * head_dim, ldk = n_kv_heads * head_dim, group = n_heads / n_kv_heads;
    const int block = 256;
    float *P = h3_cpu_scratch(b, (size_t)block * (size_t)(Skv ? Skv : 1));
    if (!P) return;
    const float *Q = q->data, *K = k->data, *V = v->data;
    float *O = o->data;
    for (int h = 0; h < n_heads; h++) {
        int kh = h / group;
        for (int q0 = 0; q0 < Sq; q0 += block) {
            int nq = Sq - q0 < block ? Sq - q0 : block;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, Skv, head_dim, scale,
                        Q + (size_t)q0 * ldq + (size_t)h * head_dim, ldq, K + (size_t)kh * head_dim, ldk, 0.0f, P,
                        Skv);
            for (int i = 0; i < nq; i++) {
                float *p = P + (size_t)i * Skv;
                int limit = causal ? q0 + i + 1 : Skv;
                float m = -INFINITY;
                for (int j = 0; j < limit; j++) m = p[j] > m ? p[j] : m;
                double sum = 0;
                for (int j = 0; j < limit; j++) {
                    p[j] = expf(p[j] - m);
                    sum += p[j];
                }
                float inv = (float)(1.0 / sum);
                for (int j = 0; j < limit; j++) p[j] *= inv;
                for (int j = limit; j < Skv; j++) p[j] = 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, head_dim, Skv, 1.0f, P, Skv,
                        V + (size_t)kh * head_dim, ldk, 0.0f, O + (size_t)q0 * ldq + (size_t)h * head_dim, ldq);
        }
    }
}

static void cpu_gather_rows(h3_backend *b, h3_tensor *dst, const h3_tensor *src, const h3_tensor *idx) {
    int64_t n = h3_tensor_numel(idx), rows = h3_tensor_rows(src);
    size_t rb = (size_t)h3_tensor_cols(src) * h3_dtype_size(src->dtype);
    if (dst->dtype != src->dtype) { h3_backend_fail(b, H3_ERR_INTERNAL, "gather_rows: dtype mismatch"); return; }
    const int32_t *ix = idx->data;
    for (int64_t i = 0; i < n; i++) {
        if (ix[i] < 0 || ix[i] >= rows) {
            h3_backend_fail(b, H3_ERR_INVALID_ARGUMENT, "gather_rows: index %d outside [0, %lld)", ix[i], (long long)rows);
            return;
        }
        memcpy((char *)dst->data + (size_t)i * rb, (const char *)src->data + (size_t)ix[i] * rb, rb);
    }
}

static void cpu_scatter_rows(h3_backend *b, h3_tensor *dst, const h3_tensor *src, const h3_tensor *idx) {
    int64_t n = h3_tensor_numel(idx), rows = h3_tensor_rows(dst);
    size_t rb = (size_t)h3_tensor_cols(src) * h3_dtype_size(src->dtype);
    if (dst->dtype != src->dtype) { h3_backend_fail(b, H3_ERR_INTERNAL, "scatter_rows: dtype mismatch"); return; }
    const int32_t *ix = idx->data;
    for (int64_t i = 0; i < n; i++) {
        if (ix[i] < 0 || ix[i] >= rows) {
            h3_backend_fail(b, H3_ERR_INVALID_ARGUMENT, "scatter_rows: index %d outside [0, %lld)", ix[i], (long long)rows);
            return;
        }
        memcpy((char *)dst->data + (size_t)ix[i] * rb, (const char *)src->data + (size_t)i * rb, rb);
    }
}

static void cpu_copy(h3_backend *b, h3_tensor *dst, const h3_tensor *src) {
    if (dst->dtype != src->dtype) {
        h3_backend_fail(b, H3_ERR_UNSUPPORTED, "cpu copy: %s -> %s", h3_dtype_name(src->dtype), h3_dtype_name(dst->dtype));
        return;
    }
    memmove(dst->data, src->data, h3_tensor_nbytes(src));
}

static void cpu_fill(h3_backend *b, h3_tensor *dst, float value) {
    int64_t n = h3_tensor_numel(dst);
    if (dst->dtype == H3_I32) {
        int32_t *d = dst->data;
        for (int64_t i = 0; i < n; i++) d[i] = (int32_t)value;
        return;
    }
    if (!h3_cpu_need_f32(b, "fill", dst)) return;
    float *d = dst->data;
    for (int64_t i = 0; i < n; i++) d[i] = value;
}

/* A dummy tensor's values (h3_st_random), rounded like the file dtype
 * they stand for, then widened: what loading such a file would give. */
static void cpu_fill_random(h3_backend *b, h3_tensor *dst, const h3_st_random *v, h3_st_dtype round_to) {
    if (!h3_cpu_need_f32(b, "fill_random", dst)) return;
    int64_t n = h3_tensor_numel(dst), rows = dst->shape[0] ? dst->shape[0] : 1, cols = n / rows;
    int64_t row_stride = v->row_stride ? v->row_stride : cols, part_rows = v->part_rows ? v->part_rows : rows;
    float *d = dst->data;
    for (int64_t r = 0; r < rows; r++) {
        int64_t at = v->offset + (r / part_rows) * v->part_stride + (r % part_rows) * row_stride;
        for (int64_t c = 0; c < cols; c++) {
            float x = h3_counter_uniform(v->key, (uint64_t)(at + c), v->lo, v->hi);
            if (round_to == H3_ST_BF16) x = h3_bf16_to_f32(h3_f32_to_bf16(x));
            else if (round_to == H3_ST_F16) x = h3_f16_to_f32(h3_f32_to_f16(x));
            d[r * cols + c] = x;
        }
    }
}

static const h3_backend_ops cpu_ops = {
    .name = "cpu",
    .compute_dtype = H3_F32,
    .destroy = cpu_destroy,
    .weight_dtype = cpu_weight_dtype,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy_bytes,
    .download = cpu_copy_bytes,
    .synchronize = cpu_synchronize,
    .linear = cpu_linear,
    .quantize_fp8 = h3_cpu_quantize_fp8, /* h3_cpu_fp8.c */
    .rms_norm = cpu_rms_norm,
    .layer_norm = cpu_layer_norm,
    .binary = cpu_binary,
    .row_vector = cpu_row_vector,
    .scale = cpu_scale,
    .unary = cpu_unary,
    .swiglu = cpu_swiglu,
    .modulate = cpu_modulate,
    .gated_residual = cpu_gated_residual,
    .rope = cpu_rope,
    .attention = cpu_attention,
    .vsa_attention = h3_cpu_vsa_attention, /* h3_cpu_vsa.c */
    .gather_rows = cpu_gather_rows,
    .scatter_rows = cpu_scatter_rows,
    .copy = cpu_copy,
    .fill = cpu_fill,
    .fill_random = cpu_fill_random,
    /* h3_cpu_video_vae.c */
    .copy_view = h3_cpu_copy_view,
    .blend_view = h3_cpu_blend_view,
    .rgb8_from_planar = h3_cpu_rgb8_from_planar,
    .im2col3d = h3_cpu_im2col3d,
    .group_norm = h3_cpu_group_norm,
    /* h3_cpu_audio_vae.c */
    .conv1d = h3_cpu_conv1d,
    .conv_transpose1d = h3_cpu_conv_transpose1d,
    .upsample1d = h3_cpu_upsample1d,
    .downsample1d = h3_cpu_downsample1d,
    .snake_beta = h3_cpu_snake_beta,
    .snake = h3_cpu_snake,
    .snake_beta_antialiased = h3_cpu_snake_beta_antialiased,
    .clamp = h3_cpu_clamp,
    .count_nonfinite = cpu_count_nonfinite,
};

h3_status_code h3_backend_cpu_create(int n_threads, h3_backend **out, h3_status *status) {
    *out = NULL;
    h3_backend *b = calloc(1, sizeof *b);
    cpu_impl *c = calloc(1, sizeof *c);
    if (!b || !c) {
        free(b);
        free(c);
        return h3_fail(status, H3_ERR_NO_MEMORY, "cpu backend: out of memory");
    }
    c->n_threads = n_threads;
    if (n_threads > 0) openblas_set_num_threads(n_threads);
    h3_backend_init(b, &cpu_ops, c);
    b->chunk_min_size = CPU_ARENA_CHUNK;
    *out = b;
    return H3_OK;
}

/* The measuring twin (backend/measure/): float32 weights, 16 MiB arena
 * chunks, the same op table. The CPU's scratch is host working memory the
 * tally leaves out, so the twin takes none. */
static h3_dtype cpu_measure_weight_dtype(const h3_measure_target *t, h3_weight_type type, h3_dtype file_dtype) {
    (void)t;
    return cpu_weight_dtype(NULL, type, file_dtype);
}

h3_status_code h3_backend_cpu_create_measure(h3_backend **out, h3_status *status) {
    h3_measure_target t = {
        .name = "measure:cpu",
        .ops = &cpu_ops,
        .compute_dtype = H3_F32,
        .chunk_min_size = CPU_ARENA_CHUNK,
        .weight_dtype = cpu_measure_weight_dtype,
    };
    return h3_backend_measure_create(&t, out, status);
}
