/* tests/emu/test_backend_fuse_emu.c: a decode step's fused launches
 * (IGNITE_GPU_FUSE=1, the default: docs/gpu.md, "A decode step's launches")
 * against the launch-per-step path (IGNITE_GPU_FUSE=0), both through the
 * CUDA backend with every kernel emulated (IGNITE_EMU_MATMUL=kernels), on
 * synthetic models: Llama-tiny Q4_K, Q4_0, Q4_K_M (Q|K|V in two parts) and
 * f16 weights (--gpu-weights f16), and Gemma3-tiny Q8_0 (GeGLU, head norms,
 * post norms, a sliding window).
 *
 * Per model and setting, the same work: three sequences prefilled (9, 70 and
 * 3 tokens: the second past a 64-key split, so its decode attention merges
 * several splits), two decode steps of all three (a bucket of 4 rows, one
 * of them padding), one of the first alone (a bucket of 1), then 3 more
 * tokens of the third as a prefill step (its products are GEMVs: the int8
 * blocks a decode step's attention and norms left must not be taken for
 * its own). What must hold:
 *   - every logit of the fused path is the bit of the other's: the fused
 *     kernels compute the same f32 values in the same order (the gate|up
 *     GEMV's activation is the element-wise kernel's function on the same
 *     accumulators; the last split merges the partials as the combine
 *     kernel does; a residual GEMV's last block normalizes with the norm
 *     kernel's function and thread count), so any lost row, wrong head, stale ticket or missed
 *     split shows as a changed bit (the CUDA backend's logits against the
 *     CPU backend's are test_backend_qemu's and test_backend_arch_emu's);
 *   - the launches of a decode step (backend.step_nodes, counted by the
 *     emulator: a graph's nodes on a GPU) drop by the fusions' count a
 *     layer: RoPE and the pool write where Q|K|V is one GEMV and no head
 *     norms come first, the combine, the activation where gate and up are
 *     one GEMV of one type, the RMSNorm after wo and after down where the
 *     residual product is one GEMV and no post norm follows (f16 weights'
 *     bucket of 4 goes through the device GEMM, which has no epilogue: the
 *     combine alone; Gemma 3 has head and post norms);
 *   - Llama-tiny Q4_K's fused run again with IGNITE_PDL=1 (the GEMVs, the
 *     decode attention, the prefills' tensor-core products of 9 rows and
 *     more (gk_qmma) and the element-wise kernels as programmatic dependent
 *     launches, each block meeting at griddepcontrol.wait under the
 *     emulator, a block that never waits a fault): the same bits and
 *     launches as the default run;
 *   - IGNITE_GPU_FUSE=2 is refused when the backend is made.
 * Prints each model's launches per decode step and per layer, both paths.
 * Label emu. */
#include "backend/backend.h"
#include "backend/gpu.h"
#include "core/status.h"
#include "models/synthetic.h"
#include "tests/test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_CTX 256
#define N_SEQ 3

/* What one setting gave: the logits of every step, the launches of the
 * bucket-4 and bucket-1 decode steps. */
struct run {
    float *logits; /* [N_SEQ prefills + 2 * N_SEQ + 1 + 1][n_vocab] */
    int64_t nodes4, nodes1;
};

static int run_setting(const struct model *m, bool f16, bool no_verify, const char *fuse,
                       struct run *r)
{
    const int64_t nv = m->hp.n_vocab;
    static const int64_t prompt[N_SEQ] = {9, 70, 3};
    setenv("IGNITE_GPU_FUSE", fuse, 1);
    if (no_verify) /* a few rows of one sequence: a prefill step, not a verify step */
        setenv("IGNITE_GPU_VERIFY", "0", 1);
    /* prefill through dequantized slabs and the (CPU) GEMM: the emulated
     * tensor-core kernel over 70 rows was most of the time; the decode
     * steps take the chooser's GEMV again (the scratch is sized for both) */
    setenv("IGNITE_QMM_PATH", "dequant", 1);
    struct backend_opts o = {.device = {.kind = BACKEND_CUDA}, .n_ctx = N_CTX, .max_rows = 72,
                             .n_slots = N_SEQ, .n_blocks = N_SEQ * (N_CTX / KV_BLOCK),
                             .gpu_weights = f16 ? BACKEND_GPU_F16 : BACKEND_GPU_NATIVE};
    struct backend *g = NULL;
    int st = gpu_backend_create_emu(m, &o, &g);
    unsetenv("IGNITE_GPU_FUSE");
    unsetenv("IGNITE_GPU_VERIFY");
    if (st != IG_OK) {
        unsetenv("IGNITE_QMM_PATH");
        return st;
    }
    int32_t table[N_SEQ][N_CTX / KV_BLOCK], ids[72];
    for (int s = 0; s < N_SEQ; s++)
        for (int b = 0; b < N_CTX / KV_BLOCK; b++)
            table[s][b] = (int32_t)((N_SEQ - 1 - s) * (N_CTX / KV_BLOCK) + b);
    uint64_t rng = 7;
    int64_t pos[N_SEQ], k = 0;
    r->logits = malloc((size_t)((3 * N_SEQ + 2) * nv) * sizeof *r->logits);
    for (int s = 0; s < N_SEQ && st == IG_OK; s++) {
        for (int64_t i = 0; i < prompt[s]; i++)
            ids[i] = (int32_t)(test_rand_u64(&rng) % (uint64_t)nv);
        st = backend_run_seq(g, table[s], s, ids, prompt[s], 0, r->logits + k++ * nv);
        pos[s] = prompt[s];
    }
    unsetenv("IGNITE_QMM_PATH");
    for (int step = 0; step < 3 && st == IG_OK; step++) {
        int64_t ns = step < 2 ? N_SEQ : 1;
        struct backend_seq seqs[N_SEQ];
        for (int64_t s = 0; s < ns; s++) {
            seqs[s] = (struct backend_seq){.table = table[s], .slot = (int)s, .row0 = s,
                                           .n_rows = 1, .pos0 = pos[s]++};
            ids[s] = (int32_t)(test_rand_u64(&rng) % (uint64_t)nv);
        }
        struct backend_batch b = {.tokens = ids, .n_rows = ns, .seqs = seqs, .n_seqs = ns,
                                  .logits = r->logits + k * nv};
        st = backend_step(g, &b);
        k += ns;
        if (ns == N_SEQ)
            r->nodes4 = g->step_nodes;
        else
            r->nodes1 = g->step_nodes;
    }
    for (int i = 0; i < 3; i++)
        ids[i] = (int32_t)(test_rand_u64(&rng) % (uint64_t)nv);
    if (st == IG_OK)
        st = backend_run_seq(g, table[2], 2, ids, 3, pos[2], r->logits + k * nv);
    backend_free(g);
    return st;
}

/* saved1, saved4: the launches a layer the fused path saves in a decode step
 * of one row and of four. */
static void run_model(const char *spec, bool f16, bool no_verify, int64_t saved1,
                      int64_t saved4, bool pdl)
{
    struct model *m = NULL;
    CHECK(model_synthetic_spec(spec, &m) == IG_OK);
    if (!m)
        return;
    const char *name = f16 ? "f16 weights" : spec;
    struct run a = {0}, b = {0};
    CHECKF(run_setting(m, f16, no_verify, "0", &a) == IG_OK, "%s: IGNITE_GPU_FUSE=0 failed",
           name);
    CHECKF(run_setting(m, f16, no_verify, "1", &b) == IG_OK, "%s: IGNITE_GPU_FUSE=1 failed",
           name);
    const int64_t n = (3 * N_SEQ + 2) * m->hp.n_vocab, L = m->hp.n_layer;
    int64_t off = 0;
    for (int64_t i = 0; a.logits && b.logits && i < n; i++)
        off += memcmp(&a.logits[i], &b.logits[i], sizeof(float)) != 0;
    CHECKF(off == 0, "%s: %lld logits of the fused path differ from the unfused path's", name,
           (long long)off);
    CHECKF(a.nodes1 - b.nodes1 == saved1 * L, "%s: one row: %lld launches unfused, %lld "
           "fused (expected %lld fewer)", name, (long long)a.nodes1, (long long)b.nodes1,
           (long long)(saved1 * L));
    CHECKF(a.nodes4 - b.nodes4 == saved4 * L, "%s: four rows: %lld launches unfused, %lld "
           "fused (expected %lld fewer)", name, (long long)a.nodes4, (long long)b.nodes4,
           (long long)(saved4 * L));
    fprintf(stderr, "%s, %lld layers: a decode step's launches, 1 row: %lld unfused, %lld fused; "
            "4 rows: %lld, %lld\n", name, (long long)L, (long long)a.nodes1,
            (long long)b.nodes1, (long long)a.nodes4, (long long)b.nodes4);
    if (pdl) { /* the fused run as programmatic dependent launches */
        struct run c = {0};
        setenv("IGNITE_PDL", "1", 1);
        CHECKF(run_setting(m, f16, no_verify, "1", &c) == IG_OK, "%s: IGNITE_PDL=1 failed",
               name);
        unsetenv("IGNITE_PDL");
        off = 0;
        for (int64_t i = 0; b.logits && c.logits && i < n; i++)
            off += memcmp(&b.logits[i], &c.logits[i], sizeof(float)) != 0;
        CHECKF(c.logits && off == 0 && c.nodes1 == b.nodes1 && c.nodes4 == b.nodes4,
               "%s: IGNITE_PDL=1: %lld logits differ, launches %lld/%lld (default %lld/%lld)",
               name, (long long)off, (long long)c.nodes1, (long long)c.nodes4,
               (long long)b.nodes1, (long long)b.nodes4);
        free(c.logits);
    }
    free(a.logits);
    free(b.logits);
    model_free(m);
}

int main(void)
{
    setenv("IGNITE_EMU_MATMUL", "kernels", 1);
    /* A layer saves RoPE (in the Q|K|V GEMV), the combine, the activation
     * and both norms (wo's tail the FFN's, down's the next layer's or the
     * head's); Q4_K_M's Q|K|V is two parts (V in Q6_K): no RoPE there; f16
     * weights' four rows go through the device GEMM (no epilogue): the
     * combine alone; Gemma 3 has head norms before RoPE and post norms
     * after its products: the combine and the activation. */
    /* Q4_0 without verify steps (IGNITE_GPU_VERIFY=0): the last 3 rows are a
     * prefill step whose products are GEMVs, after decode steps that left
     * int8 blocks of o and xn (the others: a verify step, a padding row). */
    static const struct {
        const char *spec;
        bool f16, no_verify;
        int64_t saved1, saved4;
        bool pdl;
    } models[] = {
        {"synthetic:Llama-tiny:Q4_K", false, false, 5, 5, true},
        {"synthetic:Llama-tiny:Q4_0", false, true, 5, 5, false},
        {"synthetic:Llama-tiny:Q4_K_M", false, false, 4, 4, false},
        {"synthetic:Llama-tiny:Q4_K", true, false, 5, 1, false},
        {"synthetic:Gemma3-tiny:Q8_0", false, false, 2, 2, false},
    };
    /* the first model that fails ends the run (a broken fusion fails them all) */
    for (size_t i = 0; i < sizeof models / sizeof models[0] && !test_failures_; i++)
        run_model(models[i].spec, models[i].f16, models[i].no_verify, models[i].saved1,
                  models[i].saved4, models[i].pdl);

    /* A value other than 0 or 1 is refused by name. */
    struct model *m = NULL;
    struct backend *g = NULL;
    CHECK(model_synthetic_spec("synthetic:Llama-tiny:Q4_0", &m) == IG_OK);
    struct backend_opts o = {.device = {.kind = BACKEND_CUDA}, .n_ctx = 64, .max_rows = 8,
                             .n_slots = 1, .n_blocks = 1};
    setenv("IGNITE_GPU_FUSE", "2", 1);
    fprintf(stderr, "(an IGNITE_GPU_FUSE error is expected next)\n");
    CHECK(m && gpu_backend_create_emu(m, &o, &g) == IG_E_USAGE && !g);
    unsetenv("IGNITE_GPU_FUSE");
    model_free(m);
    return test_summary("test_backend_fuse_emu");
}
