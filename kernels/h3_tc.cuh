/* h3_tc.cuh - the tensor-core primitives of our attention kernels: cp.async,
 * ldmatrix, mma.sync (sm_80), and on sm_90a wgmma with its shared-memory
 * descriptors, mbarriers, named barriers, register reallocation and bulk
 * copies; with them the steps of the online softmax and the P·V product
 * that the dense (h3_attention_*.cu) and block-sparse (h3_vsa_*.cu) kernels
 * share. Loads, stores and reductions of plain values are in h3_common.cuh.
 * Everything is static inline device code in an anonymous namespace, so
 * each .cu that includes it gets its own copy and nothing clashes at link
 * time. */
#ifndef H3_TC_CUH
#define H3_TC_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define H3_HAVE_WGMMA 1
#endif

namespace {

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* 16 bytes global -> shared, zero-filled when !valid (src must still be a
 * mapped address). */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool valid) {
    int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
/* The same, each 8x8 matrix transposed (B fragments from a row-major V tile). */
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* m16n8k16 with f32 accumulators, and the packing of two floats into the
 * 16-bit pair an A fragment holds. */
template <typename T> struct Mma;
template <> struct Mma<__nv_bfloat16> {
    static __device__ __forceinline__ void run(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *(uint32_t *)&h;
    }
    static __device__ __forceinline__ float round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
    static __device__ __forceinline__ float2 unpack(uint32_t u) {
        return __bfloat1622float2(*(const __nv_bfloat162 *)&u);
    }
};
template <> struct Mma<__half> {
    static __device__ __forceinline__ void run(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 h = __floats2half2_rn(lo, hi);
        return *(uint32_t *)&h;
    }
    static __device__ __forceinline__ float round(float x) { return __half2float(__float2half_rn(x)); }
    static __device__ __forceinline__ float2 unpack(uint32_t u) { return __half22float2(*(const __half2 *)&u); }
};

/* Online softmax, the step every attention kernel shares. A row's scores
 * are spread over the 4 threads of a quad (accumulator layout of mma.sync
 * and wgmma alike); each thread holds two rows. mx holds this tile's row
 * maxima of the thread's own scores (seeded with the running max m): reduce
 * them over the quad, then give the exp2 base (0 for a row with no valid key
 * yet, so -inf - -inf never happens) and the factor corr that rescales the
 * running sum and output, and move m on. */
__device__ __forceinline__ void softmax_row_max(float mx[2], float m[2], float base[2], float corr[2]) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        base[r] = mx[r] == -INFINITY ? 0.0f : mx[r];
        corr[r] = exp2f(m[r] - base[r]);
        m[r] = mx[r];
    }
}

/* The end of the online softmax: each row's sum l completed over its quad,
 * and 1/l (0 for a row that saw no valid key) to normalise the output. */
__device__ __forceinline__ void softmax_row_inverse(float l[2], float inv[2]) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        inv[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    }
}

/* The rest of the step for the mma.sync kernels: s[NB][4] (scaled by
 * log2 e, masked to -inf) becomes probabilities, the running sums l and the
 * output fragments oacc[DH/8][4] are rescaled. */
template <int NB, int DH>
__device__ __forceinline__ void mma_softmax_step(float (*s)[4], float mx[2], float m[2], float l[2],
                                                 float (*oacc)[4]) {
    float base[2], corr[2], rs[2] = {0.0f, 0.0f};
    softmax_row_max(mx, m, base, corr);
#pragma unroll
    for (int nb = 0; nb < NB; nb++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            s[nb][e] = exp2f(s[nb][e] - base[e >> 1]);
            rs[e >> 1] += s[nb][e];
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) l[r] = l[r] * corr[r] + rs[r];
#pragma unroll
    for (int d = 0; d < DH / 8; d++) {
        oacc[d][0] *= corr[0];
        oacc[d][1] *= corr[0];
        oacc[d][2] *= corr[1];
        oacc[d][3] *= corr[1];
    }
}

/* O += P·V for the mma.sync kernels, 16 keys a step: P is s[NB][4] (the
 * probabilities of NB 8-key blocks in the accumulator layout of S), packed
 * pairwise into A fragments; load_v(kk, d, b) loads the B fragments of keys
 * 16kk..16kk+15 for value channels 8d.. (b[0], b[1]) and 8(d+1).. (b[2],
 * b[3]), from wherever the kernel keeps V. */
template <typename T, int NB, int DH, typename LoadV>
__device__ __forceinline__ void mma_pv(float (*s)[4], float (*oacc)[4], LoadV load_v) {
#pragma unroll
    for (int kk = 0; kk < NB / 2; kk++) {
        uint32_t pa[4] = {Mma<T>::pack(s[2 * kk][0], s[2 * kk][1]), Mma<T>::pack(s[2 * kk][2], s[2 * kk][3]),
                          Mma<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                          Mma<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int d = 0; d < DH / 8; d += 2) {
            uint32_t b[4];
            load_v(kk, d, b);
            Mma<T>::run(oacc[d], pa, b[0], b[1]);
            Mma<T>::run(oacc[d + 1], pa, b[2], b[3]);
        }
    }
}

/* S = Q·Kᵀ of a key tile for the mma.sync kernels (k_attn_mma, k_vsa_mma),
 * a warp's 16 query rows: s[NB][4] from the A fragments qf (DH/16 k-steps
 * of 16 channels) and K fragments read by ldmatrix at k_at(row, ch) (the
 * shared address of 16-byte chunk ch of key row `row` of the tile), NB
 * 8-key blocks. The rest of the tile step is mma_softmax_step and mma_pv. */
template <typename T, int NB, int DH, typename KAt>
__device__ __forceinline__ void mma_scores(float (*s)[4], uint32_t (*qf)[4], int lane, KAt k_at) {
#pragma unroll
    for (int nb = 0; nb < NB; nb++) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < DH / 16; kk++) {
#pragma unroll
        for (int nb = 0; nb < NB; nb += 2) {
            uint32_t b[4];
            int row = nb * 8 + (lane & 7) + ((lane >> 4) << 3), ch = 2 * kk + ((lane >> 3) & 1);
            ldmatrix_x4(b, k_at(row, ch));
            Mma<T>::run(s[nb], qf[kk], b[0], b[1]);
            Mma<T>::run(s[nb + 1], qf[kk], b[2], b[3]);
        }
    }
}

#ifdef H3_HAVE_WGMMA
/* Shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row
 * groups 1024 bytes apart. */
__device__ __forceinline__ uint64_t wg_desc(uint32_t saddr) {
    uint64_t d = (uint64_t)((saddr & 0x3FFFF) >> 4);
    d |= (uint64_t)1 << 16;           /* leading byte offset: unused for swizzled K-major */
    d |= (uint64_t)(1024 >> 4) << 32; /* stride byte offset */
    d |= (uint64_t)1 << 62;           /* SWIZZLE_128B */
    return d;
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }

/* The accumulator operands of a wgmma: "+f"(d[i]) .. "+f"(d[i + 7]), and 32 of them. */
#define H3_WG_F8(i)                                                                                            \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
        "+f"(d[i + 7])
#define H3_WG_F32(i) H3_WG_F8(i), H3_WG_F8(i + 8), H3_WG_F8(i + 16), H3_WG_F8(i + 24)

/* The wgmma forms of our kernels, for T = __nv_bfloat16 or __half (the PTX
 * differs only in the operand type). Wg<T>::ss<N>: d[64 x N] (+)= A[64 x 16]·
 * B[N x 16]ᵀ, both operands from shared memory (N = 64, 128, 176, 192: the
 * score GEMMs). Wg<T>::rs<N>: the same with A from registers (the
 * accumulator layout of a previous product packed to T pairs; N = 64, 128:
 * the P·V GEMMs, N the head dim). Accumulator i is row 16·warp + lane/4 +
 * 8·((i>>1)&1), column 8·(i>>2) + 2·(lane%4) + (i&1). */
#define H3_WG_FORMS(T, TY)                                                                                          \
    template <> struct Wg<T> {                                                                                      \
        static __device__ __forceinline__ void ss_n64(float *d, uint64_t desc_a, uint64_t desc_b, int scale_d) {    \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                               \
                         "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " "                                \
                         "{"                                                                                        \
                         "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                   \
                         "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"           \
                         "}, "                                                                                      \
                         "%32, %33, p, 1, 1, 0, 0;\n}\n"                                                            \
                         : H3_WG_F32(0)                                                                             \
                         : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                 \
        }                                                                                                           \
        static __device__ __forceinline__ void ss_n128(float *d, uint64_t desc_a, uint64_t desc_b, int scale_d) {   \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                               \
                         "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " "                               \
                         "{"                                                                                        \
                         "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                   \
                         "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "         \
                         "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "         \
                         "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"           \
                         "}, "                                                                                      \
                         "%64, %65, p, 1, 1, 0, 0;\n}\n"                                                            \
                         : H3_WG_F32(0), H3_WG_F32(32)                                                              \
                         : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                 \
        }                                                                                                           \
        static __device__ __forceinline__ void ss_n176(float *d, uint64_t desc_a, uint64_t desc_b, int scale_d) {   \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %90, 0;\n"                                               \
                         "wgmma.mma_async.sync.aligned.m64n176k16.f32." TY "." TY " "                               \
                         "{"                                                                                        \
                         "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                   \
                         "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "         \
                         "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "         \
                         "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "         \
                         "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "         \
                         "%80, %81, %82, %83, %84, %85, %86, %87"                                                   \
                         "}, "                                                                                      \
                         "%88, %89, p, 1, 1, 0, 0;\n}\n"                                                            \
                         : H3_WG_F32(0), H3_WG_F32(32), H3_WG_F8(64), H3_WG_F8(72), H3_WG_F8(80)                    \
                         : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                 \
        }                                                                                                           \
        static __device__ __forceinline__ void ss_n192(float *d, uint64_t desc_a, uint64_t desc_b, int scale_d) {   \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"                                               \
                         "wgmma.mma_async.sync.aligned.m64n192k16.f32." TY "." TY " "                               \
                         "{"                                                                                        \
                         "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                   \
                         "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "         \
                         "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "         \
                         "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "         \
                         "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "         \
                         "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"           \
                         "}, "                                                                                      \
                         "%96, %97, p, 1, 1, 0, 0;\n}\n"                                                            \
                         : H3_WG_F32(0), H3_WG_F32(32), H3_WG_F32(64)                                               \
                         : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                 \
        }                                                                                                           \
        static __device__ __forceinline__ void rs_n64(float *d, const uint32_t *a, uint64_t desc_b, int scale_d) {  \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                               \
                         "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " "                                \
                         "{"                                                                                        \
                         "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                   \
                         "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"           \
                         "}, "                                                                                      \
                         "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"                                              \
                         : H3_WG_F32(0)                                                                             \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));                  \
        }                                                                                                           \
        static __device__ __forceinline__ void rs_n128(float *d, const uint32_t *a, uint64_t desc_b, int scale_d) { \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                               \
                         "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " "                               \
                         "{"                                                                                        \
                         "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                   \
                         "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "         \
                         "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "         \
                         "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"           \
                         "}, "                                                                                      \
                         "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"                                              \
                         : H3_WG_F32(0), H3_WG_F32(32)                                                              \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));                  \
        }                                                                                                           \
        template <int N> static __device__ __forceinline__ void ss(float *d, uint64_t da, uint64_t db, int sd) {    \
            static_assert(N == 64 || N == 128 || N == 176 || N == 192, "a score GEMM of 64, 128, 176 or 192 keys"); \
            if constexpr (N == 64) ss_n64(d, da, db, sd);                                                           \
            else if constexpr (N == 128) ss_n128(d, da, db, sd);                                                    \
            else if constexpr (N == 176) ss_n176(d, da, db, sd);                                                    \
            else ss_n192(d, da, db, sd);                                                                            \
        }                                                                                                           \
        template <int N> static __device__ __forceinline__ void rs(float *d, const uint32_t *a, uint64_t db, int sd) { \
            static_assert(N == 64 || N == 128, "a P·V GEMM of head dim 64 or 128");                                  \
            if constexpr (N == 64) rs_n64(d, a, db, sd);                                                            \
            else rs_n128(d, a, db, sd);                                                                             \
        }                                                                                                           \
    };
template <typename T> struct Wg;
H3_WG_FORMS(__nv_bfloat16, "bf16")
H3_WG_FORMS(__half, "f16")
#undef H3_WG_FORMS

/* mbarriers and bulk copies of the warp-specialised kernels. */
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ bool mbar_try(uint32_t bar, uint32_t parity) {
    uint32_t done;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
    return done != 0;
}
/* A barrier that never completes is a bug: trap (the launch then fails with
 * an error the backend reports) instead of hanging the device. */
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    long n = 0;
    while (!mbar_try(bar, parity))
        if (++n > (1l << 26)) __trap();
}
__device__ __forceinline__ void bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

/* Orders generic-proxy writes to shared memory (cp.async, st.shared) before async-proxy reads (wgmma, bulk copies). */
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/* Named barriers 1.. among the 256 threads of two consumer warpgroups (the ping-pong token). */
__device__ __forceinline__ void named_sync(int id) { asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ void named_arrive(int id) { asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory"); }

/* Pins registers that an in-flight wgmma reads or writes: the compiler may
 * not move their uses across this point nor reuse them before it. */
template <int N> __device__ __forceinline__ void fence_f(float *r) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N> __device__ __forceinline__ void fence_u(uint32_t *r) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+r"(r[i])::"memory");
}
/* mbar_wait without the trap: a trap anywhere in a setmaxnreg'd branch makes
 * ptxas fall back to the entry budget (168 registers: spills and serialized
 * wgmma, C7512). A wait that times out sets *late; the consumer traps once
 * its wgmma work is done, so a barrier that never completes still ends the
 * launch with an error. */
__device__ __forceinline__ void mbar_wait_late(uint32_t bar, uint32_t parity, int *late) {
    int n = 0;
    while (!mbar_try(bar, parity))
        if (++n > (1 << 26)) {
            *late = 1;
            break;
        }
}
/* setmaxnreg: the warpgroup raises (inc) or gives back (dec) its registers a thread, to N. */
template <int N> __device__ __forceinline__ void reg_alloc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N> __device__ __forceinline__ void reg_dealloc() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
#endif /* H3_HAVE_WGMMA */

} /* namespace */

#endif
