/* cli/info_tp.c: `ignite info --tp N`: what each tensor-parallel rank holds
 * of the model (models/tp.h): its query and KV heads, FFN columns and
 * vocabulary rows (layer 0's, and whether every layer is alike), the bytes
 * of weights it reads and its KV cache per token. Covered by
 * tests/tp/test_tp_cli.py. */
#include "cli/cli.h"

#include "core/status.h"
#include "kvcache/kvcache.h"
#include "models/tp.h"

#include <stdio.h>
#include <string.h>

/* True when every layer of part p splits as layer 0 does. */
static bool layers_alike(const struct model *m, const struct model_tp_part *p)
{
    for (int64_t l = 1; l < m->hp.n_layer; l++)
        if (memcmp(&p->layers[l], &p->layers[0], sizeof p->layers[0]))
            return false;
    return true;
}

/* f32 K and V bytes a token takes in part p's cache (layers that share
 * another's K/V keep none). */
static int64_t kv_bytes_per_token(const struct model *m, const struct kv_memory *mem,
                                  const struct model_tp_part *p)
{
    int64_t bytes = 0;
    for (int64_t l = 0; l < m->hp.n_layer; l++)
        if (mem->layers[l].kind != KV_SHARED)
            bytes += 2 * p->layers[l].n_kv * m->layers[l].head_dim * (int64_t)sizeof(float);
    return bytes;
}

int cli_info_tp(const struct model *m, int n_ranks)
{
    struct kv_memory *mem;
    int st = kv_memory_of(m, KV_F32, KV_F32, &mem);
    if (st != IG_OK)
        return st;
    size_t all = 0;
    struct model_tensor_it it;
    model_tensors_begin(&it, m, MODEL_TENSORS_ALL | MODEL_TENSORS_TIED);
    while (model_tensors_next(&it))
        if (!it.t->gathered)
            all += model_weight_size(it.w);
    printf("tensor parallel %d ranks (mpirun -np %d): weights read per step %.1f MiB in one "
           "process\n", n_ranks, n_ranks, (double)all / 1048576.0);
    for (int r = 0; r < n_ranks; r++) {
        struct model_tp_part p;
        if ((st = model_tp_part(m, r, n_ranks, &p)) != IG_OK)
            break;
        const struct model_tp_layer *s = &p.layers[0];
        bool rep = m->layers[0].n_head_kv < n_ranks;
        printf("  rank %-3d      query heads %lld-%lld, KV heads %lld-%lld%s, FFN columns "
               "%lld-%lld, vocabulary %lld-%lld%s; weights %.1f MiB; KV %lld bytes/token f32\n",
               r, (long long)s->q0, (long long)(s->q0 + s->n_q - 1), (long long)s->kv0,
               (long long)(s->kv0 + s->n_kv - 1), rep ? " (replicated)" : "",
               (long long)s->ff0, (long long)(s->ff0 + s->n_ff - 1), (long long)p.v0,
               (long long)(p.v0 + p.n_v - 1),
               layers_alike(m, &p) ? "" : " (layer 0; others differ)",
               (double)model_tp_part_bytes(m, &p) / 1048576.0,
               (long long)kv_bytes_per_token(m, mem, &p));
        model_tp_part_free(&p);
    }
    kv_memory_free(mem);
    return st;
}
