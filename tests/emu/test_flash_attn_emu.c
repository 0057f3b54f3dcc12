/* tests/emu/test_flash_attn_emu.c: the prefill attention kernel
 * (prefill/flash_attn.cu) run by the CPU emulator, and its CPU twin
 * (prefill_attn_ref), against fp64 over ragged shapes: n = 1, 17, 64, 65,
 * 300, 1024; pos0 = 0 and > 0; GQA ratios 1, 3, 4, 8; head_dim 64 and 128;
 * bf16 and f16. Each must stay within twice the naive same-precision error
 * (defined in attn_case.h), write every output element (NaN sentinels), touch
 * exactly the chunk's cache rows (guard bands), and agree on the log-sum-exp.
 * The small n run every combination of n, pos0, ratio and head dim, each
 * in one dtype (every pair of those values meets both dtypes); n = 300 and
 * 1024 a few combinations (emulation under ASan costs ~10^4x the GPU).
 * IGNITE_EMU_FULL=1 runs the full product, both dtypes, on every n.
 * That is for the chooser's variant (PREFILL_ATTN_DEFAULT_VARIANT(hd), or the one
 * IGNITE_FLASH_VARIANT names); with the arguments --variant NAME that
 * variant of PREFILL_ATTN_VARIANTS runs a reduced list instead (one ctest
 * entry per other variant, test_flash_attn_emu_NAME; the ws variants add
 * head dim 256, windows, persistent blocks and paged caches; the mma.sync
 * variants built for head dim 256 add it, and each head dim's default
 * (256's included) adds windows, the cache tiles wholly behind every window
 * NaN so that computing on one shows; the mma.sync variants add a paged
 * cache and variable-length calls: several sequences of different rows and
 * pos0 in one call over a shuffled pool, attn_varlen in attn_case.h,
 * windows on each head dim's default). The chooser's pick by
 * measured speed is checked on a table of the test's own. gpt-oss's
 * attention sinks: a few cases with a sink per query head (run_sink_cases).
 * Head dim 512 on the variant built for it (run_512_cases). Under
 * IGNITE_PDL=1 (run_pdl_cases: a variant of each kernel, mma.sync, wgmma
 * and ws, paged where it reads a pool) the plain launch's o, lse and caches
 * bit for bit with q, k, v, the caches and the table hidden until each
 * block's wait (tests/emu/pdl_hide.h). Label emu. */
#include "tests/emu/attn_case.h"
#include "tests/emu/pdl_hide.h"
#include "tests/test.h"

#include "core/timer.h"
#include "kvcache/kv_devq.h"

#include <stdlib.h>

typedef int (*attn_fn)(const struct prefill_attn_params *p);

/* The emulated kernel as an attn_fn (the stream is unused there). */
static int emu_entry(const struct prefill_attn_params *p)
{
    return prefill_attn_emu(p, NULL);
}

void test_emu_set_seed(uint64_t seed);         /* emu_knobs.cc */
uint64_t test_emu_ldmatrix_conflicts(void); /* emu_knobs.cc */

void test_emu_set_sm_count(int n);            /* emu_knobs.cc */
uint64_t test_emu_tma_stores(void);           /* emu_knobs.cc */

/* The ws variants' work counter (p.tile_counter), one for every run as a
 * graph would replay it: each launch must leave it zero, or the next one
 * takes too few items (NaN sentinels left). ws_static: the runs that take
 * the static schedule instead (no counter). */
static uint32_t ws_tiles[2];
static int ws_static;

/* Whether p runs on the ws kernel (its tiles in *t), and then its counter
 * (unless ws_static). */
static int ws_schedule(struct prefill_attn_params *p, struct prefill_attn_tile *t)
{
    if (prefill_attn_choose(p, t) != 0 || t->isa != PREFILL_ATTN_ISA_WS)
        return 0;
    p->tile_counter = ws_static ? NULL : ws_tiles;
    return 1;
}

/* After a ws launch: the counter back at zero. */
static void check_ws_counter(const char *name)
{
    CHECKF(ws_tiles[0] == 0 && ws_tiles[1] == 0, "%s: the work counter left at %u, %u", name,
           ws_tiles[0], ws_tiles[1]);
    ws_tiles[0] = ws_tiles[1] = 0;
}

/* A run's own copies of the case's outputs (o, lse as initialised) and
 * caches (as before any run), so every run starts from the same state. */
struct fresh {
    uint16_t *o, *kc, *vc;
    float *lse;
};

static struct fresh fresh_outputs(const struct attn_case *c)
{
    size_t cb = (c->cache_elems * 2 + 63) / 64 * 64;
    struct fresh f = {
        .o = (uint16_t *)aligned_alloc(64, (c->o_elems * 2 + 63) / 64 * 64),
        .kc = (uint16_t *)aligned_alloc(64, cb),
        .vc = (uint16_t *)aligned_alloc(64, cb),
        .lse = (float *)malloc(c->lse_elems * sizeof(float)),
    };
    memcpy(f.o, c->o, c->o_elems * 2);
    memcpy(f.lse, c->lse, c->lse_elems * sizeof(float));
    memcpy(f.kc, c->kc0, c->cache_elems * 2);
    memcpy(f.vc, c->vc0, c->cache_elems * 2);
    return f;
}

static void fresh_free(struct fresh *f)
{
    free(f->o);
    free(f->lse);
    free(f->kc);
    free(f->vc);
}

/* Runs fn on fresh copies of the case's outputs and caches and checks it. */
static void run_one(struct attn_case *c, const struct attn_ref *ref, attn_fn fn,
                    const char *who, int variant)
{
    struct fresh f = fresh_outputs(c);
    uint16_t *o = f.o, *kc = f.kc, *vc = f.vc;
    float *lse = f.lse;
    struct prefill_attn_params p = attn_case_params(c, c->qkv, kc, vc, o, lse);
    p.variant = variant;
    char name[160];
    attn_case_name(c, name, sizeof name);
    if (variant != PREFILL_ATTN_AUTO) {
        size_t len = strlen(name);
        snprintf(name + len, sizeof name - len, " %s", prefill_attn_variant_name(variant));
    }
    struct prefill_attn_tile t;
    const int ws = fn == emu_entry && ws_schedule(&p, &t);
    int rc = fn(&p);
    CHECKF(rc == 0, "%s %s: returned %d", who, name, rc);
    if (ws && rc == 0) {
        /* Every item once: all O written (the sentinels below), and no
         * more stores than one per consumer warpgroup and 64 columns. */
        check_ws_counter(name);
        const uint64_t want =
            (uint64_t)t.n_q_tiles * (uint64_t)c->n_head * (uint64_t)(t.warps / 4 - 1) *
            (uint64_t)(c->hd / 64);
        CHECKF(test_emu_tma_stores() == want, "%s %s: %llu O stores, not %llu", who, name,
               (unsigned long long)test_emu_tma_stores(), (unsigned long long)want);
    }
    if (fn == emu_entry) /* the swizzled layout must be conflict-free */
        CHECKF(test_emu_ldmatrix_conflicts() == 0, "%s: %llu ldmatrix bank conflicts", name,
               (unsigned long long)test_emu_ldmatrix_conflicts());
    if (rc == 0) {
        struct attn_err e;
        attn_errors(c, ref, o, lse, &e);
        int bad = attn_check_memory(c, o, lse, kc, vc, who);
        CHECKF(bad == 0, "%s %s: %d sentinel/cache violations", who, name, bad);
        CHECKF(e.o_max <= 2 * ref->naive + 1e-7, "%s %s: max |O err| %.3g > 2 x naive %.3g",
               who, name, e.o_max, ref->naive);
        CHECKF(e.lse_max <= 1e-3, "%s %s: max |lse err| %.3g", who, name, e.lse_max);
        if (getenv("IGNITE_TEST_VERBOSE"))
            fprintf(stderr, "%-4s %-40s O err %.3g (naive %.3g) lse err %.3g\n", who, name,
                    e.o_max, ref->naive, e.lse_max);
    }
    fresh_free(&f);
}

/* With a window over a contiguous cache, on the mma.sync kernel (its K/V
 * tiles start at key 0): the cache rows of the tiles wholly behind every
 * query's window become NaN (ATTN_SENTINEL), so a kernel that computed on
 * them (a masked P times NaN V) would write NaN. (The ws kernel's cache
 * tiles end at pos0 and it computes on the masked rows of a tile the window
 * edge crosses: a cache must keep those finite.) */
static void poison_behind_window(struct attn_case *c, int variant)
{
    struct prefill_attn_params p = attn_case_params(c, c->qkv, c->kc0, c->vc0, c->o, c->lse);
    struct prefill_attn_tile t;
    p.variant = variant;
    if (prefill_attn_choose(&p, &t) != 0 || t.isa != PREFILL_ATTN_ISA_MMA)
        return;
    const int64_t first = c->pos0 - c->window + 1;
    const int64_t end = first > 0 ? first / t.block_n * t.block_n : 0;
    for (int64_t hk = 0; hk < c->n_head_kv; hk++)
        for (int64_t pos = 0; pos < end; pos++) {
            size_t i = ATTN_GUARD + (size_t)attn_cache_at(c, hk, pos);
            attn_fill16(c->kc0 + i, (size_t)c->hd, ATTN_SENTINEL);
            attn_fill16(c->vc0 + i, (size_t)c->hd, ATTN_SENTINEL);
        }
}

/* gpt-oss's sinks for the cases run while it is set (NULL: none): a logit
 * per query head, up to 16 heads. */
static const float *case_sinks;

/* The case on the CPU twin and on the emulated kernel (variant, or AUTO),
 * with a window and a paged cache if asked. */
static void run_case_p(int64_t n, int64_t pos0, int64_t ratio, int64_t hd, int dtype,
                       int variant, int64_t window, int paged)
{
    struct attn_case c;
    memset(&c, 0, sizeof c);
    c.n = n;
    c.pos0 = pos0;
    c.n_head_kv = ratio == 8 ? 1 : 2; /* several KV groups, except for the widest */
    c.n_head = ratio * c.n_head_kv;
    c.hd = hd;
    c.dtype = dtype;
    c.window = window;
    c.paged = paged;
    c.sinks = case_sinks;
    c.seed = (uint64_t)(n * 131 + pos0 * 7 + ratio * 3 + hd + dtype + window * 11);
    attn_case_init(&c);
    struct attn_ref ref;
    attn_reference(&c, &ref);
    if (window > 0 && !paged)
        poison_behind_window(&c, variant);
    run_one(&c, &ref, prefill_attn_ref, "ref", PREFILL_ATTN_AUTO);
    test_emu_set_seed(c.seed); /* a different barrier order per case */
    run_one(&c, &ref, emu_entry, "emu", variant);
    attn_ref_free(&ref);
    attn_case_free(&c);
}

static void run_case_w(int64_t n, int64_t pos0, int64_t ratio, int64_t hd, int dtype,
                       int variant, int64_t window)
{
    run_case_p(n, pos0, ratio, hd, dtype, variant, window, 0);
}

static void run_case_v(int64_t n, int64_t pos0, int64_t ratio, int64_t hd, int dtype,
                       int variant)
{
    run_case_w(n, pos0, ratio, hd, dtype, variant, 0);
}

static void run_case(int64_t n, int64_t pos0, int64_t ratio, int64_t hd, int dtype)
{
    run_case_v(n, pos0, ratio, hd, dtype, PREFILL_ATTN_AUTO);
}

/* A variable-length case (attn_varlen) on the CPU twin and the emulated
 * kernel: sequences of n_rows[i] rows at pos0[i], each within twice its
 * own naive error, the pool and the gap rows checked. */
static void run_varlen(int n_seqs, const int32_t *n_rows, const int32_t *pos0, int64_t ratio,
                       int64_t hd, int dtype, int variant, int64_t window)
{
    struct attn_varlen vl;
    memset(&vl, 0, sizeof vl);
    vl.n_seqs = n_seqs;
    for (int i = 0; i < n_seqs; i++)
        vl.n_rows[i] = n_rows[i], vl.pos0[i] = pos0[i];
    vl.n_head_kv = ratio == 8 ? 1 : 2;
    vl.n_head = ratio * vl.n_head_kv;
    vl.hd = hd, vl.dtype = dtype, vl.window = window;
    vl.seed = (uint64_t)(n_rows[0] * 131 + pos0[n_seqs - 1] * 7 + ratio * 3 + hd + dtype +
                         window * 11 + n_seqs);
    attn_varlen_init(&vl);
    vl.c.sinks = case_sinks;
    for (int i = 0; i < n_seqs; i++)
        vl.one[i].sinks = case_sinks;
    struct attn_ref ref[ATTN_MAX_SEQS];
    attn_varlen_reference(&vl, ref);
    char name[200];
    attn_varlen_name(&vl, name, sizeof name);
    if (variant != PREFILL_ATTN_AUTO) {
        size_t len = strlen(name);
        snprintf(name + len, sizeof name - len, " %s", prefill_attn_variant_name(variant));
    }
    const struct attn_case *c = &vl.c;
    for (int who = 0; who < 2; who++) {
        const char *tag = who ? "emu" : "ref";
        struct fresh f = fresh_outputs(c);
        uint16_t *o = f.o, *kc = f.kc, *vc = f.vc;
        float *lse = f.lse;
        struct prefill_attn_params p =
            attn_varlen_params(&vl, c->qkv, kc, vc, o, lse, vl.seqs, vl.tables);
        int rc;
        if (who) {
            p.variant = variant;
            struct prefill_attn_tile t;
            const int ws = ws_schedule(&p, &t);
            test_emu_set_seed(vl.seed);
            rc = prefill_attn_emu(&p, NULL);
            if (ws && rc == 0)
                check_ws_counter(name);
        } else {
            rc = prefill_attn_ref(&p);
        }
        CHECKF(rc == 0, "%s %s: returned %d", tag, name, rc);
        if (rc == 0) {
            int bad = attn_varlen_check_memory(&vl, o, lse, kc, vc, tag);
            CHECKF(bad == 0, "%s %s: %d sentinel/pool violations", tag, name, bad);
            for (int i = 0; i < n_seqs; i++) {
                struct attn_err e;
                attn_varlen_errors(&vl, i, &ref[i], o, lse, &e);
                CHECKF(e.o_max <= 2 * ref[i].naive + 1e-7,
                       "%s %s: sequence %d: max |O err| %.3g > 2 x naive %.3g", tag, name, i,
                       e.o_max, ref[i].naive);
                CHECKF(e.lse_max <= 1e-3, "%s %s: sequence %d: max |lse err| %.3g", tag, name,
                       i, e.lse_max);
                if (getenv("IGNITE_TEST_VERBOSE"))
                    fprintf(stderr, "%-4s %s seq %d: O err %.3g (naive %.3g) lse err %.3g\n",
                            tag, name, i, e.o_max, ref[i].naive, e.lse_max);
            }
        }
        fresh_free(&f);
    }
    for (int i = 0; i < n_seqs; i++)
        attn_ref_free(&ref[i]);
    attn_varlen_free(&vl);
}

/* The varlen shapes (GQA 2, two KV heads): a 1-row sequence deep in its
 * cache, one at pos0 0,
 * pos0 not a multiple of 64 with several query tiles, a short one whose
 * chunk starts inside a block; the window case adds a window shorter than
 * the cached part. */
static void run_varlen_cases_window(int64_t hd, int dtype, int variant)
{
    static const int32_t wn[] = {40, 1, 100}, wp[] = {150, 77, 20};
    run_varlen(3, wn, wp, 2, hd, dtype == PREFILL_ATTN_F16 ? PREFILL_ATTN_BF16 : PREFILL_ATTN_F16,
               variant, 64);
}

static void run_varlen_cases(int64_t hd, int dtype, int variant, int window)
{
    static const int32_t n_rows[] = {1, 70, 130, 5}, pos0[] = {100, 0, 37, 190};
    run_varlen(4, n_rows, pos0, 2, hd, dtype, variant, 0);
    if (window)
        run_varlen_cases_window(hd, dtype, variant);
}

/* The pick by measured speed, on a table of the test's own: the nearest
 * measured n, the fastest there, only what fits the device, the build, the
 * head dim and the window. */
static void check_pick_measured(struct prefill_attn_params p)
{
    static const struct prefill_attn_speed rows[] = {
        {"m64w4", 90, 128, 512, 10.0f},     {"m128w8", 90, 128, 512, 20.0f},
        {"m64w4", 90, 128, 4096, 30.0f},    {"m128w8", 90, 128, 4096, 25.0f},
        {"ws128n128", 90, 128, 4096, 50.0f}, {"m128w4", 90, 64, 512, 5.0f},
        {"ws128n64", 90, 256, 1024, 40.0f}, {"m64w4", 80, 128, 4096, 35.0f},
        {"no-such-variant", 90, 128, 4096, 999.0f},
    };
    const size_t nr = sizeof rows / sizeof rows[0];
    p.head_dim = 128, p.pos0 = 0, p.n_tokens = 17, p.window = 0;
    CHECK(prefill_attn_pick_measured(rows, nr, &p, 90, 1) == PREFILL_ATTN_M128W8);
    p.pos0 = 1000, p.n_tokens = 2000; /* 3000 keys: nearest 4096 */
    CHECK(prefill_attn_pick_measured(rows, nr, &p, 90, 1) == PREFILL_ATTN_WS128N128);
    CHECK(prefill_attn_pick_measured(rows, nr, &p, 90, 0) == PREFILL_ATTN_M64W4);
    CHECK(prefill_attn_pick_measured(rows, nr, &p, 80, 1) == PREFILL_ATTN_M64W4);
    CHECK(prefill_attn_pick_measured(rows, nr, &p, 0, 1) == PREFILL_ATTN_WS128N128);
    p.window = 512; /* the mma.sync and ws variants have windows, the wgmma ones not */
    CHECK(prefill_attn_pick_measured(rows, nr, &p, 90, 1) == PREFILL_ATTN_WS128N128);
    CHECK(prefill_attn_pick_measured(rows, nr, &p, 90, 0) == PREFILL_ATTN_M64W4);
    CHECK(prefill_attn_pick_measured(rows, nr, &p, 80, 1) == PREFILL_ATTN_M64W4);
    p.window = 0, p.head_dim = 256;
    CHECK(prefill_attn_pick_measured(rows, nr, &p, 90, 1) == PREFILL_ATTN_WS128N64);
    p.head_dim = 64, p.pos0 = 0, p.n_tokens = 100000;
    CHECK(prefill_attn_pick_measured(rows, nr, &p, 90, 1) == PREFILL_ATTN_M128W4);
    CHECK(prefill_attn_pick_measured(rows, nr, &p, 70, 1) == PREFILL_ATTN_AUTO);
}

/* The chooser honours p->variant and IGNITE_FLASH_VARIANT, picks by the
 * built-in table of measured speeds, falls back to what fits (head dim 256:
 * PREFILL_ATTN_DEFAULT_VARIANT(256), windows: an mma.sync or ws variant,
 * on any device) and rejects unknown names, head dims a variant is not
 * built for, windows on a wgmma variant and devices nothing runs on. */
static void check_chooser(void)
{
    struct attn_case c;
    memset(&c, 0, sizeof c);
    c.n = 17, c.pos0 = 0, c.n_head = 2, c.n_head_kv = 1, c.hd = 128, c.dtype = PREFILL_ATTN_BF16;
    c.seed = 1;
    attn_case_init(&c);
    struct prefill_attn_params p = attn_case_params(&c, c.qkv, c.kc, c.vc, c.o, c.lse);
    struct prefill_attn_tile t;
    check_pick_measured(p);
    const char *env = getenv("IGNITE_FLASH_VARIANT");
    if (!env || !*env) {
        size_t n_rows;
        const struct prefill_attn_speed *table = prefill_attn_speed_table(&n_rows);
        const int want = prefill_attn_pick_measured(table, n_rows, &p, 0, 1);
        CHECK(prefill_attn_choose(&p, &t) == 0 &&
              t.variant == (want ? want : PREFILL_ATTN_DEFAULT_VARIANT(128)));
        setenv("IGNITE_FLASH_VARIANT", "m128w8", 1);
        CHECK(prefill_attn_choose(&p, &t) == 0 && t.variant == PREFILL_ATTN_M128W8 &&
              t.block_m == 128 && t.warps == 8);
        setenv("IGNITE_FLASH_VARIANT", "no-such-variant", 1);
        CHECK(prefill_attn_choose(&p, &t) != 0);
        unsetenv("IGNITE_FLASH_VARIANT");
        struct prefill_attn_params q = p;
        q.window = 64; /* never a wgmma variant; the mma.sync ones on any device */
        CHECK(prefill_attn_choose(&q, &t) == 0 && t.isa != PREFILL_ATTN_ISA_WGMMA);
        CHECK(prefill_attn_choose_for(&q, 80, 1, &t) == 0 && t.isa == PREFILL_ATTN_ISA_MMA);
        CHECK(prefill_attn_choose_for(&q, 90, 0, &t) == 0 && t.isa == PREFILL_ATTN_ISA_MMA);
        q.window = 0, q.head_dim = 256; /* no measured row: the default, on any device */
        CHECK(prefill_attn_choose(&q, &t) == 0 &&
              t.variant == PREFILL_ATTN_DEFAULT_VARIANT(256));
        CHECK(prefill_attn_choose_for(&q, 80, 1, &t) == 0 && t.isa == PREFILL_ATTN_ISA_MMA);
        q.variant = PREFILL_ATTN_M128W4N48; /* not built for 256 */
        CHECK(prefill_attn_choose(&q, &t) != 0);
        q.variant = PREFILL_ATTN_AUTO, q.head_dim = 512; /* m64w4n16 only, any device */
        q.dtype = PREFILL_ATTN_F16;
        CHECK(prefill_attn_choose_for(&q, 80, 0, &t) == 0 && t.variant == PREFILL_ATTN_M64W4N16 &&
              t.smem_bytes <= 163 * 1024);
        CHECK(prefill_attn_choose_for(&q, 90, 1, &t) == 0 && t.variant == PREFILL_ATTN_M64W4N16);
        q.dtype = PREFILL_ATTN_BF16; /* 512 is built for f16 only */
        CHECK(prefill_attn_choose(&q, &t) != 0);
        q.dtype = PREFILL_ATTN_F16;
        q.variant = PREFILL_ATTN_M64W4N32H; /* not built for 512 */
        CHECK(prefill_attn_choose(&q, &t) != 0);
        q.variant = PREFILL_ATTN_AUTO, q.n_head = 32768, q.n_head_kv = 1; /* grid y 65536 */
        CHECK(prefill_attn_choose(&q, &t) != 0);
        q.n_head = p.n_head, q.n_head_kv = p.n_head_kv, q.head_dim = 256, q.dtype = p.dtype;
        q.variant = PREFILL_ATTN_AUTO;
        /* A paged cache: an mma.sync variant or a ws one with whole-block
         * tiles, never a wgmma one; blocks of 64. */
        static const int32_t blocks[] = {3, 1, 2, 0, 3, 1};
        q = p;
        q.block_table = blocks, q.block_rows = 64, q.n_blocks = 4;
        q.cache_head_stride = 64 * 128, q.cache_block_stride = 64 * 128;
        CHECK(prefill_attn_choose(&q, &t) == 0 && t.isa != PREFILL_ATTN_ISA_WGMMA);
        CHECK(prefill_attn_choose_for(&q, 80, 0, &t) == 0 && t.isa == PREFILL_ATTN_ISA_MMA);
        q.variant = PREFILL_ATTN_WS128N128;
        CHECK(prefill_attn_choose(&q, &t) == 0);
        q.variant = PREFILL_ATTN_WS128N160; /* 160-key tiles are not whole blocks */
        CHECK(prefill_attn_choose(&q, &t) != 0);
        q.variant = PREFILL_ATTN_WG128N64;
        CHECK(prefill_attn_choose(&q, &t) != 0);
        q.variant = PREFILL_ATTN_M128W4N48; /* 48-key tiles across blocks */
        CHECK(prefill_attn_choose(&q, &t) == 0);
        q.variant = PREFILL_ATTN_AUTO, q.block_rows = 32;
        CHECK(prefill_attn_choose(&q, &t) != 0);
        /* Variable length: the mma.sync variants and the ws ones of
         * whole-block tiles (where measured faster: the H200's table has
         * them first from 1024 keys), over a paged cache, each sequence's
         * tables covering n_ctx; the largest n_rows and pos0 need not fit
         * together (they are different sequences'). */
        static ATTN_ALIGN16 const struct prefill_attn_seq seqs[2] = {{0, 17, 100, 0},
                                                                    {17, 3, 0, 0}};
        q.block_rows = 64, q.seqs = seqs, q.n_seqs = 2, q.table_stride = 3;
        q.n_ctx = 192, q.n_tokens = 100, q.pos0 = 150;
        CHECK(prefill_attn_choose_for(&q, 80, 0, &t) == 0 && t.isa == PREFILL_ATTN_ISA_MMA &&
              t.n_q_tiles == (int)((100 + t.block_m - 1) / t.block_m));
        CHECK(prefill_attn_choose(&q, &t) == 0 &&
              (t.isa == PREFILL_ATTN_ISA_MMA ||
               (t.isa == PREFILL_ATTN_ISA_WS && t.block_n % 64 == 0)));
        q.variant = PREFILL_ATTN_M128W4N48;
        CHECK(prefill_attn_choose(&q, &t) == 0);
        q.variant = PREFILL_ATTN_WS128N128; /* the ws variants of whole-block tiles */
        CHECK(prefill_attn_choose(&q, &t) == 0 && t.isa == PREFILL_ATTN_ISA_WS);
        q.variant = PREFILL_ATTN_WS192N64; /* built for head dim 64 only */
        CHECK(prefill_attn_choose(&q, &t) != 0);
        q.head_dim = 64;
        CHECK(prefill_attn_choose(&q, &t) == 0);
        q.head_dim = 128;
        q.variant = PREFILL_ATTN_WS128N160; /* 160-key tiles are not whole blocks */
        CHECK(prefill_attn_choose(&q, &t) != 0);
        q.variant = PREFILL_ATTN_WS128N64, q.head_dim = 256; /* not at 256 (it spilled) */
        CHECK(prefill_attn_choose(&q, &t) != 0);
        q.head_dim = 128;
        CHECK(prefill_attn_choose(&q, &t) == 0);
        static ATTN_ALIGN16 const struct prefill_attn_seq seqs3[3] = {{0, 17, 100, 0},
                                                                     {17, 3, 0, 0}};
        q.seqs = (const struct prefill_attn_seq *)((const char *)seqs3 + 8); /* not 16-aligned */
        CHECK(prefill_attn_choose(&q, &t) != 0);
        q.variant = PREFILL_ATTN_AUTO; /* an mma.sync variant then */
        CHECK(prefill_attn_choose(&q, &t) == 0 && t.isa == PREFILL_ATTN_ISA_MMA);
        q.seqs = seqs;
        q.variant = PREFILL_ATTN_WG128N64;
        CHECK(prefill_attn_choose(&q, &t) != 0);
        q.variant = PREFILL_ATTN_AUTO;
        struct prefill_attn_params r = q;
        r.n_tokens = 193; /* more rows than the tables hold */
        CHECK(prefill_attn_choose(&r, &t) != 0);
        r = q, r.table_stride = 2; /* tables shorter than n_ctx */
        CHECK(prefill_attn_choose(&r, &t) != 0);
        r = q, r.n_seqs = 0;
        CHECK(prefill_attn_choose(&r, &t) != 0);
        r = q, r.n_seqs = 65536;
        CHECK(prefill_attn_choose(&r, &t) != 0);
        r = q, r.block_table = NULL; /* varlen needs the paged cache */
        CHECK(prefill_attn_choose(&r, &t) != 0);
        CHECK(prefill_attn_ref(&r) != 0);
    }
    p.variant = PREFILL_ATTN_M128W4N32;
    CHECK(prefill_attn_choose(&p, &t) == 0 && t.block_n == 32 && t.m_tiles == 2 &&
          t.q_in_regs == 0 && t.n_q_tiles == 1);
    p.window = 16; /* a variant without windows, forced */
    p.variant = PREFILL_ATTN_WG128N64;
    CHECK(prefill_attn_choose(&p, &t) != 0);
    p.window = 0;
    p.variant = PREFILL_ATTN_N_VARIANTS;
    CHECK(prefill_attn_choose(&p, &t) != 0);
    /* Row strides a tile's 32-bit offsets cannot step are refused; long
     * sequences at ordinary strides are not. */
    p.variant = PREFILL_ATTN_AUTO;
    struct prefill_attn_params wide = p;
    wide.k_row_stride = ((int64_t)1 << 31) / 16 + 8;
    CHECK(prefill_attn_choose(&wide, &t) != 0);
    wide = p;
    wide.cache_row_stride = (int64_t)1 << 32;
    CHECK(prefill_attn_choose(&wide, &t) != 0);
    wide = p;
    wide.n_tokens = wide.n_ctx = (int64_t)1 << 20, wide.q_row_stride = 4096;
    CHECK(prefill_attn_choose(&wide, &t) == 0);
    for (int v = PREFILL_ATTN_AUTO + 1; v < PREFILL_ATTN_N_VARIANTS; v++) {
        CHECK(prefill_attn_variant_find(prefill_attn_variant_name(v)) == v);
        p.variant = v;
        int ok = prefill_attn_choose(&p, &t) == 0;
        CHECKF(ok == prefill_attn_variant_supports(v, 128), "%s", prefill_attn_variant_name(v));
    }
    attn_case_free(&c);
}

/* One variant on a reduced list: ragged n, pos0 = 0 and > 0, several query
 * and K/V tiles, every GQA ratio, each head dim it is built for and both
 * types. The ws variants also K/V tiles wholly from the cache and the chunk
 * with a grid of 1 SM (a block runs several work items: ring phases and the
 * Q buffer reused) and 2 SMs, the items drawn from the work counter (one
 * case on the static schedule; each launch must store every item's O once
 * and leave the counter zero); the two that the chooser falls back to
 * (ws128n128, and ws128n64 at head dim 256) also sliding windows and paged
 * caches (whole blocks, the block holding pos0, windows over the pool): the
 * other ws variants share all that code, so their list stays short (the CI
 * runs this twice under ASan). The mma.sync variants that are a head dim's
 * default also sliding windows. */
/* Head dim 512 (Gemma 4's global layers; 8 query heads on 1 KV head, or 2
 * on 2): a chunk after a cache, a window (tiles behind it NaN), a paged
 * prefix behind a window, a variable-length call; f16 only (bf16 refused).
 * Tiny shapes: a case at 512 costs the emulator 4 to 8 times one at 128. */
static void run_512_cases(int v)
{
    run_case_v(17, 37, 8, 512, PREFILL_ATTN_F16, v);
    run_case_w(40, 70, 2, 512, PREFILL_ATTN_F16, v, 24);
    run_case_p(20, 70, 8, 512, PREFILL_ATTN_F16, v, 32, 1);
    static const int32_t n_rows[] = {1, 20}, pos0[] = {70, 3};
    run_varlen(2, n_rows, pos0, 2, 512, PREFILL_ATTN_F16, v, 0);
}

/* A variant no GPU has timed yet (ws192n128, docs/gpu.md) is run only when
 * forced: while the built-in table has no row for it, the chooser's pick
 * at its head dim is never it, at any n of the GPU check's sweep, on an
 * H100/H200 with the sm_90a kernels or on any device. */
static void check_not_picked_untimed(int v, int64_t hd)
{
    size_t n_rows;
    const struct prefill_attn_speed *table = prefill_attn_speed_table(&n_rows);
    for (size_t i = 0; i < n_rows; i++)
        if (strcmp(table[i].variant, prefill_attn_variant_name(v)) == 0)
            return; /* timed: the chooser may take it where it was fastest */
    struct attn_case c;
    memset(&c, 0, sizeof c);
    c.n = 17, c.n_head = 4, c.n_head_kv = 1, c.hd = hd, c.dtype = PREFILL_ATTN_BF16, c.seed = 1;
    attn_case_init(&c);
    struct prefill_attn_params p = attn_case_params(&c, c.qkv, c.kc, c.vc, c.o, c.lse);
    struct prefill_attn_tile t;
    for (int64_t n = 1024; n <= 16384; n *= 2) {
        p.pos0 = n - p.n_tokens, p.n_ctx = n; /* pos0 + n_tokens: the table's n */
        CHECKF(prefill_attn_choose_for(&p, 90, 1, &t) == 0 && t.variant != v &&
                   prefill_attn_choose_for(&p, 0, 1, &t) == 0 && t.variant != v,
               "%s, untimed, picked at n %lld", prefill_attn_variant_name(v), (long long)n);
    }
    attn_case_free(&c);
}

static void run_variant(int v)
{
    int64_t t0 = ig_now_ns();
    if (v == PREFILL_ATTN_WS192N128 && !getenv("IGNITE_FLASH_VARIANT"))
        check_not_picked_untimed(v, 64);
    const int ws = prefill_attn_variant_isa(v) == PREFILL_ATTN_ISA_WS;
    if (prefill_attn_variant_supports(v, 512))
        run_512_cases(v);
    for (int64_t hd = 64; hd <= 256; hd *= 2) {
        if (!prefill_attn_variant_supports(v, hd))
            continue;
        const int dt = hd == 128 ? PREFILL_ATTN_F16 : PREFILL_ATTN_BF16;
        const int full = v == PREFILL_ATTN_WS128N128 || (v == PREFILL_ATTN_WS128N64 && hd == 256);
        run_case_v(1, 37, 8, hd, PREFILL_ATTN_BF16, v);
        ws_static = 1; /* the ws kernel without a counter: items b, b + grid, ... */
        run_case_v(17, 0, 3, hd, PREFILL_ATTN_F16, v);
        ws_static = 0;
        run_case_v(65, 37, 4, hd, dt, v);
        if (ws)
            test_emu_set_sm_count(2);
        run_case_v(300, 100, 1, hd, dt == PREFILL_ATTN_F16 ? PREFILL_ATTN_BF16 : PREFILL_ATTN_F16,
                   v);
        if (ws) {
            test_emu_set_sm_count(1);
            run_case_v(100, 200, 2, hd, dt, v);
            test_emu_set_sm_count(3);
        }
        /* Windows on the mma.sync kernel: each head dim's default (256's
         * included); a window shorter than a 16-key slice, one across tiles
         * with tiles wholly behind it, one with a cache. */
        if (!ws && v == PREFILL_ATTN_DEFAULT_VARIANT(hd)) {
            run_case_w(65, 37, 4, hd, dt, v, 13);
            run_case_w(300, 0, 2, hd, dt, v, 100);
            run_case_w(150, 200, 1, hd, PREFILL_ATTN_F16, v, 64);
        }
        /* Variable length over a paged cache on every mma.sync variant, on
         * the first head dim it is built for (48-key tiles straddle
         * blocks); each head dim's default also a one-sequence paged cache,
         * windows over the pool and a variable-length call with a window
         * (CI time: the other variants share that code). */
        const int mma = prefill_attn_variant_isa(v) == PREFILL_ATTN_ISA_MMA;
        const int first_hd = !prefill_attn_variant_supports(v, hd / 2);
        if (mma && v == PREFILL_ATTN_DEFAULT_VARIANT(hd)) {
            run_case_p(65, 37, 4, hd, dt, v, 0, 1);
            run_case_p(150, 200, 2, hd, PREFILL_ATTN_BF16, v, 64, 1);
            run_varlen_cases(hd, dt, v, 1);
        } else if (mma && first_hd) {
            run_varlen_cases(hd, dt, v, 0);
        }
        /* Variable length on every ws variant that reads the pool (head
         * dims 64 and 128), on the first head dim it is built for, a grid of
         * 2 SMs (blocks skip the items past their sequences' rows, several
         * items each); ws128n128 also a window, on 1 SM. */
        if (ws && first_hd && hd <= 128 && v != PREFILL_ATTN_WS128N160) {
            test_emu_set_sm_count(2);
            run_varlen_cases(hd, dt, v, 0);
            test_emu_set_sm_count(1);
            if (v == PREFILL_ATTN_WS128N128)
                run_varlen_cases_window(hd, dt, v);
            test_emu_set_sm_count(3);
        }
        if (ws && full) {
            run_case_w(300, 0, 2, hd, dt, v, 100);
            run_case_w(150, 200, 4, hd, PREFILL_ATTN_F16, v, 64);
            run_case_p(65, 37, 4, hd, dt, v, 0, 1);
            test_emu_set_sm_count(1);
            run_case_p(100, 200, 2, hd, PREFILL_ATTN_F16, v, 0, 1);
            test_emu_set_sm_count(3);
            run_case_p(150, 200, 4, hd, PREFILL_ATTN_BF16, v, 64, 1);
        }
    }
    fprintf(stderr, "variant %s: %.1f s\n", prefill_attn_variant_name(v),
            (double)(ig_now_ns() - t0) * 1e-9);
}

/* gpt-oss's sinks (head dim 64, 8 query heads a KV head, window 128 on
 * alternate layers): sinks below, near and above the scores on the chooser's
 * pick (an mma.sync variant: the only ones with sinks), a chunk after a
 * cache, a paged cache behind a window, a variable-length call with a
 * window; a forced wgmma or ws variant refused. */
static void run_sink_cases(void)
{
    static const float sinks[16] = {-2, 0, 1, 3, 5, -1, 2, 0.5f, -2, 0, 1, 3, 5, -1, 2, 0.5f};
    case_sinks = sinks;
    run_case(65, 37, 8, 64, PREFILL_ATTN_BF16);
    run_case_p(150, 200, 8, 64, PREFILL_ATTN_F16, PREFILL_ATTN_AUTO, 128, 1);
    static const int32_t n_rows[] = {1, 70, 5}, pos0[] = {100, 0, 190};
    run_varlen(3, n_rows, pos0, 4, 64, PREFILL_ATTN_F16, PREFILL_ATTN_AUTO, 128);
    struct attn_case c;
    memset(&c, 0, sizeof c);
    c.n = 17, c.n_head = 8, c.n_head_kv = 1, c.hd = 64, c.dtype = PREFILL_ATTN_F16, c.seed = 3;
    c.sinks = sinks;
    attn_case_init(&c);
    struct prefill_attn_params p = attn_case_params(&c, c.qkv, c.kc, c.vc, c.o, c.lse);
    struct prefill_attn_tile t;
    CHECK(prefill_attn_choose_for(&p, 90, 1, &t) == 0 && t.isa == PREFILL_ATTN_ISA_MMA);
    p.variant = PREFILL_ATTN_WS128N64;
    CHECKF(prefill_attn_choose(&p, &t) != 0, "ws128n64 took sinks");
    p.variant = PREFILL_ATTN_WG64N64;
    CHECKF(prefill_attn_choose(&p, &t) != 0, "wg64n64 took sinks");
    attn_case_free(&c);
    case_sinks = NULL;
}

static uint16_t f16_of(float x)
{
    return ig_f32_to_f16(x);
}

/* A quantized pool (kvcache/kv_devq.h; K of type kt, V of vt): n_seqs
 * sequences of n_rows[s] rows after pos0[s] cached positions, every row
 * (the chunk's too) already in the pool, read through shuffled tables. The
 * chooser's pick (mma.sync) against the twin reading the same blocks
 * (4e-3: the kernel rounds P to f16), the twin against f64 over the
 * dequantized values f16(d q) (1e-5); the pool unchanged (nothing
 * written); the twin reading K as f16 or V with the other quantized type
 * off the kernel; a forced ws variant refused. */
static void run_quant(int kt, int vt, int n_seqs, const int32_t *n_rows, const int32_t *pos0,
                      int64_t hd, uint64_t seed)
{
    enum { HKV = 2, H = 8, TS = 4 };
    uint64_t rng = seed;
    int64_t n = 0;
    struct prefill_attn_seq seqs[4];
    for (int s = 0; s < n_seqs; s++) {
        seqs[s] = (struct prefill_attn_seq){(int32_t)n, n_rows[s], pos0[s], 0};
        n += n_rows[s];
    }
    const int64_t head_stride = 64 * hd, block_stride = HKV * head_stride;
    const int64_t n_blocks = n_seqs * TS + 2;
    /* f16-sized: a mixed pool's f16 array, and the mutant reading K as f16 */
    const size_t bytes = (size_t)(2 * n_blocks * block_stride);
    unsigned char *kc = aligned_alloc(64, bytes), *vc = aligned_alloc(64, bytes);
    unsigned char *kc0 = malloc(bytes), *vc0 = malloc(bytes);
    const size_t qe = (size_t)(n * H * hd), ke = (size_t)(n * HKV * hd);
    uint16_t *q = aligned_alloc(64, (qe * 2 + 63) / 64 * 64);
    uint16_t *kv = aligned_alloc(64, (ke * 2 + 63) / 64 * 64);
    uint16_t *o = aligned_alloc(64, (qe * 2 + 63) / 64 * 64), *o_ref = malloc(qe * 2);
    int32_t table[4 * TS], ids[4 * TS + 2];
    memset(kc, 0xff, bytes); /* NaN scales everywhere no table reaches */
    memset(vc, 0xff, bytes);
    memset(kv, 0, ke * 2);
    for (size_t i = 0; i < qe; i++)
        q[i] = ig_f32_to_f16(2.0f * test_rand_f(&rng));
    for (int64_t i = 0; i < n_blocks; i++)
        ids[i] = (int32_t)i;
    for (int64_t i = n_blocks - 1; i > 0; i--) {
        const int64_t j = (int64_t)(test_rand_u64(&rng) % (uint64_t)(i + 1));
        const int32_t x = ids[i];
        ids[i] = ids[j], ids[j] = x;
    }
    memcpy(table, ids, sizeof(int32_t) * (size_t)(n_seqs * TS));
    for (int s = 0; s < n_seqs; s++)
        for (int64_t hk = 0; hk < HKV; hk++)
            for (int64_t j = 0; j < pos0[s] + n_rows[s]; j++)
                for (int c = 0; c < 2; c++) {
                    const int type = c ? vt : kt;
                    unsigned char *pool = c ? vc : kc;
                    const int64_t e = table[s * TS + j / 64] * block_stride + hk * head_stride;
                    float x[512];
                    for (int64_t d = 0; d < hd; d++)
                        x[d] = test_rand_f(&rng) * (d % 16 == 5 ? 4.0f : 1.0f);
                    if (type == KVQ_F16) {
                        for (int64_t d = 0; d < hd; d++) {
                            const uint16_t b = ig_f32_to_f16(x[d]);
                            memcpy(pool + 2 * (e + (j % 64) * hd + d), &b, 2);
                        }
                        continue;
                    }
                    for (int64_t b = 0; b < hd / 32; b++) {
                        uint8_t qb[32];
                        uint16_t db;
                        KVQ_QUANTIZE_BLOCK(type, x + 32 * b, qb, db, f16_of);
                        memcpy(pool + kvq_region(e) + kvq_quant_at(hd, j % 64, 32 * b), qb, 32);
                        memcpy(pool + kvq_region(e) + kvq_scale_at(hd, j % 64, 32 * b), &db, 2);
                    }
                }
    memcpy(kc0, kc, bytes);
    memcpy(vc0, vc, bytes);
    struct prefill_attn_params p = {
        .q = q, .k = kv, .v = kv, .k_cache = kc, .v_cache = vc, .o = o, .n_tokens = 0,
        .n_head = H, .n_head_kv = HKV, .head_dim = hd,
        .q_row_stride = H * hd, .q_head_stride = hd, .k_row_stride = HKV * hd,
        .k_head_stride = hd, .v_row_stride = HKV * hd, .v_head_stride = hd,
        .o_row_stride = H * hd, .o_head_stride = hd, .cache_row_stride = hd,
        .cache_head_stride = head_stride, .block_table = table, .block_rows = 64,
        .cache_block_stride = block_stride, .n_blocks = n_blocks, .n_ctx = TS * 64,
        .scale = 1.0f / sqrtf((float)hd), .dtype = PREFILL_ATTN_F16,
        .cache_k_dtype = kt, .cache_v_dtype = vt};
    if (n_seqs == 1) {
        p.n_tokens = n_rows[0];
        p.pos0 = pos0[0];
    } else {
        p.seqs = seqs, p.n_seqs = n_seqs, p.table_stride = TS;
        for (int s = 0; s < n_seqs; s++) {
            p.n_tokens = n_rows[s] > p.n_tokens ? n_rows[s] : p.n_tokens;
            p.pos0 = pos0[s] > p.pos0 ? pos0[s] : p.pos0;
        }
    }
    char name[96];
    snprintf(name, sizeof name, "quant pool k%d v%d seqs=%d hd=%lld", kt, vt, n_seqs,
             (long long)hd);
    struct prefill_attn_tile t;
    CHECKF(prefill_attn_choose_for(&p, 90, 1, &t) == 0 && t.isa == PREFILL_ATTN_ISA_MMA,
           "%s: AUTO did not fall back to mma.sync", name);
    struct prefill_attn_params pw = p;
    pw.variant = PREFILL_ATTN_WS128N64;
    CHECKF(prefill_attn_choose(&pw, &t) != 0, "%s: ws128n64 took a quantized pool", name);
    CHECKF(prefill_attn_emu(&p, NULL) == 0, "%s: emulated launch failed", name);
    CHECKF(!memcmp(kc, kc0, bytes) && !memcmp(vc, vc0, bytes), "%s: the pool was written", name);
    struct prefill_attn_params pr = p;
    pr.o = o_ref;
    CHECKF(prefill_attn_ref(&pr) == 0, "%s: ref failed", name);
    double worst = 0;
    for (size_t i = 0; i < qe; i++) {
        const double d = fabs((double)ig_f16_to_f32(o[i]) - ig_f16_to_f32(o_ref[i]));
        worst = d > worst || d != d ? d : worst;
    }
    CHECKF(worst <= 4e-3, "%s: kernel %.3g off the twin", name, worst);
    /* the twin against f64 over the blocks' values f16(d q), sequence 0 */
    {
        const int64_t rows = n_rows[0], base = pos0[0];
        double worst_ref = 0;
        for (int64_t i = 0; i < rows; i++)
            for (int64_t h = 0; h < H; h++) {
                const int64_t hk = h / (H / HKV);
                double mx = -INFINITY, sum = 0, acc[512] = {0}, w[512];
                for (int64_t j = 0; j <= base + i; j++) {
                    double dot = 0;
                    const int64_t e = table[j / 64] * block_stride + hk * head_stride;
                    for (int64_t d = 0; d < hd; d++) {
                        const unsigned char *r = kc + kvq_region(e);
                        const unsigned char *sc = r + kvq_scale_at(hd, j % 64, d);
                        const float kvv =
                            kt == KVQ_F16
                                ? ig_f16_to_f32((uint16_t)(kc[2 * (e + (j % 64) * hd + d)] |
                                                           kc[2 * (e + (j % 64) * hd + d) + 1] << 8))
                                : ig_f16_to_f32(ig_f32_to_f16(kvq_value(
                                      kt, r[kvq_quant_at(hd, j % 64, d)],
                                      ig_f16_to_f32((uint16_t)(sc[0] | sc[1] << 8)))));
                        dot += (double)ig_f16_to_f32(q[(i * H + h) * hd + d]) * kvv;
                    }
                    w[j] = dot * p.scale;
                    mx = w[j] > mx ? w[j] : mx;
                }
                for (int64_t j = 0; j <= base + i; j++) {
                    const double ex = exp(w[j] - mx);
                    const int64_t e = table[j / 64] * block_stride + hk * head_stride;
                    sum += ex;
                    for (int64_t d = 0; d < hd; d++) {
                        const unsigned char *r = vc + kvq_region(e);
                        const unsigned char *sc = r + kvq_scale_at(hd, j % 64, d);
                        const float vv =
                            vt == KVQ_F16
                                ? ig_f16_to_f32((uint16_t)(vc[2 * (e + (j % 64) * hd + d)] |
                                                           vc[2 * (e + (j % 64) * hd + d) + 1] << 8))
                                : ig_f16_to_f32(ig_f32_to_f16(kvq_value(
                                      vt, r[kvq_quant_at(hd, j % 64, d)],
                                      ig_f16_to_f32((uint16_t)(sc[0] | sc[1] << 8)))));
                        acc[d] += ex * vv;
                    }
                }
                for (int64_t d = 0; d < hd; d++) {
                    const double err = fabs(ig_f16_to_f32(o_ref[(i * H + h) * hd + d]) -
                                            acc[d] / sum);
                    worst_ref = err > worst_ref ? err : worst_ref;
                }
            }
        CHECKF(worst_ref <= 1e-3, "%s: twin %.3g off f64 over the blocks", name, worst_ref);
    }
    if (kt != KVQ_F16) { /* mutant: K's quantized bytes read as f16 */
        pr.cache_k_dtype = KVQ_F16;
        prefill_attn_ref(&pr);
        double off = 0;
        for (size_t i = 0; i < qe; i++) {
            const double d = fabs((double)ig_f16_to_f32(o[i]) - ig_f16_to_f32(o_ref[i]));
            off = d > off || d != d ? (d != d ? INFINITY : d) : off;
        }
        CHECKF(off > 4e-3, "%s: K read as f16 went unnoticed", name);
        pr.cache_k_dtype = kt;
    }
    if (vt != KVQ_F16) { /* mutant: V with the other quantized type's values */
        pr.cache_v_dtype = vt == KVQ_Q8_0 ? KVQ_FP8 : KVQ_Q8_0;
        prefill_attn_ref(&pr);
        double off = 0;
        for (size_t i = 0; i < qe; i++) {
            const double d = fabs((double)ig_f16_to_f32(o[i]) - ig_f16_to_f32(o_ref[i]));
            off = d > off || d != d ? (d != d ? INFINITY : d) : off;
        }
        CHECKF(off > 4e-3, "%s: V read as the other type went unnoticed", name);
    }
    free(kc), free(vc), free(kc0), free(vc0), free(q), free(kv), free(o), free(o_ref);
}

static void run_quant_cases(void)
{
    static const int32_t r1[] = {40}, p1[] = {100}, r2[] = {17, 65}, p2[] = {150, 3};
    run_quant(KVQ_Q8_0, KVQ_Q8_0, 1, r1, p1, 64, 11);
    run_quant(KVQ_FP8, KVQ_FP8, 2, r2, p2, 128, 12);
    run_quant(KVQ_Q8_0, KVQ_F16, 1, r1, p1, 128, 13);
    /* head dim 512 (Gemma 4's global layers: O's two column halves) */
    static const int32_t r3[] = {9}, p3[] = {70};
    run_quant(KVQ_Q8_0, KVQ_FP8, 1, r3, p3, 512, 14);
}

/* One case on variant v twice, plainly and as a dependent launch with
 * everything the kernels before it could have written (q, k, v, the caches,
 * the table) hidden from each block until its wait: the same bits. */
static void run_pdl_case(int v, int paged)
{
    struct attn_case c;
    memset(&c, 0, sizeof c);
    c.n = 65, c.pos0 = 37, c.n_head_kv = 2, c.n_head = 8, c.hd = 64;
    c.dtype = PREFILL_ATTN_F16, c.paged = paged, c.seed = 4242;
    attn_case_init(&c);
    struct fresh f[2] = {fresh_outputs(&c), fresh_outputs(&c)};
    int hides = 0, shows = 0, rc[2];
    for (int k = 0; k < 2; k++) {
        struct prefill_attn_params p = attn_case_params(&c, c.qkv, f[k].kc, f[k].vc, f[k].o,
                                                        f[k].lse);
        p.variant = v;
        struct prefill_attn_tile t;
        const int ws = ws_schedule(&p, &t);
        struct pdl_hide h = {0};
        if (k) {
            pdl_hide_add(&h, c.qkv, c.qkv_elems * 2);
            pdl_hide_add(&h, f[k].kc, c.cache_elems * 2);
            pdl_hide_add(&h, f[k].vc, c.cache_elems * 2);
            if (paged)
                pdl_hide_add(&h, c.table, (size_t)(c.n_ctx / ATTN_BLOCK) * 4);
            pdl_hide_on(&h);
        }
        rc[k] = prefill_attn_emu(&p, NULL);
        if (k) {
            hides = h.hides, shows = h.shows;
            pdl_hide_off(&h);
        }
        if (ws)
            check_ws_counter(prefill_attn_variant_name(v));
    }
    CHECKF(rc[0] == 0 && rc[1] == 0 && hides > 0 && hides == shows,
           "%s pdl: rc %d/%d, %d blocks hidden, %d shown", prefill_attn_variant_name(v), rc[0],
           rc[1], hides, shows);
    CHECKF(memcmp(f[0].o, f[1].o, c.o_elems * 2) == 0 &&
           memcmp(f[0].lse, f[1].lse, c.lse_elems * 4) == 0 &&
           memcmp(f[0].kc, f[1].kc, c.cache_elems * 2) == 0 &&
           memcmp(f[0].vc, f[1].vc, c.cache_elems * 2) == 0,
           "%s%s pdl: o, lse or the caches differ from the plain launch",
           prefill_attn_variant_name(v), paged ? " paged" : "");
    fresh_free(&f[0]);
    fresh_free(&f[1]);
    attn_case_free(&c);
}

static void run_pdl_cases(void)
{
    run_pdl_case(prefill_attn_variant_find("m64w4"), 1);
    run_pdl_case(prefill_attn_variant_find("wg64n64"), 0);
    run_pdl_case(prefill_attn_variant_find("ws128n128"), 1);
}

int main(int argc, char **argv)
{
    static const int64_t small_n[] = {1, 17, 64, 65}, ratios[] = {1, 3, 4, 8};
    if (argc > 2 && strcmp(argv[1], "--variant") == 0) {
        int v = prefill_attn_variant_find(argv[2]);
        CHECKF(v != PREFILL_ATTN_AUTO, "no variant %s", argv[2]);
        if (v != PREFILL_ATTN_AUTO)
            run_variant(v);
        return test_summary("test_flash_attn_emu --variant");
    }
    if (argc > 1 && strcmp(argv[1], "--pdl") == 0) { /* the dependent launches alone */
        run_pdl_cases();
        return test_summary("test_flash_attn_emu --pdl");
    }
    if (argc > 1 && strcmp(argv[1], "--quant") == 0) { /* the quantized pools alone */
        run_quant_cases();
        return test_summary("test_flash_attn_emu --quant");
    }
    check_chooser();
    int full = getenv("IGNITE_EMU_FULL") != NULL;
    int64_t t0 = ig_now_ns();
    for (size_t a = 0; a < 4; a++)
        for (int64_t pos0 = 0; pos0 <= 37; pos0 += 37)
            for (size_t r = 0; r < 4; r++)
                for (int64_t hd = 64; hd <= 128; hd += 64)
                    for (int dt = 0; dt < 2; dt++)
                        /* Each shape in one dtype (both under
                         * IGNITE_EMU_FULL): the dtype picks the mma kind
                         * and the conversions, not a tile edge, and every
                         * pair of n, pos0, ratio and hd still meets both. */
                        if (full || dt == (int)(a + r + (pos0 > 0) + (hd > 64)) % 2)
                            run_case(small_n[a], pos0, ratios[r], hd, dt);
    fprintf(stderr, "small shapes: %.1f s\n", (double)(ig_now_ns() - t0) * 1e-9);
    t0 = ig_now_ns();
    if (full) {
        static const int64_t big_n[] = {300, 1024};
        for (size_t a = 0; a < 2; a++)
            for (int64_t pos0 = 0; pos0 <= 100; pos0 += 100)
                for (size_t r = 0; r < 4; r++)
                    for (int64_t hd = 64; hd <= 128; hd += 64)
                        for (int dt = 0; dt < 2; dt++)
                            run_case(big_n[a], pos0, ratios[r], hd, dt);
    } else {
        run_case(300, 0, 3, 128, PREFILL_ATTN_BF16);
        run_case(300, 100, 4, 64, PREFILL_ATTN_F16);
        run_case(300, 229, 8, 128, PREFILL_ATTN_F16);
        run_case(300, 1, 1, 64, PREFILL_ATTN_BF16);
        run_case(1024, 0, 4, 128, PREFILL_ATTN_BF16);
        run_case(1024, 333, 1, 64, PREFILL_ATTN_F16);
    }
    fprintf(stderr, "large shapes: %.1f s\n", (double)(ig_now_ns() - t0) * 1e-9);
    t0 = ig_now_ns();
    run_sink_cases();
    fprintf(stderr, "sinks: %.1f s\n", (double)(ig_now_ns() - t0) * 1e-9);
    t0 = ig_now_ns();
    run_quant_cases();
    fprintf(stderr, "quantized pools: %.1f s\n", (double)(ig_now_ns() - t0) * 1e-9);
    t0 = ig_now_ns();
    run_pdl_cases();
    fprintf(stderr, "dependent launches: %.1f s\n", (double)(ig_now_ns() - t0) * 1e-9);
    return test_summary("test_flash_attn_emu");
}
