/* tests/unit/test_ppl.c: the quality meter's rules (ppl/) on cases worked
 * out by hand: which windows and rows are scored and what BOS does, a row's
 * negative log-likelihood, the mean with its standard error, quantiles,
 * llama.cpp's 16-bit record (the words themselves), a row's KL divergence
 * and top-1 agreement, and the base file: a round trip, the windows an
 * interrupted run keeps, and every refusal in one line. */
#include "core/status.h"
#include "ppl/ppl.h"
#include "tests/test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NEAR(a, b, tol) (fabs((double)(a) - (double)(b)) <= (tol))

static void check_windows(void)
{
    struct ppl_plan p;
    int32_t tokens[11] = {1, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}, w[4];
    /* 11 tokens, windows of 4: two whole windows, the rest unused */
    CHECK(ppl_plan_windows(11, 4, -1, 1, &p) == IG_OK);
    CHECK(p.n_chunk == 2 && p.first == 2 && p.n_scored == 1 && p.bos == 1);
    /* row 2 predicts token 3; row 3 would predict the next window's first */
    CHECK(!ppl_row_scored(&p, 1) && ppl_row_scored(&p, 2) && !ppl_row_scored(&p, 3));
    ppl_window_tokens(&p, tokens, 1, w);
    CHECK(w[0] == 1 && w[1] == 14 && w[2] == 15 && w[3] == 16); /* 13 became BOS */
    ppl_plan_windows(11, 4, -1, -1, &p);
    ppl_window_tokens(&p, tokens, 1, w);
    CHECK(w[0] == 13); /* no BOS: the window as the text has it */
    CHECK(ppl_plan_windows(11, 4, 1, -1, &p) == IG_OK && p.n_chunk == 1);
    CHECK(ppl_plan_windows(11, 5, -1, -1, &p) == IG_OK && p.n_chunk == 2 && p.first == 2 &&
          p.n_scored == 2 && ppl_row_scored(&p, 3) && !ppl_row_scored(&p, 4));
    CHECK(ppl_plan_windows(1200, 512, -1, -1, &p) == IG_OK && p.n_chunk == 2 &&
          p.first == 256 && p.n_scored == 255 && ppl_row_scored(&p, 510) &&
          !ppl_row_scored(&p, 511) && !ppl_row_scored(&p, 255));
    CHECK(ppl_plan_windows(3, 3, -1, -1, &p) == IG_OK && p.n_scored == 1);
    char msg[256] = "";
    ig_error_capture(msg, sizeof msg);
    CHECK(ppl_plan_windows(3, 4, -1, -1, &p) == IG_E_INPUT && strstr(msg, "3 tokens"));
    ig_error_capture(NULL, 0);
}

static void check_nll_and_stats(void)
{
    /* softmax of (0, ln 2, ln 5) is (1, 2, 5) / 8 */
    float l[3] = {0, (float)log(2.0), (float)log(5.0)};
    CHECK(NEAR(ppl_nll(l, 3, 2), log(8.0 / 5.0), 1e-6));
    CHECK(NEAR(ppl_nll(l, 3, 0), log(8.0), 1e-6));
    /* 1, 2, 3, 4: mean 2.5, variance 7.5 - 6.25, error sqrt(1.25 / 3) */
    struct ppl_acc a = {0};
    for (int i = 1; i <= 4; i++)
        ppl_acc_add_nll(&a, i);
    struct ppl_summary s;
    ppl_summarize(&a, NULL, &s);
    double err = sqrt(1.25 / 3);
    CHECK(s.count == 4 && NEAR(s.ppl, exp(2.5), 1e-9) && NEAR(s.ppl_err, exp(2.5) * err, 1e-9));
    double mean, e1;
    ppl_mean_err(5, 25, 1, &mean, &e1);
    CHECK(mean == 5 && e1 == 0); /* one value: no error */
    float v5[5] = {1, 2, 3, 4, 5}, v4[4] = {1, 2, 3, 4};
    CHECK(NEAR(ppl_quantile(v5, 5, 0.5), 3, 1e-12) && NEAR(ppl_quantile(v5, 5, 0.99), 4.96, 1e-9));
    CHECK(NEAR(ppl_quantile(v5, 5, 0.25), 2, 1e-12) && ppl_quantile(v5, 5, 1) == 5);
    CHECK(NEAR(ppl_quantile(v4, 4, 0.5), 2.5, 1e-12)); /* the even median: the middle two */
}

/* Logits (0, 1, 2, -20): the lowest is more than 16 below the top, so the
 * range is [-14, 2] in 65535 steps of 16 / 65535; log-sum-exp over the top is
 * log(1 + e^-1 + e^-2 + e^-22). */
static void check_record(void)
{
    float l[4] = {0, 1, 2, -20};
    uint16_t rec[8];
    CHECK(ppl_record_words(4) == 8 && ppl_record_words(5) == 10);
    double lse = log(1 + exp(-1.0) + exp(-2.0) + exp(-22.0));
    double nll = ppl_encode_record(l, 4, 1, rec);
    CHECK(NEAR(nll, 1 + lse, 1e-6));
    float scale, min_lp;
    memcpy(&scale, rec, 4);
    memcpy(&min_lp, rec + 2, 4);
    CHECK(NEAR(scale, 16.0 / 65535, 1e-10) && NEAR(min_lp, -16 - lse, 1e-5));
    /* 14 * 65535 / 16 = 57343.125, 15 * 65535 / 16 = 61439.0625 */
    CHECKF(rec[4] == 57343 && rec[5] == 61439 && rec[6] == 65535 && rec[7] == 0,
           "words %u %u %u %u", rec[4], rec[5], rec[6], rec[7]);
    for (int i = 0; i < 3; i++)
        CHECK(NEAR(ppl_record_logprob(rec, i), l[i] - 2 - lse, 16.0 / 65535 / 2 + 1e-5));

    /* against itself: no divergence, the same top token */
    struct ppl_kl_row k;
    ppl_kl_row(l, 4, rec, 2, &k);
    CHECKF(fabs(k.kl) < 1e-5 && k.same_top && NEAR(k.nll, lse, 1e-6) &&
           NEAR(k.nll_base, lse, 1e-4), "kl %g nll %g base %g", k.kl, k.nll, k.nll_base);
    /* (2, 1, 0, -20) against it: p = (e^-2, e^-1, 1) / e^lse, log-ratios
     * (-2, 0, 2); the -20 token is below -16 in the base and left out */
    float m[4] = {2, 1, 0, -20};
    ppl_kl_row(m, 4, rec, 2, &k);
    double kl = 2 * (1 - exp(-2.0)) / exp(lse);
    CHECKF(NEAR(k.kl, kl, 2e-4) && !k.same_top, "kl %.6f, expected %.6f", k.kl, kl);
    CHECK(NEAR(k.nll, 2 + lse, 1e-6));

    /* a tie in the base's words: either top token agrees with it */
    float t[4] = {1, 1, 0, -5}, u[4] = {0.5f, 1.5f, 0, -5};
    ppl_encode_record(t, 4, 0, rec);
    CHECK(rec[4] == 65535 && rec[5] == 65535);
    ppl_kl_row(u, 4, rec, 0, &k);
    CHECK(k.same_top);

    /* the statistics of a base comparison: KL mean, median, p99, top-1 */
    struct ppl_acc a = {0};
    float kls[4];
    for (int i = 0; i < 4; i++) {
        struct ppl_kl_row r = {.nll = 1, .nll_base = 1, .kl = 0.1 * (4 - i), .same_top = i != 0};
        kls[i] = (float)r.kl;
        ppl_acc_add_kl(&a, &r);
    }
    struct ppl_summary s;
    ppl_summarize(&a, kls, &s);
    CHECK(NEAR(s.kl_mean, 0.25, 1e-7) && NEAR(s.kl_median, 0.25, 1e-7) &&
          NEAR(s.kl_max, 0.4, 1e-7) && NEAR(s.kl_p99, 0.397, 1e-6));
    CHECK(NEAR(s.top1, 0.75, 1e-12) && NEAR(s.top1_err, sqrt(0.75 * 0.25 / 3), 1e-12));
    CHECK(NEAR(s.ppl, exp(1.0), 1e-12) && NEAR(s.ppl_base, exp(1.0), 1e-12));
}

/* ---- the base file ---------------------------------------------------------------- */

#define F_CTX 6  /* first 3, two scored rows per window */
#define F_VOCAB 5
#define F_CHUNKS 3
#define F_WORDS 10

static void fill(uint16_t *recs, int64_t n, uint64_t seed)
{
    for (int64_t r = 0; r < n; r++) {
        float l[F_VOCAB];
        for (int i = 0; i < F_VOCAB; i++)
            l[i] = 3 * test_rand_f(&seed);
        ppl_encode_record(l, F_VOCAB, 0, recs + r * F_WORDS);
    }
}

/* Opens `path` and reads its head; *msg holds the refusal, if any. */
static int read_head(const char *path, int64_t vocab, struct ppl_file_header *h, int32_t **t,
                     char *msg, size_t cap, FILE **fp)
{
    msg[0] = '\0';
    ig_error_capture(msg, cap);
    FILE *f = fopen(path, "rb");
    int st = f ? ppl_file_read_head(f, "'base'", vocab, h, t) : IG_E_IO;
    ig_error_capture(NULL, 0);
    if (fp)
        *fp = f;
    else if (f)
        fclose(f);
    return st;
}

static void check_file(void)
{
    char path[] = "/tmp/test_ppl_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    FILE *f = fdopen(fd, "w+b");
    struct ppl_file_header h = {.n_ctx = F_CTX, .n_vocab = F_VOCAB, .n_chunk = F_CHUNKS};
    int32_t tokens[F_CTX * F_CHUNKS];
    uint16_t recs[F_CHUNKS][2 * F_WORDS], back[2 * F_WORDS];
    for (int i = 0; i < F_CTX * F_CHUNKS; i++)
        tokens[i] = i % F_VOCAB;
    CHECK(ppl_file_write_head(f, "'base'", &h, tokens) == IG_OK);
    for (int c = 0; c < F_CHUNKS; c++) {
        fill(recs[c], 2, 1 + (uint64_t)c);
        CHECK(ppl_file_write_records(f, "'base'", &h, recs[c], 2) == IG_OK);
    }
    fclose(f);
    uint64_t size = 20 + 4 * F_CTX * F_CHUNKS + F_CHUNKS * 2 * F_WORDS * 2;
    CHECK(ppl_file_head_bytes(&h) + F_CHUNKS * ppl_file_chunk_bytes(&h) == size);

    /* the round trip */
    struct ppl_file_header g;
    int32_t *t = NULL;
    char msg[512];
    CHECK(read_head(path, F_VOCAB, &g, &t, msg, sizeof msg, &f) == IG_OK);
    CHECK(g.n_ctx == F_CTX && g.n_vocab == F_VOCAB && g.n_chunk == F_CHUNKS && t &&
          !memcmp(t, tokens, sizeof tokens));
    for (int c = 0; c < F_CHUNKS && f; c++) {
        CHECK(ppl_file_read_chunk(f, "'base'", &g, c, back) == IG_OK);
        CHECK(!memcmp(back, recs[c], sizeof back));
    }
    CHECK(f && ppl_file_read_end(f, "'base'") == IG_OK);
    if (f)
        fclose(f);
    free(t);

    /* another vocabulary: another model */
    CHECK(read_head(path, 7, &g, &t, msg, sizeof msg, NULL) == IG_E_INPUT);
    CHECKF(strstr(msg, "5 tokens") && strstr(msg, "has 7") && !strchr(msg, '\n'), "'%s'", msg);
    /* one byte short: truncated, before any work */
    CHECK(truncate(path, (off_t)size - 1) == 0);
    CHECK(read_head(path, F_VOCAB, &g, &t, msg, sizeof msg, NULL) == IG_E_INPUT);
    CHECKF(strstr(msg, "truncated") && !strchr(msg, '\n'), "'%s'", msg);
    /* a byte too many: not one file */
    CHECK(truncate(path, (off_t)size + 1) == 0);
    CHECK(read_head(path, F_VOCAB, &g, &t, msg, sizeof msg, NULL) == IG_E_INPUT);
    CHECKF(strstr(msg, "after its last window") && !strchr(msg, '\n'), "'%s'", msg);
    CHECK(truncate(path, (off_t)size) == 0);
    /* a stream cut short is found where it ends */
    f = fopen(path, "rb");
    char *buf = malloc(size);
    CHECK(f && buf && fread(buf, 1, size, f) == size);
    if (f)
        fclose(f);
    f = buf ? fmemopen(buf, size - 3, "rb") : NULL;
    msg[0] = '\0';
    ig_error_capture(msg, sizeof msg);
    CHECK(f && ppl_file_read_head(f, "'base'", F_VOCAB, &g, &t) == IG_OK);
    CHECK(f && ppl_file_read_chunk(f, "'base'", &g, 0, back) == IG_OK);
    CHECK(f && ppl_file_read_chunk(f, "'base'", &g, 1, back) == IG_OK);
    CHECK(f && ppl_file_read_chunk(f, "'base'", &g, 2, back) == IG_E_INPUT);
    ig_error_capture(NULL, 0);
    CHECKF(strstr(msg, "window 3's records"), "'%s'", msg);
    free(t);
    if (f)
        fclose(f);
    /* a corrupted record header */
    if (buf) {
        float nan = NAN;
        memcpy(buf + ppl_file_head_bytes(&h), &nan, 4);
        f = fmemopen(buf, size, "rb");
        ig_error_capture(msg, sizeof msg);
        CHECK(f && ppl_file_read_head(f, "'base'", F_VOCAB, &g, &t) == IG_OK);
        CHECK(f && ppl_file_read_chunk(f, "'base'", &g, 0, back) == IG_E_INPUT);
        ig_error_capture(NULL, 0);
        CHECKF(strstr(msg, "corrupted"), "'%s'", msg);
        free(t);
        if (f)
            fclose(f);
        /* not a base file at all */
        memcpy(buf, "GGUF", 4);
        f = fmemopen(buf, size, "rb");
        ig_error_capture(msg, sizeof msg);
        CHECK(f && ppl_file_read_head(f, "'base'", F_VOCAB, &g, &t) == IG_E_INPUT);
        ig_error_capture(NULL, 0);
        CHECKF(strstr(msg, "not a perplexity base file"), "'%s'", msg);
        if (f)
            fclose(f);
    }
    free(buf);

    /* an interrupted run keeps its first two windows: tokens and records */
    f = fopen(path, "r+b");
    CHECK(f && ppl_file_keep_chunks(f, "'base'", &h, 2) == IG_OK);
    if (f)
        fclose(f);
    CHECK(read_head(path, F_VOCAB, &g, &t, msg, sizeof msg, &f) == IG_OK);
    CHECK(g.n_chunk == 2 && t && !memcmp(t, tokens, 2 * F_CTX * sizeof *tokens));
    for (int c = 0; c < 2 && f; c++) {
        CHECK(ppl_file_read_chunk(f, "'base'", &g, c, back) == IG_OK);
        CHECK(!memcmp(back, recs[c], sizeof back));
    }
    CHECK(f && ppl_file_read_end(f, "'base'") == IG_OK);
    if (f)
        fclose(f);
    free(t);
    unlink(path);
}

int main(void)
{
    check_windows();
    check_nll_and_stats();
    check_record();
    check_file();
    return test_summary("test_ppl");
}
