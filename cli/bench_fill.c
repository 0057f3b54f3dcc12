/* cli/bench_fill.c: a depth for `ignite bench -d` made of copies. A decode
 * step (or a prompt chunk) at depth D reads D positions' K/V rows whatever
 * they hold: the attention's loads, products, exponentials and sums are the
 * same instructions for any values (no branch on a value, no early exit),
 * and bench's tokens are fixed ids, not sampled. So its time does not need
 * a model's own prefill of all D positions (a 16384-token fill of a 1.5B
 * model is minutes on two cores): the first N positions are the model's
 * (real rows: real magnitudes, real quantization scales), the rest repeat
 * them. Each copy is its own memory, so a step reads D distinct rows from
 * memory as after a real fill. Covered by tests/cli/test_bench_fill.c (the
 * rows of every position against those of p % N, byte for byte). */
#include "cli/bench_fill.h"

#include "core/status.h"
#include "kvcache/kvcache.h"

#include <stdlib.h>

int bench_fill_copies(struct backend *be, const int32_t *table, int64_t n_real, int64_t depth)
{
    IG_ASSERT(n_real > 0 && n_real % KV_BLOCK == 0 && n_real < depth);
    struct backend_seq seq = {.table = table, .slot = 0, .n_rows = 1, .pos0 = depth};
    const struct kv_store *src;
    const int32_t *src_table;
    int64_t src_slot;
    int st = backend_kv_export(be, &seq, n_real, &src, &src_table, &src_slot);
    if (st != IG_OK)
        return st;
    int64_t nb = kv_blocks_for(depth);
    struct kv_store *dst = NULL;
    int32_t *ids = malloc((size_t)nb * sizeof *ids);
    if (!ids)
        return ig_error(IG_E_NOMEM, "out of memory filling the cache's depth");
    st = kv_store_create(src->memory, nb, kv_memory_states_for(src->memory, 1),
                         "lower -d", &dst);
    if (st != IG_OK)
        goto done;
    kv_identity_table(ids, nb);
    /* dst's blocks c * n_real / KV_BLOCK.. take copy c: the identity table
     * from there is its table */
    for (int64_t p0 = 0; p0 < depth; p0 += n_real) {
        int64_t n = depth - p0 < n_real ? depth - p0 : n_real;
        kv_copy_seq(dst, ids + p0 / KV_BLOCK, 0, src, src_table, src_slot, n);
    }
    st = backend_kv_import(be, &seq, dst, depth);
done:
    kv_store_free(dst);
    free(ids);
    return st;
}
