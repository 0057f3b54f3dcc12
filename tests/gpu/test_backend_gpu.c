/* tests/gpu/test_backend_gpu.c: the CUDA backend on a real GPU against the
 * CPU backend (exact f32 matmuls), on synthetic models made on the host,
 * with the checks of tests/emu/backend_checks.h, in both --gpu-weights
 * modes: f16 (SmolLM2-135M in Q4_1: head_dim 64, GQA 3, tied; Llama-3.2-1B
 * in Q8_0: GQA 4, 128k vocabulary; f16 tolerance) and native, quantized
 * weights read by their kernels (the same two, and Llama-tiny in Q4_K,
 * Q6_K and Q4_K_M, the last also with IGNITE_QMM_PATH=dequant and qmma;
 * the bounds of tests/emu/test_backend_qemu.c). The weights are random, so
 * a top-1 within the error of the runner-up counts as a tie. Then
 * shapes-only models whose weights are made on the device must run to
 * finite logits, holding on the device the bytes the plan says (native
 * Llama-3-8B Q4_K within 5% of the model's). Exits 77 without a GPU. */
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
                             .max_batch = 128, .kv_dtype = KV_F32, .exact = true};
    struct pair p = {.n_vocab = m->hp.n_vocab, .allow_ties = true};
    if (mode == BACKEND_GPU_NATIVE)
        p.tol = 3e-2, p.nmse_tol = 1e-3; /* random weights: test_backend_qemu.c's bounds */
    p.lc = malloc((size_t)p.n_vocab * sizeof *p.lc);
    p.le = malloc((size_t)p.n_vocab * sizeof *p.le);
    struct backend_opts og = o;
    og.device.kind = BACKEND_CUDA;
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
        backend_truncate(p.cpu, 0);
        gpu_truncate_cuda(p.dev, 0);
        run_prompt(&p, ids, 150, 100, "long, 2 chunks");
        compare_caches(&p, m);
        check_upload(&p, m, &og);
        fprintf(stderr, "%s: worst rel err %.2e, NMSE %.2e\n", spec, p.worst, p.worst_nmse);
    }
    unsetenv("IGNITE_QMM_PATH");
    backend_free(p.cpu);
    gpu_backend_free_cuda(p.dev);
    free(p.lc);
    free(p.le);
    model_free(m);
}

/* A shapes-only model: weights made on the device, finite logits, the
 * plan's bytes (and for native, within 5% of the model's tensor bytes). */
static void check_shapes_only(const char *spec, enum backend_gpu_weights mode)
{
    struct model *m = NULL;
    struct gpu_backend *g = NULL;
    CHECK(model_synthetic_spec_shapes(spec, &m) == IG_OK);
    struct backend_opts o = {.device = {.kind = BACKEND_CUDA}, .n_ctx = 64, .max_batch = 32,
                             .gpu_weights = mode};
    if (m && gpu_backend_create_cuda(m, &o, &g) == IG_OK) {
        float *l = malloc((size_t)m->hp.n_vocab * sizeof *l);
        int32_t ids[32] = {1, 2, 3};
        CHECK(l && gpu_prefill_cuda(g, ids, 32, 0, l) == IG_OK);
        CHECK(gpu_decode_cuda(g, 5, 32, l) == IG_OK);
        int finite = 1;
        for (int64_t i = 0; l && i < m->hp.n_vocab; i++)
            finite &= isfinite(l[i]);
        CHECKF(finite, "%s: device-made weights: non-finite logits", spec);
        struct gpu_backend_info info;
        gpu_get_info_cuda(g, &info);
        double ratio = (double)info.weight_bytes / (double)model_weight_bytes(m);
        CHECK(info.weight_bytes == backend_gpu_weight_bytes(m, mode));
        if (mode == BACKEND_GPU_NATIVE)
            CHECKF(ratio <= 1.05, "%s: device weights %.3f x the model's", spec, ratio);
        fprintf(stderr, "%s, %s weights: %.2f GiB on the device (%.3f x the model's tensors), "
                "%.2f GiB in all\n", spec, backend_gpu_weights_name(mode),
                (double)info.weight_bytes / (1 << 30), ratio,
                (double)info.device_bytes / (1 << 30));
        free(l);
    } else {
        CHECKF(0, "%s: backend creation failed", spec);
    }
    gpu_backend_free_cuda(g);
    model_free(m);
}

int main(void)
{
    if (gpu_device_count_cuda() == 0) {
        fprintf(stderr, "skip: no CUDA device\n");
        return 77;
    }
    check_model("synthetic:SmolLM2-135M:Q4_1", BACKEND_GPU_F16, NULL);
    check_model("synthetic:Llama-3.2-1B:Q8_0", BACKEND_GPU_F16, NULL);
    check_model("synthetic:SmolLM2-135M:Q4_1", BACKEND_GPU_NATIVE, NULL);
    check_model("synthetic:Llama-3.2-1B:Q8_0", BACKEND_GPU_NATIVE, NULL);
    check_model("synthetic:Llama-tiny:Q4_K", BACKEND_GPU_NATIVE, NULL);
    check_model("synthetic:Llama-tiny:Q6_K", BACKEND_GPU_NATIVE, NULL);
    check_model("synthetic:Llama-tiny:Q4_K_M", BACKEND_GPU_NATIVE, NULL);
    check_model("synthetic:Llama-tiny:Q4_K_M", BACKEND_GPU_NATIVE, "dequant");
    check_model("synthetic:Llama-tiny:Q4_K_M", BACKEND_GPU_NATIVE, "qmma");

    check_shapes_only("synthetic:Llama-3.2-1B", BACKEND_GPU_F16);
    check_shapes_only("synthetic:Llama-3.2-1B", BACKEND_GPU_NATIVE);
    check_shapes_only("synthetic:Llama-3-8B:Q4_K", BACKEND_GPU_NATIVE);
    check_shapes_only("synthetic:Llama-3-8B:Q4_0", BACKEND_GPU_NATIVE);
    return test_summary("test_backend_gpu");
}
