/* tests/emu/test_backend_batch_emu.c: the CUDA backend's batched step under
 * the emulator (backend/gpu.c over the device pool: one GEMM per weight over
 * every row of a step, the variable-length prefill kernel over the step's
 * block tables, the decode kernel over B sequences padded to a batch-size
 * bucket) against the CPU backend (exact f32 matmuls), on a synthetic
 * Llama-tiny model (random Q8_0 weights, head_dim 64, GQA 2) whose weights
 * go to the device as f16: backend_checks.h's run_batch (four requests of
 * 70, 23, 40 and 74 prompt tokens, chunked prefill mixed with other
 * sequences' decode rows, a shared 64-token prefix, a request leaving so
 * later decode steps run 3, 2 and 1 sequences), every wanted row's logits
 * within the f16 bound (max |dev - cpu| / max |cpu| <= 3e-2, NMSE <= 1e-3),
 * top-1 compared where the CPU's margin exceeds twice the largest logit
 * error (random weights); the steps mixing one-row sequences with a chunk
 * past 16 rows take the decode attention for those (gpu_backend_info's
 * mixed_steps; none with IGNITE_GPU_MIXED=0). The emulator captures no graphs (the decode steps
 * run their launches directly: tests/gpu/test_backend_gpu.c checks the
 * graph count). A token out of the vocabulary in a step is IG_E_INPUT.
 * The prefill kernel is the chooser's pick (mma.sync here); CMake runs the
 * test again with IGNITE_FLASH_VARIANT=ws128n128 (the warp-specialized
 * kernel's variable-length form, test_backend_batch_emu_ws). Label emu. */
#include "backend/backend.h"
#include "models/synthetic.h"
#include "tests/emu/backend_checks.h"

int main(void)
{
    struct model *m = NULL;
    CHECK(model_synthetic_spec("synthetic:Llama-tiny:Q8_0", &m) == IG_OK);
    if (!m)
        return test_summary("test_backend_batch_emu");
    struct backend_opts o = {.device = {.kind = BACKEND_CPU}, .n_threads = 2, .n_ctx = N_CTX,
                             .max_rows = BATCH_ROWS, .n_slots = BATCH_SLOTS,
                             .n_blocks = 4 * BATCH_SLOTS, .kv_dtype = KV_F32, .exact = true};
    struct backend_opts og = o;
    og.device.kind = BACKEND_CUDA;
    og.gpu_weights = BACKEND_GPU_F16;
    struct pair p = {.n_vocab = m->hp.n_vocab, .tol = 3e-2, .nmse_tol = 1e-3,
                     .allow_ties = true};
    int32_t ids[200];
    uint64_t s = 13;
    for (int i = 0; i < 200; i++)
        ids[i] = (int32_t)(test_rand_u64(&s) % (uint64_t)m->hp.n_vocab);
    int n_buckets = 0, n_graphs = 0;
    run_batch(&p, m, &o, &og, ids, &n_buckets, &n_graphs);
    CHECKF(n_buckets == 3, "the decode steps used %d buckets, expected 3 (4, 2, 1)", n_buckets);
    CHECKF(n_graphs == 0, "the emulator captured %d graphs", n_graphs);
    fprintf(stderr, "batch: worst rel err %.2e, NMSE %.2e, %lld mixed steps\n", p.worst,
            p.worst_nmse, (long long)p.mixed_steps);

    /* A decode step (three sequences, bucket 4 with a padding row) where
     * not every row wants logits: the greedy tokens of the wanted rows only,
     * in row order, each sampler_greedy's of the logits the same step gave,
     * and nothing written past them. */
    struct backend *g = NULL;
    CHECK(gpu_backend_create_emu(m, &og, &g) == IG_OK);
    if (g) {
        static const bool pats[4][3] = {{false, true, true}, {true, false, true},
                                        {true, true, false}, {false, false, true}};
        const int64_t nv = m->hp.n_vocab;
        int32_t tokens[3] = {5, 17, 29}, tables[3][1] = {{0}, {1}, {2}};
        struct backend_seq seqs[3];
        for (int i = 0; i < 3; i++)
            seqs[i] = (struct backend_seq){.table = tables[i], .slot = i, .row0 = i,
                                           .n_rows = 1};
        float *l = malloc((size_t)(3 * nv) * sizeof *l);
        for (int k = 0; k < 4 && l; k++) {
            struct backend_batch b = {.tokens = tokens, .want_logits = pats[k], .n_rows = 3,
                                      .seqs = seqs, .n_seqs = 3, .logits = l};
            CHECK(backend_step(g, &b) == IG_OK);
            int32_t greedy[3 + 2] = {-7, -7, -7, -7, -7};
            b.logits = NULL;
            b.greedy = greedy;
            CHECK(backend_step(g, &b) == IG_OK);
            int n_want = pats[k][0] + pats[k][1] + pats[k][2];
            for (int j = 0; j < n_want; j++)
                CHECKF(greedy[j] == sampler_greedy(l + j * nv, nv), "wanted pattern %d, "
                       "row %d: greedy %d, its logits' %d", k, j, greedy[j],
                       sampler_greedy(l + j * nv, nv));
            for (int j = n_want; j < 5; j++)
                CHECKF(greedy[j] == -7, "wanted pattern %d: wrote past %d tokens", k, n_want);
        }
        free(l);
    }
    backend_free(g);

    /* a token id out of range is the input's fault, reported as such */
    g = NULL;
    CHECK(gpu_backend_create_emu(m, &og, &g) == IG_OK);
    if (g) {
        int32_t tokens[2] = {1, (int32_t)m->hp.n_vocab}, table[1] = {0}, table2[1] = {1};
        struct backend_seq seqs[2] = {{.table = table, .slot = 0, .row0 = 0, .n_rows = 1},
                                      {.table = table2, .slot = 1, .row0 = 1, .n_rows = 1}};
        float *l = malloc((size_t)(2 * m->hp.n_vocab) * sizeof *l);
        struct backend_batch b = {.tokens = tokens, .n_rows = 2, .seqs = seqs, .n_seqs = 2,
                                  .logits = l};
        fprintf(stderr, "(a token id outside the vocabulary is expected next)\n");
        CHECK(l && backend_step(g, &b) == IG_E_INPUT);
        free(l);
    }
    backend_free(g);
    model_free(m);
    return test_summary("test_backend_batch_emu");
}
