/* backend/gpu_deltanet.c: the CUDA backend's side of Qwen3.5's hybrid
 * layers (backend/cpu_deltanet.c and cpu_attention.c state every rule):
 *
 * - the gated DeltaNet mixer's work between its input norm and ssm_out
 *   (gpu_forward.c calls it and does those two): the q|k|v, z, beta and
 *   alpha products of the normed rows, then the convolution with each
 *   sequence's conv state, the L2 norms and gates, the delta rule on each
 *   sequence's state (ops/gpu_deltanet.h: the chunked form for a prompt's
 *   rows, and another sequence's of GK_DN_CHUNK_MIN rows or more, the
 *   recurrent form for the others and every decode row; IGNITE_DELTANET=recurrent runs every row
 *   in the recurrent form, as on the CPU; a prompt cut inside a chunk
 *   keeps the pool's one checkpoint (backend_step's plan says whose),
 *   gk_dn_ckpt after the rule, and its next step runs that chunk again
 *   whole from it, as backend/cpu_deltanet.c's),
 *   the gated
 *   norm into f16 rows for ssm_out. A sequence's state lives in the
 *   layer's state array in its slot, the checkpoint beside the array
 *   (gpu.c allocates them; gpu_cache.c moves the state to and from
 *   the host), in
 *   kvcache's layout, so a saved cache is the CPU backend's;
 * - gated attention's Q projection: the fused Q|K|V product into a raw
 *   buffer, split into the queries, K and V that the RoPE kernel reads and
 *   each head's output gate (applied to the attention's output before wo).
 *
 * The step's sequences (row range, position, slot) go to device memory
 * each step (gpu_deltanet_stage): a decode graph replays with any batch of
 * its bucket. Compiled twice like gpu.c. Covered by
 * tests/emu/test_deltanet_emu.c. */
#include "backend/gpu_impl.h"

#include "core/status.h"
#include "ops/gpu_deltanet.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(GK_DN_CHUNK == BACKEND_STATE_CHUNK, "the engine cuts prompts on the kernel's chunks");
_Static_assert(GK_DN_CHUNK == KV_DELTANET_CHUNK && GK_DN_CKPT_HEAD * 4 == KV_STATE_ALIGN &&
                   sizeof(struct kv_ckpt_head) == KV_STATE_ALIGN,
               "the kernels' checkpoint is kvcache's (kv_deltanet_ckpt_bytes, kv_ckpt_head)");

static bool has_deltanet(const struct model *m)
{
    for (int64_t l = 0; l < m->hp.n_layer; l++)
        if (m->layers[l].mixer == LAYER_MIXER_DELTANET)
            return true;
    return false;
}

static bool has_gated_attention(const struct model *m)
{
    for (int64_t l = 0; l < m->hp.n_layer; l++)
        if (m->layers[l].mixer == LAYER_MIXER_ATTENTION && m->layers[l].attn_gate)
            return true;
    return false;
}

int IG_DEV(gpu_deltanet_alloc)(struct gpu_backend *g)
{
    struct model_layer_max mx;
    model_layers_max(g->m, &mx);
    size_t B = (size_t)g->max_batch, C = (size_t)mx.dn_conv_dim, vd = (size_t)mx.dn_v_dim,
           hv = (size_t)mx.dn_v_heads, seqs = (size_t)g->max_seqs * sizeof(struct gk_dn_seq);
    const char *form = getenv("IGNITE_DELTANET");
    int st = IG_OK;
    g->dn_recurrent = form && !strcmp(form, "recurrent");
    for (int64_t l = 0; l < g->m->hp.n_layer; l++)
        g->dn_ckpt |= !g->dn_recurrent && g->base.kv_mem->layers[l].ckpt_bytes > 0;
    if (has_deltanet(g->m) &&
        ((st = IG_DEV(gpu_alloc)(g, B * C * 4, &g->dn_qkv, NULL)) ||
         (st = IG_DEV(gpu_alloc)(g, B * vd * 4, &g->dn_z, NULL)) ||
         (st = IG_DEV(gpu_alloc)(g, B * hv * 4, &g->dn_beta, NULL)) ||
         (st = IG_DEV(gpu_alloc)(g, B * hv * 4, &g->dn_alpha, NULL)) ||
         (st = IG_DEV(gpu_alloc)(g, B * vd * 4, &g->dn_out, NULL)) ||
         (st = IG_DEV(gpu_alloc)(g, B * vd * 2, &g->dn_out16, NULL)) ||
         (st = IG_DEV(gpu_alloc)(g, seqs, &g->dn_seqs, NULL)) ||
         (st = IG_DEV(dev_alloc_host)(g->dev, seqs, (void **)&g->h_dn_seqs))))
        return st;
    if (has_gated_attention(g->m) &&
        ((st = IG_DEV(gpu_alloc)(g, B * (size_t)(mx.q_rows + 2 * mx.kv_dim) * 4, &g->gate_raw,
                                 NULL)) ||
         (st = IG_DEV(gpu_alloc)(g, B * (size_t)mx.q_dim * 4, &g->gate, NULL))))
        return st;
    return st;
}

double IG_DEV(gpu_deltanet_act_bytes)(const struct model *m, int64_t max_batch, int64_t max_seqs)
{
    struct model_layer_max mx;
    model_layers_max(m, &mx);
    double B = (double)max_batch, bytes = 0;
    if (has_deltanet(m))
        bytes += B * (4.0 * mx.dn_conv_dim + 10.0 * mx.dn_v_dim + 8.0 * mx.dn_v_heads) +
                 2.0 * (double)max_seqs * sizeof(struct gk_dn_seq);
    if (has_gated_attention(m))
        bytes += B * 4.0 * (double)(mx.q_rows + 2 * mx.kv_dim + mx.q_dim);
    return bytes;
}

int IG_DEV(gpu_deltanet_stage)(struct gpu_backend *g, const struct backend_batch *batch,
                               int64_t rows)
{
    if (!g->dn_seqs)
        return IG_OK;
    g->dn_chunk_rows = 0;
    for (int64_t i = 0; i < rows; i++) {
        const struct backend_seq *s = i < batch->n_seqs ? &batch->seqs[i] : NULL;
        bool chunked = s && !g->dn_recurrent && (s->prompt || s->n_rows >= GK_DN_CHUNK_MIN);
        if (chunked)
            g->dn_chunk_rows += s->n_rows;
        /* the pool's checkpoint: the step's holder continues it, its taker
         * keeps it (backend_step's plan); no other sequence touches it */
        int32_t ck = !chunked || !s->prompt || !g->dn_ckpt ? 0
                     : (s->slot == g->base.ckpt.read ? GK_DN_CKPT_READ : 0) |
                           (s->slot == g->base.ckpt.take ? GK_DN_CKPT_KEEP : 0);
        g->h_dn_seqs[i] = s ? (struct gk_dn_seq){(int32_t)s->row0, (int32_t)s->n_rows,
                                                 (int32_t)s->pos0, s->slot, chunked, ck}
                            : (struct gk_dn_seq){(int32_t)i, 0, -1, 0, 0, 0}; /* padding */
    }
    return IG_DEV(dev_upload_async)(g->dev, g->dn_seqs, g->h_dn_seqs,
                                    (size_t)rows * sizeof *g->h_dn_seqs);
}

int IG_DEV(gpu_deltanet_mix)(struct gpu_backend *g, int64_t l, int64_t n, int64_t n_seqs)
{
    const struct model_layer *ML = &g->m->layers[l];
    const struct gpu_layer *L = &g->layers[l];
    int64_t e = g->m->hp.n_embd;
    struct gk_dn_shape s = {
        .Hk = ML->dn_k_heads, .Hv = ML->dn_v_heads, .D = ML->dn_head_dim, .K = ML->dn_conv,
        .grouped = ML->dn_grouped, .state = (float *)(void *)L->state,
        .state_floats = (int64_t)(g->base.kv_mem->layers[l].state_bytes / sizeof(float)),
        /* rule and chunk kernels split the sequences by rows on the device,
         * the same for any batch a captured graph replays with */
        .split = g->dn_chunk_rows > 0,
        .ckpt = g->dn_ckpt ? (float *)(void *)L->ckpt : NULL,
        .ckpt_floats = (int64_t)(g->base.kv_mem->layers[l].ckpt_bytes / sizeof(float)),
    };
    s.C = (2 * s.Hk + s.Hv) * s.D;
    int64_t vd = s.Hv * s.D;
    void *q = g->stream;
    int st;
    if ((st = IG_DEV(gpu_matmul)(g, &L->mat[LAYER_DN_QKV], g->xn, e, n, g->dn_qkv, s.C, 0.0f)) ||
        (st = IG_DEV(gpu_matmul)(g, &L->mat[LAYER_DN_Z], g->xn, e, n, g->dn_z, vd, 0.0f)) ||
        (st = IG_DEV(gpu_matmul)(g, &L->mat[LAYER_DN_BETA], g->xn, e, n, g->dn_beta, s.Hv,
                                 0.0f)) ||
        (st = IG_DEV(gpu_matmul)(g, &L->mat[LAYER_DN_ALPHA], g->xn, e, n, g->dn_alpha, s.Hv,
                                 0.0f)) ||
        (st = IG_DEV(gk_dn_conv)(&s, g->dn_qkv, L->vec[LAYER_DN_CONV], g->dn_seqs, n_seqs, q)) ||
        (st = IG_DEV(gk_dn_gates)(&s, g->dn_qkv, g->dn_beta, g->dn_alpha, L->vec[LAYER_DN_DT],
                                  L->vec[LAYER_DN_A], n, q)) ||
        (st = IG_DEV(gk_dn_rule)(&s, g->dn_qkv, g->dn_beta, g->dn_alpha, g->dn_out, g->dn_seqs,
                                 n_seqs, q)) ||
        (g->dn_chunk_rows &&
         (st = IG_DEV(gk_dn_chunk)(&s, g->dn_qkv, g->dn_beta, g->dn_alpha, g->dn_out,
                                   g->dn_seqs, n_seqs, q))) ||
        /* a step of prompt rows: their checkpoints after the rule read them */
        (g->dn_chunk_rows && s.ckpt &&
         (st = IG_DEV(gk_dn_ckpt)(&s, g->dn_qkv, g->dn_beta, g->dn_alpha, g->dn_seqs, n_seqs,
                                  q))))
        return st;
    g->base.dn_chunked_rows += g->dn_chunk_rows;
    return IG_DEV(gk_dn_norm)(&s, g->dn_out, g->dn_z, L->vec[LAYER_DN_NORM],
                              (float)g->m->hp.norm_eps, n, g->dn_out16, q);
}

int IG_DEV(gpu_gated_qkv)(struct gpu_backend *g, int64_t l, int64_t n)
{
    const struct model_layer *ML = &g->m->layers[l];
    const struct gpu_matrix *w = &g->layers[l].mat[LAYER_WQ]; /* [Q|gate per head]|K|V */
    int st = IG_DEV(gpu_matmul)(g, w, g->xn, g->m->hp.n_embd, n, g->gate_raw, w->rows, 0.0f);
    return st != IG_OK ? st
                       : IG_DEV(gk_gate_split)(g->gate_raw, n, ML->n_head, ML->n_head_kv,
                                               ML->head_dim, g->qkv, g->gate, g->stream);
}
