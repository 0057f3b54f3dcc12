/* tests/gpu/test_backend_qgpu.c: the CUDA backend's two weight modes on a
 * real GPU against the CPU backend (exact f32 matmuls), with the checks of
 * tests/emu/backend_checks.h, on synthetic models made on the host:
 * --gpu-weights f16 on SmolLM2-135M Q4_1 (f16 tolerance); native on
 * Llama-tiny Q4_K, Q6_K and Q4_K_M (Q|K in Q4_K and V in Q6_K: a matrix of
 * two parts), the last also with every product forced through f16 slabs
 * (IGNITE_QMM_PATH=dequant) and through the tensor cores (=qmma), with the
 * bounds of tests/emu/test_backend_qemu.c. Then shapes-only Llama-3-8B in
 * Q4_K and Q4_0 with their blocks made on the device: finite logits, and the
 * plan's bytes on the device, within 5% of the model's tensor bytes.
 * (test_backend_gpu.c runs the default mode on larger models.) The weights
 * are random, so a top-1 within the error of the runner-up counts as a tie.
 * Exits 77 without a GPU. Label gpu; run by the GPU check's step 6
 * (scripts/gpu/quant.sh). */
#include "models/synthetic.h"
#include "tests/emu/backend_checks.h"

static void check_model(const char *spec, enum backend_gpu_weights mode, const char *path)
{
    struct model *m = NULL;
    CHECK(model_synthetic_spec(spec, &m) == IG_OK);
    if (!m)
        return;
    fprintf(stderr, "== %s, %s weights%s%s\n", spec, backend_gpu_weights_name(mode),
            path ? ", IGNITE_QMM_PATH=" : "", path ? path : "");
    if (path)
        setenv("IGNITE_QMM_PATH", path, 1);
    struct backend_opts o = {.device = {.kind = BACKEND_CPU}, .n_threads = 0, .n_ctx = N_CTX,
                             .max_rows = 128, .n_slots = 2, .kv_dtype = KV_F32, .exact = true};
    struct pair p = {.n_vocab = m->hp.n_vocab, .allow_ties = true};
    if (mode == BACKEND_GPU_NATIVE)
        p.tol = 3e-2, p.nmse_tol = 1e-3; /* random weights: test_backend_qemu.c's bounds */
    pair_init(&p, &o);
    struct backend_opts og = o;
    og.device.kind = BACKEND_CUDA;
    og.n_blocks = 2 * (N_CTX / KV_BLOCK);
    og.gpu_weights = mode;
    CHECK(backend_create(m, &o, &p.cpu) == IG_OK);
    CHECK(gpu_backend_create_cuda(m, &og, &p.dev) == IG_OK);
    int32_t ids[150];
    uint64_t s = 7;
    for (int i = 0; i < 150; i++)
        ids[i] = (int32_t)(test_rand_u64(&s) % (uint64_t)m->hp.n_vocab);
    if (p.cpu && p.dev && p.lc && p.le) {
        struct gpu_backend_info info;
        gpu_get_info_cuda(p.dev, &info);
        CHECK(info.weight_bytes == backend_gpu_weight_bytes(m, mode));
        run_prompt(&p, ids, 5, 5, "short");
        run_prompt(&p, ids, 150, 100, "long, 2 chunks");
        compare_caches(&p, m, 150 + N_STEPS);
        check_upload(&p, m, &og, 150 + N_STEPS);
        run_two(&p, ids, 40, 16, 150 + N_STEPS);
        fprintf(stderr, "%s: worst rel err %.2e, NMSE %.2e\n", spec, p.worst, p.worst_nmse);
    }
    unsetenv("IGNITE_QMM_PATH");
    backend_free(p.cpu);
    backend_free(p.dev);
    free(p.lc);
    free(p.le);
    model_free(m);
}

/* A shapes-only model: blocks made on the device, finite logits, the plan's
 * bytes within 5% of the model's tensor bytes. */
static void check_shapes_only(const char *spec)
{
    struct model *m = NULL;
    struct backend *g = NULL;
    CHECK(model_synthetic_spec_shapes(spec, &m) == IG_OK);
    struct backend_opts o = {.device = {.kind = BACKEND_CUDA}, .n_ctx = 64, .max_rows = 32,
                             .n_slots = 1, .n_blocks = 1};
    if (m && gpu_backend_create_cuda(m, &o, &g) == IG_OK) {
        float *l = malloc((size_t)m->hp.n_vocab * sizeof *l);
        int32_t ids[32] = {1, 2, 3}, table[1] = {0}, five = 5;
        CHECK(l && backend_run_seq(g, table, 0, ids, 32, 0, l) == IG_OK);
        CHECK(l && backend_run_seq(g, table, 0, &five, 1, 32, l) == IG_OK);
        int finite = 1;
        for (int64_t i = 0; l && i < m->hp.n_vocab; i++)
            finite &= isfinite(l[i]);
        CHECKF(finite, "%s: device-made weights: non-finite logits", spec);
        struct gpu_backend_info info;
        gpu_get_info_cuda(g, &info);
        double ratio = (double)info.weight_bytes / (double)model_weight_bytes(m);
        CHECK(info.weight_bytes == backend_gpu_weight_bytes(m, BACKEND_GPU_NATIVE));
        CHECKF(ratio <= 1.05, "%s: device weights %.3f x the model's", spec, ratio);
        fprintf(stderr, "%s: %.2f GiB of weights on the device (%.4f x the model's tensors), "
                "%.2f GiB in all\n", spec, (double)info.weight_bytes / (1 << 30), ratio,
                (double)backend_device_bytes(g) / (1 << 30));
        free(l);
    } else {
        CHECKF(0, "%s: backend creation failed", spec);
    }
    backend_free(g);
    model_free(m);
}

int main(void)
{
    if (gpu_device_count_cuda() == 0) {
        fprintf(stderr, "skip: no CUDA device\n");
        return 77;
    }
    check_model("synthetic:SmolLM2-135M:Q4_1", BACKEND_GPU_F16, NULL);
    check_model("synthetic:Llama-tiny:Q4_K", BACKEND_GPU_NATIVE, NULL);
    check_model("synthetic:Llama-tiny:Q6_K", BACKEND_GPU_NATIVE, NULL);
    check_model("synthetic:Llama-tiny:Q4_K_M", BACKEND_GPU_NATIVE, NULL);
    check_model("synthetic:Llama-tiny:Q4_K_M", BACKEND_GPU_NATIVE, "dequant");
    check_model("synthetic:Llama-tiny:Q4_K_M", BACKEND_GPU_NATIVE, "qmma");
    check_shapes_only("synthetic:Llama-3-8B:Q4_K");
    check_shapes_only("synthetic:Llama-3-8B:Q4_0");
    return test_summary("test_backend_qgpu");
}
