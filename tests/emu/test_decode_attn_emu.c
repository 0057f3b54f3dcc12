/* tests/emu/test_decode_attn_emu.c: the decode attention kernels
 * (decode/decode_attn.cu) run by the CPU emulator against their CPU twin
 * (decode_attn_ref), and the twin against an independent f64 computation.
 *
 * Every case reads a KV pool through block tables (kvcache/kvcache.h's
 * layout): the pool's block ids are shuffled, so a sequence's blocks are
 * neither consecutive nor in order, and a few blocks belong to no table.
 * Only the rows a query may see (lo..pos of its own sequence) hold data;
 * every other row of the pool (rows past pos, behind the window, unused
 * blocks, the rest of the tables' blocks) holds NaN and huge garbage, so any
 * read outside shows.
 *
 * One sequence: n_ctx 64, 300, 600; pos 0, 1, 63, 64, 299, n_ctx - 1; GQA
 * 1, 3, 4, 8; head_dim 64 and 128; 1, 7, the chosen, 33 and 128 splits (more
 * than needed: empty splits), each value against the others' edges, not
 * their full product (main's comment); head_dim 256 (Gemma 3: 4 query heads, 1 KV
 * head) without and with sliding windows of 16, 64 and 200 keys, before, at
 * and past the window's edge. Batches: 2 to 5 sequences of different
 * lengths in one launch (1 position, 64 and 65 at the block edge, 300, and
 * across a window's edge), head dims 64/128/256, with a padding row (pos <
 * 0) whose o row must be zeros, the chooser's splits for the batch. The
 * check can fail: the twin through a table with one entry pointing at a
 * block of no table must disagree with the kernel.
 *
 * Every case again with the combine in the last split (tickets): the same
 * bits as the combine kernel's, the tickets back to 0 after it.
 * Both combines also write o's int8 blocks (oq, for the wo GEMV): bit for
 * bit ops_qmm_quantize of each row of the kernel's o (padding rows' zeros
 * too), nothing past them; the twin's of its own o likewise.
 * The output and `work` are poisoned first, guard elements follow the
 * output. Tolerance: 2 f16 ulps kernel vs twin (the kernel's f32 sums may
 * round the other way), 1 ulp twin vs f64. gpt-oss's attention sinks: a
 * few of the cases above again with a sink per query head. Head dim 512
 * (Gemma 4's global layers): several splits, a window, a verify step, a
 * batch with padding. Programmatic dependent launch (IGNITE_PDL=1) on a
 * few cases: with q, the pool, the positions, the splits' partials and the
 * tickets hidden from each block until its griddepcontrol.wait
 * (tests/emu/pdl_hide.h), both combines' o the plain launch's bit for bit.
 * Label emu. */
#include "decode/decode_attn.h"
#include "kvcache/kv_devq.h"
#include "kvcache/kvcache.h"
#include "models/quant.h"
#include "ops/gpu_kvq.h"
#include "ops/ops.h"
#include "ops/qmatmul.h"
#include "tests/emu/pdl_hide.h"
#include "tests/test.h"

#include "core/half.h"
#include "core/status.h"

#include <stdlib.h>
#include <string.h>

enum { GUARD = 16, MAX_SEQS = 5 };

/* gpt-oss's sinks for the cases run while it is set (NULL: none), a
 * logit per query head, up to 32 heads. */
static const float *case_sinks;
/* The cases run while it is set also go out as programmatic dependent
 * launches (check_pdl). */
static bool case_pdl;
#define GUARD_BITS 0x5a5au

/* One f16 ulp at |x| (normal range), 2^-24 below it. */
static double f16_ulp(double x)
{
    x = fabs(x);
    if (x < 6.103515625e-05)
        return 5.9604644775390625e-08;
    return ldexp(1.0, ilogb(x) - 10);
}

static void fill_f16(uint16_t *a, int64_t n, float amp, uint64_t *rng)
{
    for (int64_t i = 0; i < n; i++)
        a[i] = ig_f32_to_f16(amp * test_rand_f(rng));
}

/* The first key a query at pos sees. */
static int64_t first_key(int64_t pos, int64_t window)
{
    return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

static void check_fused(const struct decode_attn_params *p, const uint16_t *o,
                        int64_t o_elems, const char *name);

/* o's int8 blocks (decode_attn_params.oq, oqd) for o_elems outputs: the
 * quants GUARD bytes longer, their (d, s) pairs GUARD floats longer,
 * poisoned, the guards set. */
static void blocks_init(struct decode_attn_params *p, int64_t o_elems)
{
    p->oq = malloc((size_t)(o_elems + GUARD));
    p->oqd = malloc((size_t)(o_elems / 16 + GUARD) * sizeof *p->oqd);
    IG_ASSERT(p->oq && p->oqd);
    memset(p->oq, 0x80, (size_t)o_elems); /* -128: no quant is */
    memset(p->oq + o_elems, GUARD_BITS & 0xff, GUARD);
    memset(p->oqd, 0xff, (size_t)(o_elems / 16) * sizeof *p->oqd); /* NaN */
    memset(p->oqd + o_elems / 16, GUARD_BITS & 0xff, GUARD * sizeof *p->oqd);
}

/* Rows of o ([rows][n_head * head_dim]) whose int8 blocks in p->oq, p->oqd
 * are not ops_qmm_quantize's of the row, bit for bit (a padding row's zeros
 * too), or -1 where a guard past them was written. */
static int64_t blocks_off(const struct decode_attn_params *p, const uint16_t *o)
{
    const int64_t dim = p->n_head * p->head_dim, nb = dim / 32;
    const int64_t rows = p->n_seqs * decode_attn_q_len(p);
    float *f = malloc((size_t)dim * sizeof *f);
    struct qmm_q8 *b = malloc((size_t)nb * sizeof *b);
    IG_ASSERT(f && b);
    int64_t off = 0;
    for (int64_t t = 0; t < rows; t++) {
        for (int64_t c = 0; c < dim; c++)
            f[c] = ig_f16_to_f32(o[t * dim + c]);
        ops_qmm_quantize(f, dim, b);
        bool same = true;
        for (int64_t i = 0; i < nb; i++)
            same &= memcmp(p->oq + t * dim + 32 * i, b[i].qs, 32) == 0 &&
                    memcmp(&p->oqd[2 * (t * nb + i)], &b[i].d, 4) == 0 &&
                    memcmp(&p->oqd[2 * (t * nb + i) + 1], &b[i].s, 4) == 0;
        off += !same;
    }
    for (int64_t i = 0; i < GUARD; i++)
        if (p->oq[rows * dim + i] != (int8_t)(GUARD_BITS & 0xff) ||
            ((const uint8_t *)(p->oqd + 2 * rows * nb))[i] != (GUARD_BITS & 0xff))
            off = -1;
    free(f), free(b);
    return off;
}

/* Element offset of row j of KV head hk in a pool through `table`, written
 * out here from the layout's definition. */
static int64_t row_at(const struct decode_attn_params *p, const int32_t *table, int64_t hk,
                      int64_t j)
{
    return (int64_t)table[j / 64] * p->block_stride + hk * p->head_stride +
           (j % 64) * p->head_dim;
}

/* f64 attention of query row i's head h (row i % q_len of sequence i /
 * q_len), written independently of the twin: one pass over the keys up to
 * the row's own position with a running max. */
static void exact_head(const struct decode_attn_params *p, int64_t i, int64_t h, double *out)
{
    const int64_t hd = p->head_dim, hk = h / (p->n_head / p->n_head_kv), pos = p->pos[i];
    const int32_t *table = p->block_table + i / p->q_len * p->table_stride;
    const uint16_t *q = p->q + (i * p->n_head + h) * hd;
    /* a sink starts the running state: its e^0 in the sum, no value */
    double m = p->sinks ? p->sinks[h] : -INFINITY, l = p->sinks ? 1 : 0;
    for (int64_t d = 0; d < hd; d++)
        out[d] = 0;
    for (int64_t j = first_key(pos, p->window); j <= pos; j++) {
        const uint16_t *k = p->k_cache + row_at(p, table, hk, j);
        const uint16_t *v = p->v_cache + row_at(p, table, hk, j);
        double sc = 0;
        for (int64_t d = 0; d < hd; d++)
            sc += (double)ig_f16_to_f32(q[d]) * ig_f16_to_f32(k[d]);
        sc *= p->scale;
        const double mn = sc > m ? sc : m, c = exp(m - mn), e = exp(sc - mn);
        l = l * c + e;
        for (int64_t d = 0; d < hd; d++)
            out[d] = out[d] * c + e * ig_f16_to_f32(v[d]);
        m = mn;
    }
    for (int64_t d = 0; d < hd; d++)
        out[d] /= l;
}

/* Outputs of `a` and `b` over the non-padding rows that differ by more
 * than 2 ulps (NaN counts). */
static int count_off(const struct decode_attn_params *p, const uint16_t *a, const uint16_t *b,
                     const char *name, int report)
{
    int bad = 0;
    for (int64_t s = 0; s < p->n_seqs * p->q_len; s++)
        for (int64_t i = 0; i < p->n_head * p->head_dim && p->pos[s] >= 0; i++) {
            const int64_t e = s * p->n_head * p->head_dim + i;
            const double x = ig_f16_to_f32(a[e]), y = ig_f16_to_f32(b[e]);
            if (!(fabs(x - y) <= 2 * f16_ulp(fmax(fabs(x), fabs(y))) + 1e-6) && bad++ < 3 &&
                report)
                fprintf(stderr, "%s: row %lld o[%lld] kernel %.8g ref %.8g\n", name,
                        (long long)s, (long long)i, x, y);
        }
    return bad;
}

/* One launch of n_seqs sequences of q_len query rows each, row r of
 * sequence s at pos[s] + r (pos[s] < 0: every row padding; live: NULL, or
 * the rows of each sequence that are not padding, the rest at -1), in a
 * pool sized for n_ctx positions a sequence. splits < 0: the chooser's for
 * the batch on 132 SMs. mutant: also show that a swapped table is caught. */
static void check_pdl(const struct decode_attn_params *p, const uint16_t *o, int64_t o_elems,
                      int64_t pool, const char *name);

static void run_rows(int64_t n_seqs, const int64_t *pos, int64_t q_len, const int64_t *live,
                     int64_t n_ctx, int64_t group, int64_t n_head_kv, int64_t hd, int splits,
                     int64_t window, int mutant, uint64_t seed)
{
    uint64_t rng = seed * 0x9e3779b97f4a7c15ull + 1;
    const int64_t n_head = group * n_head_kv, n_rows = n_seqs * q_len;
    const int64_t o_elems = n_rows * n_head * hd;
    const int64_t ts = (n_ctx + 63) / 64, n_blocks = n_seqs * ts + 3;
    const int64_t head_stride = 64 * hd, block_stride = n_head_kv * head_stride;
    const int64_t pool = n_blocks * block_stride;
    if (splits < 0)
        splits = decode_attn_choose_splits(n_ctx, n_seqs, n_head_kv, 132);
    uint16_t *q = malloc((size_t)o_elems * 2);
    uint16_t *kc = malloc((size_t)pool * 2), *vc = malloc((size_t)pool * 2);
    uint16_t *o = malloc((size_t)(o_elems + GUARD) * 2), *o_ref = malloc((size_t)o_elems * 2);
    int32_t *table = malloc((size_t)(n_seqs * ts) * sizeof *table), ids[MAX_SEQS * 16 + 3];
    int32_t pos32[MAX_SEQS * DECODE_ATTN_MAX_Q_LEN];
    double *exact = malloc((size_t)hd * sizeof *exact);
    IG_ASSERT(n_seqs <= MAX_SEQS && n_blocks <= MAX_SEQS * 16 + 3);
    IG_ASSERT(q_len >= 1 && q_len <= DECODE_ATTN_MAX_Q_LEN);
    fill_f16(q, o_elems, 2.0f, &rng); /* larger q: sharper softmax */
    /* The pool: NaN and huge garbage everywhere, then the live rows. */
    for (int64_t i = 0; i < pool; i++) {
        kc[i] = i % 2 ? 0x7e00u : 0x7bffu;
        vc[i] = i % 3 ? 0xfe01u : 0x7c00u;
    }
    for (int64_t i = 0; i < n_blocks; i++)
        ids[i] = (int32_t)i;
    for (int64_t i = n_blocks - 1; i > 0; i--) { /* Fisher-Yates */
        const int64_t j = (int64_t)(test_rand_u64(&rng) % (uint64_t)(i + 1));
        const int32_t x = ids[i];
        ids[i] = ids[j], ids[j] = x;
    }
    memcpy(table, ids, (size_t)(n_seqs * ts) * sizeof *table);
    struct decode_attn_params p = {
        .q = q, .k_cache = kc, .v_cache = vc, .block_table = table, .table_stride = ts,
        .block_stride = block_stride, .head_stride = head_stride, .pos = pos32, .o = o,
        .work = NULL, .n_seqs = n_seqs, .n_head = n_head, .n_head_kv = n_head_kv,
        .head_dim = hd, .n_ctx = n_ctx, .n_splits = splits, .scale = 1.0f / sqrtf((float)hd),
        .window = window, .q_len = q_len, .sinks = case_sinks};
    for (int64_t s = 0; s < n_seqs; s++) {
        const int64_t n_live = pos[s] < 0 ? 0 : live ? live[s] : q_len;
        for (int64_t r = 0; r < q_len; r++)
            pos32[s * q_len + r] = r < n_live ? (int32_t)(pos[s] + r) : -1;
        /* Live: the first row's window edge to the last row (the keys a
         * verify step's rows see); every other row of the pool poison. */
        for (int64_t hk = 0; hk < n_head_kv && n_live; hk++)
            for (int64_t j = first_key(pos[s], window); j < pos[s] + n_live; j++) {
                fill_f16(kc + row_at(&p, table + s * ts, hk, j), hd, 1.0f, &rng);
                fill_f16(vc + row_at(&p, table + s * ts, hk, j), hd, 1.0f, &rng);
            }
    }
    const size_t wf = decode_attn_work_floats(&p);
    p.work = malloc(wf * sizeof(float));
    for (size_t i = 0; i < wf; i++)
        p.work[i] = NAN;
    for (int64_t i = 0; i < o_elems + GUARD; i++)
        o[i] = i < o_elems ? 0xffffu : GUARD_BITS;

    char name[200];
    int len = snprintf(name, sizeof name, "q_len=%lld pos", (long long)q_len);
    for (int64_t s = 0; s < n_seqs; s++)
        len += snprintf(name + len, sizeof name - (size_t)len, "%c%lld", s ? ',' : '=',
                        (long long)pos[s]);
    snprintf(name + len, sizeof name - (size_t)len, " n_ctx=%lld gqa=%lld kv=%lld hd=%lld "
             "splits=%d window=%lld%s", (long long)n_ctx, (long long)group, (long long)n_head_kv,
             (long long)hd, splits, (long long)window, case_sinks ? " sinks" : "");
    blocks_init(&p, o_elems);
    CHECKF(decode_attn_emu(&p, NULL) == 0, "%s: emulated launch failed", name);
    const int64_t off_q = blocks_off(&p, o);
    CHECKF(off_q == 0, "%s: the combine kernel's int8 blocks of o: %lld rows off "
           "ops_qmm_quantize (-1: past them)", name, (long long)off_q);
    check_fused(&p, o, o_elems, name);
    if (case_pdl)
        check_pdl(&p, o, o_elems, pool, name);
    struct decode_attn_params pr = p;
    pr.o = o_ref;
    for (int64_t i = 0; i < o_elems; i++)
        o_ref[i] = 0xffffu;
    blocks_init(&pr, o_elems);
    CHECKF(decode_attn_ref(&pr) == 0, "%s: ref failed", name);
    CHECKF(blocks_off(&pr, o_ref) == 0, "%s: the twin's int8 blocks of its o", name);

    int bad_ref = 0, bad_pad = 0, bad_guard = 0;
    const int bad_kernel = count_off(&p, o, o_ref, name, 1);
    for (int64_t i = 0; i < n_rows; i++)
        for (int64_t h = 0; h < n_head; h++) {
            const int64_t at = (i * n_head + h) * hd;
            if (pos32[i] < 0) { /* padding: zeros from both */
                for (int64_t d = 0; d < hd; d++)
                    bad_pad += o[at + d] != 0 || o_ref[at + d] != 0;
                continue;
            }
            exact_head(&p, i, h, exact);
            for (int64_t d = 0; d < hd; d++) {
                const double r = ig_f16_to_f32(o_ref[at + d]), e = exact[d];
                if (!(fabs(r - e) <= f16_ulp(e)) && bad_ref++ < 3)
                    fprintf(stderr, "%s: row %lld o[%lld][%lld] ref %.8g exact %.8g\n", name,
                            (long long)i, (long long)h, (long long)d, r, e);
            }
        }
    for (int64_t i = o_elems; i < o_elems + GUARD; i++)
        bad_guard += o[i] != GUARD_BITS;
    CHECKF(bad_kernel == 0, "%s: %d outputs off the twin", name, bad_kernel);
    CHECKF(bad_ref == 0, "%s: %d twin outputs off f64", name, bad_ref);
    CHECKF(bad_pad == 0, "%s: %d padding outputs not zero", name, bad_pad);
    CHECKF(bad_guard == 0, "%s: wrote past the output", name);

    /* The check can fail: the twin reading the last sequence whose block 0
     * is live through its table with that entry pointing at a block of no
     * table (a kernel that took a wrong block: poison) must come out off
     * the kernel. (Swapping two live blocks would not do: attention does
     * not care about the order of its keys.) */
    if (mutant) {
        int64_t s = n_seqs - 1;
        while (s >= 0 && !(pos[s] >= 0 && first_key(pos[s], window) < 64))
            s--;
        CHECKF(s >= 0, "%s: no sequence with a live block 0 for the mutant", name);
        if (s >= 0) {
            table[s * ts] = ids[n_seqs * ts]; /* one of the 3 blocks of no table */
            CHECKF(decode_attn_ref(&pr) == 0, "%s: mutant ref failed", name);
            CHECKF(count_off(&p, o, o_ref, name, 0) > 0,
                   "%s: a table entry pointing elsewhere went unnoticed", name);
        }
    }
    free(q), free(kc), free(vc), free(o), free(o_ref), free(exact), free(p.work), free(table);
    free(p.oq), free(p.oqd), free(pr.oq), free(pr.oqd);
}

/* Both combines as programmatic dependent launches (the split kernel, then
 * the combine kernel or the last split's), with what earlier kernels write
 * (q, the pool, the positions, the splits' partials, the tickets) hidden
 * from each block until it waits: o the plain launch's bit for bit. */
static void check_pdl(const struct decode_attn_params *p, const uint16_t *o, int64_t o_elems,
                      int64_t pool, const char *name)
{
    const size_t wf = decode_attn_work_floats(p);
    const int64_t n_tickets = (int64_t)decode_attn_tickets(p), n_rows = p->n_seqs * p->q_len;
    uint16_t *op = malloc((size_t)o_elems * sizeof *op);
    for (int fused = 0; fused < 2; fused++) {
        struct decode_attn_params pp = *p;
        pp.o = op, pp.oq = NULL, pp.oqd = NULL;
        pp.work = malloc(wf * sizeof *pp.work);
        pp.tickets = fused ? calloc((size_t)n_tickets, sizeof *pp.tickets) : NULL;
        for (size_t i = 0; i < wf; i++)
            pp.work[i] = NAN;
        for (int64_t i = 0; i < o_elems; i++)
            op[i] = 0xffffu;
        struct pdl_hide h = {0};
        pdl_hide_add(&h, (void *)pp.q, (size_t)o_elems * 2);
        pdl_hide_add(&h, (void *)pp.k_cache, (size_t)pool * 2);
        pdl_hide_add(&h, (void *)pp.v_cache, (size_t)pool * 2);
        pdl_hide_add(&h, (void *)pp.pos, (size_t)n_rows * sizeof *pp.pos);
        pdl_hide_add(&h, pp.work, wf * sizeof *pp.work);
        if (fused)
            pdl_hide_add(&h, pp.tickets, (size_t)n_tickets * sizeof *pp.tickets);
        pdl_hide_on(&h);
        CHECKF(decode_attn_emu(&pp, NULL) == 0, "%s: pdl launch failed", name);
        pdl_hide_off(&h);
        int64_t off = 0;
        for (int64_t i = 0; i < o_elems; i++)
            off += op[i] != o[i];
        CHECKF(off == 0 && h.hides > 0 && h.shows == h.hides,
               "%s: %s as dependent launches: %lld outputs differ from the plain launch's "
               "(%d blocks hidden, %d shown)", name, fused ? "the fused combine" : "split and "
               "combine kernels", (long long)off, h.hides, h.shows);
        free(pp.work), free(pp.tickets);
    }
    free(op);
}

/* One query row a sequence (a decode step). */
static void run_case(int64_t n_seqs, const int64_t *pos, int64_t n_ctx, int64_t group,
                     int64_t n_head_kv, int64_t hd, int splits, int64_t window, int mutant,
                     uint64_t seed)
{
    run_rows(n_seqs, pos, 1, NULL, n_ctx, group, n_head_kv, hd, splits, window, mutant, seed);
}

/* The combine in the last split (tickets): launched over the unfused
 * launch's inputs, its output the same bits as the combine kernel's,
 * padding rows zeros included, nothing past the output written, and every
 * ticket back to 0 after it (a graph replays it). Once: a second launch
 * would get the same inputs bit for bit (tickets checked at 0, work and o
 * poisoned alike) and the emulator replays the same thread order from its
 * seed each launch, so it only repeated the first. */
static void check_fused(const struct decode_attn_params *p, const uint16_t *o,
                        int64_t o_elems, const char *name)
{
    struct decode_attn_params pf = *p;
    const int64_t n_tickets = (int64_t)decode_attn_tickets(p);
    const size_t wf = decode_attn_work_floats(p);
    uint16_t *of = malloc((size_t)(o_elems + GUARD) * sizeof *of);
    pf.tickets = calloc((size_t)n_tickets, sizeof *pf.tickets);
    pf.work = malloc(wf * sizeof *pf.work); /* its own: no partial of the first launch */
    pf.o = of;
    if (of && pf.tickets && pf.work) {
        for (size_t i = 0; i < wf; i++) /* a split that combines early reads NaN */
            pf.work[i] = NAN;
        for (int64_t i = 0; i < o_elems + GUARD; i++)
            of[i] = i < o_elems ? 0xffffu : GUARD_BITS;
        blocks_init(&pf, o_elems); /* the combining split's (or split 0's: all padding) */
        CHECKF(decode_attn_emu(&pf, NULL) == 0, "%s: fused launch failed", name);
        const int64_t off_q = blocks_off(&pf, of);
        CHECKF(off_q == 0, "%s: fused launch: int8 blocks of o: %lld rows off "
               "ops_qmm_quantize (-1: past them)", name, (long long)off_q);
        free(pf.oq), free(pf.oqd);
        int64_t off = 0, left = 0, guard = 0;
        for (int64_t i = 0; i < o_elems; i++)
            off += of[i] != o[i];
        for (int64_t i = 0; i < n_tickets; i++)
            left += pf.tickets[i] != 0;
        for (int64_t i = o_elems; i < o_elems + GUARD; i++)
            guard += of[i] != GUARD_BITS;
        CHECKF(off == 0, "%s: fused launch: %lld outputs differ from the combine kernel's",
               name, (long long)off);
        CHECKF(left == 0, "%s: fused launch left %lld tickets set", name, (long long)left);
        CHECKF(guard == 0, "%s: fused launch wrote past the output", name);
    }
    free(of);
    free(pf.tickets);
    free(pf.work);
}

/* A quantized pool (kvcache/kv_devq.h): K of type kt, V of vt (KVQ_*),
 * sequences at pos[] (n_seqs, one row each) through shuffled tables, the
 * live rows quantized from random f32 by the block quantizer, every other
 * byte 0xff (a scale of NaN bits). The kernel (both combines) against the
 * twin reading the same blocks, 2 f16 ulps; the twin against f64 over the
 * unquantized rows within the types' rounding (q8_0: scores and values off
 * by under 1/254 of a block's largest value; fp8: 1/16); and the twin
 * reading the pool with the wrong type (K as f16 bytes, V with its scale
 * pair's other half) must come out off the kernel. */
static uint16_t f16_of(float x)
{
    return ig_f32_to_f16(x);
}

static void run_quant(int kt, int vt, int64_t n_seqs, const int64_t *pos, int64_t n_ctx,
                      int64_t group, int64_t hd, int splits, uint64_t seed)
{
    uint64_t rng = seed * 0x9e3779b97f4a7c15ull + 1;
    const int64_t n_head_kv = 2, n_head = group * n_head_kv, o_elems = n_seqs * n_head * hd;
    const int64_t ts = (n_ctx + 63) / 64, n_blocks = n_seqs * ts + 2;
    const int64_t head_stride = 64 * hd, block_stride = n_head_kv * head_stride;
    /* f16-sized: the mutant below reads K's bytes as f16 */
    const size_t bytes = (size_t)(2 * n_blocks * block_stride);
    uint16_t *q = malloc((size_t)o_elems * 2), *o = malloc((size_t)o_elems * 2);
    uint16_t *o_ref = malloc((size_t)o_elems * 2);
    unsigned char *kc = malloc(bytes), *vc = malloc(bytes);
    float *kf = malloc((size_t)(n_seqs * n_ctx * n_head_kv * hd) * sizeof *kf);
    float *vf = malloc((size_t)(n_seqs * n_ctx * n_head_kv * hd) * sizeof *vf);
    int32_t table[MAX_SEQS * 16], pos32[MAX_SEQS], ids[MAX_SEQS * 16 + 2];
    IG_ASSERT(n_seqs <= MAX_SEQS && n_blocks <= MAX_SEQS * 16 + 2);
    fill_f16(q, o_elems, 2.0f, &rng);
    memset(kc, 0xff, bytes);
    memset(vc, 0xff, bytes);
    for (int64_t i = 0; i < n_blocks; i++)
        ids[i] = (int32_t)i;
    for (int64_t i = n_blocks - 1; i > 0; i--) {
        const int64_t j = (int64_t)(test_rand_u64(&rng) % (uint64_t)(i + 1));
        const int32_t x = ids[i];
        ids[i] = ids[j], ids[j] = x;
    }
    memcpy(table, ids, (size_t)(n_seqs * ts) * sizeof *table);
    struct decode_attn_params p = {
        .q = q, .k_cache = (const uint16_t *)kc, .v_cache = (const uint16_t *)vc,
        .block_table = table, .table_stride = ts, .block_stride = block_stride,
        .head_stride = head_stride, .pos = pos32, .o = o, .n_seqs = n_seqs, .n_head = n_head,
        .n_head_kv = n_head_kv, .head_dim = hd, .n_ctx = n_ctx, .n_splits = splits,
        .scale = 1.0f / sqrtf((float)hd), .q_len = 1, .k_dtype = kt, .v_dtype = vt};
    for (int64_t s = 0; s < n_seqs; s++) {
        pos32[s] = (int32_t)pos[s];
        for (int64_t hk = 0; hk < n_head_kv; hk++)
            for (int64_t j = 0; j <= pos[s]; j++)
                for (int kv = 0; kv < 2; kv++) {
                    float *x = (kv ? vf : kf) + ((s * n_ctx + j) * n_head_kv + hk) * hd;
                    unsigned char *c = kv ? vc : kc;
                    const int type = kv ? vt : kt;
                    const int64_t e = row_at(&p, table + s * ts, hk, j);
                    for (int64_t d = 0; d < hd; d++)
                        x[d] = test_rand_f(&rng) * (d % 16 == 3 ? 6.0f : 1.0f); /* outliers */
                    if (type == KVQ_F16) { /* the f16 array: row as kv_row_offset says */
                        for (int64_t d = 0; d < hd; d++) {
                            const uint16_t b = ig_f32_to_f16(x[d]);
                            memcpy(c + 2 * (e + d), &b, 2);
                            x[d] = ig_f16_to_f32(b);
                        }
                        continue;
                    }
                    const int64_t r = j % 64;
                    unsigned char *region = c + kvq_region(e - r * hd);
                    for (int64_t b = 0; b < hd / 32; b++) {
                        uint8_t qb[32];
                        uint16_t db;
                        KVQ_QUANTIZE_BLOCK(type, x + 32 * b, qb, db, f16_of);
                        memcpy(region + kvq_quant_at(hd, r, 32 * b), qb, 32);
                        memcpy(region + kvq_scale_at(hd, r, 32 * b), &db, 2);
                    }
                }
    }
    p.work = malloc(decode_attn_work_floats(&p) * sizeof(float));
    char name[160];
    snprintf(name, sizeof name, "quant k%d v%d seqs=%lld pos0=%lld hd=%lld gqa=%lld splits=%d",
             kt, vt, (long long)n_seqs, (long long)pos[0], (long long)hd, (long long)group,
             splits);
    CHECKF(decode_attn_emu(&p, NULL) == 0, "%s: emulated launch failed", name);
    check_fused(&p, o, o_elems, name);
    struct decode_attn_params pr = p;
    pr.o = o_ref;
    CHECKF(decode_attn_ref(&pr) == 0, "%s: ref failed", name);
    CHECKF(count_off(&p, o, o_ref, name, 1) == 0, "%s: kernel off the twin", name);
    /* f64 over the unquantized rows: the cache's rounding only */
    const double tol = (kt == KVQ_FP8 || vt == KVQ_FP8) ? 0.25 : 0.05;
    double worst = 0;
    for (int64_t s = 0; s < n_seqs; s++)
        for (int64_t h = 0; h < n_head; h++) {
            const int64_t hk = h / group;
            double mx = -INFINITY, sum = 0, acc[512] = {0};
            double *w = malloc((size_t)(pos[s] + 1) * sizeof *w);
            for (int64_t j = 0; j <= pos[s]; j++) {
                const float *k = kf + ((s * n_ctx + j) * n_head_kv + hk) * hd;
                double dot = 0;
                for (int64_t d = 0; d < hd; d++)
                    dot += (double)ig_f16_to_f32(q[(s * n_head + h) * hd + d]) * k[d];
                w[j] = dot * p.scale;
                mx = w[j] > mx ? w[j] : mx;
            }
            for (int64_t j = 0; j <= pos[s]; j++) {
                const float *v = vf + ((s * n_ctx + j) * n_head_kv + hk) * hd;
                const double e = exp(w[j] - mx);
                sum += e;
                for (int64_t d = 0; d < hd; d++)
                    acc[d] += e * v[d];
            }
            for (int64_t d = 0; d < hd; d++) {
                const double err =
                    fabs(ig_f16_to_f32(o_ref[(s * n_head + h) * hd + d]) - acc[d] / sum);
                worst = err > worst ? err : worst;
            }
            free(w);
        }
    CHECKF(worst < tol, "%s: twin %.4g off the unquantized f64 (bound %.3g)", name, worst, tol);
    if (kt != KVQ_F16) { /* mutant: K's quantized bytes read as f16 */
        pr.k_dtype = KVQ_F16;
        CHECKF(decode_attn_ref(&pr) == 0 && count_off(&p, o, o_ref, name, 0) > 0,
               "%s: K read as f16 went unnoticed", name);
        pr.k_dtype = kt;
    }
    if (vt != KVQ_F16) { /* mutant: V read with the other type (a wrong scale for fp8/q8) */
        pr.v_dtype = vt == KVQ_Q8_0 ? KVQ_FP8 : KVQ_Q8_0;
        CHECKF(decode_attn_ref(&pr) == 0 && count_off(&p, o, o_ref, name, 0) > 0,
               "%s: V read as the other type went unnoticed", name);
    }
    free(q), free(o), free(o_ref), free(kc), free(vc), free(kf), free(vf), free(p.work);
}

/* The pool write (ops/gpu_kvq.cu) emulated against its twin, bit for bit:
 * 5 rows (one padding) of 2 KV heads through per-row tables, and a prefill
 * step's 2 sequences through theirs, K q8_0 rotated by rot_k, V fp8 (or f16)
 * by 64; the twin's q8_0 rows against ggml's quantizer (models/quant.c)
 * over the rotated row (ops_hadamard_rows), byte for byte; the Hadamard
 * kernel against its twin, and H H = I within f16 rounding. */
static void check_kvq_write(int64_t hd, int vt, int per_seq)
{
    uint64_t rng = (uint64_t)hd * 31 + (uint64_t)vt;
    enum { N = 5, HKV = 2, NB = 6 };
    const int64_t head_stride = 64 * hd, block_stride = HKV * head_stride;
    const size_t bytes = (size_t)kvq_region(NB * block_stride);
    uint16_t k[N * HKV * 512], v[N * HKV * 512];
    int32_t pos[N] = {3, 64, -1, 200, 127}, table[N * 4] = {0}, seqs[2 * 4] = {0, 2, 70, 0,
                                                                              2, 3, 125, 0};
    for (int t = 0; t < N * 4; t++)
        table[t] = (int32_t)((t * 7 + 3) % NB);
    fill_f16(k, N * HKV * hd, 3.0f, &rng);
    fill_f16(v, N * HKV * hd, 1.0f, &rng);
    unsigned char *kc[2] = {calloc(1, bytes), calloc(1, bytes)};
    unsigned char *vc[2] = {calloc(1, bytes * 2), calloc(1, bytes * 2)};
    struct gk_kvq_params p = {
        .k = k, .v = v, .n = N, .n_head_kv = HKV, .head_dim = hd, .pos = pos,
        .block_table = table, .table_stride = 4, .block_stride = block_stride,
        .head_stride = head_stride, .k_dtype = KVQ_Q8_0, .v_dtype = vt,
        .rot_k = kv_rotation(KV_Q8_0, hd, false), .rot_v = vt == KVQ_F16 ? 0 : 64};
    if (per_seq) { /* rows 0-1 sequence 0 at 70, rows 2-4 sequence 1 at 125 */
        p.seqs = seqs, p.n_seqs = 2;
        static int32_t pp[N] = {70, 71, 125, 126, 127};
        p.pos = pp;
    }
    for (int i = 0; i < 2; i++) {
        struct gk_kvq_params q = p;
        q.k_cache = kc[i], q.v_cache = vc[i];
        if (i)
            gk_kvq_write_ref(&q);
        else
            CHECK(gk_kvq_write_emu(&q, NULL) == 0);
    }
    CHECKF(!memcmp(kc[0], kc[1], bytes) && !memcmp(vc[0], vc[1], bytes * 2),
           "kvq write hd=%lld v=%d seqs=%d: kernel and twin differ", (long long)hd, vt, per_seq);
    /* row 0 (or sequence 0's first row), head 1, against ggml's quantizer */
    float x[512];
    for (int64_t d = 0; d < hd; d++)
        x[d] = ig_f16_to_f32(k[HKV * 0 * hd + hd + d]);
    ops_hadamard_rows(x, hd, p.rot_k);
    unsigned char ggml[16 * 34];
    quant_quantize_row(QUANT_Q8_0, x, ggml, hd);
    const int32_t pos0 = p.pos[0];
    const int32_t *tb = per_seq ? table : table;
    const int64_t e = tb[pos0 / 64] * block_stride + head_stride;
    int same = 1;
    for (int64_t b = 0; b < hd / 32; b++)
        same &= !memcmp(ggml + 34 * b, kc[0] + kvq_region(e) + kvq_scale_at(hd, pos0 % 64, 32 * b),
                        2) &&
                !memcmp(ggml + 34 * b + 2,
                        kc[0] + kvq_region(e) + kvq_quant_at(hd, pos0 % 64, 32 * b), 32);
    CHECKF(same, "kvq write hd=%lld: q8_0 row not ggml's bytes", (long long)hd);
    /* the padding row wrote nothing: row 2 (pos -1) of the per-row case */
    uint16_t h[2][8 * 512], h0[8 * 512];
    fill_f16(h0, 8 * hd, 2.0f, &rng);
    memcpy(h[0], h0, sizeof h0);
    memcpy(h[1], h0, sizeof h0);
    CHECK(gk_hadamard_f16_emu(h[0], 8, hd, 64, NULL) == 0);
    gk_hadamard_f16_ref(h[1], 8, hd, 64);
    CHECKF(!memcmp(h[0], h[1], (size_t)(8 * hd) * 2), "hadamard hd=%lld: kernel off the twin",
           (long long)hd);
    gk_hadamard_f16_ref(h[1], 8, hd, 64); /* H H = I */
    double worst = 0;
    for (int64_t i = 0; i < 8 * hd; i++) {
        const double d = fabs(ig_f16_to_f32(h[1][i]) - ig_f16_to_f32(h0[i]));
        worst = d > worst ? d : worst;
    }
    CHECKF(worst < 4e-3, "hadamard hd=%lld: H H off I by %.3g", (long long)hd, worst);
    free(kc[0]), free(kc[1]), free(vc[0]), free(vc[1]);
}

static void run_one(int64_t n_ctx, int64_t pos, int64_t group, int64_t n_head_kv, int64_t hd,
                    int n_splits, int64_t window, uint64_t seed)
{
    run_case(1, &pos, n_ctx, group, n_head_kv, hd, n_splits, window, 0, seed);
}

int main(void)
{
    /* 600 keys are 10 blocks, the last partial: 7 splits of 86 keys cross
     * block edges inside a split, 33 leave 23 of them empty, and one split
     * takes them all (1000 crossed the same edges at twice the cost).
     * The kernel's paths hang on three things apart: the head dim (its
     * instantiation), the (row, head) pairs of a block (the group: 1, 3
     * with a padding pair, 4, 8 on one KV head) and where the live keys
     * fall against block and split edges (pos, n_ctx, the split count).
     * So each pos of each n_ctx runs on two of the eight (group, head dim)
     * pairs, one of each head dim, rotating so that n_ctx 300 and 600 run
     * all eight, and the last position (every key) on four, one per split
     * count: 34 cases where the full product ran 128 (2026-12-07: the same
     * edges crossed at a fraction of the cost; see docs/gpu.md). */
    static const int64_t ctxs[] = {64, 300, 600};
    static const int64_t groups[] = {1, 3, 4, 8};
    static const int64_t hds[] = {64, 128};
    uint64_t seed = 1;
    for (int ci = 0; ci < 3; ci++) {
        const int64_t n_ctx = ctxs[ci];
        const int64_t poss[] = {0, 1, 63, 64, 299, n_ctx - 1};
        for (int pi = 0; pi < 6; pi++) {
            const int64_t pos = poss[pi];
            if (pos >= n_ctx || (pi < 5 && pos == n_ctx - 1)) /* n_ctx - 1: once, last */
                continue;
            /* Rotate the split counts over the cases; 128 splits (more
             * than needed) only while few are live: every live block
             * costs 128 fibers under emulation. */
            const int splits[] = {1, 7, decode_attn_choose_splits(n_ctx, 1, 2, 132),
                                  pos < 64 ? DECODE_ATTN_MAX_SPLITS : 33};
            for (int k = 0; k < (pos == n_ctx - 1 ? 4 : 2); k++) {
                const int c = (2 * pi + 3 * ci + 5 * k) % 8, gi = c / 2, hi = c % 2;
                const int64_t n_head_kv = groups[gi] == 8 ? 1 : 2;
                run_one(n_ctx, pos, groups[gi], n_head_kv, hds[hi], splits[(pi + ci + k) % 4],
                        0, seed++);
            }
        }
    }
    /* head_dim 256, Gemma 3's 4 query heads on 1 KV head: no window, and
     * windows with pos before, at and past their edge (W - 1, W, W + 1 and
     * far past, where the live keys straddle split boundaries; n_ctx 600
     * as above: 1000 crossed the same edges). */
    static const int64_t windows[] = {0, 16, 64, 200};
    for (int wi = 0; wi < 4; wi++) {
        const int64_t w = windows[wi];
        const int64_t poss[] = {w ? w - 1 : 5, w, w + 1, 299, 599};
        for (int pi = 0; pi < 5; pi++) {
            const int splits[] = {1, 7, decode_attn_choose_splits(600, 1, 1, 132), 33};
            run_one(600, poss[pi], 4, 1, 256, splits[(pi + wi) % 4], w, seed++);
        }
    }
    /* Batches: sequences of different lengths in one launch, a padding row
     * among them; each with the table mutant. */
    {
        static const int64_t b2[] = {64, 0};             /* 65 positions, 1 position */
        static const int64_t b3[] = {63, -1, 299};       /* the block edge, padding, 300 */
        static const int64_t b4[] = {0, 299, 64, 130};
        static const int64_t b5[] = {5, 64, -1, 63, 199};
        case_pdl = true; /* and as dependent launches: batches, a padding row */
        run_case(2, b2, 65, 4, 2, 128, -1, 0, 1, seed++);
        run_case(3, b3, 300, 1, 2, 64, -1, 0, 1, seed++);
        case_pdl = false;
        run_case(3, b3, 300, 8, 1, 128, 7, 0, 1, seed++);
        run_case(4, b4, 300, 3, 2, 64, 33, 0, 1, seed++);
        run_case(5, b5, 200, 4, 1, 256, -1, 0, 1, seed++);
        /* across a window's edge: 63 keys (inside), 64 (at), 65, 200 (past) */
        static const int64_t bw[] = {62, 63, 64, 199, -1};
        run_case(5, bw, 200, 4, 1, 256, -1, 64, 1, seed++);
        run_case(5, bw, 200, 2, 2, 128, 3, 64, 1, seed++);
    }
    /* Several query rows a sequence (a verify step: causal among them, row
     * r at pos + r), the rows across the block edge at 64 and the splits'
     * boundaries (33 splits: 64-key ranges), the first row at position 0,
     * a window's edge between the first and the last row, (row, head)
     * pairs over several row groups (gqa 4 x 5 rows: 3 blocks of 8 pairs;
     * gqa 3 x 5: a padding pair), 16 rows, and a batch with a sequence
     * half padding and one all padding (with the table mutant). */
    {
        static const int64_t p1[] = {60}, p0[] = {0}, p2[] = {126}, p3[] = {62};
        run_rows(1, p1, 2, NULL, 300, 1, 2, 64, 33, 0, 0, seed++);
        case_pdl = true; /* a verify step's rows, 33 splits, as dependent launches */
        run_rows(1, p2, 5, NULL, 300, 4, 1, 128, 33, 0, 0, seed++);
        case_pdl = false;
        run_rows(1, p0, 5, NULL, 300, 3, 2, 64, -1, 0, 0, seed++);
        run_rows(1, p1, 5, NULL, 300, 8, 1, 128, 7, 0, 0, seed++);
        run_rows(1, p3, 5, NULL, 200, 4, 1, 256, 33, 64, 0, seed++);
        run_rows(1, p2, 16, NULL, 300, 1, 1, 64, 33, 0, 0, seed++);
        static const int64_t pb[] = {130, 63, -1}, lb[] = {5, 2, 5};
        run_rows(3, pb, 5, lb, 300, 2, 2, 128, -1, 0, 1, seed++);
        run_rows(3, pb, 2, NULL, 300, 4, 1, 64, 33, 0, 1, seed++);
    }
    /* Head dim 512 (Gemma 4's global layers: 8 query heads on 1 KV head;
     * blocks of 2 pairs, two 16-byte chunks a lane): several splits; a
     * batch across a window's edge with a padding row (and the table
     * mutant); a verify step's rows of one query head. */
    {
        run_one(140, 139, 8, 1, 512, 3, 0, seed++);
        static const int64_t bw[] = {62, 100, -1}, pv[] = {62};
        run_case(3, bw, 101, 8, 1, 512, -1, 64, 1, seed++);
        run_rows(1, pv, 3, NULL, 70, 1, 2, 512, 2, 0, 0, seed++);
    }
    /* gpt-oss's sinks (head dim 64, 8 query heads a KV head, window 128 on
     * alternate layers): sinks above, near and below the scores, over
     * several splits (the sink joins once at the combine), within and past
     * a window, a verify step's rows, a batch with padding. */
    {
        static float sinks[32];
        for (int h = 0; h < 32; h++)
            sinks[h] = (float)(h % 4) * 1.5f - 1.5f; /* -1.5, 0, 1.5, 3 */
        case_sinks = sinks;
        run_one(300, 299, 8, 2, 64, 7, 0, seed++);
        run_one(300, 299, 8, 1, 64, 3, 128, seed++);
        static const int64_t p2[] = {126}, pb[] = {130, 63, -1};
        run_rows(1, p2, 3, NULL, 300, 4, 1, 64, 33, 128, 0, seed++);
        run_case(3, pb, 300, 8, 1, 64, -1, 0, 1, seed++);
        case_sinks = NULL;
    }
    /* Quantized pools (q8_0, fp8, mixed with f16): 2 sequences over
     * several splits and blocks, head dims 64, 128, 256 and 512 (Gemma 4's
     * global layers: a lane's two chunks of a row, 256 dims apart). */
    {
        static const int64_t pq[] = {299, 70}, p1[] = {130};
        run_quant(KVQ_Q8_0, KVQ_Q8_0, 2, pq, 300, 4, 64, 7, seed++);
        run_quant(KVQ_FP8, KVQ_FP8, 2, pq, 300, 2, 128, 33, seed++);
        run_quant(KVQ_Q8_0, KVQ_F16, 1, p1, 200, 4, 256, 3, seed++);
        run_quant(KVQ_F16, KVQ_FP8, 1, p1, 200, 1, 64, 2, seed++);
        check_kvq_write(64, KVQ_FP8, 0);
        check_kvq_write(128, KVQ_F16, 1);
        check_kvq_write(256, KVQ_Q8_0, 0);
        run_quant(KVQ_Q8_0, KVQ_FP8, 1, p1, 200, 2, 512, 3, seed++);
        check_kvq_write(512, KVQ_Q8_0, 1);
    }
    {
        struct decode_attn_params g = {.n_head = 12, .n_head_kv = 2, .q_len = 5};
        CHECK(decode_attn_block_pairs(&g) == 8 && decode_attn_row_groups(&g) == 4);
        g.q_len = 0;
        CHECK(decode_attn_block_pairs(&g) == 8 && decode_attn_row_groups(&g) == 1);
        g.n_head = 6; /* 3 pairs: a block of 8 (4 spills on sm_80) */
        CHECK(decode_attn_block_pairs(&g) == 8 && decode_attn_row_groups(&g) == 1);
        g.n_head = 4;
        CHECK(decode_attn_block_pairs(&g) == 2 && decode_attn_row_groups(&g) == 1);
        g.n_head = 8, g.n_head_kv = 1, g.head_dim = 512; /* blocks of 2 at 512 */
        CHECK(decode_attn_block_pairs(&g) == 2 && decode_attn_row_groups(&g) == 4);
    }
    /* The chooser: at least 64 keys per split, within the limits, fewer
     * splits when the sequences' KV heads already fill the device. */
    CHECK(decode_attn_choose_splits(64, 1, 8, 132) == 1);
    CHECK(decode_attn_choose_splits(1, 1, 8, 132) == 1);
    CHECK(decode_attn_choose_splits(32768, 1, 8, 132) == 66);
    CHECK(decode_attn_choose_splits(1 << 20, 1, 1, 132) == DECODE_ATTN_MAX_SPLITS);
    CHECK(decode_attn_choose_splits(32768, 4, 8, 132) == 17);
    CHECK(decode_attn_choose_splits(32768, 64, 8, 132) == 2);
    CHECK(decode_attn_choose_splits(32768, 256, 8, 132) == 1);
    CHECK(decode_attn_choose_splits(0, 0, 0, 0) == 1);
    return test_summary("test_decode_attn_emu");
}
