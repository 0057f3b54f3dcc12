/* backend/gpu_cache.c: a sequence's blocks of the device KV pool (and its
 * recurrent layers' states) to and from host memory (--save-kv downloads
 * them into a host kv_store, --load-kv uploads one), and a step's rows
 * layer by layer for backend_batch.on_layer (batch --pd's prefill
 * ranks: on the device's copy stream, overlapping the next layer, unless
 * IGNITE_PD_COPY_STREAM=0). A device block [n_head_kv][KV_BLOCK][head_dim]
 * f16 is laid out as a host f16 store's block, so a download needs no
 * reordering (one copy a run of consecutive blocks; a quantized pool's
 * blocks are reordered one by one); a layer sharing another's KV has nothing of its own; under the
 * window rule a window layer's blocks go through the window table, those
 * given back zeros on the host and never written on the device. Covered by
 * tests/emu/test_backend_emu.c, test_backend_pd_emu.c,
 * test_backend_arch_emu.c (--window-rule) and tests/gpu/. */
#include "backend/gpu_impl.h"

#include "core/half.h"
#include "core/status.h"
#include "kvcache/kv_devq.h"

#include <stdlib.h>
#include <string.h>

/* A quantized array's (q8_0, fp8) block i between the device's regions
 * (kvcache/kv_devq.h: each KV head's quants, then its scales; dev holds
 * the block's bytes) and the host store's ggml blocks (d, then 32 quants:
 * base, block i of an identity table): the same bytes, reordered. */
static void kvq_block_copy(const struct kv_layout *L, void *base, const int32_t *ids, int64_t i,
                           int64_t n_head_kv, unsigned char *dev, bool to_host)
{
    const int64_t hd = L->head_dim;
    for (int64_t h = 0; h < n_head_kv; h++)
        for (int64_t r = 0; r < KV_BLOCK; r++) {
            unsigned char *row = kv_row(L, base, ids, h, i * KV_BLOCK + r);
            unsigned char *region = dev + kvq_region(h * L->head_stride);
            for (int64_t b = 0; b < hd / 32; b++) {
                unsigned char *d = region + kvq_scale_at(hd, r, 32 * b);
                unsigned char *q = region + kvq_quant_at(hd, r, 32 * b);
                if (to_host) {
                    memcpy(row + 34 * b, d, 2);
                    memcpy(row + 34 * b + 2, q, 32);
                } else {
                    memcpy(d, row + 34 * b, 2);
                    memcpy(q, row + 34 * b + 2, 32);
                }
            }
        }
}

/* How a walk over rows moves them (download_blocks, layer_rows): the
 * same walk sizes the staging, queues its downloads and unpacks it, so the
 * three agree on every run's offset there. */
enum xfer_mode {
    XFER_NOW,    /* synchronous downloads into the store (reordered there) */
    XFER_SIZE,   /* the staging bytes counted only */
    XFER_QUEUE,  /* downloads into the staging on the copy stream */
    XFER_UNPACK, /* the staging into the store, once those are done */
};

struct xfer {
    enum xfer_mode mode;
    unsigned char *stage; /* page-locked (XFER_QUEUE, XFER_UNPACK) */
    size_t off;           /* staging bytes walked so far */
};

/* Blocks [i0, i1) of a sequence's device table dev_ids, paged layer l, into
 * host store st's blocks host_ids[i0..i1) (st of the pool's types), as x
 * says: one download per run of blocks consecutive on both sides, or per
 * block where the type is quantized (its regions into ggml blocks). A
 * window layer's blocks given back (dev_ids below 0, the window rule)
 * become zeros there (no later row reads them: kv_copy_seq_windowed's
 * rule). */
static int download_blocks(struct gpu_backend *g, const struct kv_store *st, int64_t l,
                           const int32_t *dev_ids, const int32_t *host_ids, int64_t i0,
                           int64_t i1, struct xfer *x)
{
    const int64_t n_head_kv = g->base.kv_mem->layers[l].n_head_kv;
    const bool to_store = x->mode == XFER_NOW || x->mode == XFER_UNPACK;
    struct kv_layout L = kv_store_layout(st, l);
    int rc = IG_OK;
    for (int kv_i = 0; kv_i < 2 && rc == IG_OK; kv_i++) {
        const enum kv_dtype dt = kv_i ? L.dtype_v : L.dtype;
        const bool quant = kv_dtype_quantized(dt);
        const size_t block = kv_dtype_row_bytes(dt, L.block_stride);
        const unsigned char *src = kv_i ? (void *)g->layers[l].v_cache
                                        : (void *)g->layers[l].k_cache;
        unsigned char *dst = kv_i ? L.v : L.k;
        unsigned char *tmp = quant && x->mode == XFER_NOW ? malloc(block) : NULL;
        if (quant && x->mode == XFER_NOW && !tmp)
            rc = ig_error(IG_E_NOMEM, "out of memory copying the KV cache");
        for (int64_t i = i0; i < i1 && rc == IG_OK;) {
            IG_ASSERT(dev_ids[i] < gpu_layer_blocks(g, l) && host_ids[i] >= 0 &&
                      host_ids[i] < st->n_blocks && (dev_ids[i] >= 0 || gpu_layer_windowed(g, l)));
            if (dev_ids[i] < 0) { /* given back: zeros, as the CPU's copy has them */
                if (to_store)
                    memset(dst + (size_t)host_ids[i] * block, 0, block);
                i++;
                continue;
            }
            int64_t run = 1;
            while (!quant && i + run < i1 && dev_ids[i + run] == dev_ids[i] + run &&
                   host_ids[i + run] == host_ids[i] + run)
                run++;
            const size_t bytes = (size_t)run * block;
            unsigned char *host = dst + (size_t)host_ids[i] * block;
            const unsigned char *dev = src + (size_t)dev_ids[i] * block;
            switch (x->mode) {
            case XFER_NOW:
                rc = IG_DEV(dev_download)(g->dev, tmp ? tmp : host, dev, bytes);
                if (rc == IG_OK && tmp) /* regions -> ggml blocks */
                    kvq_block_copy(&L, dst, host_ids, i, n_head_kv, tmp, true);
                break;
            case XFER_QUEUE:
                rc = IG_DEV(dev_download_async)(g->dev, DEV_STREAM_COPY, x->stage + x->off, dev,
                                                bytes);
                break;
            case XFER_UNPACK:
                if (quant)
                    kvq_block_copy(&L, dst, host_ids, i, n_head_kv, x->stage + x->off, true);
                else
                    memcpy(host, x->stage + x->off, bytes);
                break;
            case XFER_SIZE:
                break;
            }
            x->off += bytes;
            i += run;
        }
        free(tmp);
    }
    return rc;
}

/* Where layer l of sequence seq has its blocks: its window table for a
 * window layer under the window rule, else its table. */
static const int32_t *layer_table(const struct gpu_backend *g, const struct backend_seq *seq,
                                  int64_t l)
{
    IG_ASSERT(!gpu_layer_windowed(g, l) || seq->wtable);
    return gpu_layer_windowed(g, l) ? seq->wtable : seq->table;
}

int IG_DEV(gpu_kv_export)(struct backend *b, const struct backend_seq *seq, int64_t n,
                          const struct kv_store **out, const int32_t **table, int64_t *slot)
{
    struct gpu_backend *g = (struct gpu_backend *)b;
    const struct kv_memory *mem = b->kv_mem;
    int64_t nb = kv_blocks_for(n);
    *out = NULL;
    kv_store_free(g->host_kv);
    g->host_kv = NULL;
    int32_t *ids = realloc(g->host_table, (size_t)nb * sizeof *ids);
    if (!ids)
        return ig_error(IG_E_NOMEM, "out of memory copying the KV cache");
    g->host_table = ids;
    kv_identity_table(ids, nb);
    int st = kv_store_create(mem, nb, kv_memory_states_for(mem, 1), NULL, &g->host_kv);
    for (int64_t l = 0; l < mem->n_layer && st == IG_OK; l++) {
        const struct kv_layer_mem *Lm = &mem->layers[l];
        if (Lm->kind == KV_RECURRENT) { /* the slot's state into host slot 0 */
            st = IG_DEV(dev_download)(g->dev, kv_store_state(g->host_kv, l, 0),
                                      g->layers[l].state + (size_t)seq->slot * Lm->state_bytes,
                                      Lm->state_bytes);
            continue;
        }
        if (Lm->kind != KV_SHARED) /* (a shared layer's rows are its source's) */
            st = download_blocks(g, g->host_kv, l, layer_table(g, seq, l), ids, 0, nb,
                                 &(struct xfer){.mode = XFER_NOW});
    }
    if (st == IG_OK) {
        *out = g->host_kv;
        *table = ids;
        *slot = 0;
    }
    return st;
}

int IG_DEV(gpu_kv_import)(struct backend *b, const struct backend_seq *seq,
                          const struct kv_store *src, int64_t n)
{
    struct gpu_backend *g = (struct gpu_backend *)b;
    const struct kv_memory *mem = b->kv_mem;
    IG_ASSERT(n <= g->n_ctx && kv_memory_same_layers(src->memory, mem));
    int st = IG_DEV(gpu_kv_p2p_fence)(g); /* (blocks an NCCL send may still read) */
    if (st != IG_OK)
        return st;
    int64_t nb = kv_blocks_for(n);
    int32_t *ids = malloc((size_t)nb * sizeof *ids);
    if (!ids)
        st = ig_error(IG_E_NOMEM, "out of memory copying the KV cache");
    if (ids)
        kv_identity_table(ids, nb);
    for (int64_t l = 0; l < mem->n_layer && st == IG_OK; l++) {
        const struct kv_layer_mem *Lm = &mem->layers[l];
        if (Lm->kind == KV_RECURRENT) { /* host slot 0 into the sequence's slot */
            st = IG_DEV(dev_upload)(g->dev,
                                    g->layers[l].state + (size_t)seq->slot * Lm->state_bytes,
                                    kv_store_state(src, l, 0), Lm->state_bytes);
            /* the checkpoint: backend_kv_import gave it back where this
             * slot held it, so no step reads what it holds */
            continue;
        }
        if (Lm->kind == KV_SHARED)
            continue;
        /* a window layer's blocks given back (below 0) are not written */
        const int32_t *dst_ids = layer_table(g, seq, l);
        const int64_t dst_blocks = gpu_layer_blocks(g, l);
        const int32_t dst_min = gpu_layer_windowed(g, l) ? -1 : 0;
        int64_t hd = Lm->head_dim, block_elems = kv_layer_block_elems(Lm);
        struct kv_layout L = kv_store_layout(src, l);
        if (kv_dtype_quantized(mem->dtype) || kv_dtype_quantized(mem->dtype_v)) {
            /* a quantized pool takes its own type's blocks only, reordered */
            if (L.dtype != mem->dtype || L.dtype_v != mem->dtype_v) {
                st = ig_error(IG_E_USAGE, "the saved KV cache is %s/%s but the CUDA pool is "
                              "%s/%s (--cache-type-k/-v)", kv_dtype_name(L.dtype),
                              kv_dtype_name(L.dtype_v), kv_dtype_name(mem->dtype),
                              kv_dtype_name(mem->dtype_v));
                break;
            }
            for (int kv_i = 0; kv_i < 2 && st == IG_OK; kv_i++) {
                const enum kv_dtype dt = kv_i ? L.dtype_v : L.dtype;
                const size_t block = kv_dtype_row_bytes(dt, L.block_stride);
                unsigned char *dst = kv_i ? (void *)g->layers[l].v_cache
                                          : (void *)g->layers[l].k_cache;
                unsigned char *tmp = calloc(1, block);
                if (!tmp)
                    st = ig_error(IG_E_NOMEM, "out of memory copying the KV cache");
                for (int64_t i = 0; i < nb && st == IG_OK; i++) {
                    IG_ASSERT(dst_ids[i] >= dst_min && dst_ids[i] < dst_blocks);
                    if (dst_ids[i] < 0)
                        continue;
                    if (kv_dtype_quantized(dt))
                        kvq_block_copy(&L, kv_i ? L.v : L.k, ids, i, Lm->n_head_kv, tmp, false);
                    else
                        memcpy(tmp, (unsigned char *)(kv_i ? L.v : L.k) + i * block, block);
                    st = IG_DEV(dev_upload)(g->dev, dst + (size_t)dst_ids[i] * block, tmp,
                                            block);
                }
                free(tmp);
            }
            continue;
        }
        uint16_t *blk = malloc((size_t)block_elems * sizeof *blk);
        float *f = malloc((size_t)hd * sizeof *f);
        if (!blk || !f)
            st = ig_error(IG_E_NOMEM, "out of memory copying the KV cache");
        for (int kv_i = 0; kv_i < 2 && st == IG_OK; kv_i++) {
            uint16_t *dst = kv_i ? g->layers[l].v_cache : g->layers[l].k_cache;
            for (int64_t i = 0; i < nb && st == IG_OK; i++) {
                IG_ASSERT(dst_ids[i] >= dst_min && dst_ids[i] < dst_blocks);
                if (dst_ids[i] < 0)
                    continue;
                /* positions past n in the last block stay zero */
                int64_t rows = n - i * KV_BLOCK < KV_BLOCK ? n - i * KV_BLOCK : KV_BLOCK;
                memset(blk, 0, (size_t)block_elems * sizeof *blk);
                for (int64_t h = 0; h < Lm->n_head_kv; h++)
                    for (int64_t r = 0; r < rows; r++) {
                        kv_row_to_f32(kv_i ? L.dtype_v : L.dtype,
                                      kv_row(&L, kv_i ? L.v : L.k, ids, h, i * KV_BLOCK + r),
                                      hd, f);
                        for (int64_t d = 0; d < hd; d++)
                            blk[h * L.head_stride + r * hd + d] = ig_f32_to_f16(f[d]);
                    }
                st = IG_DEV(dev_upload)(g->dev, dst + dst_ids[i] * block_elems, blk,
                                        (size_t)block_elems * sizeof *blk);
            }
        }
        free(blk);
        free(f);
    }
    free(ids);
    return st;
}

/* ---- a step's layers for backend_batch.on_layer ---------------------------------- */

/* The first position of step sequence i the hook reads, -1: none. */
static int64_t layer_from(const struct backend_batch *batch, int64_t i)
{
    return batch->layer_from ? batch->layer_from[i] : batch->seqs[i].pos0;
}

/* Layer l's rows (and recurrent states) of the step's read sequences into
 * g->layer_kv, as x says. */
static int layer_rows(struct gpu_backend *g, int64_t l, struct xfer *x)
{
    const struct backend_batch *batch = g->layer_batch;
    const struct kv_layer_mem *Lm = &g->base.kv_mem->layers[l];
    int st = IG_OK;
    for (int64_t i = 0; i < batch->n_seqs && st == IG_OK; i++) {
        const struct backend_seq *s = &batch->seqs[i];
        const struct backend_layer_seq *ls = &g->layer_seqs[i];
        if (!ls->table || Lm->kind == KV_SHARED) /* (a shared layer's rows are its source's) */
            continue;
        if (Lm->kind != KV_RECURRENT) {
            st = download_blocks(g, g->layer_kv, l, layer_table(g, s, l), ls->table,
                                 layer_from(batch, i) / KV_BLOCK,
                                 kv_blocks_for(s->pos0 + s->n_rows), x);
            continue;
        }
        /* the state after the step's rows */
        unsigned char *host = kv_store_state(g->layer_kv, l, ls->slot);
        const unsigned char *dev = g->layers[l].state + (size_t)s->slot * Lm->state_bytes;
        if (x->mode == XFER_NOW)
            st = IG_DEV(dev_download)(g->dev, host, dev, Lm->state_bytes);
        else if (x->mode == XFER_QUEUE)
            st = IG_DEV(dev_download_async)(g->dev, DEV_STREAM_COPY, x->stage + x->off, dev,
                                            Lm->state_bytes);
        else if (x->mode == XFER_UNPACK)
            memcpy(host, x->stage + x->off, Lm->state_bytes);
        x->off += Lm->state_bytes;
    }
    return st;
}

/* The copy stream's staging for a step (two buffers of the largest layer's
 * bytes, kept and grown as needed) and its events, made once. */
static int layer_stage(struct gpu_backend *g)
{
    size_t need = 1;
    for (int64_t l = 0; l < g->base.kv_mem->n_layer; l++) {
        struct xfer x = {.mode = XFER_SIZE};
        (void)layer_rows(g, l, &x);
        need = x.off > need ? x.off : need;
    }
    int st = IG_OK;
    for (int k = 0; k < 2 && st == IG_OK; k++) {
        if (!g->layer_mixed[k])
            st = IG_DEV(dev_event_create)(g->dev, &g->layer_mixed[k]);
        if (st == IG_OK && !g->layer_copied[k])
            st = IG_DEV(dev_event_create)(g->dev, &g->layer_copied[k]);
    }
    if (st != IG_OK || need <= g->layer_stage_bytes)
        return st;
    for (int k = 0; k < 2; k++) { /* (no copy of an earlier step is left: see _end) */
        IG_DEV(dev_free_host)(g->dev, g->layer_stage[k]);
        g->layer_stage[k] = NULL;
    }
    g->layer_stage_bytes = 0;
    for (int k = 0; k < 2 && st == IG_OK; k++)
        st = IG_DEV(dev_alloc_host)(g->dev, need, &g->layer_stage[k]);
    if (st == IG_OK)
        g->layer_stage_bytes = need;
    return st;
}

int IG_DEV(gpu_layer_out_begin)(struct gpu_backend *g, const struct backend_batch *batch)
{
    const struct kv_memory *mem = g->base.kv_mem;
    int64_t n_blocks = 0, n_read = 0, n_entries = 0;
    g->layer_batch = NULL;
    if (batch->layer_device) { /* the hook sends from the device: no store */
        g->layer_batch = batch;
        return IG_OK;
    }
    for (int64_t i = 0; i < batch->n_seqs; i++) {
        const struct backend_seq *s = &batch->seqs[i];
        int64_t from = layer_from(batch, i), nb = kv_blocks_for(s->pos0 + s->n_rows);
        IG_ASSERT(from <= s->pos0);
        if (from < 0)
            continue;
        n_blocks += nb - from / KV_BLOCK;
        n_entries += nb;
        n_read++;
    }
    int64_t n_states = kv_memory_states_for(mem, n_read);
    n_blocks = n_blocks > 0 ? n_blocks : 1; /* (a store has a block at least) */
    if (!g->layer_kv || g->layer_kv->n_blocks < n_blocks || g->layer_kv->n_states < n_states) {
        kv_store_free(g->layer_kv);
        g->layer_kv = NULL;
        int st = kv_store_create(mem, n_blocks, n_states, g->base.o.oom_hint, &g->layer_kv);
        if (st != IG_OK)
            return st;
    }
    if (n_entries > g->layer_tables_cap) {
        int32_t *t = realloc(g->layer_tables, (size_t)n_entries * sizeof *t);
        if (!t)
            return ig_error(IG_E_NOMEM, "out of memory copying the KV cache");
        g->layer_tables = t;
        g->layer_tables_cap = n_entries;
    }
    if (!g->layer_seqs &&
        !(g->layer_seqs = calloc((size_t)g->n_slots, sizeof *g->layer_seqs)))
        return ig_error(IG_E_NOMEM, "out of memory copying the KV cache");
    int32_t *t = g->layer_tables, next = 0;
    for (int64_t i = 0, slot = 0; i < batch->n_seqs; i++) {
        const struct backend_seq *s = &batch->seqs[i];
        int64_t from = layer_from(batch, i), nb = kv_blocks_for(s->pos0 + s->n_rows);
        g->layer_seqs[i] = (struct backend_layer_seq){.table = NULL, .slot = -1};
        if (from < 0)
            continue;
        for (int64_t b = 0; b < nb; b++)
            t[b] = b < from / KV_BLOCK ? -1 : next++;
        g->layer_seqs[i] = (struct backend_layer_seq){.table = t, .slot = slot++};
        t += nb;
    }
    g->layer_batch = batch;
    /* IGNITE_PD_COPY_STREAM=0: each layer's downloads synchronous, its hook
     * at once (the stalling path, for comparison) */
    const char *cs = getenv("IGNITE_PD_COPY_STREAM");
    g->layer_async = !(cs && !strcmp(cs, "0"));
    g->layer_due = -1;
    int st = g->layer_async ? layer_stage(g) : IG_OK;
    if (st != IG_OK)
        g->layer_batch = NULL;
    return st;
}

/* The hook of the layer whose copies were queued last (g->layer_due), once
 * they are done: the host waits on that layer's event only, while the main
 * stream runs on. */
static int layer_hook_due(struct gpu_backend *g)
{
    const int64_t l = g->layer_due;
    if (l < 0)
        return IG_OK;
    g->layer_due = -1;
    struct xfer x = {.mode = XFER_UNPACK, .stage = g->layer_stage[l & 1]};
    int st = IG_DEV(dev_event_sync)(g->dev, g->layer_copied[l & 1]);
    if (st == IG_OK)
        st = layer_rows(g, l, &x);
    if (st == IG_OK)
        g->layer_batch->on_layer(g->layer_batch->layer_user, l, g->layer_kv, g->layer_seqs);
    return st;
}

int IG_DEV(gpu_layer_out)(struct gpu_backend *g, int64_t l)
{
    const struct backend_batch *batch = g->layer_batch;
    if (!batch)
        return IG_OK;
    if (batch->layer_device) {
        batch->on_layer(batch->layer_user, l, NULL, NULL);
        return IG_OK;
    }
    if (!g->layer_async) {
        int st = layer_rows(g, l, &(struct xfer){.mode = XFER_NOW});
        if (st == IG_OK)
            batch->on_layer(batch->layer_user, l, g->layer_kv, g->layer_seqs);
        return st;
    }
    /* The copy stream reads layer l's rows once the main stream has written
     * them (its wait keeps the record's point: CUDA runtime API,
     * cudaEventRecord), into layer l's staging, which the host unpacked for
     * layer l-2 already (layer_hook_due at layer l-1's). */
    const int k = (int)(l & 1);
    struct xfer x = {.mode = XFER_QUEUE, .stage = g->layer_stage[k]};
    int st;
    if ((st = IG_DEV(dev_event_record)(g->dev, DEV_STREAM_MAIN, g->layer_mixed[k])) ||
        (st = IG_DEV(dev_stream_wait)(g->dev, DEV_STREAM_COPY, g->layer_mixed[k])) ||
        (st = layer_rows(g, l, &x)) ||
        (st = IG_DEV(dev_event_record)(g->dev, DEV_STREAM_COPY, g->layer_copied[k])))
        return st;
    /* layer l-1's hook while the main stream goes on past layer l */
    st = layer_hook_due(g);
    g->layer_due = l;
    return st;
}

int IG_DEV(gpu_layer_out_end)(struct gpu_backend *g, int st)
{
    const struct backend_batch *batch = g->layer_batch;
    if (!batch || batch->layer_device || !g->layer_async)
        return st;
    const int64_t last = g->layer_due;
    if (st == IG_OK)
        st = layer_hook_due(g);
    /* The main stream's later work (the next steps' writes to these blocks
     * and states) after the copies: implied while every hook waits for its
     * copies, kept so the order holds if a hook moves later. A failed step
     * leaves none behind to write the staging after it is grown. */
    if (st == IG_OK && last >= 0)
        st = IG_DEV(dev_stream_wait)(g->dev, DEV_STREAM_MAIN, g->layer_copied[last & 1]);
    for (int k = 0; k < 2 && st != IG_OK; k++)
        (void)IG_DEV(dev_event_sync)(g->dev, g->layer_copied[k]);
    g->layer_due = -1;
    return st;
}

void IG_DEV(gpu_layer_out_free)(struct gpu_backend *g)
{
    for (int k = 0; k < 2; k++) {
        if (g->layer_copied[k]) /* (a failed step's copies may still run) */
            (void)IG_DEV(dev_event_sync)(g->dev, g->layer_copied[k]);
        IG_DEV(dev_event_destroy)(g->dev, g->layer_copied[k]);
        IG_DEV(dev_event_destroy)(g->dev, g->layer_mixed[k]);
        IG_DEV(dev_free_host)(g->dev, g->layer_stage[k]);
        g->layer_copied[k] = g->layer_mixed[k] = NULL;
        g->layer_stage[k] = NULL;
    }
    g->layer_stage_bytes = 0;
}
