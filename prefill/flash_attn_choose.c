/* prefill/flash_attn_choose.c: the one chooser of the prefill attention
 * kernel's configuration (prefill_attn_choose_for): which variant, by the
 * speeds the GPU check measured (prefill/flash_attn_speed.inc), and the
 * launch sizes; the variant names. The variant table itself is
 * PREFILL_ATTN_VARIANTS in prefill/flash_attn.h.
 * Plain C, in ignite_core: the launchers, tests and bench all ask it.
 * Covered by tests/emu/test_flash_attn_emu.c (every variant, the pick by
 * measured speed on a table of its own, a forced variant through
 * IGNITE_FLASH_VARIANT, windows, paged caches and variable length only
 * where supported). */
#include "prefill/flash_attn.h"

#include "core/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct variant_row {
    const char *name;
    int block_m, block_n, warps, m_tiles, q_regs_max_hd, head_dims, isa, stages;
};

static const struct variant_row variants[PREFILL_ATTN_N_VARIANTS] = {
    [PREFILL_ATTN_AUTO] = {NULL, 0, 0, 0, 0, 0, 0, 0, 0},
#define ROW_(id, name, bm, bn, w, mt, qhd, hds, minb, isa, stages, s_ahead) \
    [PREFILL_ATTN_##id] = {name, bm, bn, w, mt, qhd, hds, isa, stages},
    PREFILL_ATTN_VARIANTS(ROW_)
#undef ROW_
};

/* The measured speeds, from the GPU check (scripts/attn_speed_table.py). */
static const struct prefill_attn_speed speed_table[] = {
#include "prefill/flash_attn_speed.inc"
};

const struct prefill_attn_speed *prefill_attn_speed_table(size_t *n_rows)
{
    *n_rows = sizeof speed_table / sizeof speed_table[0];
    return speed_table;
}

const char *prefill_attn_variant_name(int variant)
{
    return variant > PREFILL_ATTN_AUTO && variant < PREFILL_ATTN_N_VARIANTS
               ? variants[variant].name
               : NULL;
}

int prefill_attn_variant_find(const char *name)
{
    for (int v = PREFILL_ATTN_AUTO + 1; name && v < PREFILL_ATTN_N_VARIANTS; v++)
        if (strcmp(variants[v].name, name) == 0)
            return v;
    return PREFILL_ATTN_AUTO;
}

int prefill_attn_variant_isa(int variant)
{
    return prefill_attn_variant_name(variant) ? variants[variant].isa : -1;
}

int prefill_attn_variant_supports(int variant, int64_t head_dim)
{
    if (!prefill_attn_variant_name(variant))
        return 0;
    int bit = head_dim == 64    ? 1
              : head_dim == 128 ? 2
              : head_dim == 256 ? 4
              : head_dim == 512 ? 8
                                : 0;
    return (variants[variant].head_dims & bit) != 0;
}

int prefill_attn_isa_runs_on(int isa, int cc, int have_sm90a)
{
    if (isa == PREFILL_ATTN_ISA_WGMMA || isa == PREFILL_ATTN_ISA_WS)
        return have_sm90a && (cc == 0 || cc == 90);
    return isa == PREFILL_ATTN_ISA_MMA && (cc == 0 || cc >= 80);
}

/* Whether variant v reads a paged cache: the mma.sync kernel (any tile: a
 * tile across two blocks is copied in two runs of rows), the ws kernel with
 * K/V tiles of whole 64-position blocks (two TMA boxes per 128-key tile). */
static int pages(int v)
{
    return variants[v].isa == PREFILL_ATTN_ISA_MMA ||
           (variants[v].isa == PREFILL_ATTN_ISA_WS && variants[v].block_n % 64 == 0);
}

/* Whether variant v takes p's variable-length sequences: the mma.sync
 * kernel (a grid dimension per sequence); the ws kernel where it reads the
 * paged pool (work items per sequence, a tile that a sequence's end or pos0
 * cuts copied and stored row by row), at head dims 64 and 128 (at 256 its
 * varlen loop spilled), with the sequences 16-byte aligned (one load). */
static int varlen(int v, const struct prefill_attn_params *p)
{
    return variants[v].isa == PREFILL_ATTN_ISA_MMA ||
           (variants[v].isa == PREFILL_ATTN_ISA_WS && pages(v) && p->head_dim <= 128 &&
            ((uintptr_t)p->seqs & 15) == 0);
}

/* Whether variant v has sliding windows: the mma.sync and ws kernels. */
static int windows(int v)
{
    return variants[v].isa == PREFILL_ATTN_ISA_MMA || variants[v].isa == PREFILL_ATTN_ISA_WS;
}

/* Whether variant v has gpt-oss's sinks: the mma.sync kernel (its epilogue,
 * store_rows; the ws kernel's is its own, and the wgmma one is not tested
 * with them). */
static int sinks(int v)
{
    return variants[v].isa == PREFILL_ATTN_ISA_MMA;
}

/* Whether p reads a quantized pool (q8_0 / fp8, kvcache/kv_devq.h): the
 * mma.sync kernel's dequantizing tile loads only (AUTO falls back to them),
 * paged f16. */
static int quant_pool(const struct prefill_attn_params *p)
{
    return p->cache_k_dtype != 0 || p->cache_v_dtype != 0;
}

/* Whether variant v can run p (head dim, window, paged cache, sinks) on cc. */
static int fits(int v, const struct prefill_attn_params *p, int cc, int have_sm90a)
{
    return prefill_attn_variant_supports(v, p->head_dim) && (p->window == 0 || windows(v)) &&
           (!p->sinks || sinks(v)) && (!quant_pool(p) || sinks(v)) &&
           (!p->block_table || pages(v)) && (!p->seqs || varlen(v, p)) &&
           prefill_attn_isa_runs_on(variants[v].isa, cc, have_sm90a);
}

int prefill_attn_pick_measured(const struct prefill_attn_speed *rows, size_t n_rows,
                               const struct prefill_attn_params *p, int cc, int have_sm90a)
{
    const double want = (double)(p->pos0 + p->n_tokens);
    double best_dist = INFINITY;
    int near_n = -1;
    for (size_t i = 0; i < n_rows; i++) { /* the nearest measured n among usable rows */
        const int v = prefill_attn_variant_find(rows[i].variant);
        if (v == PREFILL_ATTN_AUTO || rows[i].hd != p->head_dim || (cc && rows[i].cc != cc) ||
            !fits(v, p, cc, have_sm90a) || rows[i].n < 1)
            continue;
        const double d = fabs(log(want / (double)rows[i].n));
        if (d < best_dist)
            best_dist = d, near_n = rows[i].n;
    }
    int pick = PREFILL_ATTN_AUTO;
    float best = -1.0f;
    for (size_t i = 0; i < n_rows && near_n > 0; i++) {
        const int v = prefill_attn_variant_find(rows[i].variant);
        if (v == PREFILL_ATTN_AUTO || rows[i].hd != p->head_dim || (cc && rows[i].cc != cc) ||
            rows[i].n != near_n || !fits(v, p, cc, have_sm90a))
            continue;
        if (rows[i].tflops > best)
            best = rows[i].tflops, pick = v;
    }
    return pick;
}

/* p->variant, else IGNITE_FLASH_VARIANT, else the fastest measured, else
 * the default or the first that fits; AUTO when the one asked for does not
 * exist or nothing fits (reported). */
static int pick_variant(const struct prefill_attn_params *p, int cc, int have_sm90a)
{
    if (p->variant != PREFILL_ATTN_AUTO) {
        if (!prefill_attn_variant_name(p->variant))
            ig_error(IG_E_INTERNAL, "flash attention: no variant %d", p->variant);
        return prefill_attn_variant_name(p->variant) ? p->variant : PREFILL_ATTN_AUTO;
    }
    const char *env = getenv("IGNITE_FLASH_VARIANT");
    if (env && *env) {
        int v = prefill_attn_variant_find(env);
        if (v == PREFILL_ATTN_AUTO)
            ig_error(IG_E_INTERNAL, "flash attention: IGNITE_FLASH_VARIANT=%s names no variant "
                     "(see PREFILL_ATTN_VARIANTS in prefill/flash_attn.h)", env);
        return v;
    }
    int v = prefill_attn_pick_measured(speed_table, sizeof speed_table / sizeof speed_table[0],
                                       p, cc, have_sm90a);
    if (v != PREFILL_ATTN_AUTO)
        return v;
    v = PREFILL_ATTN_DEFAULT_VARIANT(p->head_dim);
    if (fits(v, p, cc, have_sm90a))
        return v;
    for (v = PREFILL_ATTN_AUTO + 1; v < PREFILL_ATTN_N_VARIANTS; v++)
        if (fits(v, p, cc, have_sm90a))
            return v;
    ig_error(IG_E_INTERNAL, "flash attention: no variant for head_dim %lld%s%s%s on compute "
             "capability %d.%d%s", (long long)p->head_dim, p->window ? " with a window" : "",
             p->seqs ? " with variable length" : p->block_table ? " with a paged cache" : "",
             p->sinks ? " with sinks" : "", cc / 10, cc % 10,
             have_sm90a ? "" : " (no sm_90a kernels built)");
    return PREFILL_ATTN_AUTO;
}

int prefill_attn_choose_for(const struct prefill_attn_params *p, int cc, int have_sm90a,
                            struct prefill_attn_tile *t)
{
    if (p->head_dim != 64 && p->head_dim != 128 && p->head_dim != 256 && p->head_dim != 512)
        return ig_error(IG_E_INTERNAL, "flash attention: head_dim %lld, expected 64, 128, 256 "
                        "or 512", (long long)p->head_dim);
    if (p->dtype != PREFILL_ATTN_BF16 && p->dtype != PREFILL_ATTN_F16)
        return ig_error(IG_E_INTERNAL, "flash attention: dtype %d, expected bf16 or f16",
                        p->dtype);
    if (p->head_dim == 512 && p->dtype != PREFILL_ATTN_F16) /* Gemma 4's: one instantiation */
        return ig_error(IG_E_INTERNAL, "flash attention: head_dim 512 takes f16 only");
    /* Varlen: each sequence's pos0 + n_rows <= n_ctx is the kernel's to
     * trust (device memory); the largest n_rows and pos0 each fit. */
    const int64_t extent = p->seqs ? (p->pos0 > p->n_tokens ? p->pos0 : p->n_tokens)
                                   : p->pos0 + p->n_tokens;
    if (p->n_tokens < 1 || p->pos0 < 0 || extent > p->n_ctx ||
        p->n_head_kv < 1 || p->n_head % p->n_head_kv || p->n_head > 65535 || p->window < 0 ||
        (p->head_dim == 512 && p->n_head > 32767) || /* 2 blocks a head (grid y) */
        p->n_ctx > INT32_MAX) /* the kernel keeps positions in 32 bits */
        return ig_error(IG_E_INTERNAL, "flash attention: bad sizes (n_tokens %lld, pos0 %lld, "
                        "n_ctx %lld, n_head %lld, n_head_kv %lld, window %lld)",
                        (long long)p->n_tokens, (long long)p->pos0, (long long)p->n_ctx,
                        (long long)p->n_head, (long long)p->n_head_kv, (long long)p->window);
    const void *ptrs[] = {p->q, p->k, p->v, p->k_cache, p->v_cache, p->o};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
        if (!ptrs[i] || ((uintptr_t)ptrs[i] & 15))
            return ig_error(IG_E_INTERNAL, "flash attention: pointer %zu is NULL or not "
                            "16-byte aligned", i);
    if (p->block_table && (p->block_rows != 64 || p->n_blocks < 1 || p->n_blocks > INT32_MAX ||
                           p->cache_block_stride < 1))
        return ig_error(IG_E_INTERNAL, "flash attention: a paged cache of blocks of %lld "
                        "positions (64 expected), %lld blocks, block stride %lld",
                        (long long)p->block_rows, (long long)p->n_blocks,
                        (long long)p->cache_block_stride);
    if (p->seqs && (!p->block_table || p->n_seqs < 1 || p->n_seqs > 65535 ||
                    p->table_stride < 1 || p->n_ctx > p->table_stride * p->block_rows))
        return ig_error(IG_E_INTERNAL, "flash attention: variable length needs a paged cache, "
                        "1 .. 65535 sequences (%lld) and tables covering n_ctx (table stride "
                        "%lld, n_ctx %lld)", (long long)p->n_seqs, (long long)p->table_stride,
                        (long long)p->n_ctx);
    int64_t strides[] = {p->q_row_stride,  p->q_head_stride,  p->k_row_stride,
                         p->k_head_stride, p->v_row_stride,   p->v_head_stride,
                         p->o_row_stride,  p->o_head_stride,  p->cache_row_stride,
                         p->cache_head_stride, p->block_table ? p->cache_block_stride : 8};
    for (size_t i = 0; i < sizeof strides / sizeof strides[0]; i++)
        if (strides[i] % 8)
            return ig_error(IG_E_INTERNAL, "flash attention: stride %zu = %lld is not a "
                            "multiple of 8 elements", i, (long long)strides[i]);
    /* A tile's row offsets (up to MAX_TILE_ROWS rows from its 64-bit base)
     * are 32-bit in load_rows. */
    enum { MAX_TILE_ROWS = 256 };
    const int64_t row_strides[] = {p->q_row_stride, p->k_row_stride, p->v_row_stride,
                                   p->cache_row_stride};
    for (size_t i = 0; i < 4; i++)
        if (row_strides[i] > INT32_MAX / MAX_TILE_ROWS)
            return ig_error(IG_E_INTERNAL, "flash attention: row stride %lld elements is over "
                            "the kernel's 32-bit tile offsets", (long long)row_strides[i]);
    const int v = pick_variant(p, cc, have_sm90a);
    if (v == PREFILL_ATTN_AUTO)
        return IG_E_INTERNAL;
    if (!prefill_attn_variant_supports(v, p->head_dim))
        return ig_error(IG_E_INTERNAL, "flash attention: variant %s is not built for head_dim "
                        "%lld", variants[v].name, (long long)p->head_dim);
    if (p->window && !windows(v))
        return ig_error(IG_E_INTERNAL, "flash attention: variant %s has no sliding window "
                        "(the mma.sync and ws variants do)", variants[v].name);
    if (p->sinks && !sinks(v))
        return ig_error(IG_E_INTERNAL, "flash attention: variant %s has no attention sinks "
                        "(the mma.sync variants do)", variants[v].name);
    if (quant_pool(p) && (variants[v].isa != PREFILL_ATTN_ISA_MMA || !p->block_table ||
                          p->dtype != PREFILL_ATTN_F16 ||
                          p->cache_k_dtype < 0 || p->cache_k_dtype > 2 ||
                          p->cache_v_dtype < 0 || p->cache_v_dtype > 2))
        return ig_error(IG_E_INTERNAL, "flash attention: variant %s reads no quantized pool "
                        "(the mma.sync variants do, paged, f16)",
                        variants[v].name);
    if (p->block_table && !pages(v))
        return ig_error(IG_E_INTERNAL, "flash attention: variant %s reads no paged cache "
                        "(the mma.sync variants and the ws ones with tiles of whole "
                        "64-position blocks do)", variants[v].name);
    if (p->seqs && !varlen(v, p))
        return ig_error(IG_E_INTERNAL, "flash attention: variant %s takes no variable-length "
                        "sequences%s (the mma.sync variants do, and the ws ones with tiles of "
                        "whole 64-position blocks at head dims 64 and 128, sequences 16-byte "
                        "aligned)", variants[v].name,
                        variants[v].isa == PREFILL_ATTN_ISA_WS ? " here" : "");
    const struct variant_row *r = &variants[v];
    t->variant = v;
    t->block_m = r->block_m;
    t->block_n = r->block_n;
    t->warps = r->warps;
    t->m_tiles = r->m_tiles;
    t->q_in_regs = p->head_dim <= r->q_regs_max_hd;
    t->isa = r->isa;
    t->stages = r->stages;
    t->n_q_tiles = (int)((p->n_tokens + t->block_m - 1) / t->block_m);
    /* Q tile plus the stages of K and V tiles, 2-byte elements; the wgmma
     * kernels align their tiles to 1024 bytes of shared address (the
     * 128-byte swizzle's period) inside a slightly larger area, the ws
     * kernel after its mbarriers (at most 128 bytes). */
    t->smem_bytes = (size_t)(t->block_m + 2 * r->stages * t->block_n) * (size_t)p->head_dim * 2 +
                    (r->isa == PREFILL_ATTN_ISA_WGMMA ? 1024
                     : r->isa == PREFILL_ATTN_ISA_WS  ? 1024 + 128
                                                      : 0);
    /* The ws kernel's own O area where it fits (PREFILL_ATTN_WS_OWN_O). */
    if (r->isa == PREFILL_ATTN_ISA_WS &&
        PREFILL_ATTN_WS_OWN_O(t->block_m, t->block_n, r->stages, p->head_dim))
        t->smem_bytes += (size_t)t->block_m * (size_t)p->head_dim * 2;
    return 0;
}

int prefill_attn_choose(const struct prefill_attn_params *p, struct prefill_attn_tile *t)
{
    return prefill_attn_choose_for(p, 0, 1, t);
}
