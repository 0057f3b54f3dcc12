/* tests/emu/test_backend_spec_emu.c: speculative decoding on the CUDA
 * backend under the emulator, its verify steps (a sequence's drafted
 * tokens and the last accepted one, 2..16 rows) run by the decode kernels
 * (backend/gpu.c's decode_step at q_len > 1: the multi-row decode
 * attention, the bucket's forward).
 *
 * The engine (generate/) over the emulated backend of a synthetic
 * Llama-tiny (Q8_0 weights as f16, head_dim 64, GQA 2), two requests at
 * temperature 0 with prompts that repeat themselves (lookup finds drafts):
 * plain greedy decoding, then prompt lookup (whose drafts pass and fail:
 * the rollback), then a draft model (the same model in a second backend
 * of its own: its drafts pass; in Q4_0 the random weights' flat logits
 * made it reject every one), must give the same tokens (a verify step's rows take other kernels'
 * summation orders than one-row steps, so a step whose top two logits lie
 * within rounding could differ: these prompts have none, and the emulator
 * is deterministic, so the check is exact). The speculative runs must
 * draft, accept and
 * reject, and run their verify steps on the decode kernels
 * (gpu_backend_info.verify_steps > 0).
 *
 * Then a mixed step (one sequence's 5 prompt rows beside another's decode
 * row: a q_len 8 step) against a pure decode step of that row over the same
 * cache: the decode row's logits within 2e-3 of the largest, 4 f16 ulps
 * (the attention is the same arithmetic, but the 16-row step's products
 * are GEMMs and the one-row step's GEMVs, whose f32 sums round otherwise
 * before the f16 activations; a wrong key seen or missed is far larger).
 * Label emu. */
#include "backend/backend.h"
#include "backend/gpu.h"
#include "generate/generate.h"
#include "kvcache/kvcache.h"
#include "models/synthetic.h"
#include "tests/test.h"

#include "core/status.h"

#include <math.h>
#include <string.h>

enum { N_REQ = 2, N_PROMPT = 24, N_GEN = 20, N_CTX = 128 };

struct req {
    struct gen_request r;
    int32_t prompt[N_PROMPT];
    int32_t out[N_GEN];
    int64_t n_out;
};

static void on_token(void *user, struct gen_request *r, int32_t token, int64_t t)
{
    struct req *q = r->user;
    (void)user, (void)t;
    if (q->n_out < N_GEN)
        q->out[q->n_out++] = token;
}

/* Request i: a 6-token phrase four times (lookup has n-grams to follow). */
static void make_reqs(struct req *q, struct gen_spec sp, int64_t n_vocab)
{
    for (int i = 0; i < N_REQ; i++) {
        memset(&q[i], 0, sizeof q[i]);
        for (int t = 0; t < N_PROMPT; t++)
            q[i].prompt[t] = (int32_t)((7 + 31 * i + 13 * (t % 6)) % n_vocab);
        q[i].r.tokens = q[i].prompt;
        q[i].r.n_tokens = N_PROMPT;
        q[i].r.user = &q[i];
        q[i].r.params = (struct gen_params){
            .n_predict = N_GEN, .ignore_eog = true,
            .sp = {.temperature = 0, .top_k = 1, .top_p = 1, .repeat_penalty = 1},
            .spec = sp};
    }
}

/* The requests through a fresh engine over `be` (and `draft`), one after
 * the other (a draft model pays alone at the fixed costs: generate/spec.h). */
static void run(struct req *q, struct backend *be, struct backend *draft, int64_t spec_max)
{
    struct engine *e = NULL;
    struct engine_opts o = {.max_rows = be->o.max_rows, .spec_max = spec_max,
                            .spec_fixed_cost = true, .draft = draft,
                            .cb = {.on_token = on_token}};
    CHECK(engine_create(be, NULL, &o, &e) == IG_OK);
    if (!e)
        return;
    for (int i = 0; i < N_REQ; i++) {
        CHECK(engine_submit(e, &q[i].r) == IG_OK);
        for (int guard = 0; engine_pending(e) && guard < 10000; guard++)
            CHECK(engine_step(e) == IG_OK);
        CHECK(!engine_pending(e));
    }
    engine_free(e);
}

/* The speculative run's tokens against plain decoding's; some drafted
 * tokens accepted and, with `rejects`, some rejected (the rollback). */
static void compare(const struct req *ref, const struct req *q, const char *what, bool rejects)
{
    int64_t drafted = 0, accepted = 0;
    for (int i = 0; i < N_REQ; i++) {
        drafted += q[i].r.result.n_drafted;
        accepted += q[i].r.result.n_accepted;
        CHECKF(q[i].n_out == ref[i].n_out &&
                   !memcmp(q[i].out, ref[i].out, (size_t)q[i].n_out * sizeof *q[i].out),
               "%s: request %d's tokens differ from plain decoding's", what, i);
    }
    printf("%s: %lld of %lld drafted tokens accepted\n", what, (long long)accepted,
           (long long)drafted);
    CHECKF(accepted > 0 && (!rejects || accepted < drafted),
           "%s: %lld of %lld accepted (want some%s)", what, (long long)accepted,
           (long long)drafted, rejects ? " of each" : "");
}

/* A mixed step's decode row against a pure decode step of the same row. */
static void check_mixed(struct backend *be, int64_t nv)
{
    int32_t t0[1] = {0}, t1[1] = {1}, toks[8];
    struct backend_seq s[2];
    static float mixed[2 * 1000], pure[1000];
    IG_ASSERT(nv <= 1000);
    /* Sequence 0: 8 positions prefilled; sequence 1: nothing yet. */
    for (int i = 0; i < 8; i++)
        toks[i] = (int32_t)(3 + 17 * i);
    s[0] = (struct backend_seq){.table = t0, .slot = 0, .row0 = 0, .n_rows = 8, .pos0 = 0};
    struct backend_batch b = {.tokens = toks, .n_rows = 8, .seqs = s, .n_seqs = 1,
                              .logits = mixed};
    CHECK(backend_step(be, &b) == IG_OK);
    /* Mixed: sequence 0's decode row at 8, sequence 1's prompt rows 0..4. */
    int32_t mt[6] = {99, 5, 6, 7, 8, 9};
    bool want[6] = {true, false, false, false, false, true};
    s[0] = (struct backend_seq){.table = t0, .slot = 0, .row0 = 0, .n_rows = 1, .pos0 = 8};
    s[1] = (struct backend_seq){.table = t1, .slot = 1, .row0 = 1, .n_rows = 5, .pos0 = 0};
    b = (struct backend_batch){.tokens = mt, .n_rows = 6, .seqs = s, .n_seqs = 2,
                               .want_logits = want, .logits = mixed};
    struct gpu_backend_info i0, i1;
    gpu_get_info_emu(be, &i0);
    CHECK(backend_step(be, &b) == IG_OK);
    gpu_get_info_emu(be, &i1);
    CHECKF(i1.verify_steps == i0.verify_steps + 1, "the mixed step did not take the decode "
           "kernels");
    /* Pure: the same row again (same K/V rewritten), alone. */
    b = (struct backend_batch){.tokens = mt, .n_rows = 1, .seqs = s, .n_seqs = 1,
                               .logits = pure};
    CHECK(backend_step(be, &b) == IG_OK);
    double worst = 0, top = 0;
    for (int64_t v = 0; v < nv; v++) {
        worst = fmax(worst, fabs((double)mixed[v] - pure[v]));
        top = fmax(top, fabs((double)pure[v]));
    }
    printf("mixed step's decode row vs a pure decode step: max |diff| %.3g of %.3g\n", worst,
           top);
    CHECKF(worst <= 2e-3 * top, "the mixed step's decode row is off the pure step's: %.3g",
           worst);
}

int main(void)
{
    struct model *m = NULL, *md = NULL;
    CHECK(model_synthetic_spec("synthetic:Llama-tiny:Q8_0", &m) == IG_OK);
    CHECK(model_synthetic_spec("synthetic:Llama-tiny:Q8_0", &md) == IG_OK);
    if (!m || !md)
        return test_summary("test_backend_spec_emu");
    const int64_t nv = m->hp.n_vocab;
    struct backend_opts o = {.device = {.kind = BACKEND_CUDA}, .n_ctx = N_CTX, .max_rows = 32,
                             .n_slots = N_REQ, .n_blocks = 2 * N_REQ * (N_CTX / KV_BLOCK),
                             .gpu_weights = BACKEND_GPU_F16};
    struct backend *be = NULL, *draft = NULL;
    CHECK(gpu_backend_create_emu(m, &o, &be) == IG_OK);
    CHECK(gpu_backend_create_emu(md, &o, &draft) == IG_OK);
    if (be && draft) {
        static struct req ref[N_REQ], q[N_REQ];
        make_reqs(ref, (struct gen_spec){0}, nv);
        run(ref, be, NULL, 0);
        struct gpu_backend_info i0, i1;
        gpu_get_info_emu(be, &i0);

        make_reqs(q, (struct gen_spec){.lookup = true, .n_max = 4, .ngram_min = 1,
                                       .ngram_max = 3}, nv);
        run(q, be, NULL, 4);
        compare(ref, q, "lookup", true);
        make_reqs(q, (struct gen_spec){.draft = true, .n_max = 4}, nv);
        run(q, be, draft, 4);
        compare(ref, q, "draft model", false);
        gpu_get_info_emu(be, &i1);
        CHECKF(i1.verify_steps > i0.verify_steps, "no verify step took the decode kernels");
        check_mixed(be, nv);
    }
    backend_free(draft);
    backend_free(be);
    model_free(md);
    model_free(m);
    return test_summary("test_backend_spec_emu");
}
