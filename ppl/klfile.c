/* ppl/klfile.c: the base file of `ignite perplexity --kl-divergence-base`,
 * which is llama.cpp's (docs/perplexity.md): "_logits_", n_ctx, n_vocab,
 * n_chunk as 32-bit integers, the n_chunk * n_ctx text tokens, then per
 * window the records of its scored rows (ppl_encode_record). Little-endian
 * hosts only, as llama.cpp writes it with fwrite of its integers.
 *
 * The reader takes files from elsewhere (another machine, llama.cpp): every
 * field is checked before it sizes anything, a regular file must be exactly
 * as long as its header says (so a truncated or joined file is refused
 * before any work), a stream is checked as it is read. Nothing in the file
 * names the model beyond its vocabulary size: a file from a model with
 * another vocabulary is refused, one from the same vocabulary (an F32 and a
 * Q4_1 file of one model, the point of the exercise) is taken; the caller
 * compares the tokens with its own reading of the text when it has one.
 * Covered by tests/cli/test_perplexity.py and tests/fuzz/fuzz_klfile.c. */
#include "ppl/ppl.h"

#include "core/status.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILE_MAX_CTX ((int64_t)1 << 22)
#define FILE_MAX_VOCAB ((int64_t)1 << 24)
#define FILE_MAX_TOKENS ((int64_t)1 << 26) /* n_chunk * n_ctx: 256 MiB of ids */

uint64_t ppl_file_head_bytes(const struct ppl_file_header *h)
{
    return 8 + 3 * 4 + 4 * (uint64_t)h->n_chunk * (uint64_t)h->n_ctx;
}

uint64_t ppl_file_chunk_bytes(const struct ppl_file_header *h)
{
    uint64_t n_scored = (uint64_t)(h->n_ctx - 1 - h->n_ctx / 2);
    return n_scored * (uint64_t)ppl_record_words(h->n_vocab) * 2;
}

/* ---- writing ---------------------------------------------------------------------- */

static int write_all(FILE *f, const char *name, const void *p, size_t n)
{
    if (fwrite(p, 1, n, f) != n)
        return ig_error(IG_E_IO, "cannot write %s: %s", name, strerror(errno ? errno : EIO));
    return IG_OK;
}

static int write_i32s(FILE *f, const char *name, int64_t a, int64_t b, int64_t c)
{
    int32_t v[3] = {(int32_t)a, (int32_t)b, (int32_t)c};
    return write_all(f, name, v, sizeof v);
}

int ppl_file_write_head(FILE *f, const char *name, const struct ppl_file_header *h,
                        const int32_t *tokens)
{
    int st = write_all(f, name, PPL_FILE_MAGIC, 8);
    if (st == IG_OK)
        st = write_i32s(f, name, h->n_ctx, h->n_vocab, h->n_chunk);
    if (st == IG_OK)
        st = write_all(f, name, tokens, (size_t)(h->n_chunk * h->n_ctx) * sizeof *tokens);
    return st;
}

int ppl_file_write_records(FILE *f, const char *name, const struct ppl_file_header *h,
                           const uint16_t *recs, int64_t n)
{
    return write_all(f, name, recs, (size_t)(n * ppl_record_words(h->n_vocab)) * sizeof *recs);
}

static int io_fail(const char *what, const char *name)
{
    return ig_error(IG_E_IO, "cannot %s %s: %s", what, name, strerror(errno ? errno : EIO));
}

int ppl_file_keep_chunks(FILE *f, const char *name, const struct ppl_file_header *h,
                         int64_t keep)
{
    IG_ASSERT(keep >= 1 && keep <= h->n_chunk);
    if (fflush(f))
        return io_fail("write", name);
    int fd = fileno(f);
    struct ppl_file_header k = *h;
    k.n_chunk = keep;
    uint64_t from = ppl_file_head_bytes(h), to = ppl_file_head_bytes(&k);
    uint64_t left = (uint64_t)keep * ppl_file_chunk_bytes(h);
    /* The records move towards the start: copied in order, a block is read
     * before anything is written over it. */
    char buf[1 << 16];
    for (uint64_t done = 0; done < left && from != to;) {
        size_t n = left - done < sizeof buf ? (size_t)(left - done) : sizeof buf;
        ssize_t got = pread(fd, buf, n, (off_t)(from + done));
        if (got <= 0)
            return got == 0 ? ig_error(IG_E_IO, "cannot read back %s: it is shorter than "
                                       "written", name)
                            : io_fail("read back", name);
        if (pwrite(fd, buf, (size_t)got, (off_t)(to + done)) != got)
            return io_fail("write", name);
        done += (uint64_t)got;
    }
    int32_t n_chunk = (int32_t)keep;
    if (pwrite(fd, &n_chunk, sizeof n_chunk, 16) != (ssize_t)sizeof n_chunk ||
        ftruncate(fd, (off_t)(to + left)))
        return io_fail("write", name);
    return IG_OK;
}

/* ---- reading ----------------------------------------------------------------------- */

/* Reads exactly n bytes; a short read is a truncated file (`where` says in
 * what), an error an I/O failure. */
static int read_all(FILE *f, const char *name, void *p, size_t n, const char *where)
{
    size_t got = fread(p, 1, n, f);
    if (got == n)
        return IG_OK;
    if (ferror(f))
        return io_fail("read", name);
    return ig_error(IG_E_INPUT, "%s is truncated: it ends in %s", name, where);
}

/* A regular file must be exactly as long as the header says. */
static int check_length(FILE *f, const char *name, const struct ppl_file_header *h)
{
    struct stat sb;
    int fd = fileno(f);
    if (fd < 0 || fstat(fd, &sb) || !S_ISREG(sb.st_mode))
        return IG_OK; /* a stream: checked as it is read */
    uint64_t want = ppl_file_head_bytes(h) + (uint64_t)h->n_chunk * ppl_file_chunk_bytes(h);
    uint64_t have = (uint64_t)sb.st_size;
    if (have < want)
        return ig_error(IG_E_INPUT, "%s is truncated: %llu bytes, but %lld windows of -c %lld "
                        "over %lld tokens make %llu (a run that did not finish?)", name,
                        (unsigned long long)have, (long long)h->n_chunk, (long long)h->n_ctx,
                        (long long)h->n_vocab, (unsigned long long)want);
    if (have > want)
        return ig_error(IG_E_INPUT, "%s has %llu bytes after its last window (%llu expected in "
                        "all): not one base file", name, (unsigned long long)(have - want),
                        (unsigned long long)want);
    return IG_OK;
}

int ppl_file_read_head(FILE *f, const char *name, int64_t model_vocab,
                       struct ppl_file_header *h, int32_t **tokens)
{
    *tokens = NULL;
    char magic[8];
    int32_t v[3];
    int st = read_all(f, name, magic, sizeof magic, "its header");
    if (st != IG_OK)
        return st;
    if (memcmp(magic, PPL_FILE_MAGIC, 8))
        return ig_error(IG_E_INPUT, "%s is not a perplexity base file (no '%s' at its start; "
                        "write one with --kl-divergence-base FILE alone)", name, PPL_FILE_MAGIC);
    if ((st = read_all(f, name, v, sizeof v, "its header")) != IG_OK)
        return st;
    *h = (struct ppl_file_header){.n_ctx = v[0], .n_vocab = v[1], .n_chunk = v[2]};
    if (h->n_ctx < PPL_MIN_CTX || h->n_ctx > FILE_MAX_CTX)
        return ig_error(IG_E_INPUT, "%s: a window of %lld tokens (expected %d..%lld)", name,
                        (long long)h->n_ctx, PPL_MIN_CTX, (long long)FILE_MAX_CTX);
    if (h->n_vocab < 1 || h->n_vocab > FILE_MAX_VOCAB)
        return ig_error(IG_E_INPUT, "%s: a vocabulary of %lld tokens (expected 1..%lld)", name,
                        (long long)h->n_vocab, (long long)FILE_MAX_VOCAB);
    if (model_vocab > 0 && h->n_vocab != model_vocab)
        return ig_error(IG_E_INPUT, "%s was written with a model of %lld tokens; this model has "
                        "%lld (another model family: compare models of one vocabulary)", name,
                        (long long)h->n_vocab, (long long)model_vocab);
    if (h->n_chunk < 1 || h->n_chunk > FILE_MAX_TOKENS / h->n_ctx)
        return ig_error(IG_E_INPUT, "%s: %lld windows of %lld tokens (expected 1..%lld windows)",
                        name, (long long)h->n_chunk, (long long)h->n_ctx,
                        (long long)(FILE_MAX_TOKENS / h->n_ctx));
    if ((st = check_length(f, name, h)) != IG_OK)
        return st;
    /* Grown as the ids arrive: a stream that claims more than it holds
     * costs no more memory than it sent. */
    int64_t n = h->n_chunk * h->n_ctx, have = 0, cap = 0;
    int32_t *t = NULL;
    while (have < n && st == IG_OK) {
        int64_t want = n - have < ((int64_t)1 << 16) ? n - have : (int64_t)1 << 16;
        if (have + want > cap) {
            int64_t nc = cap ? 2 * cap : want;
            nc = nc < have + want ? have + want : nc > n ? n : nc;
            int32_t *b = realloc(t, (size_t)nc * sizeof *t);
            if (!b) {
                st = ig_error(IG_E_NOMEM, "out of memory for %s's %lld tokens", name,
                              (long long)n);
                break;
            }
            t = b;
            cap = nc;
        }
        st = read_all(f, name, t + have, (size_t)want * sizeof *t, "its tokens");
        have += want;
    }
    for (int64_t i = 0; i < n && st == IG_OK; i++)
        if (t[i] < 0 || t[i] >= h->n_vocab)
            st = ig_error(IG_E_INPUT, "%s: token %lld is %d, outside its vocabulary of %lld",
                          name, (long long)i, t[i], (long long)h->n_vocab);
    if (st != IG_OK) {
        free(t);
        return st;
    }
    *tokens = t;
    return IG_OK;
}

int ppl_file_read_chunk(FILE *f, const char *name, const struct ppl_file_header *h,
                        int64_t chunk, uint16_t *recs)
{
    int64_t nv = ppl_record_words(h->n_vocab), n = h->n_ctx - 1 - h->n_ctx / 2;
    char where[64];
    snprintf(where, sizeof where, "window %lld's records", (long long)chunk + 1);
    int st = read_all(f, name, recs, (size_t)(n * nv) * sizeof *recs, where);
    for (int64_t r = 0; r < n && st == IG_OK; r++) {
        float scale, min_lp;
        memcpy(&scale, recs + r * nv, sizeof scale);
        memcpy(&min_lp, recs + r * nv + 2, sizeof min_lp);
        if (!(isfinite(scale) && scale >= 0 && isfinite(min_lp) && min_lp <= 0))
            st = ig_error(IG_E_INPUT, "%s is corrupted: window %lld, row %lld has scale %g and "
                          "log-probability %g", name, (long long)chunk + 1, (long long)r,
                          (double)scale, (double)min_lp);
    }
    return st;
}

int ppl_file_read_end(FILE *f, const char *name)
{
    char c;
    if (fread(&c, 1, 1, f) == 1)
        return ig_error(IG_E_INPUT, "%s has bytes after its last window: not one base file",
                        name);
    return ferror(f) ? io_fail("read", name) : IG_OK;
}
