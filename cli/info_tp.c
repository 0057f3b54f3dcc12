/* cli/info_tp.c: `ignite info --tp N`: what each tensor-parallel rank holds
 * of the model (models/tp.h): its query and KV heads, FFN columns ("none"
 * in an empty share) or experts (and the dense FFN's columns beside them)
 * and vocabulary rows (the first attention layer's, and whether every layer
 * splits as the first of its kind), the bytes
 * of weights it reads, of its rows of Gemma 4's per-layer embedding table,
 * its KV cache per token and a gated DeltaNet's state per sequence (its
 * heads'); with --json, the same as
 * the object's "tensor_parallel" member, with each rank's CUDA weight bytes
 * (backend/gpu_plan.c over its part's shapes) and, of a mixture of experts,
 * its experts' of them. Covered by
 * tests/tp/test_tp_cli.py. */
#include "cli/cli.h"

#include "core/status.h"
#include "backend/backend.h"
#include "kvcache/kvcache.h"
#include "models/tp.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* True when every layer of part p splits as the first layer of its kind
 * (attention, DeltaNet) does. */
static bool layers_alike(const struct model *m, const struct model_tp_part *p)
{
    for (int64_t l = 1; l < m->hp.n_layer; l++) {
        int64_t f = 0;
        while (m->layers[f].mixer != m->layers[l].mixer)
            f++;
        if (memcmp(&p->layers[l], &p->layers[f], sizeof p->layers[0]))
            return false;
    }
    return true;
}

/* f32 K and V bytes a token takes in part p's cache (layers that share
 * another's K/V keep none, recurrent ones a state a sequence). */
static int64_t kv_bytes_per_token(const struct model *m, const struct kv_memory *mem,
                                  const struct model_tp_part *p)
{
    int64_t bytes = 0;
    for (int64_t l = 0; l < m->hp.n_layer; l++)
        if (mem->layers[l].kind != KV_SHARED && mem->layers[l].kind != KV_RECURRENT)
            bytes += 2 * p->layers[l].n_kv * m->layers[l].head_dim * (int64_t)sizeof(float);
    return bytes;
}

/* Bytes of a sequence's recurrent state in part p's cache: its DeltaNet
 * heads' state (the pool's state group holds a slot of these a sequence, on
 * either backend, as the whole model's kv_groups give it); with ckpt, of
 * the pool's one checkpoint instead. */
static size_t state_bytes(const struct model *m, const struct model_tp_part *p, bool ckpt)
{
    size_t bytes = 0;
    for (int64_t l = 0; l < m->hp.n_layer; l++)
        if (m->layers[l].mixer == LAYER_MIXER_DELTANET) {
            struct model_layer L = m->layers[l];
            L.dn_k_heads = p->layers[l].n_dk;
            L.dn_v_heads = p->layers[l].n_dk * p->layers[l].n_dg;
            bytes += ckpt ? kv_deltanet_ckpt_bytes(&L) : kv_deltanet_state_bytes(&L);
        }
    return bytes;
}

/* The first layer whose mixer is `mixer`, or -1. */
static int64_t first_layer(const struct model *m, enum layer_mixer mixer)
{
    for (int64_t l = 0; l < m->hp.n_layer; l++)
        if (m->layers[l].mixer == mixer)
            return l;
    return -1;
}

/* One rank's share as info reports it. */
struct rank_row {
    struct model_tp_part p;
    bool replicated, alike;
    bool beside; /* the first attention layer has a dense FFN beside its experts */
    bool dn_replicated; /* its DeltaNet key heads replicated (fewer than ranks) */
    int64_t la, ld;     /* the first attention layer and DeltaNet layer (-1: none): what
                           the heads reported are */
    size_t weight_bytes;
    size_t ple_bytes; /* its rows of Gemma 4's per-layer table (0: none) */
    int64_t kv_bytes;
    size_t state_bytes; /* a sequence's recurrent state (0: none) */
    size_t ckpt_bytes;  /* the pool's one checkpoint of it */
    size_t cuda_native, cuda_f16; /* its CUDA weights' plan (0: not run on CUDA) */
    size_t cuda_experts_native, cuda_experts_f16; /* of them its experts' */
};

/* Row w's CUDA plan: its part's shapes through backend/gpu_plan.c (nothing
 * where the GPU does not run m). */
static int cuda_bytes(const struct model *m, struct rank_row *w)
{
    int64_t layer;
    struct model *shard;
    if (backend_gpu_missing(m, &layer))
        return IG_OK;
    int st = model_tp_shard_shapes(m, &w->p, &shard);
    if (st != IG_OK)
        return st;
    w->cuda_native = backend_gpu_weight_bytes(shard, BACKEND_GPU_NATIVE);
    w->cuda_f16 = backend_gpu_weight_bytes(shard, BACKEND_GPU_F16);
    w->cuda_experts_native = backend_gpu_expert_bytes(shard, BACKEND_GPU_NATIVE);
    w->cuda_experts_f16 = backend_gpu_expert_bytes(shard, BACKEND_GPU_F16);
    model_tp_shard_free(shard);
    return IG_OK;
}

/* [first, last] of n things from first; [] where n is 0 (an empty share). */
static void add_range(cJSON *o, const char *name, int64_t first, int64_t n)
{
    cJSON *a = cJSON_AddArrayToObject(o, name);
    if (n == 0)
        return;
    cJSON_AddItemToArray(a, cJSON_CreateNumber((double)first));
    cJSON_AddItemToArray(a, cJSON_CreateNumber((double)(first + n - 1)));
}

/* "first-last (n)" of n columns from first, or "none" (an empty share:
 * models/tp.c gives a rank none where the units are fewer than the ranks). */
static const char *cols_text(char *buf, size_t size, int64_t first, int64_t n)
{
    if (n == 0)
        snprintf(buf, size, "none");
    else
        snprintf(buf, size, "%lld-%lld (%lld)", (long long)first, (long long)(first + n - 1),
                 (long long)n);
    return buf;
}

static void print_rows(const struct rank_row *rows, int n_ranks, size_t all)
{
    printf("tensor parallel %d ranks (mpirun -np %d): weights read per step %.1f MiB in one "
           "process\n", n_ranks, n_ranks, (double)all / 1048576.0);
    for (int r = 0; r < n_ranks; r++) {
        const struct model_tp_layer *s = &rows[r].p.layers[rows[r].la < 0 ? 0 : rows[r].la];
        const struct model_tp_layer *d = &rows[r].p.layers[rows[r].ld < 0 ? 0 : rows[r].ld];
        bool experts = s->n_e > 0;
        char share[64];
        if (experts)
            snprintf(share, sizeof share, "%lld-%lld", (long long)s->e0,
                     (long long)(s->e0 + s->n_e - 1));
        else
            cols_text(share, sizeof share, s->ff0, s->n_ff);
        printf("  rank %-3d      query heads %lld-%lld, KV heads %lld-%lld%s, %s "
               "%s, vocabulary %lld-%lld%s; weights %.1f MiB; KV %lld bytes/token f32\n",
               r, (long long)s->q0, (long long)(s->q0 + s->n_q - 1), (long long)s->kv0,
               (long long)(s->kv0 + s->n_kv - 1), rows[r].replicated ? " (replicated)" : "",
               experts ? "experts" : "FFN columns", share,
               (long long)rows[r].p.v0,
               (long long)(rows[r].p.v0 + rows[r].p.n_v - 1),
               rows[r].alike ? "" : " (the first layer; others differ)",
               (double)rows[r].weight_bytes / 1048576.0, (long long)rows[r].kv_bytes);
        if (experts && rows[r].beside)
            printf("                dense FFN beside the experts: columns %s\n",
                   cols_text(share, sizeof share, s->mf0, s->n_mf));
        if (rows[r].ple_bytes)
            printf("                per-layer embedding table: vocabulary rows %lld-%lld, "
                   "%.1f MiB\n", (long long)rows[r].p.v0,
                   (long long)(rows[r].p.v0 + rows[r].p.n_v - 1),
                   (double)rows[r].ple_bytes / 1048576.0);
        if (rows[r].state_bytes)
            printf("                DeltaNet key heads %lld-%lld%s with %lld value heads (%lld "
                   "of each one's); state %.1f KiB/sequence, checkpoint %.1f KiB once\n",
                   (long long)d->dk0,
                   (long long)(d->dk0 + d->n_dk - 1), rows[r].dn_replicated ? " (replicated)" : "",
                   (long long)(d->n_dk * d->n_dg), (long long)d->n_dg,
                   (double)rows[r].state_bytes / 1024.0, (double)rows[r].ckpt_bytes / 1024.0);
    }
}

static void add_rows_json(cJSON *o, const struct rank_row *rows, int n_ranks, size_t all)
{
    cJSON *tp = cJSON_AddObjectToObject(o, "tensor_parallel");
    cJSON_AddNumberToObject(tp, "ranks", n_ranks);
    cJSON_AddNumberToObject(tp, "weight_bytes_one_process", (double)all);
    cJSON *a = cJSON_AddArrayToObject(tp, "parts");
    for (int r = 0; r < n_ranks; r++) {
        const struct model_tp_layer *s = &rows[r].p.layers[rows[r].la < 0 ? 0 : rows[r].la];
        const struct model_tp_layer *d = &rows[r].p.layers[rows[r].ld < 0 ? 0 : rows[r].ld];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "rank", r);
        add_range(e, "query_heads", s->q0, s->n_q);
        add_range(e, "kv_heads", s->kv0, s->n_kv);
        cJSON_AddBoolToObject(e, "kv_replicated", rows[r].replicated);
        if (s->n_e)
            add_range(e, "experts", s->e0, s->n_e);
        if (!s->n_e || rows[r].beside) { /* a dense FFN's, or the one beside the experts:
                                            [] and width 0 where the rank holds none */
            add_range(e, "ffn_columns", s->n_e ? s->mf0 : s->ff0, s->n_e ? s->n_mf : s->n_ff);
            cJSON_AddNumberToObject(e, "ffn_width", (double)(s->n_e ? s->n_mf : s->n_ff));
        }
        add_range(e, "vocab_rows", rows[r].p.v0, rows[r].p.n_v);
        cJSON_AddBoolToObject(e, "layers_alike", rows[r].alike);
        cJSON_AddNumberToObject(e, "weight_bytes", (double)rows[r].weight_bytes);
        if (rows[r].ple_bytes)
            cJSON_AddNumberToObject(e, "per_layer_embd_bytes", (double)rows[r].ple_bytes);
        cJSON_AddNumberToObject(e, "kv_bytes_per_token_f32", (double)rows[r].kv_bytes);
        if (rows[r].state_bytes) {
            add_range(e, "deltanet_key_heads", d->dk0, d->n_dk);
            cJSON_AddNumberToObject(e, "deltanet_value_heads_per_key_head", (double)d->n_dg);
            cJSON_AddNumberToObject(e, "state_bytes_per_sequence", (double)rows[r].state_bytes);
            cJSON_AddNumberToObject(e, "checkpoint_bytes", (double)rows[r].ckpt_bytes);
        }
        if (rows[r].cuda_native) { /* the rank's CUDA backend's weights */
            cJSON *cw = cJSON_AddObjectToObject(e, "cuda_weight_bytes");
            cJSON_AddNumberToObject(cw, "native", (double)rows[r].cuda_native);
            cJSON_AddNumberToObject(cw, "f16", (double)rows[r].cuda_f16);
            if (s->n_e) { /* of them, its experts' (models/tp.c: whole experts a rank) */
                cJSON *ce = cJSON_AddObjectToObject(e, "cuda_expert_bytes");
                cJSON_AddNumberToObject(ce, "native", (double)rows[r].cuda_experts_native);
                cJSON_AddNumberToObject(ce, "f16", (double)rows[r].cuda_experts_f16);
            }
        } else {
            cJSON_AddNullToObject(e, "cuda_weight_bytes");
        }
        cJSON_AddItemToArray(a, e);
    }
}

int cli_info_tp_check(const struct model *m, int n_ranks)
{
    int st = IG_OK;
    for (int r = 0; st == IG_OK && r < n_ranks; r++) {
        struct model_tp_part p;
        if ((st = model_tp_part(m, r, n_ranks, &p)) == IG_OK)
            model_tp_part_free(&p);
    }
    return st;
}

int cli_info_tp(const struct model *m, int n_ranks, cJSON *json)
{
    struct kv_memory *mem;
    int st = kv_memory_of(m, KV_F32, KV_F32, &mem);
    if (st != IG_OK)
        return st;
    struct rank_row *rows = calloc((size_t)n_ranks, sizeof *rows);
    int made = 0;
    if (!rows)
        st = ig_error(IG_E_NOMEM, "out of memory describing %d ranks", n_ranks);
    for (; st == IG_OK && made < n_ranks; made++) {
        struct rank_row *w = &rows[made];
        if ((st = model_tp_part(m, made, n_ranks, &w->p)) != IG_OK)
            break;
        w->la = first_layer(m, LAYER_MIXER_ATTENTION);
        w->ld = first_layer(m, LAYER_MIXER_DELTANET);
        w->replicated = w->la >= 0 && m->layers[w->la].n_head_kv < n_ranks;
        w->dn_replicated = m->hp.has_deltanet && m->hp.dn_k_heads < n_ranks;
        const struct model_layer *F = &m->layers[w->la < 0 ? 0 : w->la];
        w->beside = F->ffn == LAYER_FFN_MOE && (F->n_ff_shexp || F->n_ff_mlp);
        w->alike = layers_alike(m, &w->p);
        w->weight_bytes = model_tp_part_bytes(m, &w->p);
        if (m->hp.has_ple) {
            const struct model_weight *E = &m->w[MODEL_PLE_TOK_EMBD];
            w->ple_bytes = (size_t)model_tp_table_rows(E, &w->p) * E->row_bytes;
        }
        w->kv_bytes = kv_bytes_per_token(m, mem, &w->p);
        w->state_bytes = state_bytes(m, &w->p, false);
        w->ckpt_bytes = state_bytes(m, &w->p, true);
        if (json && (st = cuda_bytes(m, w)) != IG_OK) {
            made++; /* its part is freed below */
            break;
        }
    }
    if (st == IG_OK) {
        size_t all = 0;
        struct model_tensor_it it;
        model_tensors_begin(&it, m, MODEL_TENSORS_ALL | MODEL_TENSORS_TIED);
        while (model_tensors_next(&it))
            if (!it.t->gathered)
                all += model_weight_size(it.w);
        if (json)
            add_rows_json(json, rows, n_ranks, all);
        else
            print_rows(rows, n_ranks, all);
    }
    for (int r = 0; r < made; r++)
        model_tp_part_free(&rows[r].p);
    free(rows);
    kv_memory_free(mem);
    return st;
}
