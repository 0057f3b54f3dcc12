/* backend/gpu_kv_p2p.c: batch --pd's cache between CUDA ranks by NCCL
 * (backend/gpu_p2p.h), with no host trip: a prefill rank sends a layer's
 * blocks of a sequence straight from its pool (gpu_kv_send_layer, after
 * the layer's mixer, on the step's stream), a decode rank receives them
 * into a device staging store (gpu_kv_recv_layer: the same blocks, in
 * order) and copies that into its pool's blocks once the sequence has them
 * (gpu_kv_stage_import, device to device, a copy a run of consecutive
 * blocks). A block moves as the pool holds
 * it (f16, or a quantized pool's regions), one ncclSend for K and one for
 * V a block, every send of a layer in one group: the receiver posts the
 * same counts from the layer and rows alone (the header, which goes over
 * MPI), whatever the sender's blocks are. Rows past the last one of a
 * sequence's last block come along as the sender has them; nothing reads
 * them (a position is read once written). Both pools must be of the same
 * types (kv_memory_same_layers and dtypes; the caller checks at the head),
 * and the model's layers paged or shared, without window tables
 * (gpu_kv_p2p_fits; else the host path). Covered by tests/emu/pd_nccl_emu.c. */
#include "backend/gpu_impl.h"

#include "backend/gpu_p2p.h"
#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>

struct gpu_kv_stage {
    int64_t n_blocks;
    unsigned char *mem;  /* device: each paged layer's K blocks, then its V blocks */
    size_t *k_at, *v_at; /* [n_layer] offsets in mem (paged layers) */
};

/* Bytes of one block of layer l's K (v false) or V in the pool. */
static size_t block_bytes(const struct gpu_backend *g, int64_t l, bool v)
{
    const struct kv_memory *mem = g->base.kv_mem;
    return kv_dtype_row_bytes(v ? mem->dtype_v : mem->dtype,
                              kv_layer_block_elems(&mem->layers[l]));
}

static bool paged(const struct gpu_backend *g, int64_t l)
{
    enum kv_kind k = g->base.kv_mem->layers[l].kind;
    return k != KV_SHARED && k != KV_RECURRENT;
}

bool IG_DEV(gpu_kv_p2p_fits)(const struct backend *b, char *why, size_t cap)
{
    const struct gpu_backend *g = (const struct gpu_backend *)b;
    for (int64_t l = 0; l < b->kv_mem->n_layer; l++) {
        if (b->kv_mem->layers[l].kind == KV_RECURRENT) {
            snprintf(why, cap, "layer %lld is recurrent (its state is not sent by NCCL)",
                     (long long)l);
            return false;
        }
        if (gpu_layer_windowed(g, l)) {
            snprintf(why, cap, "layer %lld keeps window tables (--window-rule)", (long long)l);
            return false;
        }
    }
    return true;
}

/* The blocks holding rows [p0, p1). */
static void block_range(int64_t p0, int64_t p1, int64_t *b0, int64_t *b1)
{
    *b0 = p0 / KV_BLOCK;
    *b1 = kv_blocks_for(p1);
}

int IG_DEV(gpu_kv_send_layer)(struct backend *b, struct gpu_p2p *p, int peer,
                              const int32_t *table, int64_t l, int64_t p0, int64_t p1)
{
    struct gpu_backend *g = (struct gpu_backend *)b;
    if (!paged(g, l) || p1 <= p0)
        return IG_OK;
    int64_t b0, b1;
    block_range(p0, p1, &b0, &b1);
    const size_t kb = block_bytes(g, l, false), vb = block_bytes(g, l, true);
    const unsigned char *k = (const void *)g->layers[l].k_cache;
    const unsigned char *v = (const void *)g->layers[l].v_cache;
    void *stream = IG_DEV(dev_stream)(g->dev);
    int st = gpu_p2p_group_start(p);
    if (st != IG_OK)
        return st;
    for (int64_t i = b0; i < b1 && st == IG_OK; i++) {
        IG_ASSERT(table[i] >= 0 && table[i] < g->n_blocks);
        st = gpu_p2p_send(p, k + (size_t)table[i] * kb, kb, peer, stream);
        if (st == IG_OK)
            st = gpu_p2p_send(p, v + (size_t)table[i] * vb, vb, peer, stream);
    }
    int end = gpu_p2p_group_end(p); /* (a group started is ended, failed or not) */
    return st != IG_OK ? st : end;
}

int IG_DEV(gpu_kv_stage_create)(struct backend *b, int64_t n_pos, struct gpu_kv_stage **out)
{
    struct gpu_backend *g = (struct gpu_backend *)b;
    const int64_t n_layer = b->kv_mem->n_layer, nb = kv_blocks_for(n_pos);
    *out = NULL;
    struct gpu_kv_stage *s = calloc(1, sizeof *s);
    if (s) {
        s->k_at = calloc((size_t)n_layer, sizeof *s->k_at);
        s->v_at = calloc((size_t)n_layer, sizeof *s->v_at);
    }
    if (!s || !s->k_at || !s->v_at) {
        IG_DEV(gpu_kv_stage_free)(b, s);
        return ig_error(IG_E_NOMEM, "out of memory for a cache's staging store");
    }
    s->n_blocks = nb;
    size_t at = 0;
    for (int64_t l = 0; l < n_layer; l++)
        if (paged(g, l)) {
            s->k_at[l] = at;
            at += (size_t)nb * block_bytes(g, l, false);
            s->v_at[l] = at;
            at += (size_t)nb * block_bytes(g, l, true);
        }
    int st = IG_DEV(dev_alloc)(g->dev, at ? at : 1, (void **)&s->mem);
    if (st != IG_OK) {
        IG_DEV(gpu_kv_stage_free)(b, s);
        return st;
    }
    *out = s;
    return IG_OK;
}

void IG_DEV(gpu_kv_stage_free)(struct backend *b, struct gpu_kv_stage *s)
{
    if (!s)
        return;
    IG_DEV(dev_free)(((struct gpu_backend *)b)->dev, s->mem);
    free(s->k_at);
    free(s->v_at);
    free(s);
}

int IG_DEV(gpu_kv_recv_layer)(struct backend *b, struct gpu_p2p *p, int peer,
                              struct gpu_kv_stage *s, int64_t l, int64_t p0, int64_t p1)
{
    struct gpu_backend *g = (struct gpu_backend *)b;
    if (!paged(g, l) || p1 <= p0)
        return IG_OK;
    int64_t b0, b1;
    block_range(p0, p1, &b0, &b1);
    if (b1 > s->n_blocks)
        return ig_error(IG_E_INTERNAL, "layer %lld's rows to %lld are past the staging "
                        "store's %lld blocks", (long long)l, (long long)p1,
                        (long long)s->n_blocks);
    const size_t kb = block_bytes(g, l, false), vb = block_bytes(g, l, true);
    void *stream = IG_DEV(dev_stream)(g->dev);
    int st = gpu_p2p_group_start(p);
    if (st != IG_OK)
        return st;
    for (int64_t i = b0; i < b1 && st == IG_OK; i++) {
        st = gpu_p2p_recv(p, s->mem + s->k_at[l] + (size_t)i * kb, kb, peer, stream);
        if (st == IG_OK)
            st = gpu_p2p_recv(p, s->mem + s->v_at[l] + (size_t)i * vb, vb, peer, stream);
    }
    int end = gpu_p2p_group_end(p);
    return st != IG_OK ? st : end;
}

int IG_DEV(gpu_kv_stage_import)(struct backend *b, const struct gpu_kv_stage *s,
                                const struct backend_seq *seq, int64_t n_pos)
{
    struct gpu_backend *g = (struct gpu_backend *)b;
    const int64_t nb = kv_blocks_for(n_pos);
    IG_ASSERT(nb <= s->n_blocks);
    int st = IG_OK;
    for (int64_t l = 0; l < b->kv_mem->n_layer && st == IG_OK; l++) {
        if (!paged(g, l))
            continue;
        const size_t kb = block_bytes(g, l, false), vb = block_bytes(g, l, true);
        unsigned char *k = (void *)g->layers[l].k_cache, *v = (void *)g->layers[l].v_cache;
        for (int64_t i = 0; i < nb && st == IG_OK;) { /* one copy a run of blocks */
            int64_t run = 1;
            while (i + run < nb && seq->table[i + run] == seq->table[i] + run)
                run++;
            IG_ASSERT(seq->table[i] >= 0 && seq->table[i] + run <= g->n_blocks);
            st = IG_DEV(dev_copy)(g->dev, k + (size_t)seq->table[i] * kb,
                                  s->mem + s->k_at[l] + (size_t)i * kb, (size_t)run * kb);
            if (st == IG_OK)
                st = IG_DEV(dev_copy)(g->dev, v + (size_t)seq->table[i] * vb,
                                      s->mem + s->v_at[l] + (size_t)i * vb, (size_t)run * vb);
            i += run;
        }
    }
    return st;
}
