/* tests/emu/rope_case.h: a Q|K|V product with gk_qkv_rope's work in its
 * epilogue against the plain product then gk_qkv_rope (both emulated): the
 * same bits in q and in the pool, and nothing else of the pool touched.
 * The product is the caller's (test_qmm_emu.c: gk_qgemv; test_gemv_emu.c:
 * gk_gemv_f16); here the pool, tables, positions and the comparison. Rows
 * at positions 5, 70 (the table's second block) and, with 3 rows, a padding
 * row (-1); 4 query heads on 2 KV heads of 64 dims; both RoPE styles, with
 * all dims rotated or half of them, with and without a bias. */
#ifndef IGNITE_TESTS_EMU_ROPE_CASE_H
#define IGNITE_TESTS_EMU_ROPE_CASE_H

#include "kvcache/kvcache.h"
#include "models/model.h"
#include "ops/gpu_ops.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

enum { RC_HEADS = 4, RC_KV = 2, RC_HD = 64, RC_ROWS = (RC_HEADS + 2 * RC_KV) * RC_HD,
       RC_BLOCKS = 4, RC_STRIDE = 2 };

/* One case's buffers: the inputs (bias, positions, tables, frequencies) and
 * two sets of outputs, the pool poisoned alike in both. */
struct rope_case {
    float bias[RC_ROWS];
    int32_t pos[3], table[3 * RC_STRIDE];
    double inv_freq[RC_HD / 2];
    uint16_t *q[2], *kc[2], *vc[2];
    size_t pool;
};

/* The params of set `i` (0: the fused epilogue's, 1: gk_qkv_rope's). */
static inline struct gk_qkv_params rope_case_params(struct rope_case *c, int i, int64_t n,
                                                    int style, int64_t n_rot, bool bias)
{
    struct gk_qkv_params p = {
        .bias = bias ? c->bias : NULL, .inv_freq = c->inv_freq, .pos = c->pos, .n = n,
        .n_head = RC_HEADS, .n_head_kv = RC_KV, .head_dim = RC_HD, .n_rot = n_rot,
        .rope_style = style, .q = c->q[i], .k_cache = c->kc[i], .v_cache = c->vc[i],
        .block_table = c->table, .table_stride = RC_STRIDE,
        .block_stride = RC_KV * KV_BLOCK * RC_HD, .head_stride = KV_BLOCK * RC_HD,
        .mscale = 1.25};
    return p;
}

static inline void rope_case_init(struct rope_case *c, uint64_t *st)
{
    c->pool = (size_t)RC_BLOCKS * RC_KV * KV_BLOCK * RC_HD;
    for (int i = 0; i < RC_ROWS; i++)
        c->bias[i] = 0.1f * test_rand_f(st);
    const int32_t pos[3] = {5, 70, -1}, table[3 * RC_STRIDE] = {2, 0, 3, 1, -1, -1};
    memcpy(c->pos, pos, sizeof pos);
    memcpy(c->table, table, sizeof table);
    for (int i = 0; i < RC_HD / 2; i++)
        c->inv_freq[i] = pow(10000.0, -2.0 * i / RC_HD);
    for (int s = 0; s < 2; s++) {
        c->q[s] = malloc(3 * RC_HEADS * RC_HD * 2);
        c->kc[s] = malloc(c->pool * 2);
        c->vc[s] = malloc(c->pool * 2);
        memset(c->q[s], 0xa5, 3 * RC_HEADS * RC_HD * 2);
        memset(c->kc[s], 0xa5, c->pool * 2);
        memset(c->vc[s], 0xa5, c->pool * 2);
    }
}

/* Every bit of set 0 against set 1 (q of the n rows, both pools whole). */
static inline void rope_case_check(struct rope_case *c, int64_t n, const char *what)
{
    int64_t off = 0;
    for (int64_t i = 0; i < n * RC_HEADS * RC_HD; i++)
        off += c->q[0][i] != c->q[1][i];
    for (size_t i = 0; i < c->pool; i++)
        off += c->kc[0][i] != c->kc[1][i] || c->vc[0][i] != c->vc[1][i];
    CHECKF(off == 0, "%s: %lld elements of q and the pool differ from the product + "
           "gk_qkv_rope", what, (long long)off);
}

static inline void rope_case_free(struct rope_case *c)
{
    for (int s = 0; s < 2; s++)
        free(c->q[s]), free(c->kc[s]), free(c->vc[s]);
}

#endif
