/* decode/decode_attn_ref.c: the CPU twin of decode/decode_attn.cu, the
 * definition of its result: plain loops, f64 softmax and sums, the output
 * rounded once to f16, each query row on its own (causal among a
 * sequence's rows: row r sees keys up to its own position), through its
 * sequence's block table (kv_row_offset). Host pointers; work is not used. Covered by
 * tests/emu/test_decode_attn_emu.c (against the emulated kernel and an
 * independent f64 computation). */
#include "decode/decode_attn.h"

#include "core/half.h"
#include "core/status.h"
#include "kvcache/kv_devq.h"
#include "kvcache/kvcache.h"
#include "ops/gpu_qmm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Host-side sizing, shared by both builds of the kernel (hence here, in
 * ignite_core, not in the .cu that compiles twice). */
int decode_attn_choose_splits(int64_t n_ctx, int64_t n_seqs, int64_t n_head_kv, int n_sm)
{
    /* About 4 blocks per SM over all sequences and KV heads, at least 64
     * keys per split. */
    const int64_t sm = n_sm > 0 ? n_sm : 1, kv = n_head_kv > 0 ? n_head_kv : 1;
    const int64_t units = kv * (n_seqs > 0 ? n_seqs : 1);
    int64_t s = (4 * sm + units - 1) / units;
    const int64_t by_len = (n_ctx + 63) / 64;
    s = s < by_len ? s : by_len;
    s = s < DECODE_ATTN_MAX_SPLITS ? s : DECODE_ATTN_MAX_SPLITS;
    return s < 1 ? 1 : (int)s;
}

/* One partial per (sequence, row, query head, split): o[head_dim], max, sum. */
size_t decode_attn_work_floats(const struct decode_attn_params *p)
{
    return (size_t)(p->n_seqs * decode_attn_q_len(p) * p->n_head * p->n_splits *
                    (p->head_dim + 2));
}

size_t decode_attn_tickets(const struct decode_attn_params *p)
{
    return (size_t)(p->n_seqs * p->n_head_kv * decode_attn_row_groups(p));
}

/* Value d of row pos of KV head hk in `cache` of kv_devq.h's `type`. */
static float cache_value(const uint16_t *cache, int type, const struct kv_layout *L,
                         const int32_t *table, int64_t hk, int64_t pos, int64_t d)
{
    const int64_t e = kv_row_offset(L, table, hk, pos);
    if (type == KVQ_F16)
        return ig_f16_to_f32(cache[e + d]);
    const int64_t r = pos % KV_BLOCK, hd = L->head_dim;
    const unsigned char *region = (const unsigned char *)cache + kvq_region(e - r * hd);
    const unsigned char *sc = region + kvq_scale_at(hd, r, d);
    return kvq_value(type, region[kvq_quant_at(hd, r, d)],
                     ig_f16_to_f32((uint16_t)(sc[0] | sc[1] << 8)));
}

int decode_attn_ref(const struct decode_attn_params *p)
{
    const int64_t hd = p->head_dim;
    if (!p->q || !p->k_cache || !p->v_cache || !p->block_table || !p->pos || !p->o ||
        p->n_head_kv < 1 || p->n_head < 1 || p->n_head % p->n_head_kv || p->n_ctx < 1 ||
        p->n_seqs < 0 || hd < 1 || p->window < 0 || p->n_ctx > p->table_stride * KV_BLOCK ||
        p->q_len < 0 || p->q_len > DECODE_ATTN_MAX_Q_LEN)
        return ig_error(IG_E_INTERNAL, "decode_attn_ref: bad params");
    const int64_t group = p->n_head / p->n_head_kv;
    const struct kv_layout L = {.block_stride = p->block_stride, .head_stride = p->head_stride,
                                .head_dim = hd};
    double *w = malloc((size_t)p->n_ctx * sizeof *w);
    if (!w)
        return ig_error(IG_E_NOMEM, "decode_attn_ref: out of memory");
    /* Row s of the step is row s % q_len of sequence s / q_len. */
    for (int64_t s = 0; s < p->n_seqs * decode_attn_q_len(p); s++) {
        const int32_t *table = p->block_table + s / decode_attn_q_len(p) * p->table_stride;
        uint16_t *o = p->o + s * p->n_head * hd;
        if (p->pos[s] < 0) { /* padding */
            memset(o, 0, (size_t)(p->n_head * hd) * sizeof *o);
            continue;
        }
        const int64_t last = p->pos[s] < p->n_ctx ? p->pos[s] : p->n_ctx - 1;
        const int64_t lo = p->window > 0 && last - p->window + 1 > 0 ? last - p->window + 1 : 0;
        const int64_t n_keys = last - lo + 1;
        for (int64_t h = 0; h < p->n_head; h++) {
            const uint16_t *q = p->q + (s * p->n_head + h) * hd;
            /* gpt-oss's sink: a logit in the max and the denominator alone */
            const double sink = p->sinks ? p->sinks[h] : -INFINITY;
            double mx = sink, sum = 0;
            for (int64_t j = 0; j < n_keys; j++) {
                double dot = 0;
                for (int64_t d = 0; d < hd; d++)
                    dot += (double)ig_f16_to_f32(q[d]) *
                           cache_value(p->k_cache, p->k_dtype, &L, table, h / group, lo + j, d);
                w[j] = dot * p->scale;
                mx = w[j] > mx ? w[j] : mx;
            }
            for (int64_t j = 0; j < n_keys; j++) {
                w[j] = exp(w[j] - mx);
                sum += w[j];
            }
            if (p->sinks)
                sum += exp(sink - mx);
            for (int64_t d = 0; d < hd; d++) {
                double acc = 0;
                for (int64_t j = 0; j < n_keys; j++)
                    acc += w[j] * cache_value(p->v_cache, p->v_dtype, &L, table, h / group,
                                              lo + j, d);
                o[h * hd + d] = ig_f32_to_f16((float)(acc / sum));
            }
        }
    }
    free(w);
    if (p->oq) /* o's int8 blocks, as the kernel's quantize_o */
        gk_quantize_rows_ref(p->o, p->n_head * hd, p->n_seqs * decode_attn_q_len(p),
                             p->n_head * hd, p->oq, p->oqd);
    return IG_OK;
}
