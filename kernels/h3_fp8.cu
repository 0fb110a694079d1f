/* h3_fp8.cu - the per-row E4M3 quantiser (h3_kernels_fp8.h): one block per
 * row, an absmax reduction, then the codes. The conversion is the hardware
 * one (cvt.rn.satfinite.e4m3x2.f32 on sm_89+, the same rounding emulated by
 * cuda_fp8.h on older targets), which backend/h3_fp8.c reproduces. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <math.h>
#include <stdint.h>

#include "kernels/h3_common.cuh" /* ld1 */
#include "kernels/h3_kernels_fp8.h"

namespace {

const int kThreads = 256;

/* The block's largest |x| and whether any x is not finite, in every thread. */
__device__ float block_absmax(float amax, int bad, int *any_bad) {
    __shared__ float s_max[kThreads / 32];
    __shared__ int s_bad[kThreads / 32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        bad |= __shfl_xor_sync(0xffffffffu, bad, o);
    }
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        s_max[warp] = amax;
        s_bad[warp] = bad;
    }
    __syncthreads();
    amax = 0.0f;
    bad = 0;
    for (int w = 0; w < kThreads / 32; w++) {
        amax = fmaxf(amax, s_max[w]);
        bad |= s_bad[w];
    }
    *any_bad = bad;
    return amax;
}

__global__ void k_quantize_fp8_rows(uint8_t *q, float *scale, const void *x, int xdt, int64_t cols) {
    int64_t row = blockIdx.x;
    int64_t base = row * cols;
    float amax = 0.0f;
    int bad = 0;
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
        float v = ld1(x, xdt, base + c);
        if (!isfinite(v)) bad = 1;
        else amax = fmaxf(amax, fabsf(v));
    }
    int any_bad;
    amax = block_absmax(amax, bad, &any_bad);
    float s = any_bad ? NAN : amax / 448.0f; /* IEEE division, as the CPU's */
    if (threadIdx.x == 0) scale[row] = s;
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
        uint8_t code;
        if (any_bad) {
            code = 0x7F;
        } else if (s > 0.0f) {
            float v = __fdiv_rn(ld1(x, xdt, base + c), s);
            code = (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
        } else {
            code = 0;
        }
        q[base + c] = code;
    }
}

__global__ void k_fp8_rescale(void *y, int ydt, const float *xs, const float *ws, const void *bias, int bdt,
                              int64_t M, int64_t N) {
    GRID_STRIDE(i, M * N) {
        int64_t m = i / N, n = i - m * N;
        float v = ld1(y, ydt, i) * (xs[m] * ws[n]);
        if (bias) v += ld1(bias, bdt, n);
        st1(y, ydt, i, v);
    }
}

} // namespace

extern "C" int h3k_quantize_fp8_rows(uint8_t *q, float *scale, const void *x, int xdt, int64_t rows, int64_t cols,
                                     cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    if (rows > 0x7fffffffLL) return (int)cudaErrorInvalidValue;
    k_quantize_fp8_rows<<<(unsigned)rows, kThreads, 0, stream>>>(q, scale, x, xdt, cols);
    return (int)cudaGetLastError();
}

extern "C" int h3k_fp8_rescale(void *y, int ydt, const float *xs, const float *ws, const void *bias, int bdt, int64_t M,
                               int64_t N, cudaStream_t stream) {
    int64_t n = M * N;
    if (n <= 0) return 0;
    int64_t blocks = (n + kThreads - 1) / kThreads;
    unsigned grid = (unsigned)(blocks < 65536 * 8 ? blocks : 65536 * 8);
    k_fp8_rescale<<<grid, kThreads, 0, stream>>>(y, ydt, xs, ws, bias, bdt, M, N);
    return (int)cudaGetLastError();
}
