/* ppl/window.c: how `ignite perplexity` cuts a text into windows and which
 * rows of a window it scores (ppl/ppl.h), as llama-perplexity does: the
 * text's tokens in non-overlapping windows of n_ctx, only whole windows,
 * each window's first token replaced by BOS when the vocabulary adds one
 * (so every window starts as the text did), and the rows of the second half
 * scored so that every prediction has at least n_ctx / 2 tokens before it.
 * The last row's logits predict a token of the next window: not scored.
 * Covered by tests/unit/test_ppl.c. */
#include "ppl/ppl.h"

#include "core/status.h"

#include <string.h>

int ppl_plan_windows(int64_t n_tokens, int64_t n_ctx, int64_t max_chunks, int32_t bos,
                     struct ppl_plan *p)
{
    IG_ASSERT(n_ctx >= PPL_MIN_CTX);
    *p = (struct ppl_plan){.n_ctx = n_ctx, .first = n_ctx / 2, .bos = bos};
    p->n_scored = n_ctx - 1 - p->first;
    p->n_chunk = n_tokens / n_ctx;
    if (max_chunks > 0 && p->n_chunk > max_chunks)
        p->n_chunk = max_chunks;
    if (p->n_chunk < 1)
        return ig_error(IG_E_INPUT, "the text is %lld tokens long; a window of -c %lld needs at "
                        "least that many (give a longer text or a smaller -c)",
                        (long long)n_tokens, (long long)n_ctx);
    return IG_OK;
}

void ppl_window_tokens(const struct ppl_plan *p, const int32_t *tokens, int64_t c, int32_t *out)
{
    IG_ASSERT(c >= 0 && c < p->n_chunk);
    memcpy(out, tokens + c * p->n_ctx, (size_t)p->n_ctx * sizeof *out);
    if (p->bos >= 0)
        out[0] = p->bos;
}

bool ppl_row_scored(const struct ppl_plan *p, int64_t r)
{
    return r >= p->first && r < p->n_ctx - 1;
}
