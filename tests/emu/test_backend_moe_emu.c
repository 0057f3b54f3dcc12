/* tests/emu/test_backend_moe_emu.c: the CUDA backend's mixture-of-experts
 * FFN (backend/gpu_moe.c, ops/gpu_moe.cu emulated; the dense products as
 * their CPU twins) end to end against the CPU backend (exact f32 path,
 * backend/cpu_moe.c, itself proven against the fp64 transformers reference
 * by tests/cpu/test_moe.py) on bench/random_gguf.py's qwen3moe tiny file
 * (3 layers, 8 experts of 256, 2 used) given as the argument, Q8_0:
 *   - experts in their Q8_0 blocks (native weights: dense products of up
 *     to 8 rows quantize activations to int8, so backend_checks.h's int8
 *     bounds, against the CPU's int8 path: against its exact path one
 *     step's router flipped an expert, 0.14 relative, near the bound), and
 *     as f16 (--gpu-weights f16: the f16 bounds, NMSE 1e-3, against the
 *     exact path);
 *   - per mode: 24 ids prefilled (native: in chunks of 17 and 7) (a
 *     prefill step's tiles of several pairs of an expert), 5 decode steps (a row's 2
 *     experts only), teacher-forced, each step's logits within the bound
 *     and the same top token (a top two within twice the largest logit
 *     error of the CPU's is a tie: allow_ties); native: two sequences
 *     sharing steps (one decoding while the other prefills, then both
 *     decode): each row's logits against the CPU's, whose rows do not
 *     depend on their neighbours (tests/cpu/test_moe.py), so neither do the
 *     device's;
 *   - the device's weight bytes are the plan's (the f32 routers, the
 *     experts' stacked matrices);
 *   - the prefill chunks of 4 pairs an expert or more (native: the 17-row
 *     one; f16: the 24 rows whole; gpt-oss: both of its chunks) take the
 *     tensor-core expert products (gk_moe_mma's tiles of 64, f16 experts
 *     too; gpu_backend_info.moe_mma_layers one a layer but the last, whose
 *     rows are the logits' one, gpt-oss's 16-row chunk, a verify step, in
 *     its last layer too), the 7-row chunk and the decode steps the GEMV;
 *   - a qwen3moe model with a dense MLP beside its SwiGLU experts (Gemma 4's
 *     beside GeGLU ones run: tests/emu/test_gemma4_emu.py) is refused with
 *     one line (IG_E_MODEL);
 *   - with a second argument, random_gguf.py's qwen35moe tiny Q8_0 file:
 *     the shared expert beside the routed ones (run_shexp), with a control
 *     showing the comparison sees it;
 *   - with a third, gpt-oss's tiny F16 file (run_gptoss): its attention
 *     (sinks, biases, window, YaRN) and MoE in f16 weights, its expert
 *     products (clamped SwiGLU, biases) on the tensor cores; with a
 *     fourth, its tiny MXFP4 file (MXFP4 experts, Q8_0 elsewhere) in
 *     native weights, the MXFP4 experts on the tensor cores the same way.
 * Label emu. Built again for a GPU as tests/gpu's test_backend_moe_gpu (the
 * CUDA entry points, every product the real kernel's; exits 77 without a
 * device), which the GPU check's moe step runs (scripts/gpu/moe.sh).
 * Usage: test_backend_moe_emu QWEN3MOE_TINY.gguf [QWEN35MOE_TINY.gguf [GPTOSS_TINY_F16.gguf
 * [GPTOSS_TINY_MXFP4.gguf]]] */
#include "backend/backend.h"
#include "ops/gpu_moe.h"
#include "tests/emu/backend_checks.h"

/* n_ids prompt ids (at most 48) in chunks of `chunk` (0: native 17, f16
 * whole), then the decode steps. */
static void run_mode(const struct model *m, enum backend_gpu_weights mode, int n_ids, int chunk)
{
    const char *name = mode == BACKEND_GPU_F16 ? "f16 weights" : "native weights";
    fprintf(stderr, "== %s\n", name);
    struct backend_opts o = {.device = {.kind = BACKEND_CPU}, .n_threads = 2, .n_ctx = N_CTX,
                             .max_rows = 64, .n_slots = 2, .kv_dtype = KV_F32,
                             .exact = mode == BACKEND_GPU_F16};
    struct pair p = {.n_vocab = m->hp.n_vocab, .allow_ties = true};
    if (mode == BACKEND_GPU_F16) {
        p.nmse_tol = 1e-3;
    } else {
        p.tol = LOGIT_TOL_INT8;
        p.nmse_tol = NMSE_TOL_INT8;
    }
    pair_init(&p, &o);
    struct backend_opts og = o;
    og.device.kind = BACKEND_CUDA;
    og.n_blocks = 2 * (N_CTX / KV_BLOCK);
    og.gpu_weights = mode;
    CHECK(backend_create(m, &o, &p.cpu) == IG_OK);
    CHECK(IG_DEV(gpu_backend_create)(m, &og, &p.dev) == IG_OK);
    if (p.cpu && p.dev && p.lc && p.le) {
        struct gpu_backend_info info;
        IG_DEV(gpu_get_info)(p.dev, &info);
        CHECKF(info.weight_bytes == backend_gpu_weight_bytes(m, mode),
               "%s: %zu weight bytes on the device, the plan says %zu", name, info.weight_bytes,
               backend_gpu_weight_bytes(m, mode));
        int32_t ids[48];
        uint64_t s = 7;
        for (int i = 0; i < n_ids; i++)
            ids[i] = (int32_t)(test_rand_u64(&s) % (uint64_t)m->hp.n_vocab);
        bool native = mode == BACKEND_GPU_NATIVE;
        int64_t step = chunk ? chunk : native ? 17 : n_ids;
        run_prompt(&p, ids, n_ids, step, name);
        /* a prompt chunk of 4 pairs an expert or more (qwen3moe native: the
         * 17-row chunk's 34 pairs over 8 experts; f16: the 24 rows whole;
         * gpt-oss: both chunks, 48 and 32 pairs) takes the tensor cores
         * (gk_moe_choose), whatever the experts' type, in every MoE layer but
         * the last, which in a prefill step runs the rows that want logits
         * alone; a chunk of up to 16 rows (the 7-row one, gpt-oss's 16-row
         * one) runs as a verify step (backend/gpu.c's step_q_len: these
         * models have no recurrent layer), its rows padded to a power of two
         * in every layer, the last too; the decode steps the GEMV */
        struct gpu_backend_info after;
        IG_DEV(gpu_get_info)(p.dev, &after);
        int64_t want = 0;
        for (int64_t at = 0; at < n_ids; at += step) {
            int64_t rows = n_ids - at < step ? n_ids - at : step;
            bool verify = rows > 1 && rows <= 16;
            int64_t run = verify ? 2 : rows; /* the rows the MoE layers run */
            while (run < rows)
                run *= 2;
            for (int64_t l = 0; l < m->hp.n_layer - (verify ? 0 : 1); l++)
                want += m->layers[l].ffn == LAYER_FFN_MOE &&
                        run * m->layers[l].n_expert_used >=
                            GK_MOE_MMA_MIN_PAIRS * m->layers[l].n_expert;
        }
        CHECKF(want > 0, "%s: no prompt chunk takes the tensor cores: the case proves less",
               name);
        CHECKF(after.moe_mma_layers == want, "%s: %lld MoE layer steps on the tensor cores, "
               "expected %lld", name, (long long)after.moe_mma_layers, (long long)want);
        if (native)
            run_two(&p, ids, 12, 6, n_ids + N_STEPS);
        fprintf(stderr, "%s: worst rel err %.2e, NMSE %.2e\n", name, p.worst, p.worst_nmse);
    }
    backend_free(p.cpu);
    backend_free(p.dev);
    free(p.lc);
    free(p.le);
}

/* What the backend's MoE does not run (a dense MLP beside experts other
 * than Gemma 4's GeGLU ones) is refused with one line. */
static void check_refused(struct model *m)
{
    struct backend *g = NULL;
    m->hp.has_moe_mlp = true; /* not run wrongly: refused */
    struct backend_opts o = {.device = {.kind = BACKEND_CUDA}, .n_ctx = 64, .max_rows = 16,
                             .n_slots = 1, .n_blocks = 1};
    fprintf(stderr, "(a refusal naming %s is expected next)\n", m->hp.arch);
    CHECK(IG_DEV(gpu_backend_create)(m, &o, &g) == IG_E_MODEL && g == NULL);
    m->hp.has_moe_mlp = false;
    backend_free(g);
}

/* qwen35moe's shared expert (the tiny Q8_0 file: 3 DeltaNet layers and a
 * gated attention layer, each FFN 16 experts of 256, 2 used, and a shared
 * expert of 512) on f16 weights (--gpu-weights f16: an F16 file's upload
 * takes a minute under the emulator) against the CPU's exact path: 16 ids
 * prefilled in chunks of 11 and 5, 5 decode steps, within the f16 bounds
 * (as the qwen3moe f16 mode's) and the same top token. Control: the CPU
 * without the shared expert (hp.has_moe_shexp off for its step alone) is
 * outside the bound from the device on a fresh prompt in slot 1, so the
 * comparison sees the shared expert's part. */
static void run_shexp(const char *path)
{
    struct model *m = NULL;
    CHECK(model_load(path, &m) == IG_OK);
    if (!m)
        return;
    CHECKF(m->hp.arch_id == MODEL_ARCH_QWEN35MOE && m->hp.has_moe_shexp &&
           m->layers[0].ffn == LAYER_FFN_MOE, "%s: not a qwen35moe file with a shared expert",
           path);
    struct backend_opts o = {.device = {.kind = BACKEND_CPU}, .n_threads = 2, .n_ctx = N_CTX,
                             .max_rows = 64, .n_slots = 2, .kv_dtype = KV_F32, .exact = true};
    struct pair p = {.n_vocab = m->hp.n_vocab, .nmse_tol = 1e-3, .allow_ties = true};
    pair_init(&p, &o);
    struct backend_opts og = o;
    og.device.kind = BACKEND_CUDA;
    og.n_blocks = 2 * (N_CTX / KV_BLOCK);
    og.gpu_weights = BACKEND_GPU_F16;
    CHECK(backend_create(m, &o, &p.cpu) == IG_OK);
    CHECK(IG_DEV(gpu_backend_create)(m, &og, &p.dev) == IG_OK);
    if (p.cpu && p.dev && p.lc && p.le) {
        struct gpu_backend_info info;
        IG_DEV(gpu_get_info)(p.dev, &info);
        CHECKF(info.weight_bytes == backend_gpu_weight_bytes(m, BACKEND_GPU_F16),
               "qwen35moe: %zu weight bytes on the device, the plan says %zu", info.weight_bytes,
               backend_gpu_weight_bytes(m, BACKEND_GPU_F16));
        int32_t ids[16];
        uint64_t s = 9;
        for (int i = 0; i < 16; i++)
            ids[i] = (int32_t)(test_rand_u64(&s) % (uint64_t)m->hp.n_vocab);
        run_prompt(&p, ids, 16, 11, "qwen35moe");
        fprintf(stderr, "qwen35moe: worst rel err %.2e, NMSE %.2e\n", p.worst, p.worst_nmse);
        /* the control: slot 1 from position 0 */
        m->hp.has_moe_shexp = false;
        CHECK(backend_run_seq(p.cpu, p.table[1], 1, ids, 12, 0, p.lc) == IG_OK);
        m->hp.has_moe_shexp = true;
        CHECK(backend_run_seq(p.dev, p.table[1], 1, ids, 12, 0, p.le) == IG_OK);
        double e = test_rel_err(p.le, p.lc, p.n_vocab);
        fprintf(stderr, "control, the CPU without the shared expert: rel err %.2e\n", e);
        CHECKF(e > 4 * LOGIT_TOL, "the shared expert moves the logits by %.2e only: the "
               "comparison would not see it missing", e);
    }
    backend_free(p.cpu);
    backend_free(p.dev);
    free(p.lc);
    free(p.le);
    model_free(m);
}

/* gpt-oss (sinks, Q/K/V and wo biases, window 32 on layer 0, YaRN RoPE, the
 * clamped SwiGLU with expert biases) on a tiny file: 40 ids in chunks of 24
 * (the second chunk's window reaches into the cache), then decode steps
 * past the window, against the CPU's exact path (F16 file, f16 weights) or
 * its int8 path (MXFP4 file, native weights; then two sequences too). */
static void run_gptoss(const char *path, enum backend_gpu_weights mode)
{
    struct model *m = NULL;
    CHECK(model_load(path, &m) == IG_OK);
    if (!m)
        return;
    CHECKF(m->hp.arch_id == MODEL_ARCH_GPT_OSS && m->hp.has_attn_sinks && m->hp.has_o_bias &&
           m->layers[0].window > 0, "%s: not gpt-oss's tiny file", path);
    bool mxfp4 = m->layers[0].w[LAYER_FFN_GATE_EXPS].type == QUANT_MXFP4 &&
                 m->layers[0].w[LAYER_FFN_DOWN_EXPS].type == QUANT_MXFP4;
    CHECKF(mxfp4 == (mode == BACKEND_GPU_NATIVE), "%s: MXFP4 experts expected %s", path,
           mode == BACKEND_GPU_NATIVE ? "(native weights)" : "only in native weights");
    run_mode(m, mode, 40, 24);
    model_free(m);
}

int main(int argc, char **argv)
{
    if (IG_DEV(gpu_device_count)() < 1) {
        fprintf(stderr, "test_backend_moe: no CUDA device, skipped\n");
        return 77;
    }
    if (argc < 2 || argc > 5) {
        fprintf(stderr, "usage: test_backend_moe_emu QWEN3MOE_TINY.gguf [QWEN35MOE_TINY.gguf "
                        "[GPTOSS_TINY_F16.gguf [GPTOSS_TINY_MXFP4.gguf]]]\n");
        return 2;
    }
    struct model *m = NULL;
    CHECK(model_load(argv[1], &m) == IG_OK);
    if (!m)
        return test_summary("test_backend_moe_emu");
    CHECKF(m->hp.arch_id == MODEL_ARCH_QWEN3MOE && m->layers[0].ffn == LAYER_FFN_MOE,
           "%s: not a qwen3moe file", argv[1]);
    run_mode(m, BACKEND_GPU_NATIVE, 24, 0);
    run_mode(m, BACKEND_GPU_F16, 24, 0);
    check_refused(m);
    model_free(m);
    if (argc >= 3)
        run_shexp(argv[2]);
    if (argc >= 4)
        run_gptoss(argv[3], BACKEND_GPU_F16);
    if (argc == 5)
        run_gptoss(argv[4], BACKEND_GPU_NATIVE);
    return test_summary("test_backend_moe_emu");
}
