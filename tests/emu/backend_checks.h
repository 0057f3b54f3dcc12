/* tests/emu/backend_checks.h: the CUDA backend against the CPU backend, shared
 * by tests/emu/test_backend_emu.c (emulated, the real model),
 * tests/emu/test_backend_qemu.c (emulated kernels, small synthetic models)
 * and tests/gpu/test_backend_gpu.c / test_backend_qgpu.c (a GPU, synthetic
 * models): greedy steps fed with the CPU's choice (teacher forcing) must
 * give logits within the pair's bound and pick the same token unless the
 * CPU's top two are closer than twice the largest logit error (allow_ties);
 * two sequences in one step do the same; every row that wants logits gets
 * its own (run_all_rows); the exported
 * cache matches the CPU's; an imported cache continues exactly. Both sides
 * are a struct backend: the CUDA one built by IG_DEV(gpu_backend_create),
 * the emulated or the real entry. */
#ifndef IGNITE_TESTS_EMU_BACKEND_CHECKS_H
#define IGNITE_TESTS_EMU_BACKEND_CHECKS_H

#include "backend/backend.h"
#include "backend/gpu.h"
#include "core/status.h"
#include "core/timer.h"
#include "decode/sampler.h"
#include "tests/test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* f16 weights (--gpu-weights f16): weights, activations and the cache are
 * f16 on the device, each rounding 2^-11 relative; through 30 layers the
 * logits move by about 1e-2 of their largest magnitude at most. */
#define LOGIT_TOL 3e-2
/* Native weights: products of up to 8 rows quantize the activations to
 * int8 per 32 elements (ops/gpu_qmm.h, as the CPU's fast path does), so the
 * bounds are those tests/cpu/test_fast_forward.py holds the CPU's int8 path
 * to on the real model (whose residual outliers make blocks coarse):
 * max |dev - cpu| / max |cpu| <= 0.15 and NMSE <= 3e-2. */
#define LOGIT_TOL_INT8 0.15
#define NMSE_TOL_INT8 3e-2
#define N_STEPS 5
#define N_CTX 256

struct pair {
    struct backend *cpu, *dev;
    int32_t table[2][N_CTX / KV_BLOCK]; /* the two slots' blocks, the same on both */
    float *lc, *le;
    int64_t n_vocab;
    double tol;      /* max |dev - cpu| / max |cpu|; 0: LOGIT_TOL */
    double nmse_tol; /* sum (dev - cpu)^2 / sum cpu^2; 0: not checked */
    bool allow_ties; /* a top-1 within twice the largest logit error of the CPU's is a tie */
    double worst, worst_nmse; /* the largest errors seen */
    int64_t mixed_steps;      /* run_batch: the device's prefill steps whose one-row
                                 sequences took the decode attention (gpu_backend_info) */
};

/* Both backends over the same options but the device; slot 1's blocks after
 * slot 0's, in reverse. */
static inline void pair_init(struct pair *p, const struct backend_opts *cpu)
{
    for (int b = 0; b < N_CTX / KV_BLOCK; b++) {
        p->table[0][b] = b;
        p->table[1][b] = 2 * (N_CTX / KV_BLOCK) - 1 - b;
    }
    p->lc = malloc((size_t)(2 * p->n_vocab) * sizeof *p->lc);
    p->le = malloc((size_t)(2 * p->n_vocab) * sizeof *p->le);
    (void)cpu;
}

static inline void compare_rows(const float *le, const float *lc, struct pair *p, const char *what)
{
    double e = test_rel_err(le, lc, p->n_vocab), tol = p->tol ? p->tol : LOGIT_TOL;
    int64_t ac = test_argmax(lc, p->n_vocab), ae = test_argmax(le, p->n_vocab);
    CHECKF(e <= tol, "%s: logits relative error %.3e > %.1e", what, e, tol);
    double max_diff = 0, se = 0, sr = 0;
    for (int64_t i = 0; i < p->n_vocab; i++) {
        double d = (double)le[i] - lc[i];
        max_diff = fmax(max_diff, fabs(d));
        se += d * d;
        sr += (double)lc[i] * lc[i];
    }
    double nmse = sr > 0 ? se / sr : 0;
    if (p->nmse_tol)
        CHECKF(nmse <= p->nmse_tol, "%s: logits NMSE %.3e > %.1e", what, nmse, p->nmse_tol);
    bool tie = p->allow_ties && lc[ae] >= lc[ac] - 2 * max_diff;
    CHECKF(ac == ae || tie, "%s: top-1 %lld (CUDA backend) vs %lld (CPU)", what, (long long)ae,
           (long long)ac);
    p->worst = fmax(p->worst, e);
    p->worst_nmse = fmax(p->worst_nmse, nmse);
    fprintf(stderr, "%s: rel err %.2e, NMSE %.2e, top-1 %lld%s\n", what, e, nmse, (long long)ac,
            ac == ae ? "" : " (a tie)");
}

static inline void compare(struct pair *p, const char *what)
{
    compare_rows(p->le, p->lc, p, what);
}

/* Prefills ids in chunks of `chunk` into slot 0 of both, then N_STEPS greedy
 * steps fed with the CPU's choice (so both see the same tokens). */
static inline void run_prompt(struct pair *p, const int32_t *ids, int64_t n, int64_t chunk,
                       const char *name)
{
    char what[96];
    for (int64_t i = 0; i < n; i += chunk) {
        int64_t len = n - i < chunk ? n - i : chunk;
        int64_t t0 = ig_now_ns();
        CHECK(backend_run_seq(p->cpu, p->table[0], 0, ids + i, len, i, p->lc) == IG_OK);
        int64_t t1 = ig_now_ns();
        CHECK(backend_run_seq(p->dev, p->table[0], 0, ids + i, len, i, p->le) == IG_OK);
        fprintf(stderr, "prefill %lld: cpu %.0f ms, dev %.0f ms\n", (long long)len,
                (double)(t1 - t0) / 1e6, (double)(ig_now_ns() - t1) / 1e6);
    }
    snprintf(what, sizeof what, "%s prefill (%lld tokens)", name, (long long)n);
    compare(p, what);
    for (int s = 0; s < N_STEPS; s++) {
        int32_t tok = (int32_t)test_argmax(p->lc, p->n_vocab);
        int64_t pos = n + s;
        int64_t t0 = ig_now_ns();
        CHECK(backend_run_seq(p->cpu, p->table[0], 0, &tok, 1, pos, p->lc) == IG_OK);
        int64_t t1 = ig_now_ns();
        CHECK(backend_run_seq(p->dev, p->table[0], 0, &tok, 1, pos, p->le) == IG_OK);
        fprintf(stderr, "decode: cpu %.0f ms, dev %.0f ms\n", (double)(t1 - t0) / 1e6,
                (double)(ig_now_ns() - t1) / 1e6);
        snprintf(what, sizeof what, "%s decode step %d", name, s + 1);
        compare(p, what);
    }
}

/* Two sequences in every step: slot 1 prefills `ids` in chunks while slot 0
 * (holding n0 positions after run_prompt) decodes; then both decode
 * together. Each row's logits against the CPU's. */
static inline void run_two(struct pair *p, const int32_t *ids, int64_t n, int64_t chunk, int64_t n0)
{
    int64_t done = 0, pos0 = n0;
    int32_t tok0 = (int32_t)test_argmax(p->lc, p->n_vocab), tok1 = 0;
    char what[96];
    for (int step = 0; step < 6 && pos0 < N_CTX; step++) {
        int32_t tokens[N_CTX];
        struct backend_seq seqs[2];
        int64_t k = done < n ? (n - done < chunk ? n - done : chunk) : 1;
        tokens[0] = tok0;
        if (done < n)
            memcpy(tokens + 1, ids + done, (size_t)k * sizeof *tokens);
        else
            tokens[1] = tok1;
        seqs[0] = (struct backend_seq){.table = p->table[0], .slot = 0, .row0 = 0, .n_rows = 1,
                                       .pos0 = pos0};
        seqs[1] = (struct backend_seq){.table = p->table[1], .slot = 1, .row0 = 1, .n_rows = k,
                                       .pos0 = done};
        struct backend_batch b = {.tokens = tokens, .n_rows = 1 + k, .seqs = seqs, .n_seqs = 2};
        b.logits = p->lc;
        CHECK(backend_step(p->cpu, &b) == IG_OK);
        b.logits = p->le;
        CHECK(backend_step(p->dev, &b) == IG_OK);
        snprintf(what, sizeof what, "two sequences, step %d: decoding one", step);
        compare_rows(p->le, p->lc, p, what);
        snprintf(what, sizeof what, "two sequences, step %d: %s", step,
                 done < n ? "prefilling the other" : "decoding the other");
        compare_rows(p->le + p->n_vocab, p->lc + p->n_vocab, p, what);
        tok0 = (int32_t)test_argmax(p->lc, p->n_vocab);
        tok1 = (int32_t)test_argmax(p->lc + p->n_vocab, p->n_vocab);
        pos0++;
        done += k;
    }
}

/* Every row that wants logits gets its own (what `ignite perplexity` asks):
 * slot 0 refilled with ids from position 0 in two steps (the first of
 * `split` rows), a lone wanted row early, a run of 71 rows in the first
 * step (more than one GPU_HEAD_ROWS head GEMM), a run crossing into the
 * second step and the last row not wanted; each row against the CPU's.
 * (inline: not every includer runs it) */
static inline void run_all_rows(struct pair *p, const int32_t *ids, int64_t n, int64_t split)
{
    bool want[N_CTX] = {false};
    int64_t n_want = 0;
    for (int64_t i = 0; i < n - 1; i++) {
        want[i] = i == 3 || (i >= 20 && i <= 90) || i >= split - 4;
        n_want += want[i];
    }
    IG_ASSERT(n <= N_CTX && split > 95 && split < n - 2);
    float *lc = malloc((size_t)(n_want * p->n_vocab) * sizeof *lc);
    float *le = malloc((size_t)(n_want * p->n_vocab) * sizeof *le);
    CHECK(lc && le);
    if (!lc || !le)
        goto done;
    int64_t out = 0;
    for (int step = 0; step < 2; step++) {
        int64_t r0 = step ? split : 0, rows = step ? n - split : split, kw = 0;
        for (int64_t i = r0; i < r0 + rows; i++)
            kw += want[i];
        struct backend_seq s = {.table = p->table[0], .slot = 0, .row0 = 0, .n_rows = rows,
                                .pos0 = r0};
        struct backend_batch b = {.tokens = ids + r0, .want_logits = want + r0, .n_rows = rows,
                                  .seqs = &s, .n_seqs = 1};
        b.logits = lc + out * p->n_vocab;
        CHECK(backend_step(p->cpu, &b) == IG_OK);
        b.logits = le + out * p->n_vocab;
        CHECK(backend_step(p->dev, &b) == IG_OK);
        out += kw;
    }
    char what[96];
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!want[i])
            continue;
        snprintf(what, sizeof what, "every row's logits: row %lld of %lld", (long long)i,
                 (long long)n);
        compare_rows(le + k * p->n_vocab, lc + k * p->n_vocab, p, what);
        k++;
    }
    CHECK(k == out && k == n_want);
done:
    free(lc);
    free(le);
}

/* ---- a batch of requests (run_batch) ---------------------------------------------- */

#define BATCH_SLOTS 4
#define BATCH_ROWS 32   /* a step's token budget */
#define BATCH_CHUNK 24  /* most prompt rows of one sequence in a step */

struct batch_req {
    int32_t prompt[N_CTX];
    int64_t n_prompt, n_gen;   /* prompt tokens, tokens to generate */
    int64_t done;              /* positions cached (a shared prefix counts) */
    int64_t gen;               /* tokens generated so far */
    int32_t next;              /* the token it feeds back (the CPU's choice) */
    int32_t table[N_CTX / KV_BLOCK];
    int start;                 /* step it arrives at (-1: when r0's first block is full) */
    bool active, finished;
};

/* Four requests of different prompt lengths through one CUDA backend and
 * one CPU backend (options cpu/dev, both BATCH_SLOTS sequences, 4 *
 * BATCH_SLOTS blocks, BATCH_ROWS rows) fed the same steps, as generate/
 * schedules them: every step takes each decoding sequence's one row, then
 * prompt chunks of at most BATCH_CHUNK rows within the budget, so chunked
 * prefill shares steps with other sequences' decode rows; request 3
 * arrives once request 0's first block is full and shares it (its prompt
 * starts with the same 64 tokens: it prefills from position 64 through a
 * table whose block 0 is request 0's); request 1 generates fewer tokens and
 * leaves, so later decode steps have 4, 3, 2 and 1 sequences (buckets 4, 4
 * with a padding row, 2, 1). Every row that wants logits (a prompt's last,
 * every decode row) is compared with the CPU's (compare_rows: the pair's
 * bound, top-1 where the margin exceeds it) and the CPU's choice fed back
 * to both; each step runs again on each backend asking for greedy tokens
 * (the same K/V written again), each the sampler's greedy pick of the
 * logits that backend had returned. The steps with a one-row sequence
 * beside a chunk of more than 16 rows (prefill steps) must each have taken
 * the device's mixed route (gpu_backend_info.mixed_steps, twice a step;
 * none under IGNITE_GPU_MIXED=0), left in p->mixed_steps. *n_buckets:
 * how many decode buckets the steps used; *n_graphs: the graphs the
 * device backend holds after (gpu_get_info: one per bucket
 * where the device captures them, none under the emulator). ids: at least
 * 200 ids. */
static inline void run_batch(struct pair *p, const struct model *m,
                             const struct backend_opts *cpu, const struct backend_opts *dev,
                             const int32_t *ids, int *n_buckets, int *n_graphs)
{
    struct backend *bc = NULL, *bd = NULL;
    CHECK(backend_create(m, cpu, &bc) == IG_OK);
    CHECK(IG_DEV(gpu_backend_create)(m, dev, &bd) == IG_OK);
    CHECK(cpu->n_slots == BATCH_SLOTS && dev->n_slots == BATCH_SLOTS &&
          dev->n_blocks == 4 * BATCH_SLOTS && dev->max_rows == BATCH_ROWS);
    static struct batch_req req[BATCH_SLOTS];
    static const int64_t n_prompt[BATCH_SLOTS] = {70, 23, 40, 74};
    static const int64_t n_gen[BATCH_SLOTS] = {6, 4, 7, 5};
    static const int start[BATCH_SLOTS] = {0, 0, 1, -1};
    float *lc = malloc((size_t)(BATCH_SLOTS * p->n_vocab) * sizeof *lc);
    float *le = malloc((size_t)(BATCH_SLOTS * p->n_vocab) * sizeof *le);
    bool used[8] = {false};
    int64_t n_mixed = 0; /* steps that must take the mixed route */
    *n_buckets = *n_graphs = 0;
    if (!bc || !bd || !lc || !le)
        goto done;
    for (int r = 0; r < BATCH_SLOTS; r++) {
        struct batch_req *q = &req[r];
        *q = (struct batch_req){.n_prompt = n_prompt[r], .n_gen = n_gen[r], .start = start[r]};
        /* r3: r0's first 64 tokens, then its own */
        for (int64_t i = 0; i < q->n_prompt; i++)
            q->prompt[i] = r == 3 && i < KV_BLOCK ? ids[i] : ids[(r * 50 + i) % 200];
        for (int b = 0; b < N_CTX / KV_BLOCK; b++) /* scattered, in reverse */
            q->table[b] = 4 * BATCH_SLOTS - 1 - (b * BATCH_SLOTS + r);
    }
    req[3].table[0] = req[0].table[0];
    char what[96];
    for (int step = 0; step < 64; step++) {
        int32_t tokens[BATCH_ROWS];
        bool want[BATCH_ROWS];
        struct backend_seq seqs[BATCH_SLOTS];
        int who[BATCH_SLOTS];
        int64_t rows = 0, ns = 0, n_dec = 0;
        for (int r = 0; r < BATCH_SLOTS; r++) {
            struct batch_req *q = &req[r];
            if (!q->active && !q->finished &&
                (q->start >= 0 ? step >= q->start : req[0].done >= KV_BLOCK)) {
                q->active = true;
                if (r == 3)
                    q->done = KV_BLOCK; /* the shared block is in place */
            }
        }
        /* decoding sequences first (one row each), then prompt chunks */
        for (int pass = 0; pass < 2; pass++)
            for (int r = 0; r < BATCH_SLOTS; r++) {
                struct batch_req *q = &req[r];
                bool decoding = q->done >= q->n_prompt;
                if (!q->active || decoding != (pass == 0) || rows == BATCH_ROWS)
                    continue;
                int64_t k = decoding ? 1 : q->n_prompt - q->done;
                k = k < BATCH_CHUNK ? k : BATCH_CHUNK;
                k = k < BATCH_ROWS - rows ? k : BATCH_ROWS - rows;
                for (int64_t i = 0; i < k; i++) {
                    tokens[rows + i] = decoding ? q->next : q->prompt[q->done + i];
                    want[rows + i] = false;
                }
                want[rows + k - 1] = decoding || q->done + k == q->n_prompt;
                seqs[ns] = (struct backend_seq){.table = q->table, .slot = r, .row0 = rows,
                                                .n_rows = k, .pos0 = q->done};
                who[ns++] = r;
                rows += k;
                n_dec += decoding;
            }
        if (ns == 0)
            break;
        bool one_row = false, long_seq = false; /* long: past a verify step's 16 rows */
        for (int64_t i = 0; i < ns; i++) {
            one_row |= seqs[i].n_rows == 1;
            long_seq |= seqs[i].n_rows > 16;
        }
        n_mixed += one_row && long_seq; /* a prefill step with one-row sequences */
        if (n_dec == ns) {
            int bk = 0;
            while (((int64_t)1 << bk) < ns)
                bk++;
            *n_buckets += !used[bk];
            used[bk] = true;
        }
        struct backend_batch b = {.tokens = tokens, .want_logits = want, .n_rows = rows,
                                  .seqs = seqs, .n_seqs = ns};
        b.logits = lc;
        CHECK(backend_step(bc, &b) == IG_OK);
        b.logits = le;
        CHECK(backend_step(bd, &b) == IG_OK);
        /* The same step again asking for greedy tokens (the pool gets the
         * same K/V): each the greedy token of the logits just returned. */
        int32_t greedy[BATCH_SLOTS] = {0};
        int64_t n_want = 0;
        for (int64_t r = 0; r < rows; r++)
            n_want += want[r];
        b.logits = NULL;
        b.greedy = greedy;
        CHECK(backend_step(bd, &b) == IG_OK);
        for (int64_t k = 0; k < n_want; k++)
            CHECKF(greedy[k] == sampler_greedy(le + k * p->n_vocab, p->n_vocab),
                   "batch step %d: row %lld's greedy token %d, its logits' %d", step,
                   (long long)k, greedy[k], sampler_greedy(le + k * p->n_vocab, p->n_vocab));
        CHECK(backend_step(bc, &b) == IG_OK); /* the CPU's, from its own logits */
        for (int64_t k = 0; k < n_want; k++)
            CHECKF(greedy[k] == sampler_greedy(lc + k * p->n_vocab, p->n_vocab),
                   "batch step %d: the CPU's greedy token %d of row %lld, its logits' %d",
                   step, greedy[k], (long long)k,
                   sampler_greedy(lc + k * p->n_vocab, p->n_vocab));
        int64_t out = 0;
        for (int64_t i = 0; i < ns; i++) {
            struct batch_req *q = &req[who[i]];
            const struct backend_seq *s = &seqs[i];
            bool decoding = q->done >= q->n_prompt;
            q->done += s->n_rows;
            if (!want[s->row0 + s->n_rows - 1])
                continue;
            snprintf(what, sizeof what, "batch step %d (%lld sequences, %lld rows): request %d %s",
                     step, (long long)ns, (long long)rows, who[i],
                     decoding ? "decoding" : "prompt's last row");
            compare_rows(le + out * p->n_vocab, lc + out * p->n_vocab, p, what);
            q->next = (int32_t)test_argmax(lc + out * p->n_vocab, p->n_vocab);
            out++;
            if (decoding && ++q->gen == q->n_gen) {
                q->active = false;
                q->finished = true;
            }
        }
    }
    for (int r = 0; r < BATCH_SLOTS; r++)
        CHECKF(req[r].finished, "batch: request %d did not finish", r);
    struct gpu_backend_info info;
    IG_DEV(gpu_get_info)(bd, &info);
    *n_graphs = info.graphs;
    /* Each such step ran twice (logits, then greedy tokens). With
     * IGNITE_GPU_MIXED=0 none takes the route. */
    const char *mixed = getenv("IGNITE_GPU_MIXED");
    const bool off = mixed && !strcmp(mixed, "0");
    p->mixed_steps = info.mixed_steps;
    CHECKF(n_mixed > 0, "batch: no step mixes one-row sequences with a long chunk");
    CHECKF(off ? info.mixed_steps == 0 : info.mixed_steps >= 2 * n_mixed,
           "batch: %lld prefill steps took the mixed route, expected %s %lld",
           (long long)info.mixed_steps, off ? "exactly" : "at least",
           off ? 0LL : 2 * (long long)n_mixed);
done:
    free(lc);
    free(le);
    backend_free(bc);
    backend_free(bd);
}

/* Slot 0's cache exported from the device against the CPU's f32 cache. */
static inline void compare_caches(struct pair *p, const struct model *m, int64_t n_pos)
{
    struct backend_seq s = {.table = p->table[0], .slot = 0};
    const struct kv_store *ref, *dl;
    const int32_t *tr, *td;
    int64_t slot;
    CHECK(backend_kv_export(p->cpu, &s, n_pos, &ref, &tr, &slot) == IG_OK);
    CHECK(backend_kv_export(p->dev, &s, n_pos, &dl, &td, &slot) == IG_OK);
    double max_err = 0, max_ref = 0;
    float a[512], b[512]; /* a K row: head dims up to 512 */
    for (int64_t l = 0; l < m->hp.n_layer; l++) {
        struct kv_layout lr = kv_store_layout(ref, l), ld = kv_store_layout(dl, l);
        const struct model_layer *L = &m->layers[l]; /* the layer's own KV shape */
        for (int64_t h = 0; h < L->n_head_kv; h++)
            for (int64_t pos = 0; pos < n_pos; pos++) {
                kv_row_to_f32(lr.dtype, kv_row(&lr, lr.k, tr, h, pos), L->head_dim, a);
                kv_row_to_f32(ld.dtype, kv_row(&ld, ld.k, td, h, pos), L->head_dim, b);
                for (int64_t d = 0; d < L->head_dim; d++) {
                    max_err = fmax(max_err, fabs((double)a[d] - b[d]));
                    max_ref = fmax(max_ref, fabs((double)a[d]));
                }
            }
    }
    CHECKF(max_err <= (p->tol ? p->tol : LOGIT_TOL) * max_ref, "exported K cache: max error %.3e of %.3e", max_err,
           max_ref);
    fprintf(stderr, "K cache: max error %.2e of max |K| %.2e\n", max_err, max_ref);
}

/* A fresh device backend given slot 0's exported cache (in slot 1)
 * continues exactly as the original does. */
static inline void check_upload(struct pair *p, const struct model *m, const struct backend_opts *o,
                         int64_t n_pos)
{
    struct backend *fresh = NULL;
    struct backend_seq s0 = {.table = p->table[0], .slot = 0};
    struct backend_seq s1 = {.table = p->table[1], .slot = 1};
    const struct kv_store *dl;
    const int32_t *td;
    int64_t slot;
    struct kv_store *copy = NULL;
    CHECK(IG_DEV(gpu_backend_create)(m, o, &fresh) == IG_OK);
    CHECK(backend_kv_export(p->dev, &s0, n_pos, &dl, &td, &slot) == IG_OK);
    CHECK(kv_store_create(dl->memory, kv_blocks_for(n_pos), 0, NULL, &copy) == IG_OK);
    if (!fresh || !copy)
        goto done;
    int32_t ident[N_CTX / KV_BLOCK];
    kv_identity_table(ident, kv_blocks_for(n_pos));
    kv_copy_seq(copy, ident, 0, dl, td, slot, n_pos);
    CHECK(backend_kv_import(fresh, &s1, copy, n_pos) == IG_OK);
    int32_t tok = 42;
    CHECK(backend_run_seq(p->dev, p->table[0], 0, &tok, 1, n_pos, p->le) == IG_OK);
    CHECK(backend_run_seq(fresh, p->table[1], 1, &tok, 1, n_pos, p->lc) == IG_OK);
    CHECKF(memcmp(p->lc, p->le, (size_t)p->n_vocab * sizeof *p->lc) == 0,
           "imported cache: logits differ (rel err %.3e)", test_rel_err(p->lc, p->le, p->n_vocab));
done:
    kv_store_free(copy);
    backend_free(fresh);
}

#endif
