/* cli/gen_setup.c: what run, chat and batch do before generating: load the
 * model and its tokenizer, render a prompt through the chat template (a
 * first turn, or the next turn of a continued chat) with the template the
 * options chose (the model's, a built-in by name, a Jinja file), pick the encoding
 * flags, show the prompt (--verbose-prompt), warn about a prompt past the
 * trained context (cli/run.h).
 * Covered by tests/cli/ (run, batch). */
#include "cli/run.h"

#include "cli/cli.h"
#include "core/status.h"
#include "models/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
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

/* The text of token id (special tokens as their text), "" when absent. */
static void token_text(const struct tok_vocab *v, int32_t id, char *buf, size_t cap)
{
    int64_t n = id >= 0 ? tok_piece(v, id, true, buf, cap - 1) : 0;
    buf[n > 0 && n < (int64_t)cap ? n : 0] = '\0';
}

/* A harmony template (gpt-oss): its answers come in channels. */
static bool harmony_template(const char *text, size_t len)
{
    return text && memmem(text, len, "<|channel|>", 11) && memmem(text, len, "<|message|>", 11);
}

int run_chat_setup(const struct gen_cli *o, const struct model *m, const struct tok_vocab *v,
                   struct run_chat *c)
{
    *c = (struct run_chat){0};
    struct chat_tmpl *t = &c->t;
    token_text(v, tok_bos(v), c->bos, sizeof c->bos);
    token_text(v, tok_eos(v), c->eos, sizeof c->eos);
    t->bos = c->bos;
    t->eos = c->eos;
    t->strip_bos = tok_adds_bos(v);
    c->model_path = m->path;
    c->folder = model_is_folder(m);
    if (o->chat_template) {
        t->kind = CHAT_TMPL_BUILTIN;
        t->name = o->chat_template;
        return IG_OK;
    }
    if (o->chat_template_file) {
        size_t len;
        int st = cli_read_text(o->chat_template_file, "the chat template", &c->file_text, &len);
        if (st != IG_OK)
            return st;
        snprintf(c->name, sizeof c->name, "--chat-template-file '%s'", o->chat_template_file);
        t->kind = CHAT_TMPL_JINJA;
        t->name = c->name;
        t->text = c->file_text;
        t->len = len;
        c->harmony = harmony_template(t->text, t->len);
        /* refused now, before the model runs: exit 2 as for a bad argument */
        return jinja_check(t->text, t->len, t->name);
    }
    const char *text;
    size_t len;
    if (!model_chat_template(m, &text, &len)) {
        c->missing = true;
        return IG_OK;
    }
    snprintf(c->name, sizeof c->name, "the model's chat template");
    t->text = text;
    t->len = len;
    t->name = c->name;
    ig_error_capture(c->why, sizeof c->why);
    int st = jinja_check(text, len, c->name);
    ig_error_capture(NULL, 0);
    if (st == IG_OK) {
        t->kind = CHAT_TMPL_JINJA;
        c->harmony = harmony_template(text, len);
    } else if (st == IG_E_USAGE) { /* outside the subset: the family renderer, if any */
        t->kind = CHAT_TMPL_FAMILY;
        t->style = chat_detect(text, len);
    } else {
        return st;
    }
    return IG_OK;
}

void run_chat_free(struct run_chat *c)
{
    free(c->file_text);
    c->file_text = NULL;
}

/* IG_OK when the conversation has a template, else the one line saying
 * why not and what to do. */
static int usable(const struct run_chat *c)
{
    if (c->missing)
        return ig_error(IG_E_MODEL, "--chat: '%s' has no %s; give one with --chat-template NAME "
                        "(%s) or --chat-template-file FILE", c->model_path,
                        c->folder ? "chat template (tokenizer_config.json chat_template or "
                                    "chat_template.jinja)"
                                  : "tokenizer.chat_template",
                        chat_builtin_names());
    if (c->t.kind == CHAT_TMPL_FAMILY && c->t.style == CHAT_UNKNOWN)
        return ig_error(IG_E_MODEL, "--chat: %s; give another with --chat-template NAME or "
                        "--chat-template-file FILE", c->why);
    return IG_OK;
}

int run_render_prompt(const struct run_chat *c, bool chat, bool no_think, const char *system,
                      const char *user, char **text)
{
    *text = NULL;
    if (!chat) {
        *text = strdup(user);
        return *text ? IG_OK : ig_error(IG_E_NOMEM, "out of memory");
    }
    int st = usable(c);
    return st != IG_OK ? st : chat_tmpl_first(&c->t, system, user, no_think, text);
}

int run_render_next(const struct run_chat *c, const struct tok_vocab *vocab, int32_t last,
                    const char *system, bool no_think, const char *user, char **text)
{
    char closing[256] = "";
    *text = NULL;
    if (tok_is_eog(vocab, last))
        token_text(vocab, last, closing, sizeof closing);
    int st = usable(c);
    return st != IG_OK ? st
                       : chat_tmpl_next(&c->t, system, user, no_think,
                                        tok_is_eog(vocab, last) ? closing : NULL, text);
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
