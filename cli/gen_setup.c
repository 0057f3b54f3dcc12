/* cli/gen_setup.c: what run, chat and batch do before generating: load the
 * model and its tokenizer, render a prompt through the chat template (a
 * first turn, or the next turn of a continued chat), pick the encoding
 * flags, show the prompt (--verbose-prompt), warn about a prompt past the
 * trained context (cli/run.h).
 * Covered by tests/cli/ (run, batch). */
#include "cli/run.h"

#include "cli/cli.h"
#include "core/status.h"
#include "models/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

int run_load_model(const char *path, struct model **m, struct tok_vocab **vocab)
{
    *m = NULL;
    *vocab = NULL;
    int st = model_load(path, m);
    if (st == IG_OK)
        st = tok_load_model(*m, vocab);
    /* Output rows past the vocabulary are padding (some models round the
     * embedding up): the sampler only ever sees the first n_tokens logits. */
    if (st == IG_OK && tok_n_tokens(*vocab) > (*m)->hp.n_vocab)
        st = ig_error(IG_E_MODEL, "'%s': the tokenizer has %lld tokens but the model has only "
                      "%lld embedding rows", path, (long long)tok_n_tokens(*vocab),
                      (long long)(*m)->hp.n_vocab);
    if (st != IG_OK) {
        tok_vocab_free(*vocab);
        model_free(*m);
        *vocab = NULL;
        *m = NULL;
    }
    return st;
}

/* The model's chat template, or IG_E_MODEL naming where it should be. */
static int chat_template_of(const struct model *m, const char **t, size_t *len)
{
    if (model_chat_template(m, t, len))
        return IG_OK;
    return ig_error(IG_E_MODEL, "--chat: '%s' has no %s", m->path,
                    model_is_folder(m) ? "chat template (tokenizer_config.json chat_template "
                                         "or chat_template.jinja)"
                                       : "tokenizer.chat_template");
}

int run_render_prompt(const struct model *m, bool chat, bool no_think, const char *system,
                      const char *user, char **text)
{
    *text = NULL;
    if (!chat) {
        *text = strdup(user);
        return *text ? IG_OK : ig_error(IG_E_NOMEM, "out of memory");
    }
    const char *t;
    size_t len;
    int st = chat_template_of(m, &t, &len);
    return st != IG_OK ? st
                       : chat_render_opts(chat_detect(t, len), t, len, system, user,
                                          &(struct chat_opts){.no_thinking = no_think},
                                          text);
}

int run_render_next(const struct model *m, const struct tok_vocab *vocab, int32_t last,
                    const char *user, char **text)
{
    const char *t;
    size_t len;
    char bos[256] = "";
    *text = NULL;
    int32_t b = tok_bos(vocab);
    int64_t n = b >= 0 ? tok_piece(vocab, b, true, bos, sizeof bos - 1) : 0;
    bos[n > 0 && n < (int64_t)sizeof bos ? n : 0] = '\0';
    int st = chat_template_of(m, &t, &len);
    if (st == IG_OK)
        st = chat_render_next(chat_detect(t, len), user, tok_is_eog(vocab, last), bos, text);
    return st;
}

void run_print_prompt(const struct tok_vocab *vocab, const char *text, const int32_t *ids,
                      int64_t n)
{
    fputs("prompt: ", stderr);
    cli_print_escaped(stderr, text, strlen(text));
    fprintf(stderr, "\nprompt tokens: %lld\n", (long long)n);
    char piece[512];
    for (int64_t i = 0; i < n; i++) {
        int64_t len = tok_piece(vocab, ids[i], true, piece, sizeof piece);
        fprintf(stderr, "%d\t", ids[i]);
        if (len >= 0)
            cli_print_escaped(stderr, piece, (size_t)(len < (int64_t)sizeof piece ? len
                                                                                  : (int64_t)sizeof piece));
        fputc('\n', stderr);
    }
}

void run_warn_train_ctx(const struct model *m, int64_t n, int64_t n_ctx)
{
    if (m->hp.n_ctx_train > 0 && n > m->hp.n_ctx_train && n <= n_ctx)
        ig_warn("the prompt is %lld tokens, more than the %lld positions the model was "
                "trained on: expect the output to degrade", (long long)n,
                (long long)m->hp.n_ctx_train);
}

unsigned run_encode_flags(const struct gen_cli *o)
{
    return TOK_ENC_ADD_BOS | (o->no_special && !o->chat ? 0 : TOK_ENC_PARSE_SPECIAL);
}
