/* bench/bench_grammar.c: what a grammar costs per generated token, next to
 * the decode step it rides on (docs/benchmarks.md, "Constrained
 * generation").
 *
 *   bench_grammar [-m MODEL] [-v OTHER.gguf] [-n TOKENS] [-t THREADS] SCHEMA.json...
 *
 * For each schema it generates with MODEL under the schema's grammar
 * (temperature 0.8, seeds 1, 2, ...; a fresh matcher each time, as `ignite
 * run` has) until TOKENS tokens (default 200) were generated, timing every
 * decode step, every mask (grammar_matcher_mask) and every accept. With -v,
 * each generated text is also tokenized with OTHER's vocabulary and replayed
 * through a fresh matcher over that vocabulary (a 262k-entry vocabulary, say,
 * whose model ignite cannot run), timing its masks the same way. Prints mean,
 * median, p99 and max per kind and vocabulary. */
#include "backend/backend.h"
#include "core/paths.h"
#include "core/status.h"
#include "core/timer.h"
#include "cli/cli.h"
#include "decode/sampler.h"
#include "grammar/grammar.h"
#include "models/gguf.h"
#include "models/model.h"
#include "ops/ops.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct series {
    double *v;
    int64_t n, cap;
};

static void add(struct series *s, double x)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 1024;
        s->v = realloc(s->v, (size_t)s->cap * sizeof *s->v);
        IG_ASSERT(s->v);
    }
    s->v[s->n++] = x;
}

/* CPU time of this thread: on a shared machine a wall-clock interval also
 * holds the time other jobs had the core. */
static int64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Prints "name: n, mean, p50, p99, max" in ms; returns the mean. */
static double report(const char *name, struct series *s, double *p99_out)
{
    if (!s->n) {
        printf("%-28s  no samples\n", name);
        return 0;
    }
    qsort(s->v, (size_t)s->n, sizeof *s->v, cmp_d);
    double sum = 0;
    for (int64_t i = 0; i < s->n; i++)
        sum += s->v[i];
    double mean = sum / (double)s->n, p50 = s->v[s->n / 2];
    double p99 = s->v[(int64_t)((double)(s->n - 1) * 0.99 + 0.5)];
    printf("%-28s  n %5lld  mean %8.4f  p50 %8.4f  p99 %8.4f  max %8.4f ms\n", name,
           (long long)s->n, mean, p50, p99, s->v[s->n - 1]);
    if (p99_out)
        *p99_out = p99;
    return mean;
}

/* Replays text through a fresh matcher over another vocabulary. */
static void replay(const struct grammar *g, struct tok_vocab *v, const struct grammar_vocab *gv,
                   const char *text, size_t len, float *logits, struct series *mask,
                   struct series *mask_cpu, struct series *accept)
{
    struct tok_ids ids = {0};
    IG_ASSERT(tok_encode(v, text, len, 0, &ids) == IG_OK);
    struct grammar_matcher *m;
    IG_ASSERT(grammar_matcher_create(g, gv, true, &m) == IG_OK);
    for (int64_t i = 0; i < ids.n; i++) {
        int64_t c0 = cpu_ns(), t0 = ig_now_ns();
        grammar_matcher_mask(m, logits);
        int64_t t1 = ig_now_ns(), c1 = cpu_ns();
        int st = grammar_matcher_accept(m, ids.ids[i]);
        int64_t t2 = ig_now_ns();
        if (st != IG_OK)
            break; /* a tokenization the grammar's masks never offered: stop here */
        add(mask, (double)(t1 - t0) / 1e6);
        add(mask_cpu, (double)(c1 - c0) / 1e6);
        add(accept, (double)(t2 - t1) / 1e6);
    }
    grammar_matcher_free(m);
    tok_ids_free(&ids);
}

int main(int argc, char **argv)
{
    const char *model_path = NULL, *other_path = NULL;
    int64_t want = 200, threads = 0;
    int opt;
    while ((opt = getopt(argc, argv, "m:v:n:t:")) != -1) {
        switch (opt) {
        case 'm': model_path = optarg; break;
        case 'v': other_path = optarg; break;
        case 'n':
            if (cli_parse_i64("-n", optarg, 1, 1 << 20, &want) != IG_OK)
                return 2;
            break;
        case 't':
            if (cli_parse_i64("-t", optarg, 0, OPS_POOL_MAX_THREADS, &threads) != IG_OK)
                return 2;
            break;
        default:
            fprintf(stderr, "usage: bench_grammar [-m MODEL] [-v OTHER.gguf] [-n N] [-t T] "
                            "SCHEMA.json...\n");
            return 2;
        }
    }
    char path[4096];
    if (cli_model_path(model_path, path, sizeof path) != IG_OK)
        return 2;
    struct model *m;
    struct tok_vocab *vocab;
    if (model_load(path, &m) != IG_OK || tok_load_model(m, &vocab) != IG_OK)
        return 4;
    struct grammar_vocab *gv;
    IG_ASSERT(grammar_vocab_build(vocab, &gv) == IG_OK);
    struct gguf_file *of = NULL;
    struct tok_vocab *ov = NULL;
    struct grammar_vocab *ogv = NULL;
    float *ologits = NULL;
    if (other_path) {
        if (gguf_open(other_path, &of, NULL) != IG_OK || tok_load_gguf(of, &ov) != IG_OK)
            return 4;
        int64_t t0 = ig_now_ns();
        IG_ASSERT(grammar_vocab_build(ov, &ogv) == IG_OK);
        printf("other vocabulary: %lld tokens, trie built in %.1f ms\n",
               (long long)tok_n_tokens(ov), (double)(ig_now_ns() - t0) / 1e6);
        ologits = calloc((size_t)tok_n_tokens(ov), sizeof *ologits);
    }
    struct backend_opts bo = {.n_threads = (int)threads, .n_ctx = 1024, .max_rows = 512,
                              .n_slots = 1, .kv_dtype = KV_F32};
    IG_ASSERT(backend_parse_device("cpu", &bo.device) == IG_OK);
    struct backend *be;
    if (backend_create(m, &bo, &be) != IG_OK)
        return 5;
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof *logits);
    int32_t table[1024 / KV_BLOCK];
    kv_identity_table(table, 1024 / KV_BLOCK);
    IG_ASSERT(logits);
    static const char prompt[] = "Here is one JSON object with realistic values:\n";
    struct tok_ids pids = {0};
    IG_ASSERT(tok_encode(vocab, prompt, sizeof prompt - 1, TOK_ENC_ADD_BOS, &pids) == IG_OK);

    struct series dec = {0}, mask = {0}, acc = {0}, omask = {0}, oacc = {0};
    struct series dec_cpu = {0}, mask_cpu = {0}, omask_cpu = {0};
    char *text = malloc(1 << 20);
    IG_ASSERT(text);
    for (int a = optind; a < argc; a++) {
        char *schema;
        size_t slen;
        struct grammar *g;
        if (cli_read_file(argv[a], &schema, &slen) != IG_OK ||
            grammar_from_json_schema(schema, slen, argv[a], &g) != IG_OK)
            return 2;
        free(schema);
        int64_t got = 0;
        for (uint64_t seed = 1; got < want; seed++) {
            struct sampler_params sp = sampler_default_params();
            sp.seed = seed;
            struct sampler *smp;
            struct grammar_matcher *gm;
            IG_ASSERT(sampler_create(&sp, tok_n_tokens(vocab), &smp) == IG_OK);
            IG_ASSERT(grammar_matcher_create(g, gv, true, &gm) == IG_OK);
            IG_ASSERT(backend_run_seq(be, table, 0, pids.ids, pids.n, 0, logits) == IG_OK);
            int64_t pos = pids.n;
            size_t tlen = 0;
            char piece[1024];
            for (; got < want;) {
                int64_t c0 = cpu_ns(), t0 = ig_now_ns();
                int64_t allowed = grammar_matcher_mask(gm, logits);
                int64_t t1 = ig_now_ns(), c1 = cpu_ns();
                if (allowed <= 0)
                    break;
                int32_t tok = sampler_sample(smp, logits);
                int64_t t2 = ig_now_ns();
                IG_ASSERT(grammar_matcher_accept(gm, tok) == IG_OK);
                int64_t t3 = ig_now_ns();
                add(&mask, (double)(t1 - t0) / 1e6);
                add(&mask_cpu, (double)(c1 - c0) / 1e6);
                add(&acc, (double)(t3 - t2) / 1e6);
                got++;
                if (tok_is_eog(vocab, tok))
                    break;
                int64_t n = tok_piece(vocab, tok, false, piece, sizeof piece);
                if (n > 0 && tlen + (size_t)n < (1 << 20))
                    memcpy(text + tlen, piece, (size_t)n), tlen += (size_t)n;
                if (grammar_matcher_done(gm) || pos + 1 >= be->o.n_ctx)
                    break;
                int64_t t4 = ig_now_ns(), c4 = cpu_ns();
                IG_ASSERT(backend_run_seq(be, table, 0, &tok, 1, pos++, logits) == IG_OK);
                add(&dec, (double)(ig_now_ns() - t4) / 1e6);
                add(&dec_cpu, (double)(cpu_ns() - c4) / 1e6); /* this thread's share only */
            }
            if (ov)
                replay(g, ov, ogv, text, tlen, ologits, &omask, &omask_cpu, &oacc);
            grammar_matcher_free(gm);
            sampler_free(smp);
        }
        grammar_free(g);
    }
    printf("model %s: %lld tokens, threads %d\n", path, (long long)tok_n_tokens(vocab),
           be->threads);
    double p99_mask, p99_dec, p99_omask = 0, p99_cpu, p99_ocpu;
    double mean_dec = report("decode step (wall)", &dec, &p99_dec);
    report("decode step (main thread CPU)", &dec_cpu, NULL);
    double mean_mask = report("mask (wall)", &mask, &p99_mask);
    double mean_cpu = report("mask (CPU)", &mask_cpu, &p99_cpu);
    report("accept (wall)", &acc, NULL);
    printf("mask / mean decode step: wall mean %.2f%% p99 %.2f%%; CPU mean %.2f%% p99 %.2f%%\n",
           100 * mean_mask / mean_dec, 100 * p99_mask / mean_dec, 100 * mean_cpu / mean_dec,
           100 * p99_cpu / mean_dec);
    if (ov) {
        printf("other vocabulary %s: %lld tokens\n", other_path, (long long)tok_n_tokens(ov));
        double mean_omask = report("mask (wall)", &omask, &p99_omask);
        double mean_ocpu = report("mask (CPU)", &omask_cpu, &p99_ocpu);
        report("accept (wall)", &oacc, NULL);
        printf("its mask / this model's mean decode step: wall mean %.2f%% p99 %.2f%%; CPU mean "
               "%.2f%% p99 %.2f%%\n", 100 * mean_omask / mean_dec, 100 * p99_omask / mean_dec,
               100 * mean_ocpu / mean_dec, 100 * p99_ocpu / mean_dec);
    }
    return 0;
}
