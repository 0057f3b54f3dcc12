/* backend/gpu_kv_p2p.c: batch --pd's cache between CUDA ranks by NCCL
 * (backend/gpu_p2p.h), with no host trip: a prefill rank sends a layer's
 * blocks of a sequence straight from its pool (gpu_kv_send_layer, after
 * the layer's mixer, on the step's stream), a decode rank receives them
 * straight into the blocks of its own pool it reserved for the sequence
 * (gpu_kv_recv_layer, by the reserved blocks' table: no staging store, no
 * copy; the engine adopts those blocks at admission, gen_history.blocks).
 * A block moves as the pool holds
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

int IG_DEV(gpu_kv_recv_layer)(struct backend *b, struct gpu_p2p *p, int peer,
                              const int32_t *table, int64_t l, int64_t p0, int64_t p1)
{
    struct gpu_backend *g = (struct gpu_backend *)b;
    if (!paged(g, l) || p1 <= p0)
        return IG_OK;
    int64_t b0, b1;
    block_range(p0, p1, &b0, &b1);
    const size_t kb = block_bytes(g, l, false), vb = block_bytes(g, l, true);
    unsigned char *k = (void *)g->layers[l].k_cache, *v = (void *)g->layers[l].v_cache;
    void *stream = IG_DEV(dev_stream)(g->dev);
    int st = gpu_p2p_group_start(p);
    if (st != IG_OK)
        return st;
    for (int64_t i = b0; i < b1 && st == IG_OK; i++) {
        IG_ASSERT(table[i] >= 0 && table[i] < g->n_blocks);
        st = gpu_p2p_recv(p, k + (size_t)table[i] * kb, kb, peer, stream);
        if (st == IG_OK)
            st = gpu_p2p_recv(p, v + (size_t)table[i] * vb, vb, peer, stream);
    }
    int end = gpu_p2p_group_end(p);
    return st != IG_OK ? st : end;
}
