/* cli/gen_spec.c: the speculation options of run, chat, batch (cli/gen_opts.h)
 * into a request's gen_spec, their checks, and the draft model (-md) loaded
 * beside the model with its vocabulary checked.
 * Leaves drafting, verifying and rollback to generate/ (spec.h).
 * Covered by tests/cli/test_spec_model.py. */
#include "cli/gen_opts.h"

#include "backend/backend.h"
#include "cli/run.h"
#include "core/status.h"
#include "generate/generate.h"
#include "generate/spec.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

#define GEN_SPEC_DRAFT_N_MAX 3  /* llama.cpp's --spec-draft-n-max default */
#define GEN_SPEC_LOOKUP_N_MAX 8 /* lookup's drafts are free: longer ones pay off */

void gen_cli_spec(const struct gen_cli *o, struct gen_spec *out)
{
    *out = (struct gen_spec){0};
    if (!o->lookup && !o->draft_model)
        return;
    *out = (struct gen_spec){
        .lookup = o->lookup, .draft = o->draft_model != NULL,
        .n_max = o->spec_n_max > 0 ? o->spec_n_max
                 : o->lookup   ? GEN_SPEC_LOOKUP_N_MAX : GEN_SPEC_DRAFT_N_MAX,
        .n_min = o->spec_n_min, .p_min = o->spec_p_min,
        .ngram_min = o->ngram_min, .ngram_max = o->ngram_max};
}

int64_t gen_cli_spec_max(const struct gen_cli *o)
{
    struct gen_spec sp;
    gen_cli_spec(o, &sp);
    return sp.n_max;
}

int gen_cli_check_spec(const struct gen_cli *o, int kind)
{
    if (!o->lookup && !o->draft_model)
        return IG_OK;
    if (o->lookup && o->draft_model)
        return ig_error(IG_E_USAGE, "--lookup and --draft-model are two ways to draft: give one");
    if (o->ngram_min > o->ngram_max)
        return ig_error(IG_E_USAGE, "--lookup-ngram-min %lld is above --lookup-ngram-max %lld",
                        (long long)o->ngram_min, (long long)o->ngram_max);
    struct gen_spec sp;
    gen_cli_spec(o, &sp);
    if (sp.n_min > sp.n_max)
        return ig_error(IG_E_USAGE, "--spec-draft-n-min %lld is above --spec-draft-n-max %lld",
                        (long long)sp.n_min, (long long)sp.n_max);
    (void)kind; /* CUDA too: its verify steps run on the decode kernels (backend/gpu.c) */
    return IG_OK;
}

int gen_cli_load_draft(const struct gen_cli *o, const struct tok_vocab *vocab,
                       const struct backend_opts *bo, struct model **dm, struct backend **dbe)
{
    *dm = NULL;
    *dbe = NULL;
    if (!o->draft_model)
        return IG_OK;
    struct tok_vocab *dv = NULL;
    int st = run_load_model(o->draft_model, dm, &dv);
    if (st == IG_OK)
        st = spec_vocab_check(vocab, dv);
    tok_vocab_free(dv);
    if (st == IG_OK) {
        struct backend_opts dbo = *bo;
        dbo.n_blocks = 0; /* a whole context per slot: a draft never waits */
        dbo.free_window_blocks = false; /* its pool (generate/draft.c) has no window side */
        st = backend_create(*dm, &dbo, dbe);
    }
    if (st != IG_OK) {
        model_free(*dm);
        *dm = NULL;
    }
    return st;
}
