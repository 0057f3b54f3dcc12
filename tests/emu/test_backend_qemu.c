/* tests/emu/test_backend_qemu.c: the CUDA backend with quantized weights on
 * the device, end to end under the emulator with every kernel emulated
 * (IGNITE_EMU_MATMUL=kernels: the GEMV, the tensor-core product and the
 * f16 slabs as they ship), against the CPU backend (exact f32 matmuls), on
 * synthetic Llama-tiny models (random weights, 2 layers, 256 wide, GQA 2,
 * an untied head): Q4_K, Q6_K, Q4_K_M (Q|K in Q4_K and V in Q6_K: a matrix
 * of two parts; down and the head in Q6_K).
 *
 * Per model, teacher-forced (backend_checks.h): 40 random ids prefilled in
 * chunks of 33 and 7 (the tensor-core kernel, then the GEMV), 5 decode
 * steps (the GEMV); then 12 ids and 5 steps with IGNITE_QMM_PATH=dequant
 * (every product through dequantized f16 slabs and the GEMM). Bound: max |dev -
 * cpu| / max |cpu| <= 3e-2 and NMSE <= 1e-3 (random weights have no
 * outlier blocks: int8 activations cost about 1e-2 here, the f16 path 1e-3),
 * top-1 compared where the CPU's top two differ by more than twice the
 * largest logit error. The device cache against the CPU's, an imported
 * cache continuing bit for bit; for Q4_K_M, two sequences sharing steps
 * (one decoding while the other prefills, then both decoding).
 * Memory: the weights the backend allocates are the plan's
 * (backend_gpu_weight_bytes) and within 5% of the model's tensor bytes;
 * --gpu-weights f16 holds 2 bytes a weight. A shapes-only model gets random
 * blocks made on the device and finite logits. Label emu. */
#include "backend/backend.h"
#include "models/synthetic.h"
#include "tests/emu/backend_checks.h"

#define QTOL 3e-2
#define QNMSE 1e-3

/* The checks on one model; `path` forces every product's path (NULL: the
 * chooser's), set before the backend is made so its scratch is sized for it;
 * `two`: also two sequences sharing steps. */
static void run_model(const char *spec, const char *path, bool two)
{
    struct model *m = NULL;
    CHECK(model_synthetic_spec(spec, &m) == IG_OK);
    if (!m)
        return;
    fprintf(stderr, "== %s%s%s\n", spec, path ? ", IGNITE_QMM_PATH=" : "", path ? path : "");
    if (path)
        setenv("IGNITE_QMM_PATH", path, 1);
    struct backend_opts o = {.device = {.kind = BACKEND_CPU}, .n_threads = 2, .n_ctx = N_CTX,
                             .max_rows = 64, .n_slots = 2, .kv_dtype = KV_F32, .exact = true};
    struct pair p = {.n_vocab = m->hp.n_vocab, .tol = QTOL, .nmse_tol = QNMSE,
                     .allow_ties = true};
    pair_init(&p, &o);
    struct backend_opts og = o;
    og.device.kind = BACKEND_CUDA;
    og.n_blocks = 2 * (N_CTX / KV_BLOCK);
    CHECK(backend_create(m, &o, &p.cpu) == IG_OK);
    CHECK(gpu_backend_create_emu(m, &og, &p.dev) == IG_OK);
    if (p.cpu && p.dev && p.lc && p.le) {
        struct gpu_backend_info info;
        gpu_get_info_emu(p.dev, &info);
        size_t plan = backend_gpu_weight_bytes(m, BACKEND_GPU_NATIVE);
        double ratio = (double)info.weight_bytes / (double)model_weight_bytes(m);
        CHECKF(info.weight_bytes == plan, "%s: %zu weight bytes on the device, the plan says %zu",
               spec, info.weight_bytes, plan);
        CHECKF(ratio <= 1.05, "%s: device weights %.3f x the model's", spec, ratio);
        fprintf(stderr, "%s: device weights %zu bytes, %.4f x the model's tensors\n", spec,
                info.weight_bytes, ratio);

        int32_t ids[40];
        uint64_t s = 11;
        for (int i = 0; i < 40; i++)
            ids[i] = (int32_t)(test_rand_u64(&s) % (uint64_t)m->hp.n_vocab);
        if (path) {
            run_prompt(&p, ids, 12, 12, path);
        } else {
            run_prompt(&p, ids, 40, 33, "tensor cores + GEMV");
            compare_caches(&p, m, 40 + N_STEPS);
            check_upload(&p, m, &og, 40 + N_STEPS);
            /* slot 0 decodes while slot 1 prefills 12 ids in chunks of 6, then both
             * decode (one model: CI time) */
            if (two)
                run_two(&p, ids, 12, 6, 40 + N_STEPS);
        }
        fprintf(stderr, "%s: worst rel err %.2e, NMSE %.2e\n", spec, p.worst, p.worst_nmse);
    }
    unsetenv("IGNITE_QMM_PATH");
    backend_free(p.cpu);
    backend_free(p.dev);
    free(p.lc);
    free(p.le);
    model_free(m);
}

/* --gpu-weights f16: 2 bytes a weight, f16 tolerance, through the f16 kernels. */
static void run_f16(const char *spec)
{
    struct model *m = NULL;
    CHECK(model_synthetic_spec(spec, &m) == IG_OK);
    if (!m)
        return;
    struct backend_opts o = {.device = {.kind = BACKEND_CPU}, .n_threads = 2, .n_ctx = N_CTX,
                             .max_rows = 64, .n_slots = 2, .kv_dtype = KV_F32, .exact = true};
    struct pair p = {.n_vocab = m->hp.n_vocab, .allow_ties = true};
    pair_init(&p, &o);
    struct backend_opts og = o;
    og.device.kind = BACKEND_CUDA;
    og.n_blocks = 2 * (N_CTX / KV_BLOCK);
    og.gpu_weights = BACKEND_GPU_F16;
    CHECK(backend_create(m, &o, &p.cpu) == IG_OK);
    CHECK(gpu_backend_create_emu(m, &og, &p.dev) == IG_OK);
    if (p.cpu && p.dev && p.lc && p.le) {
        struct gpu_backend_info info;
        gpu_get_info_emu(p.dev, &info);
        CHECK(info.weight_bytes == backend_gpu_weight_bytes(m, BACKEND_GPU_F16));
        CHECK(info.weight_bytes >= 2 * (size_t)m->n_params);
        int32_t ids[20];
        uint64_t s = 5;
        for (int i = 0; i < 20; i++)
            ids[i] = (int32_t)(test_rand_u64(&s) % (uint64_t)m->hp.n_vocab);
        run_prompt(&p, ids, 20, 20, "f16 weights");
    }
    backend_free(p.cpu);
    backend_free(p.dev);
    free(p.lc);
    free(p.le);
    model_free(m);
}

/* A shapes-only model: random blocks made on the (emulated) device. */
static void run_shapes_only(void)
{
    struct model *m = NULL;
    struct backend *g = NULL;
    CHECK(model_synthetic_spec_shapes("synthetic:Llama-tiny:Q4_K_M", &m) == IG_OK);
    struct backend_opts o = {.device = {.kind = BACKEND_CUDA}, .n_ctx = 64, .max_rows = 16,
                             .n_slots = 1, .n_blocks = 1};
    if (m && gpu_backend_create_emu(m, &o, &g) == IG_OK) {
        float *l = malloc((size_t)m->hp.n_vocab * sizeof *l);
        int32_t ids[16] = {1, 2, 3, 999}, table[1] = {0}, tok = 5;
        CHECK(l && backend_run_seq(g, table, 0, ids, 16, 0, l) == IG_OK);
        CHECK(l && backend_run_seq(g, table, 0, &tok, 1, 16, l) == IG_OK);
        bool finite = true, nonzero = false;
        for (int64_t i = 0; l && i < m->hp.n_vocab; i++)
            finite &= isfinite(l[i]), nonzero |= l[i] != 0;
        CHECKF(finite && nonzero, "device-made blocks: logits not finite or all zero");
        struct gpu_backend_info info;
        gpu_get_info_emu(g, &info);
        CHECK(info.weight_bytes == backend_gpu_weight_bytes(m, BACKEND_GPU_NATIVE));
        free(l);
    } else {
        CHECK(!"shapes-only model: backend creation failed");
    }
    backend_free(g);
    model_free(m);
}

int main(void)
{
    setenv("IGNITE_EMU_MATMUL", "kernels", 1);
    run_model("synthetic:Llama-tiny:Q4_K", NULL, false);
    run_model("synthetic:Llama-tiny:Q6_K", NULL, false);
    run_model("synthetic:Llama-tiny:Q4_K_M", NULL, true);
    run_model("synthetic:Llama-tiny:Q4_K_M", "dequant", false);
    run_f16("synthetic:Llama-tiny:Q4_K");
    run_shapes_only();
    return test_summary("test_backend_qemu");
}
