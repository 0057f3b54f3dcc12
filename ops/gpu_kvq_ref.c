/* ops/gpu_kvq_ref.c: the CPU twins of ops/gpu_kvq.cu, plain loops over
 * ops_hadamard_rows (the CPU backend's rotation) and kv_devq.h's block
 * quantizer: the kernels must match them bit for bit. */
#include "ops/gpu_kvq.h"

#include "core/half.h"
#include "kvcache/kv_devq.h"
#include "ops/ops.h"

#include <string.h>

static uint16_t f16_bits(float x)
{
    return ig_f32_to_f16(x);
}

static const int32_t *row_table(const struct gk_kvq_params *p, int64_t t)
{
    if (!p->seqs)
        return p->block_table + t * p->table_stride;
    for (int64_t s = 0; s < p->n_seqs; s++) {
        const int32_t *q = p->seqs + 4 * s;
        if (t >= q[0] && t < q[0] + q[1])
            return p->block_table + s * p->table_stride;
    }
    return NULL;
}

void gk_kvq_write_ref(const struct gk_kvq_params *p)
{
    const int64_t hd = p->head_dim;
    float x[512];
    for (int64_t t = 0; t < p->n; t++) {
        const int32_t pos = p->pos[t];
        const int32_t *table = pos >= 0 ? row_table(p, t) : NULL;
        if (!table)
            continue;
        for (int64_t h = 0; h < p->n_head_kv; h++)
            for (int kv = 0; kv < 2; kv++) {
                const int type = kv ? p->v_dtype : p->k_dtype;
                const int64_t rot = kv ? p->rot_v : p->rot_k, r = pos % 64;
                const int64_t e = (int64_t)table[pos / 64] * p->block_stride +
                                  h * p->head_stride + r * hd;
                const uint16_t *src = (kv ? p->v : p->k) + (t * p->n_head_kv + h) * hd;
                unsigned char *cache = kv ? p->v_cache : p->k_cache;
                if (type == KVQ_F16) {
                    memcpy(cache + 2 * e, src, (size_t)hd * 2);
                    continue;
                }
                for (int64_t d = 0; d < hd; d++)
                    x[d] = ig_f16_to_f32(src[d]);
                if (rot)
                    ops_hadamard_rows(x, hd, rot);
                unsigned char *region = cache + kvq_region(e - r * hd);
                for (int64_t b = 0; b < hd / 32; b++) {
                    uint8_t q[32];
                    uint16_t d;
                    KVQ_QUANTIZE_BLOCK(type, x + 32 * b, q, d, f16_bits);
                    memcpy(region + kvq_quant_at(hd, r, 32 * b), q, 32);
                    memcpy(region + kvq_scale_at(hd, r, 32 * b), &d, 2);
                }
            }
    }
}

void gk_hadamard_f16_ref(uint16_t *x, int64_t n_vec, int64_t len, int64_t rot)
{
    float v[512];
    for (int64_t i = 0; i < n_vec; i++) {
        for (int64_t d = 0; d < len; d++)
            v[d] = ig_f16_to_f32(x[i * len + d]);
        ops_hadamard_rows(v, len, rot);
        for (int64_t d = 0; d < len; d++)
            x[i * len + d] = ig_f32_to_f16(v[d]);
    }
}
