/* tests/emu/test_flash_attn_mutants.cc: the prefill kernels with one bug
 * planted at a time (copies made by tests/emu/mutate.cmake at build time)
 * must be caught. By the emulator: without its cp.async wait the kernel
 * reads data still in flight; without the barrier at the top of a tile, it
 * reads other threads' copies unsynchronised; with the refill of the last
 * tile's stage issued before that barrier, cp.async overwrites a stage
 * other warps still read (two and three stages); without the swizzle,
 * ldmatrix has bank conflicts. By the fp64 comparison (bugs only the
 * numbers show): full K/V tiles copied from the wrong rows; the running
 * output rescaled when no row maximum grew instead of when one did; a full
 * tile's mma fed the fragment being prefetched; a variable-length call
 * whose sequences all read the first one's block table, or whose full chunk
 * tiles come from the step's first rows instead of the sequence's; gpt-oss's
 * sink left out of the softmax's denominator; at head dim 512, every
 * block computing O's first half (the second never written); in the
 * wgmma kernel, V's
 * descriptor offsets swapped, Q/K k-steps that never reach the second
 * 64-column page, and (three stages) the next tile's S dropped. By the
 * emulator again: the wgmma kernel without fence.proxy.async after its
 * cp.async, and with S masked while its wgmma is still in flight (no wait);
 * the warp-specialized kernel waiting on the wrong parity of a full
 * mbarrier, arming it without expect_tx, refilling a stage before its
 * empty mbarrier, a ping-pong bar.sync with the wrong count, the
 * epilogue's barrier counting half the warpgroup (its TMA store races the
 * other half's writes), the producer keeping its registers (the
 * consumers' setmaxnreg.inc never gets them). By the numbers and the
 * memory checks: a variable-length call on the ws kernel whose sequences
 * all read the first one's block table, whose masks take the call's
 * largest pos0, or whose 64-row halves are stored whole past a sequence's
 * end (rows of the gap and the next sequence written), or whose chunk tile
 * holding a sequence's last key is loaded whole (the gap row's NaN reaches
 * P V). The ws kernel's work counter: draws that hand the blocks' first
 * items out again (more O stores than items), and a counter left non-zero
 * for the next launch (which then skips items: NaN left). ws192n128's mask
 * letting each row see the key after its own (fp64). Label emu. */
#include "emu/emu.h"
#include "prefill/flash_attn.h"
#include "tests/emu/attn_case.h"
#include "tests/test.h"

extern "C" int prefill_attn_emu_no_wait(const struct prefill_attn_params *p, void *stream);
extern "C" int prefill_attn_emu_no_barrier(const struct prefill_attn_params *p, void *stream);
extern "C" int prefill_attn_emu_refill_early(const struct prefill_attn_params *p, void *stream);
extern "C" int prefill_attn_emu_no_swizzle(const struct prefill_attn_params *p, void *stream);
extern "C" int prefill_attn_emu_row_step(const struct prefill_attn_params *p, void *stream);
extern "C" int prefill_attn_emu_rescale_skip(const struct prefill_attn_params *p, void *stream);
extern "C" int prefill_attn_emu_prefetch_slot(const struct prefill_attn_params *p, void *stream);
extern "C" int prefill_attn_emu_seq_table(const struct prefill_attn_params *p, void *stream);
extern "C" int prefill_attn_emu_seq_rows(const struct prefill_attn_params *p, void *stream);
extern "C" int prefill_attn_emu_sink_dropped(const struct prefill_attn_params *p, void *stream);
extern "C" int prefill_attn_emu_half_head(const struct prefill_attn_params *p, void *stream);
extern "C" int prefill_attn_wgmma_emu_wg_lbo_sbo(const struct prefill_attn_params *p,
                                                 const struct prefill_attn_tile *t, void *stream);
extern "C" int prefill_attn_wgmma_emu_wg_no_wait(const struct prefill_attn_params *p,
                                                 const struct prefill_attn_tile *t, void *stream);
extern "C" int prefill_attn_wgmma_emu_wg_no_proxy_fence(const struct prefill_attn_params *p,
                                                        const struct prefill_attn_tile *t,
                                                        void *stream);
extern "C" int prefill_attn_wgmma_emu_wg_k_page(const struct prefill_attn_params *p,
                                                const struct prefill_attn_tile *t, void *stream);
extern "C" int prefill_attn_wgmma_emu_wg_stale_s(const struct prefill_attn_params *p,
                                                 const struct prefill_attn_tile *t, void *stream);
#define WS_MUTANT_(name)                                                        \
    extern "C" int prefill_attn_ws_emu_##name(const struct prefill_attn_params *p, \
                                              const struct prefill_attn_tile *t, void *stream);
WS_MUTANT_(ws_parity)
WS_MUTANT_(ws_no_expect_tx)
WS_MUTANT_(ws_no_empty_wait)
WS_MUTANT_(ws_turn_count)
WS_MUTANT_(ws_own_count)
WS_MUTANT_(ws_no_dec)
WS_MUTANT_(ws_seq_table)
WS_MUTANT_(ws_seq_pos0)
WS_MUTANT_(ws_seq_store)
WS_MUTANT_(ws_seq_tail)
WS_MUTANT_(ws_draw_twice)
WS_MUTANT_(ws_no_reset)
WS_MUTANT_(ws_mask_row_past)
#undef WS_MUTANT_

/* A wgmma launcher behind the public signature (p->variant picks the tiles). */
template <int (*F)(const struct prefill_attn_params *, const struct prefill_attn_tile *, void *)>
static int via_tile(const struct prefill_attn_params *p, void *stream)
{
    struct prefill_attn_tile t;
    int st = prefill_attn_choose(p, &t);
    return st ? st : F(p, &t, stream);
}

/* fn(p) on the emulator. A call that launched nothing (a copy built
 * without p's variant, head dim or type: mutate.cmake's IG_ATTN_BUILT,
 * IG_ATTN_BUILT_HD) would leave the last launch's fault for the checks
 * to read as its own: it fails here. */
static int launched(int (*fn)(const struct prefill_attn_params *, void *),
                  const struct prefill_attn_params *p)
{
    const uint64_t before = ig_emu_launches();
    const int rc = fn(p, NULL);
    CHECKF(ig_emu_launches() > before, "%s, head dim %lld: nothing launched (not built?)",
           prefill_attn_variant_name(p->variant), (long long)p->head_dim);
    return rc;
}

/* Runs a mutant on a case long enough (3+ K/V tiles, full and partial, from
 * the cache and from the chunk) for each bug to bite, on the given variant
 * (AUTO: the default one for the head dim, pinned so the environment cannot
 * change what is tested). When err is given, it gets the output's max error
 * against fp64 in units of the naive same-precision error (the kernels pass
 * at <= 2). sinks: gpt-oss's sink logit of the one head, or NULL. */
static int run(int (*fn)(const struct prefill_attn_params *, void *), double *err = NULL,
               int variant = PREFILL_ATTN_AUTO, int64_t hd = 64, const float *sinks = NULL,
               int64_t n = 150, int64_t pos0 = 100)
{
    struct attn_case c;
    memset(&c, 0, sizeof c);
    c.n = n, c.pos0 = pos0, c.n_head = 1, c.n_head_kv = 1, c.hd = hd,
    c.dtype = hd == 512 ? PREFILL_ATTN_F16 : PREFILL_ATTN_BF16; /* 512: f16 only */
    c.seed = 5;
    c.sinks = sinks;
    attn_case_init(&c);
    struct prefill_attn_params p = attn_case_params(&c, c.qkv, c.kc, c.vc, c.o, c.lse);
    p.variant = variant == PREFILL_ATTN_AUTO ? PREFILL_ATTN_DEFAULT_VARIANT(hd) : variant;
    ig_emu_set_quiet(1);
    int rc = launched(fn, &p);
    ig_emu_set_quiet(0);
    if (err) {
        struct attn_ref r;
        struct attn_err e;
        attn_reference(&c, &r);
        attn_errors(&c, &r, c.o, c.lse, &e);
        *err = e.o_max / r.naive;
        attn_ref_free(&r);
    }
    attn_case_free(&c);
    return rc;
}

/* The same for a variable-length call over a paged pool (attn_varlen):
 * three sequences, each with full K/V tiles from its cache and its chunk
 * (the first n0 rows, last in the step); *err is the worst sequence's
 * error in units of its naive error, *bad (when given) the gap rows,
 * guard bands and pool rows written that should not be. */
static int run_varlen(int (*fn)(const struct prefill_attn_params *, void *), double *err,
                      int variant = PREFILL_ATTN_DEFAULT_VARIANT(64), int32_t n0 = 150,
                      int *bad = NULL)
{
    struct attn_varlen vl;
    memset(&vl, 0, sizeof vl);
    vl.n_seqs = 3;
    const int32_t n_rows[] = {n0, 70, 90}, pos0[] = {100, 130, 0};
    for (int i = 0; i < 3; i++)
        vl.n_rows[i] = n_rows[i], vl.pos0[i] = pos0[i];
    vl.n_head = vl.n_head_kv = 1, vl.hd = 64, vl.dtype = PREFILL_ATTN_BF16, vl.seed = 7;
    attn_varlen_init(&vl);
    struct attn_case *c = &vl.c;
    struct prefill_attn_params p =
        attn_varlen_params(&vl, c->qkv, c->kc, c->vc, c->o, c->lse, vl.seqs, vl.tables);
    p.variant = variant;
    ig_emu_set_quiet(1);
    int rc = launched(fn, &p);
    ig_emu_set_quiet(0);
    if (bad)
        *bad = rc == 0 ? attn_varlen_check_memory(&vl, c->o, c->lse, c->kc, c->vc, "mutant") : 0;
    struct attn_ref r[3];
    attn_varlen_reference(&vl, r);
    *err = 0;
    for (int i = 0; i < 3; i++) {
        struct attn_err e;
        attn_varlen_errors(&vl, i, &r[i], c->o, c->lse, &e);
        *err = fmax(*err, e.o_max / r[i].naive);
        attn_ref_free(&r[i]);
    }
    attn_varlen_free(&vl);
    return rc;
}

/* The ws kernel's dynamic schedule: 12 items (3 query tiles x 4 heads) on
 * 2 blocks, launched twice with one counter as a graph replays it (the
 * outputs reset between). *err: the worse launch's error in naive units;
 * *stores: the second launch's TMA stores; *left: the counter's words
 * after it, or'ed. */
static int run_sched(int (*fn)(const struct prefill_attn_params *, void *), double *err,
                     uint64_t *stores, uint32_t *left)
{
    struct attn_case c;
    memset(&c, 0, sizeof c);
    c.n = 300, c.pos0 = 100, c.n_head = 4, c.n_head_kv = 2, c.hd = 64;
    c.dtype = PREFILL_ATTN_BF16, c.seed = 9;
    attn_case_init(&c);
    const size_t o_bytes = c.o_elems * 2, lse_bytes = c.lse_elems * sizeof(float);
    uint16_t *o0 = (uint16_t *)malloc(o_bytes);
    float *lse0 = (float *)malloc(lse_bytes);
    memcpy(o0, c.o, o_bytes);
    memcpy(lse0, c.lse, lse_bytes);
    static uint32_t tiles[2];
    tiles[0] = tiles[1] = 0;
    struct prefill_attn_params p = attn_case_params(&c, c.qkv, c.kc, c.vc, c.o, c.lse);
    p.variant = PREFILL_ATTN_WS128N128;
    p.tile_counter = tiles;
    struct attn_ref r;
    attn_reference(&c, &r);
    ig_emu_set_sm_count(2);
    ig_emu_set_quiet(1);
    int rc = 0;
    *err = 0;
    for (int launch = 0; launch < 2 && rc == 0; launch++) {
        memcpy(c.o, o0, o_bytes);
        memcpy(c.lse, lse0, lse_bytes);
        rc = launched(fn, &p);
        struct attn_err e;
        attn_errors(&c, &r, c.o, c.lse, &e);
        *err = fmax(*err, e.o_max / r.naive); /* a NaN left: infinite (attn_errors) */
    }
    ig_emu_set_quiet(0);
    ig_emu_set_sm_count(3);
    *stores = ig_emu_last_stats().tma_stores;
    *left = tiles[0] | tiles[1];
    attn_ref_free(&r);
    free(o0);
    free(lse0);
    attn_case_free(&c);
    return rc;
}

int main(void)
{
    CHECK(run(prefill_attn_emu_no_wait) != 0);
    CHECKF(strstr(ig_emu_last_error(), "still in flight") != NULL, "%s", ig_emu_last_error());
    CHECK(run(prefill_attn_emu_no_barrier) != 0);
    CHECKF(strstr(ig_emu_last_error(), "race") != NULL, "%s", ig_emu_last_error());
    CHECK(run(prefill_attn_emu_no_wait, NULL, PREFILL_ATTN_M128W4N48K3, 128) != 0);
    CHECKF(strstr(ig_emu_last_error(), "still in flight") != NULL, "%s", ig_emu_last_error());
    static const int stage_variants[] = {PREFILL_ATTN_AUTO, PREFILL_ATTN_M128W4N48K3};
    for (int v : stage_variants) {
        CHECK(run(prefill_attn_emu_refill_early, NULL, v, 128) != 0);
        CHECKF(strstr(ig_emu_last_error(), "race") != NULL, "%s", ig_emu_last_error());
    }
    CHECK(run(prefill_attn_emu_no_swizzle) == 0);
    CHECKF(ig_emu_last_stats().ldmatrix_conflicts > 0, "%llu",
           (unsigned long long)ig_emu_last_stats().ldmatrix_conflicts);
    double err = 0;
    CHECK(run(prefill_attn_emu, &err) == 0);
    CHECKF(err <= 2, "the kernel itself: error %.2f x naive", err);
    CHECK(run(prefill_attn_emu_row_step, &err) == 0);
    CHECKF(err > 10, "row_step mutant: error only %.2f x naive", err);
    CHECK(run(prefill_attn_emu_rescale_skip, &err) == 0);
    CHECKF(err > 10, "rescale_skip mutant: error only %.2f x naive", err);
    CHECK(run(prefill_attn_emu_prefetch_slot, &err) == 0);
    CHECKF(err > 10, "prefetch_slot mutant: error only %.2f x naive", err);
    /* gpt-oss's sink, a logit above the scores: kept, and left out of l. */
    static const float sink[1] = {4.0f};
    CHECK(run(prefill_attn_emu, &err, PREFILL_ATTN_AUTO, 64, sink) == 0);
    CHECKF(err <= 2, "the kernel itself with a sink: error %.2f x naive", err);
    CHECK(run(prefill_attn_emu_sink_dropped, &err, PREFILL_ATTN_AUTO, 64, sink) == 0);
    CHECKF(err > 10, "sink_dropped mutant: error only %.2f x naive", err);
    /* Head dim 512 (a short chunk after a cache): blocks that all compute
     * O's first half leave the second unwritten (NaN). */
    CHECK(run(prefill_attn_emu_half_head, &err, PREFILL_ATTN_AUTO, 512, NULL, 20, 37) == 0);
    CHECKF(!(err <= 10), "half_head mutant: error only %.2f x naive", err);
    /* Variable length: each sequence's own block table and its own rows. */
    CHECK(run_varlen(prefill_attn_emu, &err) == 0);
    CHECKF(err <= 2, "the kernel itself, varlen: error %.2f x naive", err);
    run_varlen(prefill_attn_emu_seq_table, &err); /* may fault on a -1 entry */
    CHECKF(!(err <= 10), "seq_table mutant: error only %.2f x naive", err);
    CHECK(run_varlen(prefill_attn_emu_seq_rows, &err) == 0);
    CHECKF(!(err <= 10), "seq_rows mutant: error only %.2f x naive", err);
    CHECK(run(prefill_attn_emu, &err, PREFILL_ATTN_WG128N64, 128) == 0);
    CHECKF(err <= 2, "the wgmma kernel itself: error %.2f x naive", err);
    CHECK(run(via_tile<prefill_attn_wgmma_emu_wg_lbo_sbo>, &err, PREFILL_ATTN_WG128N64, 128) == 0);
    CHECKF(err > 10, "wg_lbo_sbo mutant: error only %.2f x naive", err);
    CHECK(run(via_tile<prefill_attn_wgmma_emu_wg_no_wait>, NULL, PREFILL_ATTN_WG128N64, 128) != 0);
    CHECKF(strstr(ig_emu_last_error(), "in flight") != NULL, "%s", ig_emu_last_error());
    CHECK(run(via_tile<prefill_attn_wgmma_emu_wg_k_page>, &err, PREFILL_ATTN_WG128N64, 128) == 0);
    CHECKF(err > 10, "wg_k_page mutant: error only %.2f x naive", err);
    CHECK(run(via_tile<prefill_attn_wgmma_emu_wg_no_proxy_fence>, NULL, PREFILL_ATTN_WG128N64,
              128) != 0);
    CHECKF(strstr(ig_emu_last_error(), "fence") != NULL, "%s", ig_emu_last_error());
    CHECK(run(prefill_attn_emu, &err, PREFILL_ATTN_WG128N64S3, 128) == 0);
    CHECKF(err <= 2, "the three-stage wgmma kernel itself: error %.2f x naive", err);
    CHECK(run(via_tile<prefill_attn_wgmma_emu_wg_stale_s>, &err, PREFILL_ATTN_WG128N64S3, 128) ==
          0);
    CHECKF(err > 10, "wg_stale_s mutant: error only %.2f x naive", err);

    /* The warp-specialized kernel (ws128n128; a block runs K/V tiles -1..1
     * of its item, so a stage is reused): each synchronization broken once. */
    const int ws = PREFILL_ATTN_WS128N128;
    CHECK(run(prefill_attn_emu, &err, ws, 64) == 0);
    CHECKF(err <= 2, "the ws kernel itself: error %.2f x naive", err);
    CHECK(run(via_tile<prefill_attn_ws_emu_ws_parity>, NULL, ws, 64) != 0);
    CHECKF(strstr(ig_emu_last_error(), "shared offset") != NULL, "%s", ig_emu_last_error());
    CHECK(run(via_tile<prefill_attn_ws_emu_ws_no_expect_tx>, NULL, ws, 64) != 0);
    CHECKF(strstr(ig_emu_last_error(), "shared offset") != NULL, "%s", ig_emu_last_error());
    /* The refill races the consumers' reads, or arms the full mbarrier again
     * while its phase still waits for the first fill's bytes. */
    CHECK(run(via_tile<prefill_attn_ws_emu_ws_no_empty_wait>, NULL, ws, 64) != 0);
    CHECKF(strstr(ig_emu_last_error(), "shared offset") != NULL ||
               strstr(ig_emu_last_error(), "more arrivals than its count") != NULL,
           "%s", ig_emu_last_error());
    CHECK(run(via_tile<prefill_attn_ws_emu_ws_turn_count>, NULL, ws, 64) != 0);
    CHECKF(strstr(ig_emu_last_error(), "count") != NULL, "%s", ig_emu_last_error());
    CHECK(run(via_tile<prefill_attn_ws_emu_ws_own_count>, NULL, ws, 64) != 0);
    CHECKF(strstr(ig_emu_last_error(), "shared offset") != NULL, "%s", ig_emu_last_error());
    CHECK(run(via_tile<prefill_attn_ws_emu_ws_no_dec>, NULL, ws, 64) != 0);
    CHECKF(strstr(ig_emu_last_error(), "setmaxnreg.inc") != NULL, "%s", ig_emu_last_error());

    /* Variable length on the ws kernel: each sequence's own block table, its
     * own pos0 in the masks, only its rows stored (the first sequence, last
     * in the step, of whole 64-row halves so that a box stored past a
     * sequence's end stays in the step's buffer: the gap rows show it). */
    int bad = 0;
    CHECK(run_varlen(prefill_attn_emu, &err, ws, 128, &bad) == 0);
    CHECKF(err <= 2 && bad == 0, "the ws kernel itself, varlen: error %.2f x naive, %d bad", err,
           bad);
    CHECK(run_varlen(via_tile<prefill_attn_ws_emu_ws_seq_table>, &err, ws, 128) == 0);
    CHECKF(!(err <= 10), "ws_seq_table mutant: error only %.2f x naive", err);
    CHECK(run_varlen(via_tile<prefill_attn_ws_emu_ws_seq_pos0>, &err, ws, 128) == 0);
    CHECKF(!(err <= 10), "ws_seq_pos0 mutant: error only %.2f x naive", err);
    CHECK(run_varlen(via_tile<prefill_attn_ws_emu_ws_seq_store>, &err, ws, 128, &bad) == 0);
    CHECKF(bad > 0, "ws_seq_store mutant: no row outside a sequence written (error %.2f x naive)",
           err);
    /* The chunk tile holding a sequence's last key loaded as whole boxes:
     * the gap row's NaN (and the next sequence's rows) reach the tile, and
     * a masked P times a NaN V is NaN. */
    CHECK(run_varlen(via_tile<prefill_attn_ws_emu_ws_seq_tail>, &err, ws, 128) == 0);
    CHECKF(!(err <= 10), "ws_seq_tail mutant: error only %.2f x naive", err);
    /* The work counter: every item once (2 consumer warpgroups, one box
     * each at head dim 64), the counter zero after each launch. */
    uint64_t stores = 0;
    uint32_t left = 0;
    CHECK(run_sched(prefill_attn_emu, &err, &stores, &left) == 0);
    CHECKF(err <= 2 && stores == 12 * 2 && left == 0,
           "the ws kernel's schedule: error %.2f x naive, %llu stores, counter %u", err,
           (unsigned long long)stores, left);
    CHECK(run_sched(via_tile<prefill_attn_ws_emu_ws_draw_twice>, &err, &stores, &left) == 0);
    CHECKF(stores > 12 * 2, "ws_draw_twice mutant: %llu stores", (unsigned long long)stores);
    CHECK(run_sched(via_tile<prefill_attn_ws_emu_ws_no_reset>, &err, &stores, &left) == 0);
    CHECKF(left != 0 && !(err <= 10), "ws_no_reset mutant: counter %u, error %.2f x naive", left,
           err);
    /* ws192n128 (three consumers, 192-row query tiles over 128-key tiles:
     * the diagonal falls mid-tile): the mask's row range one key too long. */
    CHECK(run(prefill_attn_emu, &err, PREFILL_ATTN_WS192N128, 64) == 0);
    CHECKF(err <= 2, "ws192n128 itself: error %.2f x naive", err);
    CHECK(run(via_tile<prefill_attn_ws_emu_ws_mask_row_past>, &err, PREFILL_ATTN_WS192N128, 64) ==
          0);
    CHECKF(err > 10, "ws_mask_row_past mutant: error only %.2f x naive", err);
    return test_summary("test_flash_attn_mutants");
}
