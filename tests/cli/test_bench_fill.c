/* tests/cli/test_bench_fill.c: `ignite bench --depth-fill`'s copies
 * (cli/bench_fill.c) on a synthetic Llama-tiny and the CPU backend, an f16
 * and a q4_0 cache, a block table that is not the identity: after 64
 * positions prefilled and bench_fill_copies to 200 (a partial last block),
 * every layer's K and V row of position p is, byte for byte, the row of
 * p % 64, and the first 64 are the prefill's own. */
#include "backend/backend.h"
#include "cli/bench_fill.h"
#include "core/status.h"
#include "kvcache/kvcache.h"
#include "models/model.h"
#include "models/synthetic.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

#define N_REAL 64
#define DEPTH 200

/* Row `pos` of KV head h, K (kind 0) or V, of layer l in store st. */
static const void *row_at(const struct kv_store *st, const int32_t *table, int64_t l, int kind,
                          int64_t h, int64_t pos, size_t *bytes)
{
    struct kv_layout L = kv_store_layout(st, l);
    void *base = kind ? L.v : L.k;
    *bytes = kv_dtype_row_bytes(kv_base_dtype(&L, base), L.head_dim);
    return kv_row(&L, base, table, h, pos);
}

static void check_type(const struct model *m, enum kv_dtype dt)
{
    int64_t nb = kv_blocks_for(DEPTH + 1);
    struct backend *be;
    struct backend_opts o = {.device = {.kind = BACKEND_CPU}, .n_threads = 1,
                             .n_ctx = DEPTH + 1, .max_rows = N_REAL, .n_slots = 1,
                             .kv_dtype = dt, .kv_dtype_v = dt};
    CHECK(backend_create(m, &o, &be) == IG_OK);
    int32_t table[8];
    for (int64_t b = 0; b < nb; b++) /* reversed: copies go through the table */
        table[b] = (int32_t)(nb - 1 - b);
    int32_t tokens[N_REAL];
    for (int i = 0; i < N_REAL; i++)
        tokens[i] = (int32_t)((i * 37 + 5) % m->hp.n_vocab);
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof *logits);
    CHECK(backend_run_seq(be, table, 0, tokens, N_REAL, 0, logits) == IG_OK);

    const struct kv_memory *mem = backend_kv_memory(be);
    struct backend_seq seq = {.table = table, .slot = 0};
    const struct kv_store *st;
    const int32_t *tab;
    int64_t slot;
    CHECK(backend_kv_export(be, &seq, N_REAL, &st, &tab, &slot) == IG_OK);
    /* the prefill's rows, before the fill */
    size_t layer_bytes = 0;
    for (int64_t l = 0; l < mem->n_layer; l++)
        layer_bytes += (size_t)(2 * mem->layers[l].n_head_kv * N_REAL) *
                       kv_dtype_row_bytes(dt, mem->layers[l].head_dim);
    char *before = malloc(layer_bytes), *w = before;
    for (int64_t l = 0; l < mem->n_layer; l++)
        for (int kind = 0; kind < 2; kind++)
            for (int64_t h = 0; h < mem->layers[l].n_head_kv; h++)
                for (int64_t p = 0; p < N_REAL; p++) {
                    size_t n;
                    const void *r = row_at(st, tab, l, kind, h, p, &n);
                    memcpy(w, r, n), w += n;
                }

    CHECK(bench_fill_copies(be, table, N_REAL, DEPTH) == IG_OK);
    CHECK(backend_kv_export(be, &seq, DEPTH, &st, &tab, &slot) == IG_OK);
    int bad = 0;
    const char *rd = before;
    for (int64_t l = 0; l < mem->n_layer; l++)
        for (int kind = 0; kind < 2; kind++)
            for (int64_t h = 0; h < mem->layers[l].n_head_kv; h++) {
                for (int64_t p = 0; p < N_REAL; p++) {
                    size_t n;
                    const void *r = row_at(st, tab, l, kind, h, p, &n);
                    bad += memcmp(r, rd, n) != 0, rd += n;
                }
                for (int64_t p = N_REAL; p < DEPTH; p++) {
                    size_t n;
                    const void *r = row_at(st, tab, l, kind, h, p, &n);
                    const void *s = row_at(st, tab, l, kind, h, p % N_REAL, &n);
                    if (memcmp(r, s, n) && bad++ < 5)
                        fprintf(stderr, "%s: layer %lld %s head %lld: row %lld is not row %lld's\n",
                                kv_dtype_name(dt), (long long)l, kind ? "V" : "K", (long long)h,
                                (long long)p, (long long)(p % N_REAL));
                }
            }
    CHECKF(bad == 0, "%s cache: %d rows differ", kv_dtype_name(dt), bad);
    free(before);
    free(logits);
    backend_free(be);
}

int main(void)
{
    struct model *m;
    CHECK(model_synthetic_spec("synthetic:Llama-tiny", &m) == IG_OK);
    check_type(m, KV_F16);
    check_type(m, KV_Q4_0);
    model_free(m);
    return test_summary("test_bench_fill");
}
