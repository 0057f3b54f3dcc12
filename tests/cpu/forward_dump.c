/* tests/cpu/forward_dump.c: a test tool that runs the CPU forward on fixed
 * token ids and writes the logits for tests/cpu/test_forward_ref.py to
 * compare with the numpy reference (it also serves as a small benchmark).
 *
 *   forward_dump [-m MODEL] [-o OUT] [-d IDS] [-g N] [-t THREADS] [-c CHUNK[,CHUNK...]]
 *                [-s STATE] [-a] [--f16] [-w] PROMPT_IDS
 *
 * Runs the CPU backend: prefills PROMPT_IDS (comma-separated; in steps of
 * CHUNK rows if given, or of the list's sizes in turn, the last one
 * repeated; each step's rows a prompt's), then one decode step per id of -d, then N greedy decode steps (each feeds
 * the argmax of the previous logits). OUT receives the float32 logits of the
 * last prefill position (-a: of every prompt position) and of every decode
 * step, back to back; STATE the
 * recurrent layers' states after the prompt (each layer's state_bytes, in
 * layer order). The greedy
 * tokens go to stdout, one line "greedy: a b c"; timings to stderr. With -w
 * the window rule (kvcache.h): the sliding-window layers' blocks come from
 * a pool's window side, given back as the sequence moves on; stdout gets a
 * line "window: blocks B cap C peak P freed F used U" (the pool's counts
 * after the last step). Under
 * mpirun the ranks run it tensor-parallel (backend/tp.h): rank 0 as above,
 * the others follow (tests/tp/). */
#include "backend/backend.h"
#include "backend/tp.h"
#include "core/coll.h"
#include "core/status.h"
#include "core/timer.h"
#include "kvcache/kvcache.h"
#include "models/model.h"
#include "tests/cpu/model_path.h"
#include "tests/test.h"

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IDS 8192
#define MAX_CUTS 64

static int write_logits(FILE *f, const float *logits, int64_t n)
{
    if (f && fwrite(logits, sizeof(float), (size_t)n, f) != (size_t)n)
        return ig_error(IG_E_IO, "short write of logits");
    return IG_OK;
}

/* Runs tokens [0, n) at pos0 in blocks `table`, a prompt's rows or a decode
 * row; want: NULL (the last row's logits) or every row's. */
static int run_seq(struct backend *be, const int32_t *table, const int32_t *tokens, int64_t n,
                   int64_t pos0, bool prompt, bool more, const bool *want, float *logits)
{
    struct backend_seq bs = {.table = table, .n_rows = n, .pos0 = pos0, .prompt = prompt,
                             .more = prompt && more};
    struct backend_batch batch = {.tokens = tokens, .n_rows = n, .seqs = &bs, .n_seqs = 1,
                                  .want_logits = want, .logits = logits};
    return backend_step(be, &batch);
}

/* Writes the recurrent layers' states of the sequence (n_pos positions). */
static int write_states(struct backend *be, const int32_t *table, int64_t n_pos,
                        const char *path)
{
    struct backend_seq bs = {.table = table, .n_rows = 1, .pos0 = n_pos - 1};
    const struct kv_store *kv;
    const int32_t *t;
    int64_t slot;
    int st = backend_kv_export(be, &bs, n_pos, &kv, &t, &slot);
    FILE *f = st == IG_OK ? fopen(path, "wb") : NULL;
    if (st == IG_OK && !f)
        return ig_error(IG_E_IO, "cannot open %s", path);
    for (int64_t l = 0; st == IG_OK && l < kv->memory->n_layer; l++) {
        const struct kv_layer_mem *L = &kv->memory->layers[l];
        if (L->kind == KV_RECURRENT &&
            fwrite(kv_store_state(kv, l, slot), 1, L->state_bytes, f) != L->state_bytes)
            st = ig_error(IG_E_IO, "short write of %s", path);
    }
    if (f && fclose(f) != 0 && st == IG_OK)
        st = ig_error(IG_E_IO, "cannot write %s", path);
    return st;
}

/* Runs tokens [0, n) at pos0 through the pool (window rule): the tables
 * grown (window blocks behind the rows' windows given back), one step. */
static int run_pooled(struct backend *be, struct kv_pool *pool, struct kv_seq *seq,
                      const int32_t *tokens, int64_t n, int64_t pos0, bool prompt,
                      bool more, float *logits)
{
    kv_pool_grow(pool, seq, pos0 + n);
    struct backend_seq bs = {.table = seq->table, .wtable = seq->wtable, .n_rows = n,
                             .pos0 = pos0, .prompt = prompt, .more = prompt && more};
    struct backend_batch batch = {.tokens = tokens, .n_rows = n, .seqs = &bs, .n_seqs = 1,
                                  .logits = logits};
    int st = backend_step(be, &batch);
    seq->n_pos = pos0 + n;
    return st;
}

static int dump_main(int argc, char **argv)
{
    char model_path[4096] = "";
    const char *out_path = NULL, *decode_arg = "", *chunk_arg = "", *state_path = NULL;
    int64_t n_greedy = 0, chunk = 0;
    int n_threads = 0;
    enum kv_dtype kv_dtype = KV_F32;
    bool window_rule = false, all_rows = false;
    static const struct option longopts[] = {
        {"f16", no_argument, NULL, 'f'}, {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "m:o:d:g:t:c:s:aw", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': snprintf(model_path, sizeof model_path, "%s", optarg); break;
        case 'o': out_path = optarg; break;
        case 'd': decode_arg = optarg; break;
        case 'g': n_greedy = atoll(optarg); break;
        case 't': n_threads = atoi(optarg); break;
        case 'c': chunk_arg = optarg; break;
        case 's': state_path = optarg; break;
        case 'a': all_rows = true; break;
        case 'f': kv_dtype = KV_F16; break;
        case 'w': window_rule = true; break;
        default: return IG_E_USAGE;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "usage: forward_dump [-m MODEL] [-o OUT] [-d IDS] [-g N] [-t THREADS] "
                        "[-c CHUNK[,CHUNK...]] [-s STATE] [-a] [--f16] [-w] PROMPT_IDS\n");
        return IG_E_USAGE;
    }
    if (!model_path[0] && test_model_path(model_path, sizeof model_path) != 0)
        return TEST_SKIP;

    static int32_t prompt[MAX_IDS], fixed[MAX_IDS], cuts[MAX_CUTS];
    int64_t n_prompt = test_parse_ids(argv[optind], prompt, MAX_IDS);
    int64_t n_fixed = test_parse_ids(decode_arg, fixed, MAX_IDS);
    int64_t n_cuts = test_parse_ids(chunk_arg, cuts, MAX_CUTS);
    if (n_prompt < 1 || n_fixed < 0 || n_cuts < 0)
        return ig_error(IG_E_USAGE, "bad token id list");
    for (int64_t i = 0; i < n_cuts; i++) {
        if (cuts[i] < 1)
            return ig_error(IG_E_USAGE, "bad chunk size %d", (int)cuts[i]);
        chunk = cuts[i] > chunk ? cuts[i] : chunk;
    }
    if (!n_cuts || chunk > n_prompt)
        chunk = n_prompt;
    if (all_rows && window_rule)
        return ig_error(IG_E_USAGE, "-a and -w: not together");

    struct model *m = NULL;
    struct backend *be = NULL;
    int32_t *table = NULL;
    float *logits = NULL;
    struct kv_pool *pool = NULL;
    struct kv_seq seq = {0};
    FILE *out = NULL;
    int st = model_load(model_path, &m);
    if (st != IG_OK)
        return st;
    int64_t n_ctx = n_prompt + n_fixed + n_greedy;
    struct backend_opts bo = {.device = {.kind = BACKEND_CPU}, .n_threads = n_threads,
                              .n_ctx = n_ctx, .max_rows = chunk, .n_slots = 1,
                              .kv_dtype = kv_dtype, .kv_dtype_v = kv_dtype,
                              .free_window_blocks = window_rule};
    if ((st = backend_create(m, &bo, &be)) != IG_OK)
        goto done;
    int64_t w_cap = kv_memory_window_cap(be->kv_mem, n_ctx, chunk);
    if (window_rule &&
        ((st = kv_pool_create_windowed(be->o.n_blocks, be->n_states, false,
                                       be->o.n_window_blocks, be->kv_mem->window_max - 1,
                                       w_cap, &pool)) != IG_OK ||
         (st = kv_seq_init(&seq, n_ctx)) != IG_OK ||
         (st = kv_pool_admit(pool, &seq, NULL, 0, n_ctx)) != IG_OK))
        goto done;
    static bool want[MAX_IDS];
    for (int64_t i = 0; i < chunk; i++)
        want[i] = true;
    logits = malloc((size_t)(all_rows ? chunk : 1) * (size_t)m->hp.n_vocab * sizeof *logits);
    table = malloc((size_t)kv_blocks_for(n_ctx) * sizeof *table);
    if (!logits || !table) {
        st = ig_error(IG_E_NOMEM, "out of memory");
        goto done;
    }
    if (out_path && !(out = fopen(out_path, "wb"))) {
        st = ig_error(IG_E_IO, "cannot open %s", out_path);
        goto done;
    }

    kv_identity_table(table, kv_blocks_for(n_ctx));
    int64_t t0 = ig_now_ns();
    int64_t n = 0;
    for (int64_t p = 0, i = 0; p < n_prompt && st == IG_OK; p += n, i++) {
        n = n_cuts ? cuts[i < n_cuts ? i : n_cuts - 1] : chunk;
        n = n_prompt - p < n ? n_prompt - p : n;
        bool more = p + n < n_prompt; /* a cut inside a chunk keeps the checkpoint */
        st = pool ? run_pooled(be, pool, &seq, prompt + p, n, p, true, more, logits)
                  : run_seq(be, table, prompt + p, n, p, true, more, all_rows ? want : NULL,
                            logits);
        if (st == IG_OK && all_rows)
            st = write_logits(out, logits, n * m->hp.n_vocab);
    }
    int64_t t1 = ig_now_ns();
    if (st != IG_OK || (!all_rows && (st = write_logits(out, logits, m->hp.n_vocab)) != IG_OK))
        goto done;
    if (all_rows) /* the last position's, for the greedy steps */
        memmove(logits, logits + (n - 1) * m->hp.n_vocab, (size_t)m->hp.n_vocab * sizeof *logits);
    if (state_path && (st = write_states(be, pool ? seq.table : table, n_prompt,
                                         state_path)) != IG_OK)
        goto done;

    int64_t pos = n_prompt;
    int64_t t2 = ig_now_ns();
    for (int64_t i = 0; i < n_fixed && st == IG_OK; i++, pos++)
        if ((st = pool ? run_pooled(be, pool, &seq, &fixed[i], 1, pos, false, false, logits)
                       : run_seq(be, table, &fixed[i], 1, pos, false, false, NULL, logits)) == IG_OK)
            st = write_logits(out, logits, m->hp.n_vocab);
    if (n_greedy > 0)
        printf("greedy:");
    for (int64_t i = 0; i < n_greedy && st == IG_OK; i++, pos++) {
        int32_t tok = test_argmax(logits, m->hp.n_vocab);
        printf(" %ld", (long)tok);
        if ((st = pool ? run_pooled(be, pool, &seq, &tok, 1, pos, false, false, logits)
                       : run_seq(be, table, &tok, 1, pos, false, false, NULL, logits)) == IG_OK)
            st = write_logits(out, logits, m->hp.n_vocab);
    }
    if (n_greedy > 0)
        printf("\n");
    if (pool)
        printf("window: blocks %lld cap %lld peak %lld freed %lld used %lld\n",
               (long long)kv_pool_window_blocks(pool), (long long)w_cap,
               (long long)kv_pool_window_peak(pool), (long long)kv_pool_window_freed(pool),
               (long long)kv_pool_window_used(pool));
    int64_t t3 = ig_now_ns();
    if (st != IG_OK)
        goto done;

    int64_t n_dec = n_fixed + n_greedy;
    fprintf(stderr, "forward_dump: %d threads, prefill %lld tokens in %.3f s (%.1f tok/s)",
            be->threads, (long long)n_prompt, (double)(t1 - t0) * 1e-9,
            (double)n_prompt / ((double)(t1 - t0) * 1e-9));
    if (n_dec > 0)
        fprintf(stderr, ", decode %lld tokens in %.3f s (%.1f tok/s)", (long long)n_dec,
                (double)(t3 - t2) * 1e-9, (double)n_dec / ((double)(t3 - t2) * 1e-9));
    fprintf(stderr, "\n");

done:
    if (out && fclose(out) != 0 && st == IG_OK)
        st = ig_error(IG_E_IO, "cannot write %s", out_path);
    free(logits);
    free(table);
    if (pool)
        kv_pool_release(pool, &seq);
    kv_seq_destroy(&seq);
    kv_pool_free(pool);
    backend_free(be);
    model_free(m);
    return st;
}

int main(int argc, char **argv)
{
    int st = ig_coll_start(&argc, &argv);
    if (st != IG_OK)
        return st;
    st = ig_coll_rank() == 0 ? dump_main(argc, argv) : backend_tp_follow();
    backend_tp_end();
    ig_coll_finish();
    return st;
}
