/* h3_common.cuh - device helpers every kernel file of h3core shares: element
 * loads and stores of a run-time dtype, rounding to a dtype, warp
 * reductions, the grid-stride loop, a fast exp2 and 16-byte alignment. The
 * tensor-core, mbarrier and bulk-copy primitives are in h3_tc.cuh.
 *
 * Like h3_tc.cuh, everything is inline code in an anonymous namespace, so
 * each .cu that includes it gets its own copy and nothing clashes at link
 * time. Dtype codes are h3_dtype's values (H3K_* in h3_kernels.h). */
#ifndef H3_COMMON_CUH
#define H3_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/h3_kernels.h"

namespace {

const float kLog2e = 1.4426950408889634f; /* softmax scale · log2 e: the kernels take exp2 */

/* ---- element access --------------------------------------------------------- */

/* Element i of p (dtype dt: F32, BF16, F16 or I32) as float32. */
__device__ __forceinline__ float ld1(const void *p, int dt, int64_t i) {
    switch (dt) {
    case H3K_F32: return ((const float *)p)[i];
    case H3K_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case H3K_F16: return __half2float(((const __half *)p)[i]);
    default: return (float)((const int32_t *)p)[i];
    }
}

/* p[i] = v, rounded once to dt (F32, BF16, F16 or I32). */
__device__ __forceinline__ void st1(void *p, int dt, int64_t i, float v) {
    switch (dt) {
    case H3K_F32: ((float *)p)[i] = v; break;
    case H3K_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
    case H3K_F16: ((__half *)p)[i] = __float2half_rn(v); break;
    default: ((int32_t *)p)[i] = (int32_t)v; break;
    }
}

/* v rounded to dtype dt and back: what torch's arithmetic in that dtype
 * keeps (BF16 and F16 round; F32 and I32 codes leave v as it is). */
__device__ __forceinline__ float round_to(int dt, float v) {
    if (dt == H3K_BF16) return __bfloat162float(__float2bfloat16_rn(v));
    if (dt == H3K_F16) return __half2float(__float2half_rn(v));
    return v;
}

/* ld1, st1 and round_to for tensors of a float dtype (F32, BF16, and any
 * other code taken as F16): the attention kernels', one comparison fewer. */
__device__ __forceinline__ float ld1_fp(const void *p, int dt, int64_t i) {
    switch (dt) {
    case H3K_F32: return ((const float *)p)[i];
    case H3K_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    default: return __half2float(((const __half *)p)[i]);
    }
}

__device__ __forceinline__ void st1_fp(void *p, int dt, int64_t i, float v) {
    switch (dt) {
    case H3K_F32: ((float *)p)[i] = v; break;
    case H3K_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
    default: ((__half *)p)[i] = __float2half_rn(v); break;
    }
}

__device__ __forceinline__ float round_to_fp(int dt, float v) {
    switch (dt) {
    case H3K_F32: return v;
    case H3K_BF16: return __bfloat162float(__float2bfloat16_rn(v));
    default: return __half2float(__float2half_rn(v));
    }
}

/* ---- reductions and loops ------------------------------------------------------ */

/* Sum of v over the 32 lanes of a warp, in every lane. */
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* for (i = this thread's first index; i < count; i += the whole grid) */
#define GRID_STRIDE(i, count)                                                              \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (count);        \
         i += (int64_t)gridDim.x * blockDim.x)

/* 2^x by the special-function unit, denormals flushed (the softmax of the
 * Hopper kernels: exact enough once P is normalised by 1/l). */
__device__ __forceinline__ float ex2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* ---- host side ------------------------------------------------------------------ */

/* 16-byte aligned (the vector and tensor-core paths' condition); NULL is. */
inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

} /* namespace */

#endif
