/* decode/greedy.cu: gk_greedy_rows (decode/greedy.h). One block per row:
 * each thread keeps the best of its strided elements (NaN made -inf, +inf
 * made FLT_MAX, so the comparison is the sampler's rule), then a butterfly
 * over the warp and thread 0 over the warps, the lower index winning ties
 * at every merge: the first index of the largest value, as
 * sampler_greedy's scan finds it. A dependent launch under IGNITE_PDL=1
 * (gk_dep_start: the logits are the output head's).
 *
 * Built twice (devkit/dev_entry.h): nvcc (gk_greedy_rows_cuda) and the
 * emulator through decode/greedy_emu.cc (gk_greedy_rows_emu). */
#include "decode/greedy.h"
#include "devkit/intrinsics.cuh"
#include "ops/gpu_math.cuh"

#include <float.h>
#include <math.h>

namespace {

constexpr int kThreads = 256;

/* Whether candidate (v, i) beats (bv, bi). */
__device__ __forceinline__ bool beats(float v, uint32_t i, float bv, uint32_t bi)
{
    return v > bv || (v == bv && i < bi);
}

__global__ void __launch_bounds__(kThreads)
greedy_rows_kernel(const float *__restrict__ x, int64_t ld, int64_t n_vocab, int32_t *ids)
{
    gk_dep_start(); /* x: the output head's logits */
    const float *row = x + (int64_t)blockIdx.x * ld;
    float bv = -INFINITY;
    uint32_t bi = UINT32_MAX;
    for (int64_t i = threadIdx.x; i < n_vocab; i += kThreads) {
        float v = row[i];
        v = isnan(v) ? -INFINITY : v == INFINITY ? FLT_MAX : v;
        if (v > bv) /* ascending i: a tie keeps the earlier */
            bv = v, bi = (uint32_t)i;
    }
    for (int m = 16; m > 0; m >>= 1) {
        const float v = ig_shfl_xor_f32(bv, m);
        const uint32_t i = ig_shfl_xor(bi, m);
        if (beats(v, i, bv, bi))
            bv = v, bi = i;
    }
    IG_SHARED(float, part_v, [kThreads / 32]);
    IG_SHARED(uint32_t, part_i, [kThreads / 32]);
    const int warp = (int)threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) {
        ig_sts(&part_v[warp], bv);
        ig_sts(&part_i[warp], bi);
    }
    ig_syncthreads();
    if (threadIdx.x != 0)
        return;
    for (int w = 1; w < kThreads / 32; w++) {
        const float v = ig_lds(&part_v[w]);
        const uint32_t i = ig_lds(&part_i[w]);
        if (beats(v, i, bv, bi))
            bv = v, bi = i;
    }
    ids[blockIdx.x] = bv > -INFINITY ? (int32_t)bi : 0;
}

} /* namespace */

int IG_DEV(gk_greedy_rows)(const float *x, int64_t ld, int64_t n_rows, int64_t n_vocab,
                           int32_t *ids, void *stream_)
{
    if (n_rows < 0 || n_rows > 0x7fffffff || n_vocab < 1 || n_vocab > INT32_MAX ||
        ld < n_vocab || (n_rows && (!x || !ids)))
        return ig_error(IG_E_INTERNAL, "gk_greedy_rows: bad sizes (rows %lld, n_vocab %lld, "
                        "ld %lld) or NULL", (long long)n_rows, (long long)n_vocab, (long long)ld);
    if (n_rows == 0)
        return IG_OK;
    return IG_LAUNCH_DEP(greedy_rows_kernel, dim3((unsigned)n_rows), dim3(kThreads), 0,
                         (cudaStream_t)stream_, x, ld, n_vocab, ids);
}
