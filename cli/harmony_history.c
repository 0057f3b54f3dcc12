/* cli/harmony_history.c: a harmony chat (gpt-oss) continued from a saved
 * cache (`run --load-kv FILE --chat`): the cache holds the last answer as
 * the model wrote it (its analysis, <|return|>), while the template's
 * history holds its final channel only. Finds where that answer began
 * (after the last user turn's "<|start|>assistant") and its final
 * channel's text, for cmd_run.c to cut the history there and render the
 * answer back as the template writes it (chat_tmpl_next_answer), as
 * `ignite chat` does between turns. Covered by
 * tests/cli/test_harmony_model.py. */
#include "cli/run.h"

#include "core/status.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

/* The ids of `text` (special tokens parsed), into ids[0..cap): how many,
 * or -1 when it does not encode to at most cap of them. */
static int64_t ids_of(struct tok_vocab *v, const char *text, int32_t *ids, int64_t cap)
{
    struct tok_ids t = {0};
    int64_t n = -1;
    if (tok_encode(v, text, strlen(text), TOK_ENC_PARSE_SPECIAL, &t) == IG_OK && t.n <= cap) {
        memcpy(ids, t.ids, (size_t)t.n * sizeof *ids);
        n = t.n;
    }
    tok_ids_free(&t);
    return n;
}

/* The first position >= from where ids[0..k) starts in tokens[0..n), or -1. */
static int64_t find_from(const int32_t *tokens, int64_t n, int64_t from, const int32_t *ids,
                         int64_t k)
{
    for (int64_t i = from; i + k <= n; i++)
        if (!memcmp(tokens + i, ids, (size_t)k * sizeof *ids))
            return i;
    return -1;
}

static int keep_final(void *user, enum harmony_channel ch, const char *text, size_t len)
{
    struct ig_str *t = user;
    if (ch != HARMONY_FINAL)
        return 0;
    return ig_str_putn(t, text, len) ? 0 : 1;
}

int run_harmony_last_answer(struct tok_vocab *v, const int32_t *tokens, int64_t n,
                            int64_t *at, char **answer)
{
    int32_t user[16], asst[16];
    int64_t nu = ids_of(v, "<|start|>user", user, 16);
    int64_t na = ids_of(v, "<|start|>assistant", asst, 16);
    *at = 0;
    *answer = NULL;
    if (nu <= 0 || na <= 0)
        return IG_OK;
    int64_t u = -1;
    for (int64_t i = find_from(tokens, n, 0, user, nu); i >= 0; i = find_from(tokens, n, i + 1, user, nu))
        u = i;
    int64_t a = u < 0 ? -1 : find_from(tokens, n, u + nu, asst, na);
    if (a < 0 || a + na >= n)
        return IG_OK;
    char *text;
    size_t len;
    int st = tok_decode(v, tokens + a + na, n - a - na, true, &text, &len);
    if (st != IG_OK)
        return st;
    struct harmony h;
    struct ig_str final = {0};
    harmony_init(&h);
    int rc = harmony_push(&h, text, len, keep_final, &final);
    if (!rc)
        rc = harmony_finish(&h, keep_final, &final);
    free(text);
    if (rc || (!final.s && !(final.s = calloc(1, 1)))) {
        free(final.s);
        return ig_error(IG_E_NOMEM, "out of memory reading the saved answer");
    }
    *at = a + na;
    *answer = final.s;
    return IG_OK;
}
