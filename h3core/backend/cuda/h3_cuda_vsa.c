/* h3_cuda_vsa.c - VSA-H3 block-sparse attention on the CUDA backend
 * (h3_op_vsa_attention; the kernels: kernels/h3_vsa*.cu) and its hooks for
 * benchmarks and tests (h3_backend_cuda_bench.h): which kernel a call runs,
 * the Hopper consumers, the key-tile lists and scores a call left in the
 * scratch, stage timing and the probes of the block-sparse kernel. */
#include "backend/cuda/h3_backend_cuda_bench.h"

#include "backend/cuda/h3_backend_cuda_impl.h"
#include "kernels/h3_kernels_attention.h" /* h3k_attention_path_name */
#include "kernels/h3_kernels_vsa.h"

#include <cuda_runtime_api.h>
#include <string.h>

static void vsa_args_at(int sm, int path, h3k_vsa_args *a, const h3_tensor *o, const h3_tensor *q,
                        const h3_tensor *k, const h3_tensor *v, const h3_tensor *gate, const h3_vsa_tiles *t,
                        int n_heads, int head_dim) {
    memset(a, 0, sizeof *a);
    a->o = o ? o->data : NULL;
    a->q = q ? q->data : NULL;
    a->k = k ? k->data : NULL;
    a->v = v ? v->data : NULL;
    a->gate = gate ? gate->data : NULL;
    a->dt = q ? (int)q->dtype : H3K_BF16;
    a->S = q ? h3_tensor_rows(q) : 0;
    a->n_heads = n_heads;
    a->head_dim = head_dim;
    a->num_tiles = t->num_tiles;
    a->num_prefix_tiles = t->num_prefix_tiles;
    a->topk = t->topk;
    a->tile_elems = t->tile_elems;
    a->tile_sizes = t->tile_sizes.data;
    a->untile_index = t->untile_index.data;
    a->path = path;
    a->sm = sm;
}

static void vsa_args(h3_backend *b, h3k_vsa_args *a, h3_tensor *o, const h3_tensor *q, const h3_tensor *k,
                     const h3_tensor *v, const h3_tensor *gate, const h3_vsa_tiles *t, int n_heads, int head_dim) {
    cuda_impl *c = impl_of(b);
    vsa_args_at(c->sm, (int)c->attention, a, o, q, k, v, gate, t, n_heads, head_dim);
    a->pipelined = c->vsa_pipelined;
    a->err = c->flag;
}

size_t h3_cuda_vsa_scratch_at(int sm, int path, const h3_tensor *o, const h3_tensor *q, const h3_tensor *k,
                              const h3_tensor *v, const h3_tensor *gate, const h3_vsa_tiles *t, int n_heads,
                              int head_dim) {
    h3k_vsa_args a;
    vsa_args_at(sm, path, &a, o, q, k, v, gate, t, n_heads, head_dim);
    return h3k_vsa_scratch(&a);
}

static const char *vsa_kernel_name(const h3k_vsa_args *a) {
    int path = h3k_vsa_path(a);
    if (path == H3K_ATTN_WGMMA && a->pipelined) return a->pipelined == 2 ? "wgmma-paired" : "wgmma-pipelined";
    return h3k_attention_path_name(path);
}

void h3_cuda_vsa_attention(h3_backend *b, h3_tensor *o, const h3_tensor *q, const h3_tensor *k, const h3_tensor *v,
                           const h3_tensor *gate, const h3_vsa_tiles *t, int n_heads, int head_dim) {
    cuda_impl *c = impl_of(b);
    if (head_dim > 256) {
        h3_backend_fail(b, H3_ERR_UNSUPPORTED, "cuda vsa_attention: head_dim %d (at most 256)", head_dim);
        return;
    }
    h3k_vsa_args a;
    vsa_args(b, &a, o, q, k, v, gate, t, n_heads, head_dim);
    if (c->vsa_profile)
        for (int i = 0; i < 4; i++) a.events[i] = c->vsa_events[i];
    a.scratch = h3_cuda_scratch(b, h3k_vsa_scratch(&a));
    a.scratch_size = c->scratch_size;
    if (!a.scratch) return;
    c->vsa_valid = 0;
    if (!ok(b, h3k_vsa_attention(&a, c->stream), vsa_kernel_name(&a))) return;
    c->vsa_last = a;
    c->vsa_epoch = c->scratch_epoch;
    c->vsa_valid = 1;
}

/* Benchmarks: a probe of the last VSA call's fine kernel, reps times; ms =
 * the fastest launch. The scratch must still hold that call's images and
 * lists. */
h3_status_code h3_backend_cuda_vsa_probe_ms(h3_backend *b, h3_cuda_vsa_probe which, int reps, float *ms,
                                            h3_status *status) {
    cuda_impl *c = impl_of(b);
    if (!c->vsa_valid || c->vsa_epoch != c->scratch_epoch)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "cuda vsa_probe: no vsa_attention results in the scratch (probe right after the call)");
    int kind = which == H3_CUDA_VSA_PROBE_MATH ? H3K_VSA_PROBE_MATH : H3K_VSA_PROBE_COPIES;
    cudaEvent_t ev[2] = {NULL, NULL};
    cudaError_t e = cudaEventCreate(&ev[0]);
    if (e == cudaSuccess) e = cudaEventCreate(&ev[1]);
    *ms = 0;
    for (int r = 0; e == cudaSuccess && r < (reps < 1 ? 1 : reps); r++) {
        float t = 0;
        e = cudaEventRecord(ev[0], c->stream);
        if (e == cudaSuccess) e = (cudaError_t)h3k_vsa_probe(&c->vsa_last, kind, c->stream);
        if (e == cudaSuccess) e = cudaEventRecord(ev[1], c->stream);
        if (e == cudaSuccess) e = cudaEventSynchronize(ev[1]);
        if (e == cudaSuccess) e = cudaEventElapsedTime(&t, ev[0], ev[1]);
        if (e == cudaSuccess && (r == 0 || t < *ms)) *ms = t;
    }
    for (int i = 0; i < 2; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return h3_fail(status, e == cudaErrorNotSupported ? H3_ERR_UNSUPPORTED : H3_ERR_DEVICE, "cuda vsa_probe: %s",
                       cudaGetErrorString(e));
    }
    return H3_OK;
}


/* The kernel-choosing fields of a VSA call, as this backend would fill them. */
static h3k_vsa_args vsa_choice(h3_backend *b, h3_dtype dtype, int head_dim, int tile_elems) {
    cuda_impl *c = impl_of(b);
    h3k_vsa_args a;
    memset(&a, 0, sizeof a);
    a.dt = (int)dtype;
    a.head_dim = head_dim;
    a.tile_elems = tile_elems;
    a.path = (int)c->attention;
    a.pipelined = c->vsa_pipelined;
    a.sm = c->sm;
    return a;
}

const char *h3_backend_cuda_vsa_kernel(h3_backend *b, h3_dtype dtype, int head_dim, int tile_elems) {
    h3k_vsa_args a = vsa_choice(b, dtype, head_dim, tile_elems);
    return vsa_kernel_name(&a);
}

int h3_backend_cuda_set_vsa_pipelined(h3_backend *b, int on) {
    cuda_impl *c = impl_of(b);
    int old = c->vsa_pipelined;
    c->vsa_pipelined = on < 0 || on > 2 ? 1 : on; /* 0 simple, 1 pipelined, 2 paired */
    return old;
}

int h3_backend_cuda_vsa_ctas_per_sm(h3_backend *b, h3_dtype dtype, int head_dim, int tile_elems) {
    h3k_vsa_args a = vsa_choice(b, dtype, head_dim, tile_elems);
    return h3k_vsa_ctas_per_sm(&a);
}

h3_status_code h3_backend_cuda_vsa_profile(h3_backend *b, int on, h3_status *status) {
    cuda_impl *c = impl_of(b);
    for (int i = 0; on && i < 4; i++)
        if (!c->vsa_events[i] && cudaEventCreate(&c->vsa_events[i]) != cudaSuccess) {
            cudaGetLastError();
            c->vsa_events[i] = NULL;
            return h3_fail(status, H3_ERR_DEVICE, "cuda vsa_profile: cannot create CUDA events");
        }
    c->vsa_profile = on != 0;
    return H3_OK;
}

h3_status_code h3_backend_cuda_vsa_stage_ms(h3_backend *b, float ms[3], h3_status *status) {
    cuda_impl *c = impl_of(b);
    if (!c->vsa_profile || !c->vsa_valid)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "cuda vsa_stage_ms: no profiled vsa_attention call (turn h3_backend_cuda_vsa_profile on first)");
    cudaError_t e = cudaEventSynchronize(c->vsa_events[3]);
    for (int i = 0; e == cudaSuccess && i < 3; i++) e = cudaEventElapsedTime(&ms[i], c->vsa_events[i], c->vsa_events[i + 1]);
    if (e != cudaSuccess) return h3_fail(status, H3_ERR_DEVICE, "cuda vsa_stage_ms: %s", cudaGetErrorString(e));
    return H3_OK;
}

h3_status_code h3_backend_cuda_vsa_inspect(h3_backend *b, int32_t *lists, size_t lists_len, float *scores,
                                           size_t scores_len, h3_status *status) {
    cuda_impl *c = impl_of(b);
    if (!c->vsa_valid || c->vsa_epoch != c->scratch_epoch)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "cuda vsa_inspect: no vsa_attention results in the scratch (inspect right after the call, "
                       "before any other op that uses scratch)");
    const h3k_vsa_args *a = &c->vsa_last;
    const int32_t *dl = NULL;
    const float *ds = NULL;
    h3k_vsa_results(a, &dl, &ds);
    size_t n = (size_t)a->num_tiles, P = (size_t)a->num_prefix_tiles, H = (size_t)a->n_heads;
    size_t want_l = dl ? H * (n - P) * (P + (size_t)a->topk) : 0, want_s = ds ? H * n * n : 0;
    if (lists && lists_len != want_l)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "cuda vsa_inspect: the call left %zu list entries, not %zu",
                       want_l, lists_len);
    if (scores && scores_len != want_s)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "cuda vsa_inspect: the call left %zu scores, not %zu", want_s,
                       scores_len);
    cudaError_t e = cudaSuccess;
    if (lists && want_l)
        e = cudaMemcpyAsync(lists, dl, want_l * sizeof *lists, cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess && scores && want_s)
        e = cudaMemcpyAsync(scores, ds, want_s * sizeof *scores, cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) return h3_fail(status, H3_ERR_DEVICE, "cuda vsa_inspect: %s", cudaGetErrorString(e));
    return H3_OK;
}
