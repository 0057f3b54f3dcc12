/* cli/gen_setup.c: what run and batch do before generating: load the model
 * and its tokenizer, render a prompt through the chat template, pick the
 * encoding flags (cli/run.h).
 * Covered by tests/cli/ (run, batch). */
#include "cli/run.h"

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
    if (!model_chat_template(m, &t, &len))
        return ig_error(IG_E_MODEL, "--chat: '%s' has no %s", m->path,
                        model_is_folder(m) ? "chat template (tokenizer_config.json chat_template "
                                             "or chat_template.jinja)"
                                           : "tokenizer.chat_template");
    return chat_render_opts(chat_detect(t, len), t, len, system, user,
                            &(struct chat_opts){.no_thinking = no_think}, text);
}

unsigned run_encode_flags(const struct gen_cli *o)
{
    return TOK_ENC_ADD_BOS | (o->no_special && !o->chat ? 0 : TOK_ENC_PARSE_SPECIAL);
}
