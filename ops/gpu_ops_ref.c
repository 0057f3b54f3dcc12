/* ops/gpu_ops_ref.c: the CPU twins (_ref) of the element-wise and weight
 * kernels of ops/gpu_ops.h (ops/gpu_elementwise.cu, ops/gpu_weights.cu):
 * plain loops over host pointers that define each kernel's result. They
 * round after every f32 operation (built without FMA contraction, as the
 * kernels are), so where the order of operations is the same the kernel
 * must match them bit for bit; RMSNorm's sum is the one place the orders
 * differ. Also gk_dequant_supported, shared by both builds of the kernels.
 * Covered by tests/emu/test_gpu_ops_emu.c (against the emulated kernels,
 * quant_dequantize_row and double-precision formulas). */
#include "ops/gpu_ops.h"
#include "ops/gpu_qmm.h"
#include "ops/gpu_random.h"

#include "core/half.h"
#include "core/status.h"
#include "kvcache/kvcache.h"
#include "models/model.h"
#include "models/quant.h"

#include <math.h>
#include <string.h>

/* ---- element-wise ---------------------------------------------------------- */

void gk_embed_ref(const uint16_t *table, const int32_t *tokens, int64_t n, int64_t n_embd,
                  int64_t v0, int64_t n_v, float *x)
{
    for (int64_t t = 0; t < n; t++) {
        int64_t row = (int64_t)tokens[t] - v0;
        for (int64_t i = 0; i < n_embd; i++)
            x[t * n_embd + i] = row >= 0 && row < n_v ? ig_f16_to_f32(table[row * n_embd + i])
                                                      : 0.0f;
    }
}

void gk_rmsnorm_ref(const float *x, int64_t ld_x, const float *w, int64_t n, int64_t dim,
                    float eps, uint16_t *y)
{
    for (int64_t t = 0; t < n; t++) {
        const float *xt = x + t * ld_x;
        float ss = 0;
        for (int64_t i = 0; i < dim; i++)
            ss += xt[i] * xt[i];
        const float r = 1.0f / sqrtf(ss / (float)dim + eps);
        for (int64_t i = 0; i < dim; i++)
            y[t * dim + i] = ig_f32_to_f16(xt[i] * r * w[i]);
    }
}

void gk_rmsnorm_xq_ref(const float *x, int64_t ld_x, const float *w, int64_t n, int64_t dim,
                       float eps, uint16_t *y, int8_t *xq, float *xqd)
{
    gk_rmsnorm_ref(x, ld_x, w, n, dim, eps, y);
    if (xq)
        gk_quantize_rows_ref(y, dim, n, dim, xq, xqd);
}

/* The destination row of head h (q | k | v) of token t at position pos, or
 * NULL where nothing is written (cache mode: a padding row, a position past
 * the row's table or a negative block id). */
static uint16_t *qkv_dst(const struct gk_qkv_params *p, int64_t t, int64_t h, int64_t pos)
{
    if (h < p->n_head)
        return p->q + (t * p->n_head + h) * p->head_dim;
    const int is_k = h < p->n_head + p->n_head_kv;
    const int64_t kh = is_k ? h - p->n_head : h - p->n_head - p->n_head_kv;
    if (p->k)
        return (is_k ? p->k : p->v) + (t * p->n_head_kv + kh) * p->head_dim;
    if (pos < 0 || pos / KV_BLOCK >= p->table_stride)
        return NULL;
    const int32_t *table = p->block_table + t * p->table_stride;
    if (table[pos / KV_BLOCK] < 0)
        return NULL;
    const struct kv_layout L = {.block_stride = p->block_stride, .head_stride = p->head_stride,
                                .head_dim = p->head_dim};
    return (is_k ? p->k_cache : p->v_cache) + kv_row_offset(&L, table, kh, pos);
}

void gk_qkv_rope_ref(const struct gk_qkv_params *p)
{
    const int64_t n_heads = p->n_head + 2 * p->n_head_kv, hd = p->head_dim;
    const int64_t half = p->n_rot / 2;
    /* Distance between the two dims of a pair, and between pairs. */
    const int64_t gap = p->rope_style == ROPE_ADJACENT ? 1 : half;
    const int64_t step = p->rope_style == ROPE_ADJACENT ? 2 : 1;
    const double ms = p->mscale != 0 ? p->mscale : 1.0;
    for (int64_t t = 0; t < p->n; t++) {
        const int64_t pos_t = p->pos[t];
        const double pos = (double)pos_t;
        if (pos_t < 0) { /* padding: zeros to q (and k, v buffers), nothing to the cache */
            for (int64_t h = 0; h < n_heads; h++) {
                uint16_t *out = qkv_dst(p, t, h, pos_t);
                if (out)
                    memset(out, 0, (size_t)hd * sizeof *out);
            }
            continue;
        }
        for (int64_t h = 0; h < n_heads; h++) {
            const float *in = p->qkv + (t * n_heads + h) * hd;
            const float *b = p->bias ? p->bias + h * hd : NULL;
            uint16_t *out = qkv_dst(p, t, h, pos_t);
            if (!out)
                continue;
            /* Every dim as is, then the rotated pairs of q and k over them. */
            for (int64_t d = 0; d < hd; d++)
                out[d] = ig_f32_to_f16(b ? in[d] + b[d] : in[d]);
            if (h >= p->n_head + p->n_head_kv)
                continue;
            for (int64_t i = 0; i < half; i++) {
                const double theta = pos * p->inv_freq[i];
                const float c = (float)(cos(theta) * ms), s = (float)(sin(theta) * ms);
                const int64_t d0 = i * step, d1 = d0 + gap;
                const float x0 = b ? in[d0] + b[d0] : in[d0];
                const float x1 = b ? in[d1] + b[d1] : in[d1];
                out[d0] = ig_f32_to_f16(x0 * c - x1 * s);
                out[d1] = ig_f32_to_f16(x0 * s + x1 * c);
            }
        }
    }
}

void gk_swiglu_ref(const float *gate_up, int64_t n, int64_t n_ff, uint16_t *h)
{
    for (int64_t t = 0; t < n; t++) {
        const float *g = gate_up + t * 2 * n_ff, *u = g + n_ff;
        for (int64_t i = 0; i < n_ff; i++)
            h[t * n_ff + i] = ig_f32_to_f16(g[i] / (1.0f + expf(-g[i])) * u[i]);
    }
}

/* 2 sqrt(2 / pi): GELU's tanh form as a logistic, as ops_geglu. */
#define GELU_K2 (2.0f * 0.7978845608028654f)

void gk_geglu_ref(const float *gate_up, int64_t n, int64_t n_ff, uint16_t *h)
{
    for (int64_t t = 0; t < n; t++) {
        const float *g = gate_up + t * 2 * n_ff, *u = g + n_ff;
        for (int64_t i = 0; i < n_ff; i++) {
            const float z = g[i] + 0.044715f * g[i] * g[i] * g[i];
            h[t * n_ff + i] = ig_f32_to_f16(g[i] / (1.0f + expf(-GELU_K2 * z)) * u[i]);
        }
    }
}

/* ---- weights ---------------------------------------------------------------- */

bool gk_dequant_supported(int type)
{
    switch (type) {
    case QUANT_F32: case QUANT_F16: case QUANT_BF16:
    case QUANT_Q8_0: case QUANT_Q4_0: case QUANT_Q4_1:
        return true;
    default:
        return false;
    }
}

/* Element c of a stored row, as quant_dequantize_row computes it (F16 aside,
 * which gk_dequant_f16_ref copies bit for bit). */
static float stored_value(int type, const uint8_t *row, int64_t c)
{
    switch (type) {
    case QUANT_F32: {
        float f;
        memcpy(&f, row + 4 * c, 4);
        return f;
    }
    case QUANT_BF16: {
        ig_bf16 h;
        memcpy(&h, row + 2 * c, 2);
        return ig_bf16_to_f32(h);
    }
    case QUANT_Q8_0: {
        const uint8_t *b = row + (c / QK8_0) * sizeof(struct block_q8_0);
        return (float)(int8_t)b[offsetof(struct block_q8_0, qs) + c % QK8_0] *
               ig_f16_at(b + offsetof(struct block_q8_0, d));
    }
    case QUANT_Q4_0: {
        const uint8_t *b = row + (c / QK4_0) * sizeof(struct block_q4_0);
        const int j = (int)(c % QK4_0);
        const uint8_t q = b[offsetof(struct block_q4_0, qs) + j % (QK4_0 / 2)];
        const int nib = j < QK4_0 / 2 ? (q & 0x0f) : (q >> 4);
        return (float)(nib - 8) * ig_f16_at(b + offsetof(struct block_q4_0, d));
    }
    default: { /* QUANT_Q4_1 */
        const uint8_t *b = row + (c / QK4_1) * sizeof(struct block_q4_1);
        const int j = (int)(c % QK4_1);
        const uint8_t q = b[offsetof(struct block_q4_1, qs) + j % (QK4_1 / 2)];
        const int nib = j < QK4_1 / 2 ? (q & 0x0f) : (q >> 4);
        return (float)nib * ig_f16_at(b + offsetof(struct block_q4_1, d)) +
               ig_f16_at(b + offsetof(struct block_q4_1, m));
    }
    }
}

void gk_dequant_f16_ref(int type, const void *src, int64_t rows, int64_t cols,
                        size_t row_bytes, uint16_t *dst)
{
    IG_ASSERT(gk_dequant_supported(type));
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *row = (const uint8_t *)src + (size_t)r * row_bytes;
        for (int64_t c = 0; c < cols; c++) {
            if (type == QUANT_F16)
                memcpy(&dst[r * cols + c], row + 2 * c, 2);
            else
                dst[r * cols + c] = ig_f32_to_f16(stored_value(type, row, c));
        }
    }
}

void gk_random_f16_ref(uint16_t *dst, int64_t n, uint64_t seed, float center, float scale)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = ig_f32_to_f16(gk_random_value(seed, (uint64_t)i, center, scale));
}

void gk_random_f32_ref(float *dst, int64_t n, uint64_t seed, float center, float scale)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = gk_random_value(seed, (uint64_t)i, center, scale);
}
