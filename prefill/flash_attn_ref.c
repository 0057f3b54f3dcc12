/* prefill/flash_attn_ref.c: the CPU twin of the prefill attention kernels
 * (prefill/flash_attn.cu, flash_attn_wgmma.cu, flash_attn_ws.cu), with the
 * sliding window, the paged cache and variable length (each sequence as a
 * call of its own).
 * Written for clarity: per head and query row, an online softmax over tiles
 * of REF_BLOCK_N keys in fp32, the algorithm the kernel runs (whose tile
 * width depends on its variant; the result does not), without its parallel
 * structure (P is not rounded to the input type here, so this is the more
 * accurate of the two). The tile chooser is in prefill/flash_attn_choose.c.
 * Covered by tests/emu/test_flash_attn_emu.c (against fp64). */
#include "prefill/flash_attn.h"

#include "core/half.h"
#include "core/status.h"
#include "kvcache/kv_devq.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum { REF_BLOCK_N = 64 }; /* keys per online-softmax step */

static float load(const void *base, int64_t i, int dtype)
{
    uint16_t h = ((const uint16_t *)base)[i];
    return dtype == PREFILL_ATTN_BF16 ? ig_bf16_to_f32(h) : ig_f16_to_f32(h);
}

static uint16_t round_to(float x, int dtype)
{
    return dtype == PREFILL_ATTN_BF16 ? ig_f32_to_bf16(x) : ig_f32_to_f16(x);
}

/* Element offset of cache row pos of kv head hk: contiguous, or through
 * the block table. */
static int64_t cache_row(const struct prefill_attn_params *p, int64_t hk, int64_t pos)
{
    if (!p->block_table)
        return hk * p->cache_head_stride + pos * p->cache_row_stride;
    return (int64_t)p->block_table[pos / p->block_rows] * p->cache_block_stride +
           hk * p->cache_head_stride + (pos % p->block_rows) * p->cache_row_stride;
}

/* Key `pos` of kv head hk: the cache below pos0, the chunk from there. */
static const uint16_t *key_row(const struct prefill_attn_params *p, const void *cache,
                               const void *chunk, int64_t row_stride, int64_t head_stride,
                               int64_t hk, int64_t pos)
{
    if (pos < p->pos0)
        return (const uint16_t *)cache + cache_row(p, hk, pos);
    return (const uint16_t *)chunk + (pos - p->pos0) * row_stride + hk * head_stride;
}

/* Value d of key `pos` of kv head hk: key_row's, or from a quantized pool
 * (type: KVQ_Q8_0 / KVQ_FP8) every key, f16(d q) as the kernel's tile
 * holds it. */
static float key_val(const struct prefill_attn_params *p, const void *cache, int type,
                     const uint16_t *row, int64_t hk, int64_t pos, int64_t d)
{
    if (type == KVQ_F16)
        return load(row, d, p->dtype);
    const int64_t hd = p->head_dim, r = pos % p->block_rows;
    const unsigned char *region =
        (const unsigned char *)cache + kvq_region(cache_row(p, hk, pos) - r * hd);
    const unsigned char *sc = region + kvq_scale_at(hd, r, d);
    const float x = kvq_value(type, region[kvq_quant_at(hd, r, d)],
                              ig_f16_to_f32((uint16_t)(sc[0] | sc[1] << 8)));
    return ig_f16_to_f32(ig_f32_to_f16(x));
}

/* One sequence: p's rows 0 .. n_tokens - 1 at pos0 (sizes checked). */
static void one_seq(const struct prefill_attn_params *p)
{
    const int64_t hd = p->head_dim, group = p->n_head / p->n_head_kv;
    float q[512], acc[512];
    /* a quantized pool holds every key, the chunk's too (a mixed pool's f16
     * array as well) */
    const bool quant = p->cache_k_dtype != KVQ_F16 || p->cache_v_dtype != KVQ_F16;
    struct prefill_attn_params all = *p;
    if (quant)
        all.pos0 = p->pos0 + p->n_tokens;

    for (int64_t h = 0; h < p->n_head; h++) {
        const int64_t hk = h / group;
        for (int64_t i = 0; i < p->n_tokens; i++) {
            const int64_t last = p->pos0 + i; /* the last key query i sees ... */
            const int64_t first = p->window > 0 && last - p->window + 1 > 0
                                      ? last - p->window + 1
                                      : 0; /* ... and the first */
            for (int64_t d = 0; d < hd; d++) {
                q[d] = load(p->q, i * p->q_row_stride + h * p->q_head_stride + d, p->dtype);
                acc[d] = 0;
            }
            /* gpt-oss's sink starts the running state: its e^0 in l, no value */
            float m = p->sinks ? p->sinks[h] : -INFINITY, l = p->sinks ? 1.0f : 0.0f;
            for (int64_t j0 = first; j0 <= last; j0 += REF_BLOCK_N) {
                int64_t j1 = j0 + REF_BLOCK_N;
                if (j1 > last + 1)
                    j1 = last + 1;
                float s[REF_BLOCK_N], m_tile = -INFINITY;
                for (int64_t j = j0; j < j1; j++) {
                    const uint16_t *k = key_row(&all, p->k_cache, p->k, p->k_row_stride,
                                                p->k_head_stride, hk, j);
                    float dot = 0;
                    for (int64_t d = 0; d < hd; d++)
                        dot += q[d] * key_val(p, p->k_cache, p->cache_k_dtype, k, hk, j, d);
                    s[j - j0] = dot * p->scale;
                    m_tile = fmaxf(m_tile, s[j - j0]);
                }
                float m_new = fmaxf(m, m_tile), corr = expf(m - m_new);
                l *= corr;
                for (int64_t d = 0; d < hd; d++)
                    acc[d] *= corr;
                for (int64_t j = j0; j < j1; j++) {
                    float pj = expf(s[j - j0] - m_new);
                    const uint16_t *v = key_row(&all, p->v_cache, p->v, p->v_row_stride,
                                                p->v_head_stride, hk, j);
                    l += pj;
                    for (int64_t d = 0; d < hd; d++)
                        acc[d] += pj * key_val(p, p->v_cache, p->cache_v_dtype, v, hk, j, d);
                }
                m = m_new;
            }
            uint16_t *o = (uint16_t *)p->o + i * p->o_row_stride + h * p->o_head_stride;
            for (int64_t d = 0; d < hd; d++)
                o[d] = round_to(acc[d] / l, p->dtype);
            if (p->lse)
                p->lse[h * p->lse_head_stride + i] = m + logf(l);
        }
    }
    /* The chunk's K and V into the cache, after every read of the cache
     * (a quantized pool's are there already). */
    for (int64_t hk = 0; hk < p->n_head_kv && !quant; hk++)
        for (int64_t i = 0; i < p->n_tokens; i++) {
            int64_t c = cache_row(p, hk, p->pos0 + i);
            memcpy((uint16_t *)p->k_cache + c,
                   (const uint16_t *)p->k + i * p->k_row_stride + hk * p->k_head_stride,
                   (size_t)hd * 2);
            memcpy((uint16_t *)p->v_cache + c,
                   (const uint16_t *)p->v + i * p->v_row_stride + hk * p->v_head_stride,
                   (size_t)hd * 2);
        }
}

int prefill_attn_ref(const struct prefill_attn_params *p)
{
    if (p->head_dim < 1 || p->head_dim > 512 || p->n_head_kv < 1 || p->n_head % p->n_head_kv ||
        p->pos0 < 0 || p->n_tokens < 0 || p->window < 0 ||
        (p->seqs ? p->n_tokens > p->n_ctx : p->pos0 + p->n_tokens > p->n_ctx) ||
        (p->block_table && p->block_rows < 1) ||
        (p->seqs && (!p->block_table || p->n_seqs < 1 || p->table_stride < 1 ||
                     p->n_ctx > p->table_stride * p->block_rows)))
        return ig_error(IG_E_INTERNAL, "flash attention reference: inconsistent sizes");
    if (!p->seqs) {
        one_seq(p);
        return 0;
    }
    /* Variable length: each sequence as one call on its rows and its table
     * (the kernel's launch covers n_tokens rows of each). */
    for (int64_t s = 0; s < p->n_seqs; s++) {
        const struct prefill_attn_seq *sq = &p->seqs[s];
        if (sq->row0 < 0 || sq->n_rows < 0 || sq->n_rows > p->n_tokens || sq->pos0 < 0 ||
            (int64_t)sq->pos0 + sq->n_rows > p->n_ctx)
            return ig_error(IG_E_INTERNAL, "flash attention reference: sequence %lld: rows "
                            "%d + %d at pos0 %d (n_tokens %lld, n_ctx %lld)", (long long)s,
                            sq->row0, sq->n_rows, sq->pos0, (long long)p->n_tokens,
                            (long long)p->n_ctx);
    }
    for (int64_t s = 0; s < p->n_seqs; s++) {
        const struct prefill_attn_seq *sq = &p->seqs[s];
        if (sq->n_rows == 0)
            continue;
        struct prefill_attn_params one = *p;
        one.seqs = NULL;
        one.n_tokens = sq->n_rows;
        one.pos0 = sq->pos0;
        one.q = (const uint16_t *)p->q + sq->row0 * p->q_row_stride;
        one.k = (const uint16_t *)p->k + sq->row0 * p->k_row_stride;
        one.v = (const uint16_t *)p->v + sq->row0 * p->v_row_stride;
        one.o = (uint16_t *)p->o + sq->row0 * p->o_row_stride;
        one.lse = p->lse ? p->lse + sq->row0 : NULL;
        one.block_table = p->block_table + s * p->table_stride;
        one_seq(&one);
    }
    return 0;
}
