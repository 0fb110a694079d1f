/* attention.c - --attention only: every dense attention kernel at the block's
 * shapes. Each path that fits (forced through
 * h3_backend_cuda_set_attention_variant; the kernel name printed is the one
 * that ran) timed with CUDA events around h3_op_attention, median of --reps
 * after 2 warm-ups, on fresh random q, k, v (scores O(1..3), as in the tests);
 * before them torch SDPA through the reference script's sdpa_backends()
 * (--reference none skips it). Then the same at the video VAE's tile shape
 * (head_dim 64, fp16) for its kernels against sdpa_vae(). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/h3_backend_cuda_bench.h"
#include "bench.h"

/* torch SDPA (flash, cuDNN, efficient) at both S in a child process; run
 * first, so that a kernel of ours that faults cannot lose these numbers. */
static void attention_torch(const bench_options *o) {
    if (strcmp(o->reference, "none") == 0) return;
    char dir[512], cmd[1536];
    reference_script(o, ".", dir, sizeof dir);
    snprintf(cmd, sizeof cmd,
             "%s -c \"import sys; sys.path.insert(0, '%s'); import h3_bench_reference as r\n"
             "for S in (%d, %d):\n"
             "    for n, x in r.sdpa_backends(S, %d).items(): print('%%-8d %%-18s %%10.3f %%9.1f' %% "
             "(S, 'torch-' + n, x['ms'], x['tflops']) if 'ms' in x else '%%-8d torch-%%s: %%s' %% (S, n, x['error']))\" 2>&1",
             o->python, dir, S1, S2, o->reps);
    fflush(stdout);
    int rc = system(cmd);
    if (rc != 0) printf("torch SDPA reference exited with status %d\n", rc);
}

typedef struct attn_ctx {
    h3_tensor q, k, v, out;
} attn_ctx;

static void run_attention(void *opaque) {
    attn_ctx *c = opaque;
    h3_op_attention(B, &c->out, &c->q, &c->k, &c->v, NH, NH, HD, 0, 1.0f / sqrtf((float)HD));
}

/* What bounds the default kernel (wgmma-fa3-n192): its pack pass and the
 * kernel alone, then the kernel without its softmax (the same GEMMs, copies
 * and barriers), without its exponentials (the max, the sums and the
 * rescale kept), and with a quarter or half of its exponentials moved from
 * MUFU.EX2 to the FMA pipe. Kernel minus no-softmax is the softmax time the
 * GEMMs do not cover, kernel minus no-exp what MUFU costs of it; the
 * no-softmax kernel's TF/s is the ceiling of this GEMM pipeline. The FMA
 * variants' outputs are compared with the kernel's (relative L2). */
static void attention_probes(const bench_options *o, attn_ctx *c, int64_t S, double flop) {
    static const struct {
        h3_cuda_attention_probe which;
        const char *name;
    } probes[] = {{H3_CUDA_ATTN_PROBE_PACK, "probe: pack"},
                  {H3_CUDA_ATTN_PROBE_KERNEL, "probe: kernel"},
                  {H3_CUDA_ATTN_PROBE_NOSOFTMAX, "probe: no-softmax"},
                  {H3_CUDA_ATTN_PROBE_NOEXP, "probe: no-exp"},
                  {H3_CUDA_ATTN_PROBE_POLY_QUARTER, "probe: fma-exp 1/4"},
                  {H3_CUDA_ATTN_PROBE_POLY_HALF, "probe: fma-exp 1/2"}};
    enum { NP = sizeof probes / sizeof probes[0] };
    float ms[NP];
    size_t n = (size_t)S * INNER;
    float *ref = malloc(n * sizeof *ref), *got = malloc(n * sizeof *got);
    for (int i = 0; i < NP; i++) {
        h3_status st;
        ms[i] = NAN;
        if (h3_backend_cuda_attention_probe_ms(B, probes[i].which, &c->out, &c->q, &c->k, &c->v, NH, HD, o->reps,
                                               &ms[i], &st) != H3_OK) {
            printf("%-8lld %-18s %s\n", (long long)S, probes[i].name, st.message);
            break;
        }
        char err[64] = "";
        h3_cuda_attention_probe w = probes[i].which;
        if (ref && got && w == H3_CUDA_ATTN_PROBE_KERNEL && h3_tensor_download_f32(B, &c->out, ref, &st) != H3_OK)
            free(ref), ref = NULL;
        if (ref && got && (w == H3_CUDA_ATTN_PROBE_POLY_QUARTER || w == H3_CUDA_ATTN_PROBE_POLY_HALF) &&
            h3_tensor_download_f32(B, &c->out, got, &st) == H3_OK)
            snprintf(err, sizeof err, "  output vs kernel rel L2 %.2e", rel_l2(got, ref, n));
        printf("%-8lld %-18s %10.3f %9.1f%s\n", (long long)S, probes[i].name, ms[i], i ? tflops(flop, ms[i]) : 0.0,
               err);
    }
    free(ref);
    free(got);
    printf("%-8lld wgmma-fa3-n192: pack %.2f ms + kernel %.2f ms; without its softmax the kernel takes %.2f ms "
           "(%.0f TF/s): the softmax costs %.2f ms (%.0f%%) the GEMMs do not cover, of which the exponentials "
           "(MUFU.EX2) %.2f ms; a quarter / half of them on the FMA pipe: %.2f / %.2f ms (%.3fx / %.3fx the kernel)\n",
           (long long)S, ms[0], ms[1], ms[2], tflops(flop, ms[2]), ms[1] - ms[2], 100.0 * (ms[1] - ms[2]) / ms[1],
           ms[1] - ms[3], ms[4], ms[5], ms[1] / ms[4], ms[1] / ms[5]);
    fflush(stdout);
}

/* Every path at one length. */
static void attention_length(const bench_options *o, int64_t S) {
    static const h3_cuda_attention_variant paths[] = { /* the newest last: a kernel that faults ends the run */
        H3_CUDA_VARIANT_AUTO,           H3_CUDA_VARIANT_WGMMA,          H3_CUDA_VARIANT_WGMMA_FA3,
        H3_CUDA_VARIANT_WGMMA_FA3_S2,   H3_CUDA_VARIANT_WGMMA_FA3_NOPP, H3_CUDA_VARIANT_WGMMA_SIMPLE,
        H3_CUDA_VARIANT_MMA,            H3_CUDA_VARIANT_WGMMA_FA3_LAZY, H3_CUDA_VARIANT_WGMMA_FA3_N176,
        H3_CUDA_VARIANT_WGMMA_FA3_N192};
    size_t mark = h3_arena_mark(B);
    attn_ctx c;
    c.q = h3_new_2d(B, H3_BF16, S, INNER);
    c.k = h3_new_2d(B, H3_BF16, S, INNER);
    c.v = h3_new_2d(B, H3_BF16, S, INNER);
    c.out = h3_new_2d(B, H3_BF16, S, INNER);
    h3_backend_cuda_fill_uniform(B, &c.q, next_seed(), -3.5f, 3.5f);
    h3_backend_cuda_fill_uniform(B, &c.k, next_seed(), -1.7f, 1.7f);
    h3_backend_cuda_fill_uniform(B, &c.v, next_seed(), -1, 1);
    bench_check("attention inputs");
    double flop = 4.0 * (double)S * (double)S * NH * HD;
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        h3_cuda_attention_variant old = h3_backend_cuda_set_attention_variant(B, paths[p]);
        const char *kernel = h3_backend_cuda_attention_kernel(B, &c.out, &c.q, &c.k, &c.v, NH, NH, HD, 0);
        double ms = time_ms(kernel, run_attention, &c, 2, o->reps, 1);
        h3_backend_cuda_set_attention_variant(B, old);
        printf("%-8lld %-18s %10.3f %9.1f%s\n", (long long)S, kernel, ms, tflops(flop, ms), p == 0 ? "  (auto)" : "");
        fflush(stdout);
    }
    attention_probes(o, &c, S, flop);
    h3_arena_reset(B, mark);
}

/* The video VAE's ViT attention at one tile (1797 rows, 32 heads x 64, fp16,
 * scale 1/8): torch SDPA's backends (h3_bench_reference.sdpa_vae, first, in
 * a child process), then the portable mma.sync kernel and k_attn_fa3 at
 * head_dim 64 with 128- and 192-key tiles, each forced (the newest last). */
#define VAE_S 1797
#define VAE_NH 32
static void run_attention_vae(void *opaque) {
    attn_ctx *c = opaque;
    h3_op_attention(B, &c->out, &c->q, &c->k, &c->v, VAE_NH, VAE_NH, 64, 0, 0.125f);
}

static void attention_vae(const bench_options *o) {
    static const h3_cuda_attention_variant paths[] = {H3_CUDA_VARIANT_MMA, H3_CUDA_VARIANT_WGMMA_D64,
                                                      H3_CUDA_VARIANT_WGMMA_D64_N192};
    printf("\nattention at the video VAE's tile: %d rows, %d heads x 64, fp16, non-causal; median of %d\n", VAE_S,
           VAE_NH, o->reps);
    printf("%-8s %-18s %10s %9s\n", "S", "kernel", "ms", "TF/s");
    fflush(stdout);
    if (strcmp(o->reference, "none") != 0) {
        char dir[512], cmd[1536];
        reference_script(o, ".", dir, sizeof dir);
        snprintf(cmd, sizeof cmd,
                 "%s -c \"import sys; sys.path.insert(0, '%s'); import h3_bench_reference as r\n"
                 "for n, x in r.sdpa_vae(%d).items(): print('%%-8d %%-18s %%10.4f %%9.1f' %% "
                 "(%d, 'torch-' + n, x['ms'], x['tflops']) if 'ms' in x else '%%-8d torch-%%s: %%s' %% (%d, n, "
                 "x['error']))\" 2>&1",
                 o->python, dir, o->reps, VAE_S, VAE_S);
        fflush(stdout);
        int rc = system(cmd);
        if (rc != 0) printf("torch SDPA reference exited with status %d\n", rc);
    }
    size_t mark = h3_arena_mark(B);
    attn_ctx c;
    c.q = h3_new_2d(B, H3_F16, VAE_S, VAE_NH * 64);
    c.k = h3_new_2d(B, H3_F16, VAE_S, VAE_NH * 64);
    c.v = h3_new_2d(B, H3_F16, VAE_S, VAE_NH * 64);
    c.out = h3_new_2d(B, H3_F16, VAE_S, VAE_NH * 64);
    h3_backend_cuda_fill_uniform(B, &c.q, next_seed(), -3.5f, 3.5f);
    h3_backend_cuda_fill_uniform(B, &c.k, next_seed(), -1.7f, 1.7f);
    h3_backend_cuda_fill_uniform(B, &c.v, next_seed(), -1, 1);
    bench_check("attention inputs (VAE)");
    double flop = 4.0 * VAE_S * (double)VAE_S * VAE_NH * 64;
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        h3_cuda_attention_variant old = h3_backend_cuda_set_attention_variant(B, paths[p]);
        const char *kernel = h3_backend_cuda_attention_kernel(B, &c.out, &c.q, &c.k, &c.v, VAE_NH, VAE_NH, 64, 0);
        double ms = time_ms(kernel, run_attention_vae, &c, 2, o->reps, 1); /* one call a timing, as torch's */
        h3_backend_cuda_set_attention_variant(B, old);
        printf("%-8d %-18s %10.4f %9.1f\n", VAE_S, kernel, ms, tflops(flop, ms));
        fflush(stdout);
    }
    h3_arena_reset(B, mark);
}

void attention_bench(const bench_options *o) {
    printf("\nattention only: %d heads x %d, bf16, non-causal; median of %d after 2 warm-ups\n", NH, HD, o->reps);
    printf("%-8s %-18s %10s %9s\n", "S", "kernel", "ms", "TF/s");
    fflush(stdout);
    attention_torch(o);
    attention_length(o, S1);
    attention_length(o, S2);
    attention_vae(o);
}
