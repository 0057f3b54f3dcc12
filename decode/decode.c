/* decode/decode.c: the one-token forward against the KV cache.
 *
 * The same transformer block as prefill (ops/layer.c) with a block of one
 * token, and its own attention step: one query per
 * head against every cached position (a local layer's: its window's), one
 * head per work item, keys streamed in chunks with an online softmax. It shares no attention code with
 * prefill/attn_tiled.c, so the prefill-vs-decode test checks one against the
 * other. Sampling and the generation loop are elsewhere in decode/.
 * Covered by tests/cpu/ (numpy reference; prefill vs decode). */
#include "decode/decode.h"

#include "core/half.h"
#include "core/status.h"
#include "ops/layer.h"
#include "ops/simd.h"

#include <math.h>

/* Keys scored per step of the online softmax. */
#define DECODE_KEY_CHUNK 64
_Static_assert(KV_BLOCK % DECODE_KEY_CHUNK == 0, "a key chunk never straddles a cache block");

/* ---- attention of one query over the cache --------------------------------------- */

struct decode_attn_job {
    const struct kv_cache *kv;
    int64_t layer;
    int64_t n_keys;       /* positions k_first .. n_keys - 1 are visible */
    int64_t k_first;      /* 0, or the first key of a sliding window */
    const float *q;       /* [n_head, head_dim] after RoPE */
    float *out;           /* [n_head, head_dim] */
    int64_t group;        /* query heads per KV head */
    float scale;
    float softcap;        /* scores become softcap * tanh(s / softcap); 0 = off */
    struct ops_ctx *ctx;  /* per-thread scratch: o [head_dim] */
};

/* Lanes of a q.k dot product: independent partial sums the compiler can
 * vectorize without reassociating. */
#define DECODE_LANES 8

/* f16 -> f32 is exact either way; through the compiler's _Float16 (where it
 * has one) the AVX2 clone gets vcvtph2ps and vectorizes, where the bit
 * manipulation of ig_f16_to_f32 kept the loop scalar (a fifth of decode). */
static inline float cache_elem(enum kv_dtype dt, const void *base, int64_t i)
{
#if defined(__FLT16_MAX__) && defined(__x86_64__)
    return dt == KV_F32 ? ((const float *)base)[i] : (float)((const _Float16 *)base)[i];
#else
    return dt == KV_F32 ? ((const float *)base)[i] : ig_f16_to_f32(((const ig_f16 *)base)[i]);
#endif
}

/* Eight lanes, loaded unaligned from f32 or f16 cache rows; written with
 * GCC's vector extension because -O2 leaves these loops scalar (their trip
 * counts are not known multiples of 8). The lanes are DECODE_LANES. */
typedef float dec_v8 __attribute__((vector_size(32)));
typedef float dec_v8u __attribute__((vector_size(32), aligned(4)));
_Static_assert(DECODE_LANES == 8, "one vector of lanes");
#if defined(__FLT16_MAX__) && defined(__x86_64__)
typedef _Float16 dec_h8u __attribute__((vector_size(16), aligned(2)));
#define DEC_LOAD8(dt, base, i)                                                                  \
    ((dt) == KV_F32 ? *(const dec_v8u *)(const void *)((const float *)(base) + (i))            \
                    : __builtin_convertvector(                                                   \
                          *(const dec_h8u *)(const void *)((const _Float16 *)(base) + (i)), dec_v8))
#else
#define DEC_LOAD8(dt, base, i)                                                                  \
    ((dec_v8){cache_elem(dt, base, (i) + 0), cache_elem(dt, base, (i) + 1),                     \
              cache_elem(dt, base, (i) + 2), cache_elem(dt, base, (i) + 3),                     \
              cache_elem(dt, base, (i) + 4), cache_elem(dt, base, (i) + 5),                     \
              cache_elem(dt, base, (i) + 6), cache_elem(dt, base, (i) + 7)})
#endif
#define DEC_V8(p) (*(dec_v8u *)(void *)(p))

/* dt is a constant at both call sites, so each instance has straight loops. */
static inline __attribute__((always_inline)) void
decode_attn_head(const struct decode_attn_job *job, int64_t h, float *o, const enum kv_dtype dt)
{
    const struct kv_cache *kv = job->kv;
    int64_t hd = kv->head_dim;
    int64_t kvh = h / job->group;
    void *const *kt = kv_cache_k_table(kv, job->layer);
    void *const *vt = kv_cache_v_table(kv, job->layer);
    const float *q = job->q + h * hd;
    float m = -INFINITY, l = 0.0f;
    for (int64_t d = 0; d < hd; d++)
        o[d] = 0.0f;

    /* Chunks start on a multiple of the chunk (one cache block each); the
     * first one of a window skips the keys before the window's edge. */
    for (int64_t k0 = job->k_first / DECODE_KEY_CHUNK * DECODE_KEY_CHUNK; k0 < job->n_keys;
         k0 += DECODE_KEY_CHUNK) {
        int64_t nc = job->n_keys - k0 < DECODE_KEY_CHUNK ? job->n_keys - k0 : DECODE_KEY_CHUNK;
        int64_t c0 = job->k_first > k0 ? job->k_first - k0 : 0;
        float s[DECODE_KEY_CHUNK];
        /* The chunk lies inside one cache block: its rows are contiguous. */
        const void *kb = kv_cache_rows(kv, kt, kvh, k0), *vb = kv_cache_rows(kv, vt, kvh, k0);
        float mx = m;
        for (int64_t c = c0; c < nc; c++) {
            int64_t off = c * hd;
            dec_v8 lanes = {0};
            int64_t d = 0;
            for (; d + DECODE_LANES <= hd; d += DECODE_LANES)
                lanes += DEC_V8(q + d) * DEC_LOAD8(dt, kb, off + d);
            float dot = 0.0f;
            for (int j = 0; j < DECODE_LANES; j++)
                dot += lanes[j];
            for (; d < hd; d++)
                dot += q[d] * cache_elem(dt, kb, off + d);
            s[c] = dot * job->scale;
            if (job->softcap > 0)
                s[c] = job->softcap * tanhf(s[c] / job->softcap);
            mx = s[c] > mx ? s[c] : mx;
        }
        float corr = expf(m - mx);
        l *= corr;
        int64_t dv = hd / DECODE_LANES * DECODE_LANES;
        for (int64_t d = 0; d < dv; d += DECODE_LANES)
            DEC_V8(o + d) = DEC_V8(o + d) * corr;
        for (int64_t d = dv; d < hd; d++)
            o[d] *= corr;
        for (int64_t c = c0; c < nc; c++) {
            float pc = expf(s[c] - mx);
            l += pc;
            int64_t off = c * hd;
            for (int64_t d = 0; d < dv; d += DECODE_LANES)
                DEC_V8(o + d) = DEC_V8(o + d) + pc * DEC_LOAD8(dt, vb, off + d);
            for (int64_t d = dv; d < hd; d++)
                o[d] += pc * cache_elem(dt, vb, off + d);
        }
        m = mx;
    }
    float *out = job->out + h * hd;
    for (int64_t d = 0; d < hd; d++)
        out[d] = o[d] / l;
}

OPS_SIMD_CLONES
static void decode_attn_head_f32(const struct decode_attn_job *job, int64_t h, float *o)
{
    decode_attn_head(job, h, o, KV_F32);
}

OPS_SIMD_CLONES
static void decode_attn_head_f16(const struct decode_attn_job *job, int64_t h, float *o)
{
    decode_attn_head(job, h, o, KV_F16);
}

static void decode_attn_task(void *arg, int64_t h0, int64_t h1, int thread)
{
    const struct decode_attn_job *job = arg;
    float *o = ops_ctx_scratch(job->ctx, thread);
    for (int64_t h = h0; h < h1; h++) {
        if (job->kv->dtype == KV_F32)
            decode_attn_head_f32(job, h, o);
        else
            decode_attn_head_f16(job, h, o);
    }
}

/* ---- the forward --------------------------------------------------------------- */

/* Decode's attention step (ops_attention_fn): one query per head against
 * every cached position, one head per work item. */
static void decode_attention(struct ops_ctx *ctx, struct kv_cache *kv, int64_t il, int64_t n,
                             int64_t pos)
{
    const struct model_hparams *hp = &ops_ctx_model(ctx)->hp;
    struct ops_buffers *b = ops_ctx_buffers(ctx);
    IG_ASSERT(n == 1);
    int64_t window = ops_ctx_model(ctx)->layers[il].window;
    struct decode_attn_job job = {
        .kv = kv, .layer = il, .n_keys = pos + 1, .q = b->q, .out = b->att,
        .k_first = window > 0 && pos + 1 > window ? pos + 1 - window : 0,
        .group = hp->n_head / hp->n_head_kv,
        .scale = (float)hp->attn_scale, .softcap = (float)hp->attn_softcap, .ctx = ctx,
    };
    ops_pool_run(ops_ctx_pool(ctx), hp->n_head, 1, decode_attn_task, &job);
}

int decode_forward(struct ops_ctx *ctx, struct kv_cache *kv, int32_t token, int64_t pos,
                   float *logits)
{
    const struct model *m = ops_ctx_model(ctx);
    const struct model_hparams *hp = &m->hp;
    struct ops_buffers *b = ops_ctx_buffers(ctx);

    if (pos != kv->n_pos)
        return ig_error(IG_E_INTERNAL, "decode at position %lld but the cache holds %lld",
                        (long long)pos, (long long)kv->n_pos);
    if (pos >= kv->n_ctx)
        return ig_error(IG_E_INPUT, "the context of %lld positions is full",
                        (long long)kv->n_ctx);
    int st = kv_cache_reserve(kv, pos + 1);
    if (st != IG_OK)
        return st;
    if ((st = ops_embed(m, &token, 1, b->x)) != IG_OK) /* [n_embd] */
        return st;

    ops_rope_prepare(ctx, pos, 1);
    for (int64_t il = 0; il < hp->n_layer; il++)
        ops_layer_forward(ctx, kv, il, 1, pos, decode_attention);
    kv->n_pos = pos + 1;

    ops_output_head(ctx, b->x, logits);
    return IG_OK;
}
