/* ops/gpu_weights.cu: weights onto the device: stored GGUF rows (F32, F16,
 * BF16, Q8_0, Q4_0, Q4_1) dequantized to f16 on the GPU, and counter-based
 * random weights for synthetic models. Contracts in ops/gpu_ops.h; the CPU
 * twins (ops/gpu_ops_ref.c) define the results; block layouts come from
 * models/quant.h.
 *
 * These run once per weight at load time, so they favour plainness: one
 * thread per 32-element block (quantized types) or per element, grid-stride
 * loops. Every quantized value is exact in f32 before its last operation
 * (q * d has at most 19 significant bits), so f32 -> f16 is the one rounding,
 * as on the CPU (Q4_1 adds m after the exact product: one f32 rounding,
 * fused or not).
 *
 * Built twice (devkit/dev_entry.h): nvcc (name_cuda) and the emulator through
 * ops/gpu_weights_emu.cc (name_emu). gk_dequant_supported lives in the twin's
 * file (one definition for both builds). Covered by
 * tests/emu/test_gpu_ops_emu.c and tests/gpu/. */
#include "ops/gpu_math.cuh"
#include "ops/gpu_ops.h"
#include "ops/gpu_random.h"

extern "C" {
#include "models/quant.h"
}

#include <stddef.h>

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16; /* grid-stride beyond this */
constexpr int kQK = 32;                 /* elements per block of every supported quant type */
static_assert(QK4_0 == kQK && QK4_1 == kQK && QK8_0 == kQK, "32-element blocks");

__device__ __forceinline__ uint16_t load_u16(const uint8_t *p) /* p 2-byte aligned */
{
    return *(const uint16_t *)p;
}

/* The 32 values of one block, as models/quant.c computes them. */
template <int TYPE> __device__ __forceinline__ void decode_block(const uint8_t *b, float y[kQK]);

template <> __device__ __forceinline__ void decode_block<QUANT_Q8_0>(const uint8_t *b, float y[kQK])
{
    const float d = gk_f16_to_f32(load_u16(b + offsetof(block_q8_0, d)));
    const uint8_t *qs = b + offsetof(block_q8_0, qs);
    for (int j = 0; j < kQK; j += 2) {
        const uint16_t q = load_u16(qs + j);
        y[j] = (float)(int8_t)(q & 0xff) * d;
        y[j + 1] = (float)(int8_t)(q >> 8) * d;
    }
}

template <> __device__ __forceinline__ void decode_block<QUANT_Q4_0>(const uint8_t *b, float y[kQK])
{
    const float d = gk_f16_to_f32(load_u16(b + offsetof(block_q4_0, d)));
    const uint8_t *qs = b + offsetof(block_q4_0, qs);
    for (int j = 0; j < kQK / 2; j += 2) {
        const uint16_t q = load_u16(qs + j);
        y[j] = (float)((q & 0x0f) - 8) * d;
        y[j + 1] = (float)(((q >> 8) & 0x0f) - 8) * d;
        y[j + kQK / 2] = (float)(((q >> 4) & 0x0f) - 8) * d;
        y[j + 1 + kQK / 2] = (float)((q >> 12) - 8) * d;
    }
}

template <> __device__ __forceinline__ void decode_block<QUANT_Q4_1>(const uint8_t *b, float y[kQK])
{
    const float d = gk_f16_to_f32(load_u16(b + offsetof(block_q4_1, d)));
    const float m = gk_f16_to_f32(load_u16(b + offsetof(block_q4_1, m)));
    const uint8_t *qs = b + offsetof(block_q4_1, qs);
    for (int j = 0; j < kQK / 2; j += 2) {
        const uint16_t q = load_u16(qs + j);
        y[j] = gk_add((float)(q & 0x0f) * d, m);
        y[j + 1] = gk_add((float)((q >> 8) & 0x0f) * d, m);
        y[j + kQK / 2] = gk_add((float)((q >> 4) & 0x0f) * d, m);
        y[j + 1 + kQK / 2] = gk_add((float)(q >> 12) * d, m);
    }
}

/* One thread per block: decode, round, four 16-byte stores (VEC: dst 16-byte
 * aligned; rows of whole blocks keep every block's output so). */
template <int TYPE, bool VEC>
__global__ void __launch_bounds__(kThreads)
dequant_blocks_kernel(const uint8_t *__restrict__ src, int64_t rows, int64_t blocks_per_row,
                      size_t row_bytes, size_t block_bytes, uint16_t *__restrict__ dst)
{
    const int64_t total = rows * blocks_per_row;
    for (int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * kThreads) {
        const int64_t r = i / blocks_per_row, k = i % blocks_per_row;
        float y[kQK];
        decode_block<TYPE>(src + (size_t)r * row_bytes + (size_t)k * block_bytes, y);
        uint16_t *out = dst + i * kQK; /* = r * cols + k * 32 */
        if (VEC) {
            for (int c = 0; c < kQK / 8; c++) {
                gk_u32x4 o;
                for (int w = 0; w < 4; w++)
                    o.w[w] = ig_pack2<ig_f16_t>(y[8 * c + 2 * w], y[8 * c + 2 * w + 1]);
                ((gk_u32x4 *)out)[c] = o;
            }
        } else {
            for (int j = 0; j < kQK; j++)
                out[j] = gk_f32_to_f16(y[j]);
        }
    }
}

/* One thread per element of the float formats (F16 is copied bit for bit). */
template <int TYPE>
__global__ void __launch_bounds__(kThreads)
convert_kernel(const uint8_t *__restrict__ src, int64_t rows, int64_t cols, size_t row_bytes,
               uint16_t *__restrict__ dst)
{
    const int64_t total = rows * cols;
    for (int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * kThreads) {
        const int64_t r = i / cols, c = i % cols;
        const uint8_t *row = src + (size_t)r * row_bytes;
        if (TYPE == QUANT_F32) {
            dst[i] = gk_f32_to_f16(((const float *)row)[c]);
        } else if (TYPE == QUANT_F16) {
            dst[i] = ((const uint16_t *)row)[c];
        } else { /* BF16: exact in f32 */
            uint32_t u = (uint32_t)((const uint16_t *)row)[c] << 16;
            float f;
            memcpy(&f, &u, 4);
            dst[i] = gk_f32_to_f16(f);
        }
    }
}

__device__ __forceinline__ void store_value(uint16_t *p, float v)
{
    *p = gk_f32_to_f16(v);
}

__device__ __forceinline__ void store_value(float *p, float v)
{
    *p = v;
}

template <class T>
__global__ void __launch_bounds__(kThreads)
random_kernel(T *__restrict__ dst, int64_t n, uint64_t seed, float center, float scale)
{
    for (int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * kThreads) {
        store_value(&dst[i], gk_random_value(seed, (uint64_t)i, center, scale));
    }
}

unsigned grid_for(int64_t items)
{
    const int64_t b = (items + kThreads - 1) / kThreads;
    return (unsigned)(b < kMaxBlocks ? b : kMaxBlocks);
}

template <int TYPE>
int launch_blocks(const void *src, int64_t rows, int64_t cols, size_t row_bytes,
                  size_t block_bytes, uint16_t *dst, cudaStream_t stream)
{
    const int64_t bpr = cols / kQK;
    const uint8_t *s = (const uint8_t *)src;
    dim3 grid(grid_for(rows * bpr)), block(kThreads);
    if (gk_aligned(dst, 16)) {
        auto *kernel = dequant_blocks_kernel<TYPE, true>;
        return IG_LAUNCH(kernel, grid, block, 0, stream, s, rows, bpr, row_bytes, block_bytes,
                         dst);
    }
    auto *kernel = dequant_blocks_kernel<TYPE, false>;
    return IG_LAUNCH(kernel, grid, block, 0, stream, s, rows, bpr, row_bytes, block_bytes, dst);
}

template <int TYPE>
int launch_convert(const void *src, int64_t rows, int64_t cols, size_t row_bytes, uint16_t *dst,
                   cudaStream_t stream)
{
    dim3 grid(grid_for(rows * cols)), block(kThreads);
    auto *kernel = convert_kernel<TYPE>;
    return IG_LAUNCH(kernel, grid, block, 0, stream, (const uint8_t *)src, rows, cols, row_bytes,
                     dst);
}

template <class T>
int launch_random(T *dst, int64_t n, uint64_t seed, float center, float scale, void *stream_)
{
    if (n < 0 || (n > 0 && !dst))
        return ig_error(IG_E_INTERNAL, "gk_random: bad size %lld or NULL", (long long)n);
    if (n == 0)
        return IG_OK;
    dim3 grid(grid_for(n)), block(kThreads);
    auto *kernel = random_kernel<T>;
    return IG_LAUNCH(kernel, grid, block, 0, (cudaStream_t)stream_, dst, n, seed, center, scale);
}

} /* namespace */

extern "C" {

int IG_DEV(gk_dequant_f16)(int type, const void *src, int64_t rows, int64_t cols,
                           size_t row_bytes, uint16_t *dst, void *stream_)
{
    const cudaStream_t stream = (cudaStream_t)stream_; /* unused by the emulator */
    const struct quant_traits *t = quant_traits_of((uint32_t)type);
    if (!gk_dequant_supported(type) || !t)
        return ig_error(IG_E_INTERNAL, "gk_dequant_f16: type %s is not dequantized on the GPU",
                        quant_type_name((uint32_t)type));
    const size_t align = type == QUANT_F32 ? 4 : 2;
    if (rows < 0 || cols < 0 || cols % t->block_elems ||
        row_bytes < (size_t)(cols / t->block_elems) * t->block_bytes || row_bytes % align ||
        !gk_aligned(src, align) || !gk_aligned(dst, 2) || (rows * cols > 0 && (!src || !dst)))
        return ig_error(IG_E_INTERNAL, "gk_dequant_f16: bad %s rows (rows %lld, cols %lld, "
                        "row_bytes %zu) or a NULL/misaligned pointer", t->name, (long long)rows,
                        (long long)cols, row_bytes);
    if (rows * cols == 0)
        return IG_OK;
    switch (type) {
    case QUANT_F32: return launch_convert<QUANT_F32>(src, rows, cols, row_bytes, dst, stream);
    case QUANT_F16: return launch_convert<QUANT_F16>(src, rows, cols, row_bytes, dst, stream);
    case QUANT_BF16: return launch_convert<QUANT_BF16>(src, rows, cols, row_bytes, dst, stream);
    case QUANT_Q8_0:
        return launch_blocks<QUANT_Q8_0>(src, rows, cols, row_bytes, t->block_bytes, dst, stream);
    case QUANT_Q4_0:
        return launch_blocks<QUANT_Q4_0>(src, rows, cols, row_bytes, t->block_bytes, dst, stream);
    default: /* QUANT_Q4_1 */
        return launch_blocks<QUANT_Q4_1>(src, rows, cols, row_bytes, t->block_bytes, dst, stream);
    }
}

int IG_DEV(gk_random_f16)(uint16_t *dst, int64_t n, uint64_t seed, float center, float scale,
                          void *stream)
{
    return launch_random(dst, n, seed, center, scale, stream);
}

int IG_DEV(gk_random_f32)(float *dst, int64_t n, uint64_t seed, float center, float scale,
                          void *stream)
{
    return launch_random(dst, n, seed, center, scale, stream);
}

} /* extern "C" */
