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
 * them (a position is read once written). A window layer under the window
 * rule moves the same way through the window tables (its own block ids;
 * which blocks: backend_kv_send_part). A recurrent layer's state moves
 * whole, slot to slot, once it is the prompt's (gpu_kv_send_state,
 * gpu_kv_recv_state: into the slot the decode rank's engine holds for the
 * sequence, engine_history_reserve). Both pools must be of the same types
 * (kv_memory_same_layers and dtypes; the caller checks at the head).
 * Covered by tests/emu/pd_nccl_emu.c and tests/tp/test_pd_cli.py. */
#include "backend/gpu_impl.h"

#include "backend/gpu_p2p.h"
#include "core/status.h"

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

/* The block ids layer l's tables hold: the window side's, its zero block
 * apart (never written, never moved), or the pool's. */
static int64_t layer_ids(const struct gpu_backend *g, int64_t l)
{
    return gpu_layer_windowed(g, l) ? g->n_wblocks : g->n_blocks;
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
        IG_ASSERT(table[i] >= 0 && table[i] < layer_ids(g, l));
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
        IG_ASSERT(table[i] >= 0 && table[i] < layer_ids(g, l));
        st = gpu_p2p_recv(p, k + (size_t)table[i] * kb, kb, peer, stream);
        if (st == IG_OK)
            st = gpu_p2p_recv(p, v + (size_t)table[i] * vb, vb, peer, stream);
    }
    int end = gpu_p2p_group_end(p);
    return st != IG_OK ? st : end;
}

/* A recurrent layer l's state in slot `slot`: its bytes in the pool. */
static unsigned char *state_of(const struct gpu_backend *g, int64_t slot, int64_t l)
{
    const struct kv_layer_mem *L = &g->base.kv_mem->layers[l];
    IG_ASSERT(L->kind == KV_RECURRENT && slot >= 0 && slot < g->n_states);
    return g->layers[l].state + (size_t)slot * L->state_bytes;
}

int IG_DEV(gpu_kv_send_state)(struct backend *b, struct gpu_p2p *p, int peer, int64_t slot,
                              int64_t l)
{
    struct gpu_backend *g = (struct gpu_backend *)b;
    return gpu_p2p_send(p, state_of(g, slot, l), b->kv_mem->layers[l].state_bytes, peer,
                        IG_DEV(dev_stream)(g->dev));
}

int IG_DEV(gpu_kv_recv_state)(struct backend *b, struct gpu_p2p *p, int peer, int64_t slot,
                              int64_t l)
{
    struct gpu_backend *g = (struct gpu_backend *)b;
    return gpu_p2p_recv(p, state_of(g, slot, l), b->kv_mem->layers[l].state_bytes, peer,
                        IG_DEV(dev_stream)(g->dev));
}
