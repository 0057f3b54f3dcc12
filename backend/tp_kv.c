/* backend/tp_kv.c: a sequence's cache between tensor-parallel ranks, in the
 * whole model's layout (what saved caches hold): rank 0 gathers each KV
 * head from the first rank holding it (export) and sends each rank its
 * heads (import, replicated heads to each of their ranks). A gated
 * DeltaNet layer's state moves the same way by its heads: the
 * convolution's channels of the rank's key heads (from the first rank
 * holding each) and value heads, and each value head's matrix. Covered by
 * tests/tp/test_tp_cli.py (caches saved and loaded at 1, 2 and 3 ranks). */
#include "backend/tp_impl.h"

#include "core/coll.h"
#include "core/status.h"

#include <stdlib.h>
#include <string.h>

/* Whether rank `rank` is the one that sends KV head h of layer l (the first
 * rank holding it). */
static bool sends_head(const struct tp_rank *r, int rank, int64_t l, int64_t h)
{
    for (int i = 0; i < rank; i++) {
        const struct model_tp_layer *s = &r->parts[i].layers[l];
        if (h >= s->kv0 && h < s->kv0 + s->n_kv)
            return false;
    }
    const struct model_tp_layer *s = &r->parts[rank].layers[l];
    return h >= s->kv0 && h < s->kv0 + s->n_kv;
}

/* Whether rank `rank` is the one that sends DeltaNet key head k of layer l
 * (the first rank holding it). */
static bool sends_key_head(const struct tp_rank *r, int rank, int64_t l, int64_t k)
{
    for (int i = 0; i < rank; i++) {
        const struct model_tp_layer *s = &r->parts[i].layers[l];
        if (k >= s->dk0 && k < s->dk0 + s->n_dk)
            return false;
    }
    return true; /* (k is rank's: the caller walks its key heads) */
}

/* One piece of a state: n floats at `whole` in the whole layer's layout,
 * at `part` in rank's part's. */
static size_t piece(float *state, bool part_store, int64_t whole, int64_t part, int64_t n,
                    char *p, bool to_msg)
{
    float *at = state + (part_store ? part : whole);
    size_t b = (size_t)n * sizeof(float);
    if (p && to_msg)
        memcpy(p, at, b);
    else if (p)
        memcpy(at, p, b);
    return b;
}

/* `rank`'s share of the state of DeltaNet layer l at `state` (the whole
 * layer's layout, or with part_store the part's: backend/cpu_deltanet.c's
 * [dn_conv - 1][channels] then a matrix a value head), to or from p as
 * heads_move; only_sent: the key heads' channels that rank sends. */
static size_t state_move(const struct tp_rank *r, int rank, bool only_sent, bool part_store,
                         float *state, int64_t l, char *p, bool to_msg)
{
    const struct model_layer *L = &r->m->layers[l];
    const struct model_tp_layer *s = &r->parts[rank].layers[l];
    int64_t D = L->dn_head_dim, Hk = L->dn_k_heads, nk = s->n_dk, nv = s->n_dk * s->n_dg;
    int64_t C = (2 * Hk + L->dn_v_heads) * D, Cp = (2 * nk + nv) * D;
    size_t used = 0;
    for (int64_t i = 0; i < L->dn_conv - 1; i++) {
        for (int64_t u = 0; u < 2 * nk; u++) { /* q's and k's channels */
            int64_t k = s->dk0 + u % nk;
            if (only_sent && !sends_key_head(r, rank, l, k))
                continue;
            used += piece(state, part_store, i * C + (u / nk * Hk + k) * D, i * Cp + u * D, D,
                          p ? p + used : NULL, to_msg);
        }
        for (int64_t h = 0; h < nv; h++) /* v's: a value head is on one rank */
            used += piece(state, part_store, i * C + (2 * Hk + model_tp_dn_head(L, s, h)) * D,
                          i * Cp + (2 * nk + h) * D, D, p ? p + used : NULL, to_msg);
    }
    for (int64_t h = 0; h < nv; h++)
        used += piece(state, part_store, (L->dn_conv - 1) * C + model_tp_dn_head(L, s, h) * D * D,
                      (L->dn_conv - 1) * Cp + h * D * D, D * D, p ? p + used : NULL, to_msg);
    return used;
}

/* The chunks of KV heads of `rank`'s share (all its heads, or only those it
 * sends) for blocks [0, nb), between the message p and store st (its heads
 * numbered from `first`: 0 in a whole-model store, the share's kv0 in a
 * part's; block ids from table; recurrent layers' states in state slot
 * `slot`). to_msg: store -> p, else p -> store. Returns the bytes of p used
 * (p NULL: just counts). */
static size_t heads_move(const struct tp_rank *r, int rank, bool only_sent, bool part_store,
                         const struct kv_store *st, const int32_t *table, int64_t slot,
                         int64_t nb, char *p, bool to_msg)
{
    size_t used = 0;
    const struct kv_memory *mem = st->memory;
    for (int64_t l = 0; l < mem->n_layer; l++) {
        if (mem->layers[l].kind == KV_SHARED)
            continue;
        if (mem->layers[l].kind == KV_RECURRENT) {
            used += state_move(r, rank, only_sent, part_store, kv_store_state(st, l, slot), l,
                               p ? p + used : NULL, to_msg);
            continue;
        }
        const struct model_tp_layer *s = &r->parts[rank].layers[l];
        struct kv_layout L = kv_store_layout(st, l);
        size_t kb = kv_dtype_row_bytes(L.dtype, L.head_stride);
        size_t vb = kv_dtype_row_bytes(L.dtype_v, L.head_stride);
        for (int64_t h = s->kv0; h < s->kv0 + s->n_kv; h++) {
            if (only_sent && !sends_head(r, rank, l, h))
                continue;
            int64_t hl = part_store ? h - s->kv0 : h;
            for (int64_t i = 0; i < nb; i++) {
                int64_t e = (int64_t)table[i] * L.block_stride + hl * L.head_stride;
                char *k = (char *)L.k + kv_dtype_row_bytes(L.dtype, e);
                char *v = (char *)L.v + kv_dtype_row_bytes(L.dtype_v, e);
                if (p && to_msg) {
                    memcpy(p + used, k, kb);
                    memcpy(p + used + kb, v, vb);
                } else if (p) {
                    memcpy(k, p + used, kb);
                    memcpy(v, p + used + kb, vb);
                }
                used += kb + vb;
            }
        }
    }
    return used;
}

/* A staging store of nb blocks of mem (the previous one freed). */
int tp_staging(struct tp_rank *r, const struct kv_memory *mem, int64_t nb)
{
    kv_store_free(r->staging);
    r->staging = NULL;
    free(r->ids);
    r->ids = malloc((size_t)nb * sizeof *r->ids);
    if (!r->ids)
        return ig_error(IG_E_NOMEM, "out of memory");
    kv_identity_table(r->ids, nb);
    return kv_store_create(mem, nb, kv_memory_states_for(mem, 1), NULL, &r->staging);
}

/* Every rank: its sent heads of the sequence (slot, table) to rank 0, which
 * puts them into its whole-model staging store `full` (rank 0's own too). */
int tp_export_heads(struct tp_rank *r, const struct backend_seq *seq, int64_t n_pos,
                        struct kv_store *full)
{
    int rank = ig_coll_rank(), n = ig_coll_size();
    const struct kv_store *own;
    const int32_t *table;
    int64_t slot, nb = kv_blocks_for(n_pos);
    int st = backend_kv_export(r->cpu, seq, n_pos, &own, &table, &slot);
    if (st != IG_OK)
        return st;
    size_t bytes = heads_move(r, rank, true, true, own, table, slot, nb, NULL, true);
    if ((st = tp_grow(r, bytes ? bytes : 1)) != IG_OK)
        return st;
    heads_move(r, rank, true, true, own, table, slot, nb, r->buf, true);
    if (rank != 0) {
        ig_coll_send(r->buf, bytes, 0, TAG_KV);
        return IG_OK;
    }
    heads_move(r, 0, true, false, full, r->ids, 0, nb, r->buf, false);
    for (int i = 1; i < n; i++) {
        size_t b = heads_move(r, i, true, false, full, r->ids, 0, nb, NULL, false);
        if ((st = tp_grow(r, b ? b : 1)) != IG_OK)
            return st;
        ig_coll_recv(r->buf, b, i, TAG_KV);
        heads_move(r, i, true, false, full, r->ids, 0, nb, r->buf, false);
    }
    return IG_OK;
}

/* Every rank: its heads of a whole-model store (rank 0's `src`, blocks 0..)
 * into a part store of the same dtypes, then into its cache at seq. */
int tp_import_heads(struct tp_rank *r, const struct backend_seq *seq, int64_t n_pos,
                        const struct kv_store *src, enum kv_dtype dk, enum kv_dtype dv)
{
    int rank = ig_coll_rank(), n = ig_coll_size();
    int64_t nb = kv_blocks_for(n_pos);
    kv_memory_free(r->part_mem);
    r->part_mem = NULL;
    int st = kv_memory_of(r->shard, dk, dv, &r->part_mem);
    if (st == IG_OK)
        st = tp_staging(r, r->part_mem, nb);
    if (st != IG_OK)
        return st;
    if (rank == 0) {
        for (int i = n - 1; i >= 0; i--) { /* rank 0's own last: its buffer stays */
            size_t b = heads_move(r, i, false, false, src, r->ids, 0, nb, NULL, true);
            if ((st = tp_grow(r, b ? b : 1)) != IG_OK)
                return st;
            heads_move(r, i, false, false, src, r->ids, 0, nb, r->buf, true);
            if (i)
                ig_coll_send(r->buf, b, i, TAG_KV);
        }
    } else {
        size_t b = heads_move(r, rank, false, true, r->staging, r->ids, 0, nb, NULL, false);
        if ((st = tp_grow(r, b ? b : 1)) != IG_OK)
            return st;
        ig_coll_recv(r->buf, b, 0, TAG_KV);
    }
    heads_move(r, rank, false, true, r->staging, r->ids, 0, nb, r->buf, false);
    return backend_kv_import(r->cpu, seq, r->staging, n_pos);
}

