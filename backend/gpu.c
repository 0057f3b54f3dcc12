/* backend/gpu.c: the CUDA backend's memory, set-up and steps: what lives in
 * device memory, the step's inputs, and the decode graphs. The forward
 * itself, the layer loop and each kind of layer, is gpu_forward.c's.
 *
 * Device memory: weights in their quantized blocks or f16 (gpu_plan.c), Q|K|V
 * and gate|up concatenated so each is one product (gpu_matmul.c); norms and
 * biases f32; the KV pool f16, per paged layer K and V each
 * [n_blocks][n_head_kv][KV_BLOCK][head_dim] of the layer's own shape
 * (kvcache.h's layout from kv_memory_of, allocated once for the engine's
 * blocks, or under the window rule a sliding-window layer's n_wblocks and a
 * zero block, indexed through the window tables: gpu_impl.h; a layer sharing
 * another's KV points at its source's arrays, a recurrent layer has
 * [n_states][state_bytes] and the pool's one checkpoint of ckpt_bytes,
 * gpu_deltanet.c's); activations for max_batch
 * rows of the largest layer (model_layers_max); the step's tokens,
 * positions and compacted block tables in fixed buffers.
 * A step runs all its rows at once, every weight read once. A step whose
 * sequences all have one row is a decode step (one of 1 to 16 rows a
 * sequence, where they fit, a verify step: step_q_len): padded to its
 * bucket, its inputs in the fixed buffers, its forward (gpu_forward_decode)
 * captured as a graph per bucket and q_len and replayed, or with
 * batch->on_layer (its layers' rows go to the hook between layers,
 * gpu_cache.c) launched as it comes; any other step is a prefill step
 * (gpu_forward_prefill, then the output head of the rows that want logits;
 * its one-row sequences' rows ordered last for the decode attention:
 * order_rows). The hook never changes the route: --pd's prefill rank
 * computes one process's bits. The logits come back, or for a greedy step
 * (batch->greedy) each row's token (decode/greedy.h): a token crosses the
 * bus, not the row.
 *
 * Weights go up in gpu_weights.c, the pool to and from the host in
 * gpu_cache.c. Compiled twice (backend/gpu.h): over the CUDA device layer and
 * over the emulated one. Covered by tests/emu/test_backend_emu.c,
 * test_backend_qemu.c, test_backend_arch_emu.c, test_backend_batch_emu.c,
 * test_backend_pd_emu.c and tests/gpu/. */
#include "backend/gpu_impl.h"

#include "backend/gpu_p2p.h"
#include "core/half.h"
#include "core/status.h"
#include "decode/decode_attn.h"
#include "decode/greedy.h"
#include "ops/gpu_deltanet.h"
#include "ops/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

/* ---- memory ------------------------------------------------------------------- */

int IG_DEV(gpu_alloc)(struct gpu_backend *g, size_t bytes, void *out, size_t *account)
{
    void **p = out;
    *p = NULL;
    if (g->n_allocs == g->cap_allocs) {
        size_t cap = g->cap_allocs ? 2 * g->cap_allocs : 64;
        void **a = realloc(g->allocs, cap * sizeof *a);
        if (!a)
            return ig_error(IG_E_NOMEM, "out of memory");
        g->allocs = a;
        g->cap_allocs = cap;
    }
    int st = IG_DEV(dev_alloc)(g->dev, bytes ? bytes : 16, p);
    if (st != IG_OK)
        return st;
    g->allocs[g->n_allocs++] = *p;
    g->device_bytes += bytes;
    if (account)
        *account += bytes;
    return IG_OK;
}

/* Bucket i's decode attention in layer l at q_len rows a sequence, or
 * false where a verify step of that shape does not fit verify_rows. */
static bool bucket_attn_at(const struct gpu_backend *g, int i, int64_t l, int64_t q_len,
                           struct decode_attn_params *ap)
{
    if (g->m->layers[l].mixer != LAYER_MIXER_ATTENTION ||
        (q_len > 1 && ((int64_t)1 << i) * q_len > g->verify_rows))
        return false;
    *ap = gpu_bucket_attn(g, i, l);
    ap->q_len = q_len;
    return true;
}

/* The decode attention's tickets (decode_attn_params), zero between
 * launches: the most any bucket, q_len and layer needs. */
static size_t attn_tickets(const struct gpu_backend *g)
{
    size_t most = 1;
    struct decode_attn_params ap;
    for (int i = 0; i < g->n_buckets; i++)
        for (int64_t q = 1; q <= (1 << GPU_VERIFY_Q_LOG2); q *= 2)
            for (int64_t l = 0; l < g->m->hp.n_layer; l++)
                if (bucket_attn_at(g, i, l, q, &ap) && decode_attn_tickets(&ap) > most)
                    most = decode_attn_tickets(&ap);
    return most;
}

/* Rows of the staged tables: a decode step's sequences, or a verify step's
 * rows (a table a row). */
static int64_t table_rows(const struct gpu_backend *g)
{
    return g->verify_rows > g->max_seqs ? g->verify_rows : g->max_seqs;
}

struct gpu_sizes {
    double weights, kv, acts;
};

/* Floats of the decode attention's work buffer: the most any bucket (at
 * any verify q_len) of any layer needs. */
static size_t attn_work_floats(const struct gpu_backend *g)
{
    size_t most = 1;
    struct decode_attn_params ap;
    for (int i = 0; i < g->n_buckets; i++)
        for (int64_t q = 1; q <= (1 << GPU_VERIFY_Q_LOG2); q *= 2)
            for (int64_t l = 0; l < g->m->hp.n_layer; l++)
                if (bucket_attn_at(g, i, l, q, &ap) && decode_attn_work_floats(&ap) > most)
                    most = decode_attn_work_floats(&ap);
    return most;
}

static void plan_sizes(const struct gpu_backend *g, struct gpu_sizes *s)
{
    const struct model_hparams *hp = &g->m->hp;
    double e = hp->n_embd, ff = (double)g->n_ff, B = (double)g->max_batch;
    s->weights = (double)backend_gpu_weight_bytes(g->m, g->weights_mode);
    /* under the window rule the window layers' blocks and their zero block */
    s->kv = kv_memory_bytes_windowed(g->base.kv_mem, g->n_blocks,
                                     g->n_wblocks ? g->n_wblocks + 1 : 0, g->n_states);
    s->acts = B * (4.0 * e + 2.0 * e + 4.0 * g->qkv_rows + 2.0 * (2 * g->q_dim + 2 * g->kv_dim) +
                   4.0 * 2 * ff + 2.0 * ff + (hp->has_post_norms ? 4.0 * e : 0.0) + 8.0 +
                   /* Gemma 4's (gpu_gemma4.c): per-layer inputs, shared-KV rows */
                   (hp->has_ple ? 16.0 * (double)(hp->n_layer * hp->n_embd_per_layer) : 0.0) +
                   (hp->n_kv_shared ? 8.0 * (double)g->kv_dim : 0.0)) +
              4.0 * hp->n_vocab * (double)g->logit_rows +
              4.0 * (double)(table_rows(g) * g->table_stride) * (g->n_wblocks ? 2 : 1) +
              4.0 * (double)attn_work_floats(g) +
              4.0 * (double)attn_tickets(g) + 4.0 + 8.0 + B * (e + e / 4) +
              (g->n_ff % 32 == 0 ? B * (ff + ff / 4) + ff / 8 : 0.0) +
              (g->q_dim % 32 == 0 ? B * (double)(g->q_dim + g->q_dim / 4) : 0.0) +
              (double)gpu_plan_scratch_bytes(g->m, g->weights_mode, g->max_batch) +
              (double)IG_DEV(gpu_moe_buf_bytes)(g->m, g->max_batch) +
              IG_DEV(gpu_deltanet_act_bytes)(g->m, g->max_batch, g->max_seqs);
}

/* ---- setup ------------------------------------------------------------------------ */

static int check_model(const struct model *m)
{
    const struct model_hparams *hp = &m->hp;
    int st = gpu_plan_check_model(m); /* the architecture first, then a layer's shape */
    if (st != IG_OK)
        return st;
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        if (L->mixer == LAYER_MIXER_DELTANET) { /* ops/gpu_deltanet.h's kernels */
            if (!GK_DN_HEAD_DIM_OK(L->dn_head_dim) || L->dn_conv > GK_DN_MAX_CONV)
                return ig_error(IG_E_MODEL, "the CUDA backend's gated DeltaNet takes head dims "
                                "64 and 128 and convolutions of at most %d; '%s' has %lld and "
                                "%lld (use --device cpu)", GK_DN_MAX_CONV, m->path,
                                (long long)L->dn_head_dim, (long long)L->dn_conv);
            continue;
        }
        if (L->head_dim != 64 && L->head_dim != 128 && L->head_dim != 256 &&
            L->head_dim != 512)
            return ig_error(IG_E_MODEL, "the CUDA backend supports head_dim 64, 128, 256 and "
                            "512; '%s' has %lld (use --device cpu)", m->path,
                            (long long)L->head_dim);
        if (L->n_head / L->n_head_kv > 8)
            return ig_error(IG_E_MODEL, "the CUDA backend supports up to 8 query heads per KV "
                            "head; '%s' has %lld (use --device cpu)", m->path,
                            (long long)(L->n_head / L->n_head_kv));
        if (hp->n_embd % 8 || L->n_ff % 8 || L->n_ff_shexp % 8 || L->n_ff_mlp % 8)
            return ig_error(IG_E_MODEL, "the CUDA backend needs widths that are multiples of 8");
        if (L->n_ff > 40960 || L->n_ff_shexp > 40960 || L->n_ff_mlp > 40960 ||
            hp->n_embd > 40960 || L->n_head * L->head_dim > 40960)
            return ig_error(IG_E_MODEL, "the CUDA backend's decode GEMV takes inputs of at most "
                            "40960 elements; '%s' is wider (use --device cpu)", m->path);
    }
    return IG_OK;
}

/* The kernels read and write K/V in paged blocks, each layer of its own
 * shape (or, Gemma 4's shared-KV layers, its source's), and recurrent state
 * in slots (gpu_deltanet.c). */
static int check_memory(const struct gpu_backend *g)
{
    const struct kv_memory *mem = g->base.kv_mem;
    for (int64_t l = 0; l < mem->n_layer; l++) {
        const struct kv_layer_mem *L = &mem->layers[l];
        if (L->kind != KV_FULL && L->kind != KV_WINDOW && L->kind != KV_RECURRENT &&
            L->kind != KV_SHARED)
            return ig_error(IG_E_MODEL, "the CUDA backend runs layers of full or sliding-window "
                            "attention; layer %lld of '%s' is %s: use --device cpu",
                            (long long)l, g->m->path, kv_kind_name(L->kind));
    }
    return IG_OK;
}

/* Refuses up front, with the numbers, a model that does not fit; `hint`
 * (backend_opts.oom_hint) ends the line. */
static int check_fits(const struct gpu_backend *g, const char *hint)
{
    struct gpu_sizes s;
    plan_sizes(g, &s);
    double need = s.weights + s.kv + s.acts, slack = 512.0 * 1024 * 1024; /* cuBLAS, context */
    if (g->info.mem_free == 0 || need + slack <= (double)g->info.mem_free)
        return IG_OK;
    return ig_error(IG_E_NOMEM, "the model needs %.2f GiB on cuda:%d (weights %.2f, KV pool "
                    "%.2f for %lld blocks of %d positions, activations %.2f) but %s has %.2f "
                    "GiB free (%s)", (need + slack) / GIB, g->info.index, s.weights / GIB,
                    s.kv / GIB, (long long)g->n_blocks, KV_BLOCK, s.acts / GIB, g->info.name,
                    (double)g->info.mem_free / GIB,
                    hint ? hint : "lower -c/--ctx-size or --chunk, or use --device cpu");
}

/* Under the window rule, window layer l's last block (id n_wblocks, where
 * the staged window tables point the blocks given back) zeros: K's block of
 * kb bytes, V's of vb. */
static int zero_last_block(struct gpu_backend *g, int64_t l, size_t kb, size_t vb)
{
    unsigned char *k = (unsigned char *)g->layers[l].k_cache + (size_t)g->n_wblocks * kb;
    unsigned char *v = (unsigned char *)g->layers[l].v_cache + (size_t)g->n_wblocks * vb;
    int st = IG_DEV(dev_memset)(g->dev, k, 0, kb);
    return st != IG_OK ? st : IG_DEV(dev_memset)(g->dev, v, 0, vb);
}

static int alloc_state(struct gpu_backend *g)
{
    const struct model_hparams *hp = &g->m->hp;
    size_t B = (size_t)g->max_batch, e = (size_t)hp->n_embd, ff = (size_t)g->n_ff;
    const struct kv_memory *mem = g->base.kv_mem;
    size_t tables = (size_t)(table_rows(g) * g->table_stride) * sizeof(int32_t);
    int st;
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const struct kv_layer_mem *L = &mem->layers[l];
        /* bytes of the layer's blocks, each array in its own type (q8_0, fp8:
         * 34 bytes a 32 values, kvcache/kv_devq.h) */
        const size_t nb = (size_t)gpu_layer_blocks(g, l); /* a window layer's: the window side's */
        size_t pool = nb * kv_dtype_row_bytes(mem->dtype, kv_layer_block_elems(L));
        size_t pool_v = nb * kv_dtype_row_bytes(mem->dtype_v, kv_layer_block_elems(L));
        if (L->kind == KV_RECURRENT) { /* one checkpoint, a header of zeros: none */
            size_t ck = g->n_states ? L->ckpt_bytes : 0;
            if ((st = IG_DEV(gpu_alloc)(g, (size_t)g->n_states * L->state_bytes,
                                        &g->layers[l].state, &g->kv_bytes)) == IG_OK && ck &&
                (st = IG_DEV(gpu_alloc)(g, ck, &g->layers[l].ckpt, &g->kv_bytes)) == IG_OK)
                st = IG_DEV(dev_memset)(g->dev, g->layers[l].ckpt, 0, ck);
        }
        else if (L->kind == KV_SHARED) /* below: its source's arrays */
            st = IG_OK;
        else if ((st = IG_DEV(gpu_alloc)(g, pool, &g->layers[l].k_cache, &g->kv_bytes)) == IG_OK)
            st = IG_DEV(gpu_alloc)(g, pool_v, &g->layers[l].v_cache, &g->kv_bytes);
        if (st == IG_OK && L->kind == KV_WINDOW && g->n_wblocks) /* the zero block, the last */
            st = zero_last_block(g, l, pool / nb, pool_v / nb);
        if (st != IG_OK)
            return st;
    }
    for (int64_t l = 0; l < hp->n_layer; l++)
        if (mem->layers[l].kind == KV_SHARED) { /* the source's arrays, no blocks of its own */
            g->layers[l].k_cache = g->layers[mem->layers[l].source].k_cache;
            g->layers[l].v_cache = g->layers[mem->layers[l].source].v_cache;
        }
    if ((st = IG_DEV(gpu_alloc)(g, B * e * 4, &g->x, NULL)) || (st = IG_DEV(gpu_alloc)(g, B * e * 2, &g->xn, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * (size_t)g->qkv_rows * 4, &g->qkv, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * (size_t)g->q_dim * 2, &g->q16, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * (size_t)g->kv_dim * 2, &g->k16, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * (size_t)g->kv_dim * 2, &g->v16, NULL)) ||
        (st = IG_DEV(gpu_gemma4_alloc)(g)) ||
        (st = IG_DEV(gpu_alloc)(g, B * (size_t)g->q_dim * 2, &g->att16, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * 2 * ff * 4, &g->gu, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * ff * 2, &g->h16, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, (size_t)(hp->n_vocab * g->logit_rows) * 4, &g->logits, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, (size_t)g->logit_rows * 4, &g->greedy, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * 4, &g->tokens, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * 4, &g->pos, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, tables, &g->tables, NULL)) ||
        (g->n_wblocks && (st = IG_DEV(gpu_alloc)(g, tables, &g->wtables, NULL))) ||
        (st = IG_DEV(gpu_alloc)(g, (g->attn_work_floats = attn_work_floats(g)) * 4,
                                &g->attn_work, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, attn_tickets(g) * 4, &g->attn_tickets, NULL)) ||
        (st = IG_DEV(dev_memset)(g->dev, g->attn_tickets, 0, attn_tickets(g) * 4)) ||
        (st = IG_DEV(gpu_alloc)(g, 4, &g->norm_ticket, NULL)) ||
        (st = IG_DEV(dev_memset)(g->dev, g->norm_ticket, 0, 4)) ||
        (st = IG_DEV(gpu_alloc)(g, 8, &g->attn_tiles, NULL)) ||
        (st = IG_DEV(dev_memset)(g->dev, g->attn_tiles, 0, 8)))
        return st;
    if (((hp->has_post_norms || g->tp) &&
         (st = IG_DEV(gpu_alloc)(g, B * e * 4, &g->proj, NULL))) ||
        (st = IG_DEV(gpu_deltanet_alloc)(g)))
        return st;
    if (e % 32 == 0 && ((st = IG_DEV(gpu_alloc)(g, B * e, &g->xq, NULL)) ||
                        (st = IG_DEV(gpu_alloc)(g, B * (e / 32) * 8, &g->xqd, NULL))))
        return st;
    if (g->q_dim % 32 == 0 &&
        ((st = IG_DEV(gpu_alloc)(g, B * (size_t)g->q_dim, &g->oq, NULL)) ||
         (st = IG_DEV(gpu_alloc)(g, B * (size_t)(g->q_dim / 32) * 8, &g->oqd, NULL))))
        return st;
    if (ff % 32 == 0 && ((st = IG_DEV(gpu_alloc)(g, B * ff, &g->hq, NULL)) ||
                         (st = IG_DEV(gpu_alloc)(g, B * (ff / 32) * 8, &g->hqd, NULL)) ||
                         (st = IG_DEV(gpu_alloc)(g, ff / 32 * 4, &g->glu_tickets, NULL)) ||
                         (st = IG_DEV(dev_memset)(g->dev, g->glu_tickets, 0, ff / 32 * 4))))
        return st;
    /* Each RoPE variant's frequencies and cos/sin factor (Gemma 3's local
     * layers have their own base, Gemma 4's their own rotated dims too). */
    size_t half = (size_t)(model_rope_dims_max(hp) / 2);
    double *inv = malloc((half ? half : 1) * sizeof *inv);
    if (!inv)
        return ig_error(IG_E_NOMEM, "out of memory");
    for (int r = 0; r < 2 && st == IG_OK; r++) {
        half = (size_t)(model_rope_dims(hp, r) / 2);
        ops_rope_freqs(&hp->rope[r], model_rope_dims(hp, r), inv, &g->mscale[r]);
        st = IG_DEV(gpu_alloc)(g, (half ? half : 1) * sizeof *inv, &g->inv_freq[r], NULL);
        if (st == IG_OK)
            st = IG_DEV(dev_upload)(g->dev, g->inv_freq[r], inv, half * sizeof *inv);
    }
    free(inv);
    size_t seqs = (size_t)g->max_seqs * sizeof *g->seqs;
    if (st == IG_OK)
        st = IG_DEV(gpu_alloc)(g, seqs, &g->seqs, NULL);
    /* the step's inputs staged in pinned memory: tokens, positions, tables,
     * sequences */
    if (st == IG_OK)
        st = IG_DEV(dev_alloc_host)(g->dev, 2 * B * 4 + (g->n_wblocks ? 2 : 1) * tables + seqs,
                                    &g->h_stage);
    if (st == IG_OK) {
        const int64_t n_entries = table_rows(g) * g->table_stride;
        g->h_tokens = g->h_stage;
        g->h_pos = g->h_tokens + B;
        g->h_tables = g->h_pos + B;
        g->h_wtables = g->n_wblocks ? g->h_tables + n_entries : NULL;
        g->h_seqs = (struct prefill_attn_seq *)(g->h_tables + (g->n_wblocks ? 2 : 1) * n_entries);
        if (!(g->want = malloc(B * sizeof *g->want)) ||
            !(g->h_greedy = malloc((size_t)table_rows(g) * sizeof *g->h_greedy)) ||
            !(g->h_order = malloc((size_t)g->max_seqs * sizeof *g->h_order)) ||
            !(g->row_of = malloc(B * sizeof *g->row_of)))
            st = ig_error(IG_E_NOMEM, "out of memory");
    }
    /* Page-locked logits for the engine, up to a GiB (beyond, the engine's
     * own memory: a greedy step brings back tokens only anyway). */
    size_t logit_bytes = (size_t)(g->base.o.n_slots * hp->n_vocab) * 4;
    if (st == IG_OK && logit_bytes <= ((size_t)1 << 30))
        st = IG_DEV(dev_alloc_host)(g->dev, logit_bytes, &g->h_logits);
    g->base.host_logits = g->h_logits;
    return st;
}

int IG_DEV(gpu_device_count)(void)
{
    return IG_DEV(dev_count)();
}

static const struct backend_ops gpu_ops;

int IG_DEV(gpu_backend_create)(const struct model *m, const struct backend_opts *o,
                               struct backend **out)
{
    return IG_DEV(gpu_backend_create_tp)(m, o, NULL, out);
}

int IG_DEV(gpu_backend_create_tp)(const struct model *m, const struct backend_opts *o_in,
                                  struct cpu_tp *tp, struct backend **out)
{
    *out = NULL;
    struct backend_opts tp_o = *o_in; /* a rank's device: its own where there are several */
    int here;
    if (tp)
        tp_o.device.index =
            IG_DEV(gpu_tp_device)(o_in->device.index, IG_DEV(dev_count)(), &here);
    const struct backend_opts *o = &tp_o;
    int st = check_model(m);
    if (st != IG_OK)
        return st;
    IG_ASSERT(o->n_blocks >= 1 && o->n_slots >= 1 && o->max_rows >= 1);
    struct gpu_backend *g = calloc(1, sizeof *g);
    if (!g || !(g->layers = calloc((size_t)m->hp.n_layer, sizeof *g->layers))) {
        free(g);
        return ig_error(IG_E_NOMEM, "out of memory");
    }
    g->base = (struct backend){.ops = &gpu_ops, .m = m, .o = *o, .shares_blocks = true,
                               .threads = 1};
    g->m = m;
    g->n_ctx = o->n_ctx;
    g->max_rows = o->max_rows;
    g->n_slots = o->n_slots;
    g->weights_mode = o->gpu_weights;
    struct model_layer_max mx; /* the activations hold any layer's rows */
    model_layers_max(m, &mx);
    g->q_dim = mx.q_dim;
    g->kv_dim = mx.kv_dim;
    g->qkv_rows = mx.q_dim + 2 * mx.kv_dim;
    g->n_ff = mx.n_ff;
    g->n_blocks = o->n_blocks;
    /* Room past n_ctx for the longest step, so that a varlen launch's
     * largest pos0 plus its longest sequence stays inside n_ctx. */
    g->table_stride = kv_blocks_for(g->n_ctx) + kv_blocks_for(g->max_rows);
    for (g->n_buckets = 1; ((int64_t)1 << (g->n_buckets - 1)) < g->n_slots; g->n_buckets++)
        ;
    IG_ASSERT(g->n_buckets <= GPU_MAX_BUCKETS);
    g->max_seqs = (int64_t)1 << (g->n_buckets - 1);
    g->max_batch = g->max_rows > g->max_seqs ? g->max_rows : g->max_seqs;
    g->logit_rows = g->max_rows < GPU_HEAD_ROWS ? g->max_rows : GPU_HEAD_ROWS;
    if (g->logit_rows < g->max_seqs)
        g->logit_rows = g->max_seqs;
    /* Verify steps through the decode kernels while their rows fit the
     * activations and the logits (IGNITE_GPU_VERIFY=0: through the prefill
     * path, for comparison). */
    const char *verify = getenv("IGNITE_GPU_VERIFY");
    g->q_len = 1;
    g->verify_rows = g->max_batch < g->logit_rows ? g->max_batch : g->logit_rows;
    if (g->verify_rows < 2 || (verify && !strcmp(verify, "0")))
        g->verify_rows = 0;
    /* A prefill step's one-row sequences through decode_attn
     * (IGNITE_GPU_MIXED=0: through the prefill kernel, for comparison). */
    const char *mixed = getenv("IGNITE_GPU_MIXED");
    g->mixed_decode = !(mixed && !strcmp(mixed, "0"));
    /* The pool: f16 (an f32 request too), or q8_0 / fp8 as asked
     * (backend.c refuses q4_0); a shared-KV layer reads its source's blocks
     * in their type (gpu_forward.c's kvq_write_rows). */
    enum kv_dtype kt = kv_dtype_quantized(o->kv_dtype) ? o->kv_dtype : KV_F16;
    enum kv_dtype vt = kv_dtype_quantized(o->kv_dtype_v) ? o->kv_dtype_v : KV_F16;
    if (st == IG_OK && (st = kv_memory_of(m, kt, vt, &g->base.kv_mem)) == IG_OK &&
        (st = check_memory(g)) == IG_OK) {
        g->n_states = g->base.n_states = kv_memory_states_for(g->base.kv_mem, o->n_slots);
        /* the window rule where asked (a rank keeps every block) */
        g->n_wblocks = tp ? 0 : backend_window_blocks(g->base.kv_mem, o);
        g->base.o.n_window_blocks = g->n_wblocks;
        st = IG_DEV(dev_open)(o->device.index, &g->dev);
    }
    if (st == IG_OK) {
        IG_DEV(dev_get_info)(g->dev, &g->info);
        g->stream = IG_DEV(dev_stream)(g->dev);
        for (int i = 0; i < g->n_buckets; i++)
            g->n_splits[i] = decode_attn_choose_splits(g->n_ctx, (int64_t)1 << i,
                                                       mx.n_head_kv, g->info.n_sm);
        st = check_fits(g, o->oom_hint);
    }
    if (st == IG_OK && tp)
        st = IG_DEV(gpu_tp_open)(g, tp);
    if (st == IG_OK && (st = IG_DEV(gpu_upload_weights)(g)) == IG_OK)
        st = alloc_state(g);
    if (st == IG_OK)
        st = IG_DEV(gpu_moe_alloc)(g);
    if (st != IG_OK) {
        gpu_ops.destroy(&g->base);
        return st;
    }
    g->base.weight_bytes = g->weight_bytes;
    snprintf(g->base.device, sizeof g->base.device, "cuda:%d", g->info.index);
    snprintf(g->base.device_name, sizeof g->base.device_name, "%s", g->info.name);
    *out = &g->base;
    return IG_OK;
}

static void gpu_destroy(struct backend *b)
{
    struct gpu_backend *g = (struct gpu_backend *)b;
    if (g->dev) {
        for (int i = 0; i < g->n_buckets; i++) {
            IG_DEV(dev_graph_free)(g->graphs[i]);
            for (int k = 0; k <= GPU_VERIFY_Q_LOG2; k++)
                IG_DEV(dev_graph_free)(g->verify_graphs[i][k]);
        }
        IG_DEV(gpu_layer_out_free)(g);
        IG_DEV(gpu_kv_p2p_close)(g);
        for (size_t i = 0; i < g->n_allocs; i++)
            IG_DEV(dev_free)(g->dev, g->allocs[i]);
        IG_DEV(dev_free_host)(g->dev, g->h_stage);
        IG_DEV(dev_free_host)(g->dev, g->h_logits);
        IG_DEV(dev_free_host)(g->dev, g->h_dn_seqs);
        IG_DEV(dev_close)(g->dev);
    }
    IG_DEV(gpu_tp_free)(g);
    kv_store_free(g->host_kv);
    kv_store_free(g->layer_kv);
    kv_memory_free(g->base.kv_mem);
    free(g->host_table);
    free(g->layer_tables);
    free(g->layer_seqs);
    free(g->want);
    free(g->h_greedy);
    free(g->h_order);
    free(g->row_of);
    free(g->allocs);
    free(g->layers);
    free(g);
}

/* ---- a prefill step ----------------------------------------------------------------- */

/* Whether row r of the step wants logits (NULL want: each sequence's last). */
static bool row_wanted(const struct backend_batch *batch, const struct backend_seq *s, int64_t r)
{
    return batch->want_logits ? batch->want_logits[r] : r == s->row0 + s->n_rows - 1;
}

/* Copies sequence s's table (the blocks of positions < n_pos) into row i of
 * the staged tables, the rest of the row -1. */
static void stage_table(struct gpu_backend *g, int64_t i, const int32_t *table, int64_t n_pos)
{
    int32_t *row = g->h_tables + i * g->table_stride;
    int64_t nb = kv_blocks_for(n_pos);
    if (nb)
        memcpy(row, table, (size_t)nb * sizeof *row);
    for (int64_t b = nb; b < g->table_stride; b++)
        row[b] = -1;
}

/* The same for its window table (the window rule): the blocks given back
 * (entries below 0) point at the window side's zero block, n_wblocks. */
static void stage_wtable(struct gpu_backend *g, int64_t i, const int32_t *wtable, int64_t n_pos)
{
    int32_t *row = g->h_wtables + i * g->table_stride;
    int64_t nb = kv_blocks_for(n_pos);
    for (int64_t b = 0; b < g->table_stride; b++)
        row[b] = b >= nb ? -1 : wtable[b] >= 0 ? wtable[b] : (int32_t)g->n_wblocks;
}

/* Row i of the staged tables (and window tables) for sequence s up to its
 * step's last row; s NULL: a padding row's, no blocks. */
static void stage_tables(struct gpu_backend *g, int64_t i, const struct backend_seq *s)
{
    const int64_t n_pos = s ? s->pos0 + s->n_rows : 0;
    stage_table(g, i, s ? s->table : NULL, n_pos);
    if (g->n_wblocks)
        stage_wtable(g, i, s ? s->wtable : NULL, n_pos);
}

/* The batch as the forward takes it: with the mixed route (g->mixed_decode)
 * and both kinds of sequence, those of several rows first, then those of
 * one row, each kind in the batch's order, their rows renumbered in that
 * order (tokens into h_tokens, sequences into h_order): the one-row
 * sequences' rows are then the step's last, contiguous, as decode_attn
 * takes a bucket's, and their tables follow the others'. g->row_of maps a
 * batch row to its row. Returns the one-row sequences so placed (0: the
 * batch as it is, row_of the identity). */
static int64_t order_rows(struct gpu_backend *g, const struct backend_batch *batch,
                          struct backend_batch *out)
{
    int64_t ns = batch->n_seqs, n_single = 0, row = 0, k = 0;
    for (int64_t i = 0; i < ns; i++)
        n_single += batch->seqs[i].n_rows == 1;
    *out = *batch;
    if (!g->mixed_decode || n_single == 0 || n_single == ns) {
        for (int64_t r = 0; r < batch->n_rows; r++)
            g->row_of[r] = (int32_t)r;
        return 0;
    }
    for (int pass = 0; pass < 2; pass++)
        for (int64_t i = 0; i < ns; i++) {
            const struct backend_seq *s = &batch->seqs[i];
            if ((s->n_rows == 1) != (pass == 1))
                continue;
            g->h_order[k] = *s;
            g->h_order[k++].row0 = row;
            for (int64_t r = 0; r < s->n_rows; r++, row++) {
                g->row_of[s->row0 + r] = (int32_t)row;
                g->h_tokens[row] = batch->tokens[s->row0 + r];
            }
        }
    out->seqs = g->h_order;
    out->tokens = g->h_tokens;
    return n_single;
}

/* A step of any other shape: the rows ordered (order_rows), inputs staged
 * and uploaded, the forward (gpu_forward.c), the wanted rows' logits or
 * tokens downloaded in the batch's order. */
static int prefill_step(struct gpu_backend *g, const struct backend_batch *batch)
{
    int64_t n = batch->n_rows, ns = batch->n_seqs, n_want = 0, *want = g->want, want0 = n;
    struct backend_batch b;
    const int64_t n_single = order_rows(g, batch, &b);
    for (int64_t i = 0; i < ns; i++) {
        const struct backend_seq *s = &b.seqs[i];
        for (int64_t r = 0; r < s->n_rows; r++)
            g->h_pos[s->row0 + r] = (int32_t)(s->pos0 + r);
        g->h_seqs[i] = (struct prefill_attn_seq){
            .row0 = (int32_t)s->row0, .n_rows = (int32_t)s->n_rows, .pos0 = (int32_t)s->pos0};
        stage_tables(g, i, s);
    }
    for (int64_t i = 0; i < ns; i++) { /* in the batch's order: the logits' */
        const struct backend_seq *s = &batch->seqs[i];
        for (int64_t r = s->row0; r < s->row0 + s->n_rows; r++)
            if (row_wanted(batch, s, r)) {
                want[n_want] = g->row_of[r];
                want0 = want[n_want] < want0 ? want[n_want] : want0;
                n_want++;
            }
    }
    int st;
    if ((st = IG_DEV(dev_upload)(g->dev, g->tokens, b.tokens, (size_t)n * 4)) ||
        (st = IG_DEV(dev_upload)(g->dev, g->pos, g->h_pos, (size_t)n * 4)) ||
        (st = IG_DEV(dev_upload)(g->dev, g->tables, g->h_tables,
                                 (size_t)(ns * g->table_stride) * 4)) ||
        (g->n_wblocks && (st = IG_DEV(dev_upload)(g->dev, g->wtables, g->h_wtables,
                                                  (size_t)(ns * g->table_stride) * 4))) ||
        (ns > 1 && (st = IG_DEV(dev_upload)(g->dev, g->seqs, g->h_seqs,
                                            (size_t)ns * sizeof *g->seqs))) ||
        (st = IG_DEV(gpu_deltanet_stage)(g, &b, ns)) ||
        (batch->on_layer && (st = IG_DEV(gpu_layer_out_begin)(g, batch))))
        return st;
    g->mixed_steps += n_single > 0;
    /* Past attention, the last layer matters for the rows that want logits. */
    st = IG_DEV(gpu_forward_prefill)(g, n, ns, n_single, want0);
    if (st == IG_OK && n_want)
        st = IG_DEV(gpu_head_rows)(g, want, n_want, batch->logits, batch->greedy);
    st = IG_DEV(gpu_layer_out_end)(g, st); /* (the last layer's hook) */
    g->layer_batch = NULL;
    return st == IG_OK ? IG_DEV(dev_sync)(g->dev) : st;
}

/* ---- a decode step ----------------------------------------------------------------- */

/* Bucket i's step launched as it comes, no graph. */
static int run_ungraphed(struct gpu_backend *g, int bucket)
{
    int64_t n0 = IG_DEV(dev_launches)(g->dev);
    int st = IG_DEV(gpu_forward_decode)(g, bucket);
    g->base.step_nodes = n0 < 0 ? -1 : IG_DEV(dev_launches)(g->dev) - n0;
    return st;
}

/* Runs bucket i's step (at g->q_len rows a sequence): the first call
 * captures it as a graph where the device layer can, later calls replay it.
 * A step whose layers go to on_layer (g->layer_batch) runs ungraphed: the
 * hook is host code between its layers, which a graph would not keep. */
static int run_bucket(struct gpu_backend *g, int bucket)
{
    if (g->layer_batch)
        return run_ungraphed(g, bucket);
    int k = 0;
    while (((int64_t)1 << k) < g->q_len)
        k++;
    struct dev_graph **slot = k ? &g->verify_graphs[bucket][k] : &g->graphs[bucket];
    if (*slot) {
        g->base.step_nodes = IG_DEV(dev_graph_nodes)(*slot);
        return IG_DEV(dev_graph_launch)(g->dev, *slot);
    }
    if (g->no_graph || IG_DEV(dev_graph_begin)(g->dev) != IG_OK) {
        g->no_graph = true;
        return run_ungraphed(g, bucket);
    }
    int st = IG_DEV(gpu_forward_decode)(g, bucket);
    struct dev_graph *graph = NULL;
    int st_end = IG_DEV(dev_graph_end)(g->dev, &graph);
    if (st != IG_OK || st_end != IG_OK) {
        IG_DEV(dev_graph_free)(graph);
        return st != IG_OK ? st : st_end;
    }
    *slot = graph;
    g->base.step_nodes = IG_DEV(dev_graph_nodes)(graph);
    return IG_DEV(dev_graph_launch)(g->dev, *slot);
}

/* q_len for a step through the decode kernels: 1 for one row a sequence;
 * 2, 4, 8 or 16 for a verify step (each sequence 1..16 rows, the most
 * rounded up) whose bucket of sequences times q_len fits verify_rows, in a
 * model without recurrent layers; 0: a prefill step. */
static int64_t step_q_len(const struct gpu_backend *g, const struct backend_batch *batch)
{
    if (batch->n_rows == batch->n_seqs)
        return 1;
    /* A recurrent layer's decode step takes a row per sequence: its
     * sequences' rows must run in order (the prefill path). */
    const struct kv_memory *mem = g->base.kv_mem;
    for (int64_t l = 0; l < mem->n_layer; l++)
        if (mem->layers[l].kind == KV_RECURRENT)
            return 0;
    int64_t most = 1, nb = 1;
    for (int64_t i = 0; i < batch->n_seqs; i++) {
        const int64_t n = batch->seqs[i].n_rows;
        if (n < 1 || n > (1 << GPU_VERIFY_Q_LOG2))
            return 0;
        most = n > most ? n : most;
    }
    int64_t q = 2;
    while (q < most)
        q *= 2;
    while (nb < batch->n_seqs)
        nb *= 2;
    return nb * q <= g->verify_rows ? q : 0;
}

/* A decode or verify step's staged inputs uploaded (rows of them) and
 * bucket's step run; with on_layer its layers go to the hook
 * (gpu_layer_out_begin; the caller ends it). */
static int launch_bucket(struct gpu_backend *g, const struct backend_batch *batch, int64_t rows,
                         int bucket)
{
    int st;
    if ((st = IG_DEV(dev_upload_async)(g->dev, g->tokens, g->h_tokens, (size_t)rows * 4)) ||
        (st = IG_DEV(dev_upload_async)(g->dev, g->pos, g->h_pos, (size_t)rows * 4)) ||
        (st = IG_DEV(dev_upload_async)(g->dev, g->tables, g->h_tables,
                                       (size_t)(rows * g->table_stride) * 4)) ||
        (g->n_wblocks && (st = IG_DEV(dev_upload_async)(g->dev, g->wtables, g->h_wtables,
                                                        (size_t)(rows * g->table_stride) * 4))) ||
        (st = IG_DEV(gpu_deltanet_stage)(g, batch, rows)) ||
        (batch->on_layer && (st = IG_DEV(gpu_layer_out_begin)(g, batch))))
        return st;
    return run_bucket(g, bucket);
}

/* A step through the decode kernels, q_len rows a sequence (1: a decode
 * step; more: a verify step, the sequences' rows padded to q_len): the
 * sequences padded to their bucket (padding rows token 0 at position -1:
 * nothing of them reaches the pool), the inputs uploaded into the fixed
 * buffers (at q_len > 1 each row's table: the RoPE writes through it), the
 * (bucket, q_len) graph run, the wanted rows' logits or tokens downloaded
 * in the batch's order (sequence by sequence, row by row). */
static int decode_step(struct gpu_backend *g, const struct backend_batch *batch, int64_t q_len)
{
    int64_t ns = batch->n_seqs, nv = g->m->hp.n_vocab;
    int bucket = 0;
    while (((int64_t)1 << bucket) < ns)
        bucket++;
    int64_t rows = ((int64_t)1 << bucket) * q_len, n_want = 0;
    for (int64_t i = 0; i < rows; i++) {
        const int64_t si = i / q_len, r = i % q_len;
        const struct backend_seq *s = si < ns ? &batch->seqs[si] : NULL;
        const bool live = s && r < s->n_rows;
        g->h_tokens[i] = live ? batch->tokens[s->row0 + r] : 0;
        g->h_pos[i] = live ? (int32_t)(s->pos0 + r) : -1;
        stage_tables(g, i, s);
        if (live && row_wanted(batch, s, s->row0 + r))
            g->want[n_want++] = i;
    }
    g->q_len = q_len;
    int st = IG_DEV(gpu_layer_out_end)(g, launch_bucket(g, batch, rows, bucket));
    g->layer_batch = NULL; /* (gpu_layer_out_end ran the last layer's hook) */
    g->q_len = 1;
    if (st != IG_OK)
        return st;
    g->verify_steps += q_len > 1;
    /* The live rows end at the last sequence's: rows past it are padding. */
    const int64_t used = (ns - 1) * q_len + batch->seqs[ns - 1].n_rows;
    if (batch->greedy) { /* a token a row comes back, not the row */
        int32_t *dst = n_want == used ? batch->greedy : g->h_greedy;
        if ((st = IG_DEV(gk_greedy_rows)(g->logits, nv, used, nv, g->greedy, g->stream)) ||
            (st = IG_DEV(dev_download)(g->dev, dst, g->greedy, (size_t)used * 4)))
            return st;
        if (dst == g->h_greedy)
            for (int64_t k = 0; k < n_want; k++)
                batch->greedy[k] = g->h_greedy[g->want[k]];
        return IG_OK;
    }
    if (n_want == used) /* the usual case: one download */
        return IG_DEV(dev_download)(g->dev, batch->logits, g->logits, (size_t)(used * nv) * 4);
    float *out = batch->logits;
    for (int64_t k = 0; k < n_want && st == IG_OK;) {
        int64_t run = 1; /* wanted rows next to each other: one download */
        while (k + run < n_want && g->want[k + run] == g->want[k] + run)
            run++;
        st = IG_DEV(dev_download)(g->dev, out, g->logits + g->want[k] * nv,
                                  (size_t)(run * nv) * 4);
        out += run * nv;
        k += run;
    }
    return st == IG_OK ? IG_DEV(dev_sync)(g->dev) : st;
}

/* ---- the step ------------------------------------------------------------------------ */

/* The step's shape (backend_check_step) and tables, then its tokens
 * (outside input: IG_E_INPUT). */
static int check_batch(const struct gpu_backend *g, const struct backend_batch *batch)
{
    int st = backend_check_step(&g->base, batch);
    if (st != IG_OK)
        return st;
    for (int64_t i = 0; i < batch->n_seqs; i++)
        if (!batch->seqs[i].table || (g->n_wblocks && !batch->seqs[i].wtable))
            return ig_error(IG_E_INTERNAL, "step sequence %lld has no block table%s",
                            (long long)i, batch->seqs[i].table ? " for its window layers" : "");
    for (int64_t i = 0; i < batch->n_rows; i++)
        if (batch->tokens[i] < 0 || batch->tokens[i] >= g->m->hp.n_vocab)
            return ig_error(IG_E_INPUT, "token id %d is outside the vocabulary (0..%lld)",
                            batch->tokens[i], (long long)g->m->hp.n_vocab - 1);
    return IG_OK;
}

/* A step takes its route by its shape alone: with on_layer (batch --pd's
 * prefill rank) the same as without, so its logits and cache are one
 * process's bit for bit (a decode or verify step then runs ungraphed,
 * run_bucket). */
static int run_step(struct gpu_backend *g, const struct backend_batch *batch)
{
    const int64_t q_len = step_q_len(g, batch);
    return q_len ? decode_step(g, batch, q_len) : prefill_step(g, batch);
}

static int gpu_step(struct backend *b, const struct backend_batch *batch)
{
    struct gpu_backend *g = (struct gpu_backend *)b;
    int st = check_batch(g, batch);
    if (st == IG_OK)
        st = IG_DEV(gpu_kv_p2p_fence)(g);
    if (st != IG_OK)
        return st;
    bool watched = IG_DEV(gpu_kv_p2p_watch)(g);
    st = g->tp ? IG_DEV(gpu_tp_step)(g, batch, run_step) : run_step(g, batch);
    gpu_p2p_wait_end(g->p2p, watched);
    return st;
}

/* ---- state ---------------------------------------------------------------------------- */

static size_t gpu_device_bytes(const struct backend *b)
{
    return ((const struct gpu_backend *)b)->device_bytes;
}

void IG_DEV(gpu_get_info)(const struct backend *b, struct gpu_backend_info *info)
{
    const struct gpu_backend *g = (const struct gpu_backend *)b;
    *info = (struct gpu_backend_info){.kv_bytes = g->kv_bytes, .weight_bytes = g->weight_bytes,
                                      .verify_steps = g->verify_steps,
                                      .mixed_steps = g->mixed_steps,
                                      .moe_mma_layers = g->moe.mma_layers};
    for (int i = 0; i < g->n_buckets; i++)
        info->graphs += g->graphs[i] != NULL;
}

/* The NCCL communicator of batch --pd's cache (collective): the emulated
 * backend's memory is the host's, which only the tests' stand-in takes. */
static int gpu_p2p_open(struct backend *b, struct gpu_p2p **out)
{
    (void)b;
#if defined(IG_EMU_BACKEND)
    return gpu_p2p_nccl_open(true, out);
#else
    return gpu_p2p_nccl_open(false, out);
#endif
}

static const struct backend_ops gpu_ops = {
    .step = gpu_step,
    .kv_export = IG_DEV(gpu_kv_export),
    .kv_import = IG_DEV(gpu_kv_import),
    .device_bytes = gpu_device_bytes,
    .destroy = gpu_destroy,
    .p2p_open = gpu_p2p_open,
    .kv_send_layer = IG_DEV(gpu_kv_send_layer),
    .kv_recv_layer = IG_DEV(gpu_kv_recv_layer),
    .p2p_wait = IG_DEV(gpu_kv_p2p_wait),
    .p2p_progress = IG_DEV(gpu_kv_p2p_progress),
    .kv_send_state = IG_DEV(gpu_kv_send_state),
    .kv_recv_state = IG_DEV(gpu_kv_recv_state),
};
