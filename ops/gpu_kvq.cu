/* ops/gpu_kvq.cu: the quantized KV pool's kernels (ops/gpu_kvq.h). One
 * block of head_dim threads (64 to 512: Gemma 4's global layers) a (row,
 * KV head, K or V) or a vector: the row
 * in shared memory as f32, the butterflies with a barrier between spans,
 * then each warp quantizes one block of 32 (its max by shuffles: a max is
 * exact in any order, so the scale is the twin's). Both are dependent
 * launches under IGNITE_PDL=1 (gk_dep_start first: their inputs are the
 * kernel before's). Built twice: nvcc and ops/gpu_kvq_emu.cc. */
#include "devkit/intrinsics.cuh"
#include "devkit/kernel.cuh"
#include "ops/gpu_kvq.h"
#include "ops/gpu_math.cuh"
#include "kvcache/kv_devq.h"

namespace {

/* v[0..len) in place: butterflies of growing span within chunks of rot
 * (H_2n = [[H_n, H_n], [H_n, -H_n]], ops_hadamard_rows' order), then times
 * 1 / sqrt(rot). Thread j owns v[j]; every thread calls it. */
__device__ __forceinline__ float rotate_row(float *v, int j, int rot)
{
    for (int s = 1; s < rot; s *= 2) {
        ig_syncthreads();
        if (j % (2 * s) < s) {
            const float a = ig_lds(&v[j]), b = ig_lds(&v[j + s]);
            ig_sts(&v[j], a + b);
            ig_sts(&v[j + s], a - b);
        }
    }
    ig_syncthreads();
    return ig_lds(&v[j]) * (1.0f / sqrtf((float)rot));
}

/* Row t's position and the base of its table (NULL: nothing to write). */
__device__ __forceinline__ const int32_t *row_table(const gk_kvq_params &p, int64_t t)
{
    if (!p.seqs)
        return p.block_table + t * p.table_stride;
    for (int64_t s = 0; s < p.n_seqs; s++) {
        const int32_t *q = p.seqs + 4 * s;
        if (t >= q[0] && t < q[0] + q[1])
            return p.block_table + s * p.table_stride;
    }
    return nullptr;
}

/* Block (row t, KV head h, K = 0 / V = 1), head_dim threads. */
__global__ void kvq_write_kernel(const gk_kvq_params p)
{
    gk_dep_start(); /* k, v: the Q|K|V product's; the positions */
    IG_SHARED(float, v, [512]);
    const int j = (int)threadIdx.x, hd = (int)p.head_dim;
    const int64_t t = blockIdx.x, h = blockIdx.y;
    const int kv = (int)blockIdx.z;
    const int type = kv ? p.v_dtype : p.k_dtype;
    const int rot = (int)(kv ? p.rot_v : p.rot_k);
    const int32_t pos = p.pos[t];
    const int32_t *table = pos >= 0 ? row_table(p, t) : nullptr;
    if (!table)
        return; /* block-uniform */
    const int64_t e = (int64_t)table[pos / 64] * p.block_stride + h * p.head_stride +
                      (int64_t)(pos % 64) * hd;
    const uint16_t *src = (kv ? p.v : p.k) + (t * p.n_head_kv + h) * hd;
    void *cache = kv ? p.v_cache : p.k_cache;
    if (type == KVQ_F16) {
        ((uint16_t *)cache)[e + j] = src[j];
        return;
    }
    float x = gk_f16_to_f32(src[j]);
    if (rot) {
        ig_sts(&v[j], x);
        x = rotate_row(v, j, rot);
    }
    float amax = fabsf(x);
    for (int off = 16; off > 0; off >>= 1)
        amax = fmaxf(amax, ig_shfl_xor_f32(amax, off));
    const float d = amax / (type == KVQ_Q8_0 ? 127.0f : 448.0f), id = d ? 1.0f / d : 0.0f;
    unsigned char *region = (unsigned char *)cache + kvq_region(e - (int64_t)(pos % 64) * hd);
    const int r = pos % 64;
    uint8_t q;
    if (type == KVQ_Q8_0) {
        const float qv = roundf(x * id);
        q = (uint8_t)(int8_t)(qv == qv ? qv : 0.0f);
    } else {
        q = (uint8_t)kvq_f32_to_fp8(x * id);
    }
    region[kvq_quant_at(hd, r, j)] = q;
    if (j % 32 == 0)
        *(uint16_t *)(region + kvq_scale_at(hd, r, j)) = gk_f32_to_f16(d);
}

/* Block: one vector of len (a multiple of rot), len threads. */
__global__ void hadamard_f16_kernel(uint16_t *x, int64_t len, int rot)
{
    gk_dep_start(); /* x: q (RoPE's) or the attention's output */
    IG_SHARED(float, v, [512]);
    const int j = (int)threadIdx.x;
    uint16_t *row = x + (int64_t)blockIdx.x * len;
    ig_sts(&v[j], gk_f16_to_f32(row[j]));
    row[j] = gk_f32_to_f16(rotate_row(v, j, rot));
}

} /* namespace */

extern "C" int IG_DEV(gk_kvq_write)(const struct gk_kvq_params *p, void *stream)
{
    const int64_t hd = p->head_dim;
    if ((hd != 64 && hd != 128 && hd != 256 && hd != 512) || p->n < 0 || p->n > 2147483647 ||
        p->n_head_kv < 1 || p->n_head_kv > 65535 || p->rot_k < 0 || p->rot_k > hd ||
        p->rot_v < 0 || p->rot_v > hd || (p->rot_k && hd % p->rot_k) ||
        (p->rot_v && hd % p->rot_v))
        return ig_error(IG_E_INTERNAL, "KV pool write: unsupported sizes (hd %lld, rot %lld/%lld)",
                        (long long)hd, (long long)p->rot_k, (long long)p->rot_v);
    if (p->n == 0)
        return IG_OK;
    return IG_LAUNCH_DEP(kvq_write_kernel, dim3((unsigned)p->n, (unsigned)p->n_head_kv, 2),
                         dim3((unsigned)hd), 0, (cudaStream_t)stream, *p);
}

extern "C" int IG_DEV(gk_hadamard_f16)(uint16_t *x, int64_t n_vec, int64_t len, int64_t rot,
                                       void *stream)
{
    if ((rot != 64 && rot != 128 && rot != 256) || len < rot || len > 512 || len % rot ||
        n_vec < 0 || n_vec > 2147483647)
        return ig_error(IG_E_INTERNAL, "Hadamard rotation: unsupported sizes (%lld of %lld, "
                        "chunks of %lld)", (long long)n_vec, (long long)len, (long long)rot);
    if (n_vec == 0)
        return IG_OK;
    return IG_LAUNCH_DEP(hadamard_f16_kernel, dim3((unsigned)n_vec), dim3((unsigned)len), 0,
                         (cudaStream_t)stream, x, len, (int)rot);
}
