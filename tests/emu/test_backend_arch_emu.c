/* tests/emu/test_backend_arch_emu.c: the CUDA backend's Qwen 3 and Gemma 3
 * blocks end to end under the emulator (backend/gpu.c, every kernel but the
 * matrix products emulated: those run as their CPU twins) against the CPU
 * backend (exact f32 matmuls, prefill/attn_tiled.c), on synthetic models of
 * random weights (models/synthetic.c):
 *   Qwen3-tiny Q8_0: head_dim 128, Q/K head norms, and YaRN (factor 4) on
 *     its RoPE, so the cos/sin factor 1 + 0.1 ln 4 is in play;
 *   Gemma3-tiny Q8_0: head_dim 256 on 1 KV head, sqrt(n_embd) embeddings,
 *     GeGLU, post norms, head norms, layer 0 local (window 16, local RoPE
 *     base 10 000) and layer 1 made global (base 1e6), an attention scale
 *     that is not 1/sqrt(head_dim) (1/sqrt(n_embd / n_head), 27B's kind),
 *     a final soft-cap of 30.
 *   Qwen3-tiny again with its second layer narrower than the model (half
 *     the query heads, one KV head, two thirds of the FFN width): layers of
 *     their own sizes, on both backends and in the cache.
 *   Gemma3-tiny with Gemma 4's rules (backend/gpu_gemma4.c), all of
 *     Gemma's checks: V heads RMS-normed without a weight, layer output
 *     scales (0.25, 1.5), the local layers' RoPE over half the head
 *     (rope.dimension_count_swa), V = K in layer 0 (attention_k_eq_v: K's
 *     rows uploaded again as V's, backend/gpu_plan.c), layer 1 made local
 *     and reading layer 0's K/V (shared KV: no blocks, no K/V of its own;
 *     a prefill step's rows kept from layer 0's RoPE);
 *     then the device's copy of the model without the V norm, and without
 *     the output scales (the backend skipping them), must be off by more
 *     than the bounds (relative error 3e-2, NMSE 1e-4 on this run).
 * Weights go to the device as f16 (--gpu-weights f16): the bound is the f16
 * one of backend_checks.h plus NMSE 1e-3. Per model (teacher-forced, as
 * backend_checks.h does): 40 ids prefilled in chunks of 33 and 7 (Gemma:
 * both chunks' rows past the window's edge), 5 decode steps; the exported
 * cache against the CPU's, an imported one continuing bit for bit; the
 * device's weight bytes are the plan's (the norms included). Gemma also:
 * 40 ids in one chunk; 13 ids then 5 steps across the window's edge
 * (positions 13..17); two sequences sharing steps (run_two; with --model
 * FILE too, its step of 17 prompt rows beside a decode row counted on the
 * mixed route, none under IGNITE_GPU_MIXED=0). The prefill attention kernel is the
 * chooser's pick, the mma.sync kernel here (IGNITE_FLASH_VARIANT may force
 * another: CMake runs the Gemma model again on the ws kernel). Then what the
 * backend still refuses, with IG_E_MODEL: attention soft-capping (Gemma 2's),
 * Q/K norms with QKV biases. With --model FILE --cache-type q8_0|fp8 (issue
 * 51): the file's checks on a quantized pool (Gemma 4: its shared-KV layers
 * reading their sources' quantized blocks), see cache_type. Label emu. */
#include "backend/backend.h"
#include "models/synthetic.h"
#include "tests/emu/backend_checks.h"

#include <math.h>

static struct model *make(const char *spec)
{
    struct model *m = NULL;
    if (strncmp(spec, "synthetic:", 10)) { /* a file (--model): as it is */
        CHECK(model_load(spec, &m) == IG_OK);
        return m;
    }
    CHECK(model_synthetic_spec(spec, &m) == IG_OK);
    if (!m)
        return NULL;
    struct model_hparams *hp = &m->hp;
    if (hp->arch_id == MODEL_ARCH_QWEN3) {
        struct model_rope *r = &hp->rope[MODEL_ROPE_GLOBAL];
        r->scaling = ROPE_SCALING_YARN;
        r->factor = 4.0;
        r->orig_ctx = 256;
        r->yarn_ext_factor = 1.0;
        r->yarn_beta_fast = 32.0;
        r->yarn_beta_slow = 1.0;
    } else {
        /* Gemma 3 alternates five local layers and a global one: here the
         * second layer is the global one. */
        m->layers[1].window = 0;
        m->layers[1].rope = MODEL_ROPE_GLOBAL;
        hp->n_swa_layers = 1;
        hp->attn_scale = 1.0 / sqrt((double)hp->n_embd / (double)hp->n_head);
        for (int64_t l = 0; l < hp->n_layer; l++) /* the forwards read each layer's */
            m->layers[l].attn_scale = hp->attn_scale;
        hp->final_softcap = 30.0;
    }
    return m;
}

/* Gemma 4's shared KV on the Gemma 3 model: layer 1 made local too and
 * reading layer 0's K/V (no blocks, no K/V weights of its own). */
static void share_kv(struct model *m)
{
    struct model_layer *L = &m->layers[1];
    L->window = m->layers[0].window;
    L->rope = MODEL_ROPE_LOCAL;
    L->kv_shared = true;
    L->kv_source = 0;
    m->hp.n_swa_layers = 2;
    m->hp.n_kv_shared = 1;
}

/* Gemma 4's attention rules on the Gemma 3 model (layer l's output scale
 * out_scales[l]; layer 1 reading layer 0's K/V, layer 0's V its K); v_norm
 * or out_scale false: that rule left out. */
static float out_scales[2] = {0.25f, 1.5f};

/* The NMSE bound of the run with Gemma 4's rules: the real backend measured
 * 7.2e-6 there, the V norm skipped 4.9e-3 (Gemma's post norms take most of
 * what V's scale does), so the bound sits between with room both ways. */
#define GEMMA4_NMSE_TOL 1e-4

static void gemma4_rules(struct model *m, bool v_norm, bool out_scale)
{
    m->hp.has_v_norm = v_norm;
    m->hp.has_out_scale = out_scale;
    m->hp.n_rot_local = m->hp.head_dim / 2;
    share_kv(m);
    m->layers[0].v_is_k = true; /* no V weight: V = K */
    for (int64_t l = 0; l < m->hp.n_layer && l < 2; l++)
        m->layers[l].w[LAYER_OUT_SCALE] = (struct model_weight){
            .type = QUANT_F32, .n_expert = 1, .rows = 1, .cols = 1, .row_bytes = 4,
            .data = &out_scales[l]};
}

static void set_cols(struct model_weight *w, int64_t cols)
{
    w->cols = cols;
    w->row_bytes = quant_row_bytes(w->type, cols);
}

/* Layers of their own sizes (struct model_layer's facts): layer l made
 * narrower than the model, half the query heads, one KV head and two
 * thirds of the FFN, its weights the stored ones read at the smaller
 * shapes (random numbers either way). */
static void narrow_layer(struct model *m, int64_t l)
{
    struct model_layer *L = &m->layers[l];
    L->n_head /= 2;
    L->n_head_kv = 1;
    L->n_ff = 2 * L->n_ff / 3;
    int64_t q = L->n_head * L->head_dim, kv = L->n_head_kv * L->head_dim;
    L->w[LAYER_WQ].rows = q;
    L->w[LAYER_WK].rows = kv;
    L->w[LAYER_WV].rows = kv;
    set_cols(&L->w[LAYER_WO], q);
    L->w[LAYER_FFN_GATE].rows = L->n_ff;
    L->w[LAYER_FFN_UP].rows = L->n_ff;
    set_cols(&L->w[LAYER_FFN_DOWN], L->n_ff);
}

enum variant { PLAIN, NARROW, GEMMA4, FILE_SHORT };

/* --cache-type q8_0 | fp8 (with --model): the device's pool of that type;
 * the CPU's of q8_0 (the same rotation and blocks: the exported K caches
 * compare within a quant step) or, for fp8 (the CPU has none), f16 with the
 * K caches not compared (fp8's rows are rotated, f16's not). */
static enum kv_dtype cache_type = KV_F32;
/* --short (with --model): the prompt and its decode steps alone (the
 * cache's export and import and the two sequences left out): the fp8 run
 * and the mutant's, whose first prefill already misses by far. */
static bool short_run;

static void run_model(const char *spec, bool all, enum variant v)
{
    static const char *const what[] = {
        "", ", layer 1 narrower",
        ", Gemma 4's V norm, output scales, local RoPE dims, V = K, shared KV", ""};
    struct model *m = make(spec);
    if (!m)
        return;
    if (v == NARROW)
        narrow_layer(m, 1);
    if (v == GEMMA4)
        gemma4_rules(m, true, true);
    bool gemma4 = v == GEMMA4;
    fprintf(stderr, "== %s%s%s%s\n", spec, what[v], cache_type != KV_F32 ? ", a cache of " : "",
            cache_type != KV_F32 ? kv_dtype_name(cache_type) : "");
    const enum kv_dtype cpu_cache = cache_type == KV_FP8 ? KV_F16 : cache_type;
    struct backend_opts o = {.device = {.kind = BACKEND_CPU}, .n_threads = 2, .n_ctx = N_CTX,
                             .max_rows = 64, .n_slots = 2, .kv_dtype = cpu_cache,
                             .kv_dtype_v = cpu_cache, .exact = true};
    struct pair p = {.n_vocab = m->hp.n_vocab, .nmse_tol = gemma4 ? GEMMA4_NMSE_TOL : 1e-3};
    pair_init(&p, &o);
    struct backend_opts og = o;
    og.kv_dtype = og.kv_dtype_v = cache_type;
    og.device.kind = BACKEND_CUDA;
    og.n_blocks = 2 * (N_CTX / KV_BLOCK);
    og.gpu_weights = BACKEND_GPU_F16;
    CHECK(backend_create(m, &o, &p.cpu) == IG_OK);
    CHECK(gpu_backend_create_emu(m, &og, &p.dev) == IG_OK);
    if (p.cpu && p.dev && p.lc && p.le) {
        /* the plan counts the head and post norms the backend uploads */
        struct gpu_backend_info info;
        gpu_get_info_emu(p.dev, &info);
        CHECKF(info.weight_bytes == backend_gpu_weight_bytes(m, BACKEND_GPU_F16),
               "%s: %zu weight bytes on the device, the plan says %zu", spec, info.weight_bytes,
               backend_gpu_weight_bytes(m, BACKEND_GPU_F16));
        int32_t ids[40];
        uint64_t s = 7;
        for (int i = 0; i < 40; i++)
            ids[i] = (int32_t)(test_rand_u64(&s) % (uint64_t)m->hp.n_vocab);
        /* a file (FILE_SHORT): one prefill past the window (each costs
         * seconds emulated), then the decode steps */
        int64_t n = v == FILE_SHORT ? 24 : 40;
        run_prompt(&p, ids, n, v == FILE_SHORT ? n : 33,
                   v == FILE_SHORT ? "24 ids in one chunk" : "chunks of 33 and 7");
        if (cache_type != KV_FP8 && !short_run)
            compare_caches(&p, m, n + N_STEPS);
        if (!short_run)
            check_upload(&p, m, &og, n + N_STEPS);
        if (v == FILE_SHORT && !short_run) {
            /* a prompt of 20 beside a decode row: 17 rows (past a verify
             * step's 16: the mixed route), 3 (a verify step), then both
             * decoding */
            gpu_get_info_emu(p.dev, &info);
            const int64_t mixed0 = info.mixed_steps;
            run_two(&p, ids, 20, 17, n + N_STEPS);
            gpu_get_info_emu(p.dev, &info);
            const char *env = getenv("IGNITE_GPU_MIXED");
            const int64_t want = env && !strcmp(env, "0") ? 0 : 1;
            CHECKF(info.mixed_steps - mixed0 == want, "%s: %lld steps took the mixed route, "
                   "expected %lld", spec, (long long)(info.mixed_steps - mixed0),
                   (long long)want);
        }
        if (all) {
            run_prompt(&p, ids, 40, 40, "one chunk");
            run_prompt(&p, ids + 5, 13, 13, "decode across the window's edge");
            run_two(&p, ids, 12, 6, 13 + N_STEPS);
        }
        fprintf(stderr, "%s: worst rel err %.2e, NMSE %.2e\n", spec, p.worst, p.worst_nmse);
    }
    backend_free(p.cpu);
    backend_free(p.dev);
    free(p.lc);
    free(p.le);
    model_free(m);
}

/* A mutant of the backend's Gemma 4 rules: the CPU backend on the model
 * with them all, the device on a copy without the V norm (mutant 1) or the
 * output scales (mutant 2); a 40-id prefill's logits must differ by more
 * than the bound run_model holds the real backend to. */
static void check_gemma4_mutant(int mutant)
{
    const char *spec = "synthetic:Gemma3-tiny:Q8_0";
    struct model *mc = make(spec), *md = make(spec);
    struct backend *cpu = NULL, *dev = NULL;
    if (mc && md) {
        gemma4_rules(mc, true, true);
        gemma4_rules(md, mutant != 1, mutant != 2);
        struct backend_opts o = {.device = {.kind = BACKEND_CPU}, .n_threads = 2,
                                 .n_ctx = N_CTX, .max_rows = 64, .n_slots = 1,
                                 .kv_dtype = KV_F32, .exact = true};
        struct backend_opts og = o;
        og.device.kind = BACKEND_CUDA;
        og.n_blocks = N_CTX / KV_BLOCK;
        og.gpu_weights = BACKEND_GPU_F16;
        CHECK(backend_create(mc, &o, &cpu) == IG_OK);
        CHECK(gpu_backend_create_emu(md, &og, &dev) == IG_OK);
        int64_t nv = mc->hp.n_vocab;
        float *lc = malloc((size_t)nv * sizeof *lc), *le = malloc((size_t)nv * sizeof *le);
        int32_t ids[40], table[N_CTX / KV_BLOCK];
        uint64_t s = 7;
        for (int i = 0; i < 40; i++)
            ids[i] = (int32_t)(test_rand_u64(&s) % (uint64_t)nv);
        for (int b = 0; b < N_CTX / KV_BLOCK; b++)
            table[b] = b;
        if (cpu && dev && lc && le &&
            backend_run_seq(cpu, table, 0, ids, 40, 0, lc) == IG_OK &&
            backend_run_seq(dev, table, 0, ids, 40, 0, le) == IG_OK) {
            double e = test_rel_err(le, lc, nv), se = 0, sr = 0;
            for (int64_t i = 0; i < nv; i++) {
                se += ((double)le[i] - lc[i]) * ((double)le[i] - lc[i]);
                sr += (double)lc[i] * lc[i];
            }
            fprintf(stderr, "mutant (%s): rel err %.2e, NMSE %.2e\n",
                    mutant == 1 ? "V norm skipped" : "output scales dropped", e, se / sr);
            CHECKF(e > LOGIT_TOL || se / sr > GEMMA4_NMSE_TOL, "mutant %d not caught: rel "
                   "err %.2e, NMSE %.2e within the bounds", mutant, e, se / sr);
        } else {
            CHECKF(false, "mutant %d: the backends did not run", mutant);
        }
        free(lc);
        free(le);
    }
    backend_free(cpu);
    backend_free(dev);
    model_free(mc);
    model_free(md);
}

/* What the CUDA backend still does not run is refused with one line. */
static void check_refused(void)
{
    for (int i = 0; i < 2; i++) {
        struct model *m = NULL;
        struct backend *g = NULL;
        CHECK(model_synthetic_spec_shapes(i ? "synthetic:Qwen3-tiny" : "synthetic:Gemma3-tiny",
                                          &m) == IG_OK);
        if (!m)
            continue;
        if (i)
            m->hp.has_qkv_bias = true; /* no architecture has both: refused, not run wrongly */
        else
            m->hp.attn_softcap = 50.0; /* Gemma 2's attention soft-capping */
        struct backend_opts o = {.device = {.kind = BACKEND_CUDA}, .n_ctx = 64,
                                 .max_rows = 16, .n_slots = 1, .n_blocks = 1};
        fprintf(stderr, "(a refusal naming %s is expected next)\n", m->hp.arch);
        CHECKF(gpu_backend_create_emu(m, &o, &g) == IG_E_MODEL && g == NULL, "refusal %d", i);
        backend_free(g);
        model_free(m);
    }
}

int main(int argc, char **argv)
{
    /* --gemma-only: the Gemma model's first checks alone (CMake's entry on
     * a forced prefill kernel); --model FILE: Gemma's checks on a file
     * (tests/emu/test_gemma4_emu.py's gemma4 GGUF) */
    bool gemma_only = argc == 2 && !strcmp(argv[1], "--gemma-only");
    if (argc >= 3 && !strcmp(argv[1], "--model")) {
        bool ok = true;
        for (int i = 3; i < argc && ok; i++) {
            if (!strcmp(argv[i], "--short"))
                short_run = true;
            else if (i + 1 < argc && !strcmp(argv[i], "--cache-type") &&
                     (!strcmp(argv[i + 1], "q8_0") || !strcmp(argv[i + 1], "fp8")))
                cache_type = argv[++i][0] == 'q' ? KV_Q8_0 : KV_FP8;
            else
                ok = false;
        }
        if (ok) {
            run_model(argv[2], false, FILE_SHORT);
            return test_summary("test_backend_arch_emu --model");
        }
    }
    if (argc != 1 && !gemma_only) {
        fprintf(stderr, "usage: test_backend_arch_emu [--gemma-only | --model FILE "
                        "[--cache-type q8_0|fp8] [--short]]\n");
        return 2;
    }
    if (!gemma_only)
        run_model("synthetic:Qwen3-tiny:Q8_0", false, PLAIN); /* no window: see Gemma */
    run_model("synthetic:Gemma3-tiny:Q8_0", !gemma_only, PLAIN);
    if (!gemma_only) { /* per-layer heads, KV heads and FFN width; Gemma 4's rules */
        run_model("synthetic:Qwen3-tiny:Q8_0", false, NARROW);
        run_model("synthetic:Gemma3-tiny:Q8_0", true, GEMMA4);
        check_gemma4_mutant(1);
        check_gemma4_mutant(2);
        check_refused();
    }
    return test_summary("test_backend_arch_emu");
}
