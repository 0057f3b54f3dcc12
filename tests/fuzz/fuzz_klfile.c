/* tests/fuzz/fuzz_klfile.c: libFuzzer entry for the perplexity base file
 * reader (ppl/klfile.c): any bytes as a stream (no length to check up
 * front, so every field and every short read is met as it comes). A file
 * that is taken must hold what the scoring relies on: sizes in range,
 * token ids inside the vocabulary, each record's header finite; its records
 * then go through the KL scoring against a fixed row. A refusal always says
 * why in one line. fuzz_replay.c runs it over tests/fuzz/corpus_klfile in
 * ordinary builds. */
#include "core/status.h"
#include "ppl/ppl.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void refused(int st, const char *msg)
{
    if (st == IG_OK || !msg[0] || strchr(msg, '\n'))
        abort(); /* a refusal always says why, in one line */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!size)
        return 0;
    char msg[1024] = "";
    ig_error_capture(msg, sizeof msg);
    FILE *f = fmemopen((void *)data, size, "rb");
    struct ppl_file_header h;
    int32_t *tokens = NULL;
    int st = f ? ppl_file_read_head(f, "'fuzz'", 0, &h, &tokens) : IG_E_IO;
    if (st != IG_OK) {
        if (f)
            refused(st, msg);
        goto done;
    }
    if (h.n_ctx < PPL_MIN_CTX || h.n_vocab < 1 || h.n_chunk < 1)
        abort();
    for (int64_t i = 0; i < h.n_chunk * h.n_ctx; i++)
        if (tokens[i] < 0 || tokens[i] >= h.n_vocab)
            abort();
    /* Records are sized by the header: only as much as the input can hold. */
    uint64_t chunk = ppl_file_chunk_bytes(&h);
    if (chunk > size || (uint64_t)h.n_vocab * 4 > size)
        goto done;
    int64_t nv = ppl_record_words(h.n_vocab), n_scored = h.n_ctx - 1 - h.n_ctx / 2;
    uint16_t *recs = malloc(chunk);
    float *row = malloc((size_t)h.n_vocab * sizeof *row);
    for (int64_t i = 0; row && i < h.n_vocab; i++)
        row[i] = (float)((i * 37) % 11) - 5;
    for (int64_t c = 0; recs && row && c < h.n_chunk; c++) {
        msg[0] = '\0';
        st = ppl_file_read_chunk(f, "'fuzz'", &h, c, recs);
        if (st != IG_OK) {
            refused(st, msg);
            break;
        }
        for (int64_t r = 0; r < n_scored; r++) {
            float scale, min_lp;
            memcpy(&scale, recs + r * nv, 4);
            memcpy(&min_lp, recs + r * nv + 2, 4);
            if (!(isfinite(scale) && scale >= 0 && isfinite(min_lp) && min_lp <= 0))
                abort();
            struct ppl_kl_row k;
            ppl_kl_row(row, h.n_vocab, recs + r * nv, tokens[c * h.n_ctx + h.n_ctx / 2 + r + 1],
                       &k);
        }
        if (c == h.n_chunk - 1) {
            msg[0] = '\0';
            st = ppl_file_read_end(f, "'fuzz'");
            if (st != IG_OK)
                refused(st, msg);
        }
    }
    free(row);
    free(recs);
done:
    free(tokens);
    if (f)
        fclose(f);
    ig_error_capture(NULL, 0);
    return 0;
}
