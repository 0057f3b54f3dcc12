/* tests/emu/test_gpu_ops_emu.c: the element-wise and weight kernels of
 * ops/gpu_ops.h (ops/gpu_elementwise.cu, ops/gpu_weights.cu) run by the CPU
 * emulator against their CPU twins (ops/gpu_ops_ref.c), and the twins against
 * independent computations (double-precision formulas, quant_dequantize_row).
 *
 * Ragged sizes (rows not multiples of a vector or a block; 1, 7 and 33
 * tokens), both RoPE styles, n_rot < head_dim, bias or none, K/V to buffers or
 * straight into a KV pool through per-row block tables (rows of up to 3
 * sequences, shuffled block ids, a padding row whose pool rows must stay as
 * they were), every dequantized type with padded rows and an
 * unaligned destination. Outputs are poisoned (NaN) and framed by guard
 * elements: every element must be written, nothing outside. Bit equality
 * where the kernel and twin do the same operations in the same order;
 * RMSNorm sums in another order (1 f16 ulp). Qwen 3 / Gemma 3's kernels
 * (ops/gpu_arch.cu: head norms at head_dim 64/128/256, post norms into the
 * residual, scale, soft-cap), GeGLU, RoPE with YaRN's cos/sin factor: bit
 * for bit their twins, the twins against double. Under IGNITE_PDL=1 (a
 * programmatic dependent launch, test_pdl) the embedding, RMSNorm (with and
 * without int8 blocks), RoPE into the pool, SwiGLU, the ops/gpu_arch.cu
 * kernels, the greedy kernel and ops/gpu_kvq.cu's pool write and rotation
 * keep the plain launch's bits with their inputs hidden until their wait
 * (tests/emu/pdl_hide.h). Label emu. */
#include "ops/gpu_ops.h"
#include "ops/gpu_kvq.h"
#include "kvcache/kv_devq.h"
#include "decode/greedy.h"

#include "core/half.h"
#include "core/status.h"
#include "models/model.h"
#include "models/quant.h"
#include "tests/emu/pdl_hide.h"
#include "tests/test.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 16 /* elements before and after every output (keeps 16-byte alignment) */
#define POISON 0xff
#define GUARD_BYTE 0xa5

/* An output of `bytes` bytes inside a poisoned block framed by guards. */
struct out_buf {
    unsigned char *base;
    size_t bytes, guard;
};

static void *out_init(struct out_buf *o, size_t bytes, size_t elem)
{
    o->guard = GUARD * elem;
    o->bytes = bytes;
    size_t total = (2 * o->guard + bytes + 63) / 64 * 64;
    o->base = aligned_alloc(64, total);
    memset(o->base, GUARD_BYTE, total);
    memset(o->base + o->guard, POISON, bytes);
    return o->base + o->guard;
}

/* Whether the guards are intact; frees the buffer. */
static int out_guards_ok(struct out_buf *o)
{
    int ok = 1;
    for (size_t i = 0; i < o->guard; i++)
        ok &= o->base[i] == GUARD_BYTE && o->base[o->guard + o->bytes + i] == GUARD_BYTE;
    free(o->base);
    return ok;
}

/* Distance in f16 ulps between two finite f16 values (sign-magnitude order). */
static int f16_ulps(uint16_t a, uint16_t b)
{
    int ka = a & 0x8000 ? -(int)(a & 0x7fff) : (int)(a & 0x7fff);
    int kb = b & 0x8000 ? -(int)(b & 0x7fff) : (int)(b & 0x7fff);
    return abs(ka - kb);
}

/* Largest ulp distance over n elements; -1 if either side has a NaN. */
static int max_ulps(const uint16_t *a, const uint16_t *b, int64_t n)
{
    int m = 0;
    for (int64_t i = 0; i < n; i++) {
        if ((a[i] & 0x7c00) == 0x7c00 && (a[i] & 0x3ff))
            return -1;
        if ((b[i] & 0x7c00) == 0x7c00 && (b[i] & 0x3ff))
            return -1;
        int u = f16_ulps(a[i], b[i]);
        m = u > m ? u : m;
    }
    return m;
}

static float *rand_floats(uint64_t *st, int64_t n, float lo, float hi)
{
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float) + 64);
    for (int64_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * (0.5f * test_rand_f(st) + 0.5f);
    return x;
}

static const int64_t k_ns[] = {1, 7, 33};

/* ---- embed ------------------------------------------------------------------ */

static void test_embed(uint64_t *st)
{
    const int64_t dims[] = {576, 64 * 3, 100, 7}, n_vocab = 50;
    for (size_t di = 0; di < 4; di++)
        for (size_t ni = 0; ni < 3; ni++) {
            int64_t d = dims[di], n = k_ns[ni];
            uint16_t *table = aligned_alloc(64, (size_t)(n_vocab * d * 2 + 63) / 64 * 64);
            for (int64_t i = 0; i < n_vocab * d; i++)
                table[i] = ig_f32_to_f16(4.0f * test_rand_f(st));
            int32_t tok[33];
            for (int64_t t = 0; t < n; t++)
                tok[t] = (int32_t)(test_rand_u64(st) % n_vocab);
            struct out_buf ob;
            float *x = out_init(&ob, (size_t)(n * d) * 4, 4);
            float *ref = malloc((size_t)(n * d) * 4);
            gk_embed_ref(table, tok, n, d, 0, n_vocab, ref);
            int rc = IG_DEV(gk_embed)(table, tok, n, d, 0, n_vocab, x, NULL);
            CHECKF(rc == 0, "embed d %lld n %lld: rc %d", (long long)d, (long long)n, rc);
            CHECKF(memcmp(x, ref, (size_t)(n * d) * 4) == 0, "embed d %lld n %lld: differs",
                   (long long)d, (long long)n);
            int ok = 1; /* the twin: the table row, exactly */
            for (int64_t t = 0; t < n; t++)
                for (int64_t i = 0; i < d; i++)
                    ok &= ref[t * d + i] == ig_f16_to_f32(table[tok[t] * d + i]);
            CHECK(ok);
            /* a tensor-parallel rank's part: rows [v0, v0 + n_v) of the
             * table, zeros for the other tokens (x holds the whole rows) */
            const int64_t v0 = 7, n_v = 30;
            gk_embed_ref(table + v0 * d, tok, n, d, v0, n_v, ref);
            rc = IG_DEV(gk_embed)(table + v0 * d, tok, n, d, v0, n_v, x, NULL);
            CHECKF(rc == 0 && memcmp(x, ref, (size_t)(n * d) * 4) == 0,
                   "embed d %lld n %lld, rows %lld + %lld: differs", (long long)d, (long long)n,
                   (long long)v0, (long long)n_v);
            for (int64_t t = 0; t < n; t++) {
                bool mine = tok[t] >= v0 && tok[t] < v0 + n_v;
                for (int64_t i = 0; i < d; i++)
                    ok &= ref[t * d + i] == (mine ? ig_f16_to_f32(table[tok[t] * d + i]) : 0.0f);
            }
            CHECK(ok);
            CHECKF(out_guards_ok(&ob), "embed d %lld n %lld: guards", (long long)d,
                   (long long)n);
            free(table);
            free(ref);
        }
}

/* ---- rmsnorm ---------------------------------------------------------------- */

static void test_rmsnorm(uint64_t *st)
{
    const int64_t dims[] = {576, 64 * 3, 70, 7};
    const int64_t pads[] = {0, 4, 3};
    for (size_t di = 0; di < 4; di++)
        for (size_t ni = 0; ni < 3; ni++) {
            int64_t d = dims[di], n = k_ns[ni], ld = d + pads[(di + ni) % 3];
            float *x = rand_floats(st, n * ld, -3.0f, 3.0f);
            float *w = rand_floats(st, d, 0.5f, 1.5f);
            const float eps = 1e-5f;
            struct out_buf ob;
            uint16_t *y = out_init(&ob, (size_t)(n * d) * 2, 2);
            uint16_t *ref = malloc((size_t)(n * d) * 2), *dbl = malloc((size_t)(n * d) * 2);
            gk_rmsnorm_ref(x, ld, w, n, d, eps, ref);
            int rc = IG_DEV(gk_rmsnorm)(x, ld, w, n, d, eps, y, NULL);
            CHECKF(rc == 0, "rmsnorm: rc %d", rc);
            for (int64_t t = 0; t < n; t++) { /* the formula in double */
                double ss = 0;
                for (int64_t i = 0; i < d; i++)
                    ss += (double)x[t * ld + i] * x[t * ld + i];
                double r = 1.0 / sqrt(ss / (double)d + eps);
                for (int64_t i = 0; i < d; i++)
                    dbl[t * d + i] = ig_f32_to_f16((float)(x[t * ld + i] * r * w[i]));
            }
            int ue = max_ulps(y, ref, n * d), ud = max_ulps(ref, dbl, n * d);
            CHECKF(ue >= 0 && ue <= 1, "rmsnorm d %lld ld %lld n %lld: emu vs ref %d ulps",
                   (long long)d, (long long)ld, (long long)n, ue);
            CHECKF(ud >= 0 && ud <= 1, "rmsnorm d %lld n %lld: ref vs double %d ulps",
                   (long long)d, (long long)n, ud);
            CHECKF(out_guards_ok(&ob), "rmsnorm d %lld n %lld: guards", (long long)d,
                   (long long)n);
            free(x);
            free(w);
            free(ref);
            free(dbl);
        }
}

/* ---- qkv + rope ------------------------------------------------------------- */

struct rope_shape {
    int64_t n_head, n_head_kv, head_dim, n_rot;
};

/* One head row in double, the independent check of the twin: the f16 of the
 * exact rotation must be within 1 ulp plus the f32 cancellation error. */
static int rope_row_ok(const float *in, const float *bias, const double *inv_freq,
                       double pos, int64_t hd, int64_t n_rot, int style, int rotate,
                       double ms, const uint16_t *got)
{
    int64_t half = n_rot / 2;
    for (int64_t d = 0; d < hd; d++) {
        double v = in[d] + (bias ? bias[d] : 0.0f), bound = 0;
        if (rotate && d < n_rot) {
            int64_t i = style == ROPE_ADJACENT ? d / 2 : d % half;
            int64_t d0 = style == ROPE_ADJACENT ? 2 * i : i;
            int64_t d1 = style == ROPE_ADJACENT ? d0 + 1 : d0 + half;
            double a = (double)(in[d0] + (bias ? bias[d0] : 0.0f));
            double b = (double)(in[d1] + (bias ? bias[d1] : 0.0f));
            double th = pos * inv_freq[i];
            v = ms * (d == d0 ? a * cos(th) - b * sin(th) : a * sin(th) + b * cos(th));
            bound = 4e-7 * ms * (fabs(a) + fabs(b));
        }
        double g = ig_f16_to_f32(got[d]);
        double ulp = ldexp(1.0, (int)floor(log2(fmax(fabs(v), 6.1e-5))) - 10);
        if (fabs(g - v) > ulp + bound)
            return 0;
    }
    return 1;
}

/* Rows of a qkv case: row t's position (-1: padding) and, in cache mode,
 * its sequence's block table. Rows go round-robin to n_seq sequences; a
 * sequence's rows are consecutive positions from its own start; every
 * sequence owns table_stride blocks of the pool, shuffled ids (none shared,
 * some of the pool in no table). Row 2 of a block of 7 or more is padding. */
struct qkv_rows {
    int32_t pos[33];
    int32_t *tables;        /* [n][table_stride] */
    int64_t table_stride, n_blocks;
};

static void qkv_rows_make(uint64_t *st, int64_t n, int cache, int case_no, struct qkv_rows *r)
{
    const int64_t n_seq = n < 3 ? n : 3;
    r->table_stride = cache ? 24 : 0; /* positions < 1536 in the pool */
    r->n_blocks = n_seq * r->table_stride + 5;
    int32_t ids[3 * 24 + 5], start[3];
    for (int64_t i = 0; i < r->n_blocks; i++)
        ids[i] = (int32_t)i;
    for (int64_t i = r->n_blocks - 1; i > 0; i--) { /* Fisher-Yates */
        int64_t j = (int64_t)(test_rand_u64(st) % (uint64_t)(i + 1));
        int32_t x = ids[i];
        ids[i] = ids[j], ids[j] = x;
    }
    /* Block mode reaches far positions (angles); the pool, every block. */
    const int64_t span = cache ? r->table_stride * 64 - 12 : 3000;
    for (int64_t s = 0; s < n_seq; s++)
        start[s] = (int32_t)((case_no * 97 + s * 331 + (int64_t)(test_rand_u64(st) % 64)) % span);
    r->tables = cache ? malloc((size_t)(n * r->table_stride) * sizeof *r->tables) : NULL;
    for (int64_t t = 0; t < n; t++) {
        const int64_t s = t % n_seq;
        r->pos[t] = n >= 7 && t == 2 ? -1 : start[s] + (int32_t)(t / n_seq);
        for (int64_t i = 0; i < r->table_stride; i++)
            r->tables[t * r->table_stride + i] = ids[s * r->table_stride + i];
    }
}

static void test_qkv_rope(uint64_t *st)
{
    const struct rope_shape shapes[] = {{3, 1, 64, 64}, {4, 2, 64, 32}, {2, 2, 128, 128},
                                        {2, 1, 32, 12}};
    int case_no = 0;
    for (size_t si = 0; si < 4; si++)
        for (int style = ROPE_ADJACENT; style <= ROPE_HALF_SPLIT; style++)
            for (int with_bias = 0; with_bias < 2; with_bias++)
                for (int to_cache = 0; to_cache < 2; to_cache++) {
                    const struct rope_shape *s = &shapes[si];
                    int64_t n = k_ns[case_no++ % 3], hd = s->head_dim;
                    struct qkv_rows rows;
                    qkv_rows_make(st, n, to_cache, case_no, &rows);
                    int64_t n_heads = s->n_head + 2 * s->n_head_kv, w = n_heads * hd;
                    float *qkv = rand_floats(st, n * w, -2.0f, 2.0f);
                    float *bias = with_bias ? rand_floats(st, w, -0.5f, 0.5f) : NULL;
                    double inv_freq[64];
                    for (int64_t i = 0; i < s->n_rot / 2; i++)
                        inv_freq[i] = pow(10000.0, -2.0 * (double)i / (double)s->n_rot);
                    int64_t qn = n * s->n_head * hd, kn = n * s->n_head_kv * hd;
                    /* the pool, kvcache.h's layout */
                    const int64_t head_stride = 64 * hd, block_stride = s->n_head_kv * head_stride;
                    int64_t cn = rows.n_blocks * block_stride;
                    /* YaRN's cos/sin factor on some cases (0: the default 1) */
                    double ms = case_no % 4 == 1 ? 1.0 + 0.1 * log(8.0) : 0.0;
                    struct gk_qkv_params p = {
                        .qkv = qkv, .bias = bias, .inv_freq = inv_freq, .pos = rows.pos, .n = n,
                        .n_head = s->n_head, .n_head_kv = s->n_head_kv, .head_dim = hd,
                        .n_rot = s->n_rot, .rope_style = style, .block_table = rows.tables,
                        .table_stride = rows.table_stride, .block_stride = block_stride,
                        .head_stride = head_stride, .mscale = ms};
                    /* The twin writes into plain buffers, the kernel into guarded ones. */
                    struct gk_qkv_params r = p;
                    struct out_buf oq, ok_, ov;
                    r.q = malloc((size_t)qn * 2);
                    p.q = out_init(&oq, (size_t)qn * 2, 2);
                    uint16_t *cache0 = malloc((size_t)(cn ? cn : 1) * 2);
                    for (int64_t i = 0; i < cn; i++)
                        cache0[i] = (uint16_t)(test_rand_u64(st) & 0x7bff);
                    int64_t on = to_cache ? cn : kn;
                    if (to_cache) {
                        r.k_cache = malloc((size_t)cn * 2), r.v_cache = malloc((size_t)cn * 2);
                        memcpy(r.k_cache, cache0, (size_t)cn * 2);
                        memcpy(r.v_cache, cache0, (size_t)cn * 2);
                        p.k_cache = out_init(&ok_, (size_t)cn * 2, 2);
                        p.v_cache = out_init(&ov, (size_t)cn * 2, 2);
                        memcpy(p.k_cache, cache0, (size_t)cn * 2);
                        memcpy(p.v_cache, cache0, (size_t)cn * 2);
                    } else {
                        r.k = malloc((size_t)kn * 2), r.v = malloc((size_t)kn * 2);
                        p.k = out_init(&ok_, (size_t)kn * 2, 2);
                        p.v = out_init(&ov, (size_t)kn * 2, 2);
                    }
                    uint16_t *pk = to_cache ? p.k_cache : p.k, *pv = to_cache ? p.v_cache : p.v;
                    uint16_t *rk = to_cache ? r.k_cache : r.k, *rv = to_cache ? r.v_cache : r.v;
                    gk_qkv_rope_ref(&r);
                    int rc = IG_DEV(gk_qkv_rope)(&p, NULL);
                    char name[160];
                    snprintf(name, sizeof name, "qkv h %lld/%lld hd %lld rot %lld style %d "
                             "bias %d cache %d n %lld pos %d", (long long)s->n_head,
                             (long long)s->n_head_kv, (long long)hd, (long long)s->n_rot, style,
                             with_bias, to_cache, (long long)n, rows.pos[0]);
                    CHECKF(rc == 0, "%s: rc %d", name, rc);
                    CHECKF(max_ulps(p.q, r.q, qn) == 0, "%s: q differs (%d ulps)", name,
                           max_ulps(p.q, r.q, qn));
                    CHECKF(max_ulps(pk, rk, on) == 0, "%s: k differs (%d ulps)", name,
                           max_ulps(pk, rk, on));
                    CHECKF(max_ulps(pv, rv, on) == 0, "%s: v differs (%d ulps)", name,
                           max_ulps(pv, rv, on));
                    /* Where each row's K/V row lives, worked out here: in the
                     * pool through the row's table (kvcache.h's formula), or
                     * the block's buffers. */
                    uint16_t **kv_at = calloc((size_t)(2 * n * s->n_head_kv), sizeof *kv_at);
                    unsigned char *hit = calloc((size_t)(cn ? cn : 1), 1);
                    for (int64_t t = 0; t < n; t++)
                        for (int64_t kh = 0; kh < s->n_head_kv; kh++) {
                            int64_t off = (t * s->n_head_kv + kh) * hd;
                            if (to_cache) {
                                if (rows.pos[t] < 0)
                                    continue;
                                const int32_t *tb = rows.tables + t * rows.table_stride;
                                off = tb[rows.pos[t] / 64] * block_stride + kh * head_stride +
                                      rows.pos[t] % 64 * hd;
                                memset(hit + off, 1, (size_t)hd);
                            }
                            kv_at[2 * (t * s->n_head_kv + kh)] = rk + off;
                            kv_at[2 * (t * s->n_head_kv + kh) + 1] = rv + off;
                        }
                    if (to_cache) { /* every other row of the pool untouched, padding's too */
                        int same = 1;
                        for (int64_t i = 0; i < cn; i++)
                            same &= hit[i] || (pk[i] == cache0[i] && pv[i] == cache0[i]);
                        CHECKF(same, "%s: pool rows outside the rows' own changed", name);
                    }
                    /* The twin against the rotation in double; padding rows zero. */
                    int good = 1;
                    for (int64_t t = 0; t < n; t++)
                        for (int64_t h = 0; h < n_heads; h++) {
                            const uint16_t *got;
                            if (h < s->n_head) {
                                got = r.q + (t * s->n_head + h) * hd;
                            } else {
                                int is_k = h < s->n_head + s->n_head_kv;
                                int64_t kh = is_k ? h - s->n_head : h - s->n_head - s->n_head_kv;
                                got = kv_at[2 * (t * s->n_head_kv + kh) + !is_k];
                            }
                            if (rows.pos[t] < 0) {
                                for (int64_t d = 0; got && d < hd; d++)
                                    good &= got[d] == 0;
                                continue;
                            }
                            good &= rope_row_ok(qkv + (t * n_heads + h) * hd,
                                                bias ? bias + h * hd : NULL, inv_freq,
                                                (double)rows.pos[t], hd, s->n_rot, style,
                                                h < s->n_head + s->n_head_kv, ms ? ms : 1.0,
                                                got);
                        }
                    CHECKF(good, "%s: twin vs double rotation (padding rows zero)", name);
                    CHECKF(out_guards_ok(&oq) && out_guards_ok(&ok_) && out_guards_ok(&ov),
                           "%s: guards", name);
                    free(kv_at);
                    free(hit);
                    free(rows.tables);
                    free(qkv);
                    free(bias);
                    free(cache0);
                    free(r.q);
                    free(rk);
                    free(rv);
                }
}

/* ---- swiglu ----------------------------------------------------------------- */

static void test_glu(uint64_t *st, bool gelu)
{
    const char *what = gelu ? "geglu" : "swiglu";
    const int64_t dims[] = {576, 64 * 3, 100, 7};
    for (size_t di = 0; di < 4; di++)
        for (size_t ni = 0; ni < 3; ni++) {
            int64_t f = dims[di], n = k_ns[ni];
            float *gu = rand_floats(st, n * 2 * f, -8.0f, 8.0f);
            struct out_buf ob;
            uint16_t *h = out_init(&ob, (size_t)(n * f) * 2, 2);
            uint16_t *ref = malloc((size_t)(n * f) * 2), *dbl = malloc((size_t)(n * f) * 2);
            int rc;
            if (gelu) {
                gk_geglu_ref(gu, n, f, ref);
                rc = IG_DEV(gk_geglu)(gu, n, f, h, NULL);
            } else {
                gk_swiglu_ref(gu, n, f, ref);
                rc = IG_DEV(gk_swiglu)(gu, n, f, h, NULL);
            }
            CHECKF(rc == 0, "%s: rc %d", what, rc);
            for (int64_t t = 0; t < n; t++)
                for (int64_t i = 0; i < f; i++) {
                    double g = gu[t * 2 * f + i], u = gu[t * 2 * f + f + i];
                    /* GELU's tanh form as published: 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) */
                    double a = gelu ? 0.5 * g * (1.0 + tanh(sqrt(2.0 / M_PI) *
                                                            (g + 0.044715 * g * g * g)))
                                    : g / (1.0 + exp(-g));
                    dbl[t * f + i] = ig_f32_to_f16((float)(a * u));
                }
            CHECKF(max_ulps(h, ref, n * f) == 0, "%s f %lld n %lld: emu vs ref differs", what,
                   (long long)f, (long long)n);
            int ud = max_ulps(ref, dbl, n * f);
            CHECKF(ud >= 0 && ud <= 1, "%s f %lld n %lld: ref vs double %d ulps", what,
                   (long long)f, (long long)n, ud);
            CHECKF(out_guards_ok(&ob), "%s f %lld n %lld: guards", what, (long long)f,
                   (long long)n);
            free(gu);
            free(ref);
            free(dbl);
        }
}

/* ---- Qwen 3 / Gemma 3: head norms, post norms, scale, soft-cap --------------- */

/* Largest |a - b| / max(|b|, 1e-30) over n floats; inf for a NaN. */
static double max_rel_f32(const float *a, const float *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / fmax(fabs((double)b[i]), 1e-30);
        m = isnan(d) ? INFINITY : fmax(m, d);
    }
    return m;
}

/* In place on rows of a QKV-shaped buffer: the q heads at 0, the k heads
 * after them (ld_x the whole row), head_dim 64, 128 and 256; bit for bit
 * the twin, the twin within 4 f32 ulps of double; the v part untouched. */
static void test_head_rmsnorm(uint64_t *st)
{
    const int64_t hds[] = {64, 128, 256}, heads[] = {4, 5, 1};
    for (size_t i = 0; i < 3; i++) {
        int64_t hd = hds[i], nh = heads[i], n = k_ns[i], ld = (nh + 2) * hd + 8;
        float *x = rand_floats(st, n * ld, -3.0f, 3.0f);
        float *w = rand_floats(st, hd, 0.5f, 1.5f);
        float *ref = malloc((size_t)(n * ld) * 4), *orig = malloc((size_t)(n * ld) * 4);
        memcpy(ref, x, (size_t)(n * ld) * 4);
        memcpy(orig, x, (size_t)(n * ld) * 4);
        const float eps = 1e-6f;
        gk_head_rmsnorm_ref(ref, ld, n, nh, hd, w, eps);
        int rc = IG_DEV(gk_head_rmsnorm)(x, ld, n, nh, hd, w, eps, NULL);
        CHECKF(rc == 0, "head_rmsnorm: rc %d", rc);
        CHECKF(memcmp(x, ref, (size_t)(n * ld) * 4) == 0, "head_rmsnorm hd %lld heads %lld "
               "n %lld: emu vs ref differs", (long long)hd, (long long)nh, (long long)n);
        double worst = 0;
        int untouched = 1;
        for (int64_t t = 0; t < n; t++) {
            for (int64_t h = 0; h < nh; h++) {
                const float *o = orig + t * ld + h * hd;
                double ss = 0;
                for (int64_t d = 0; d < hd; d++)
                    ss += (double)o[d] * o[d];
                double r = 1.0 / sqrt(ss / (double)hd + eps);
                for (int64_t d = 0; d < hd; d++) {
                    double e = o[d] * r * w[d], g = ref[t * ld + h * hd + d];
                    worst = fmax(worst, fabs(g - e) / fmax(fabs(e), 1e-30));
                }
            }
            untouched &= memcmp(x + t * ld + nh * hd, orig + t * ld + nh * hd,
                                (size_t)(ld - nh * hd) * 4) == 0;
        }
        CHECKF(worst <= 4.8e-7, "head_rmsnorm hd %lld: twin vs double %.2e", (long long)hd,
               worst);
        CHECKF(untouched, "head_rmsnorm hd %lld: wrote past its heads", (long long)hd);
        free(x), free(w), free(ref), free(orig);
    }
}

/* x += norm(y) w with strided rows; dims below, at and above one block. */
static void test_rmsnorm_add(uint64_t *st)
{
    const int64_t dims[] = {640, 256, 70, 1152};
    for (size_t di = 0; di < 4; di++) {
        int64_t d = dims[di], n = k_ns[di % 3], ldx = d + 4, ldy = d + 8 * (int64_t)(di % 2);
        float *x = rand_floats(st, n * ldx, -3.0f, 3.0f), *y = rand_floats(st, n * ldy, -9.0f, 9.0f);
        float *w = rand_floats(st, d, 0.5f, 1.5f);
        float *ref = malloc((size_t)(n * ldx) * 4), *orig = malloc((size_t)(n * ldx) * 4);
        memcpy(ref, x, (size_t)(n * ldx) * 4);
        memcpy(orig, x, (size_t)(n * ldx) * 4);
        const float eps = 1e-6f;
        gk_rmsnorm_add_ref(ref, ldx, y, ldy, w, n, d, eps);
        int rc = IG_DEV(gk_rmsnorm_add)(x, ldx, y, ldy, w, n, d, eps, NULL);
        CHECKF(rc == 0, "rmsnorm_add: rc %d", rc);
        CHECKF(memcmp(x, ref, (size_t)(n * ldx) * 4) == 0, "rmsnorm_add d %lld n %lld: emu vs "
               "ref differs", (long long)d, (long long)n);
        double worst = 0; /* against double, relative to the terms' size */
        for (int64_t t = 0; t < n; t++) {
            double ss = 0;
            for (int64_t i = 0; i < d; i++)
                ss += (double)y[t * ldy + i] * y[t * ldy + i];
            double r = 1.0 / sqrt(ss / (double)d + eps);
            for (int64_t i = 0; i < d; i++) {
                double p = y[t * ldy + i] * r * w[i], e = orig[t * ldx + i] + p;
                worst = fmax(worst, fabs(ref[t * ldx + i] - e) /
                                        (fabs(orig[t * ldx + i]) + fabs(p) + 1e-30));
            }
            for (int64_t i = d; i < ldx; i++) /* the padding is not the row's */
                worst = fmax(worst, ref[t * ldx + i] != orig[t * ldx + i]);
        }
        CHECKF(worst <= 4e-7, "rmsnorm_add d %lld: twin vs double %.2e", (long long)d, worst);
        free(x), free(y), free(w), free(ref), free(orig);
    }
}

/* gk_add_rows_f32: rows of a wider array (the stride's tail and the guard
 * untouched), the twin's bits, each element x + b by its definition. */
static void test_add_rows(uint64_t *st)
{
    const int64_t n = 3, dim = 70, ld = 80, len = n * ld + GUARD;
    float *x = rand_floats(st, len, -10.0f, 10.0f), *b = rand_floats(st, dim, -1.0f, 1.0f);
    float *r = malloc((size_t)len * 4), *orig = malloc((size_t)len * 4);
    memcpy(orig, x, (size_t)len * 4);
    memcpy(r, x, (size_t)len * 4);
    gk_add_rows_f32_ref(r, ld, b, n, dim);
    CHECK(IG_DEV(gk_add_rows_f32)(x, ld, b, n, dim, NULL) == 0);
    CHECKF(memcmp(x, r, (size_t)len * 4) == 0, "add_rows: differs from the twin");
    int ok = 1;
    for (int64_t i = 0; i < len; i++)
        ok &= r[i] == (i < n * ld && i % ld < dim ? orig[i] + b[i % ld] : orig[i]);
    CHECKF(ok, "add_rows: not x + b inside the rows, or wrote outside them");
    CHECK(IG_DEV(gk_add_rows_f32)(x, dim - 1, b, n, dim, NULL) != 0);
    free(x), free(b), free(r), free(orig);
}

static void test_scale_softcap(uint64_t *st)
{
    const int64_t ns[] = {1, 300, 1000};
    for (size_t i = 0; i < 3; i++) {
        int64_t n = ns[i];
        float *x = rand_floats(st, n + GUARD, -100.0f, 100.0f);
        float *r = malloc((size_t)(n + GUARD) * 4), *orig = malloc((size_t)(n + GUARD) * 4);
        memcpy(orig, x, (size_t)(n + GUARD) * 4);
        const float s = sqrtf(640.0f), cap = 30.0f;
        memcpy(r, x, (size_t)(n + GUARD) * 4);
        gk_scale_f32_ref(r, n, s);
        CHECK(IG_DEV(gk_scale_f32)(x, n, s, NULL) == 0);
        CHECKF(memcmp(x, r, (size_t)(n + GUARD) * 4) == 0, "scale n %lld: differs (or wrote "
               "past n)", (long long)n);
        int ok = 1;
        for (int64_t j = 0; j < n; j++)
            ok &= r[j] == orig[j] * s;
        CHECK(ok);
        memcpy(x, orig, (size_t)(n + GUARD) * 4);
        memcpy(r, orig, (size_t)(n + GUARD) * 4);
        gk_softcap_ref(r, n, cap);
        CHECK(IG_DEV(gk_softcap)(x, n, cap, NULL) == 0);
        CHECKF(memcmp(x, r, (size_t)(n + GUARD) * 4) == 0, "softcap n %lld: differs (or wrote "
               "past n)", (long long)n);
        float *e = malloc((size_t)n * 4);
        for (int64_t j = 0; j < n; j++)
            e[j] = (float)(cap * tanh(orig[j] / (double)cap));
        CHECKF(max_rel_f32(r, e, n) <= 1e-6, "softcap n %lld: twin vs double %.2e",
               (long long)n, max_rel_f32(r, e, n));
        free(x), free(r), free(orig), free(e);
    }
    CHECK(IG_DEV(gk_softcap)(NULL, 4, 0.0f, NULL) != 0); /* a cap of 0 is the caller's bug */
}

/* Gemma 4's: the head norm without a weight (V heads), x to f16 (the
 * per-layer gate's input) and the per-layer inputs into each layer's second
 * half of gate | input rows; bit for bit the twins, the twins against
 * double, nothing written outside. */
static void test_gemma4_ops(uint64_t *st)
{
    int64_t hd = 128, nh = 3, n = 5, ld = (nh + 1) * hd;
    float *x = rand_floats(st, n * ld, -3.0f, 3.0f);
    float *ref = malloc((size_t)(n * ld) * 4), *orig = malloc((size_t)(n * ld) * 4);
    memcpy(ref, x, (size_t)(n * ld) * 4);
    memcpy(orig, x, (size_t)(n * ld) * 4);
    gk_head_rmsnorm_ref(ref, ld, n, nh, hd, NULL, 1e-6f);
    CHECK(IG_DEV(gk_head_rmsnorm)(x, ld, n, nh, hd, NULL, 1e-6f, NULL) == 0);
    CHECKF(memcmp(x, ref, (size_t)(n * ld) * 4) == 0, "head_rmsnorm without a weight: emu "
           "vs ref differs");
    double worst = 0;
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < nh; h++) {
            const float *o = orig + t * ld + h * hd;
            double ss = 0;
            for (int64_t d = 0; d < hd; d++)
                ss += (double)o[d] * o[d];
            double r = 1.0 / sqrt(ss / (double)hd + 1e-6);
            for (int64_t d = 0; d < hd; d++)
                worst = fmax(worst, fabs(ref[t * ld + h * hd + d] - o[d] * r) /
                                        fmax(fabs(o[d] * r), 1e-30));
        }
    CHECKF(worst <= 4.8e-7, "head_rmsnorm without a weight: twin vs double %.2e", worst);
    CHECK(memcmp(x + nh * hd, orig + nh * hd, (size_t)hd * 4) == 0); /* past the heads */
    free(x), free(ref), free(orig);

    int64_t m = 1000;
    float *f = rand_floats(st, m, -70000.0f, 70000.0f);
    uint16_t *h = malloc((size_t)(m + GUARD) * 2), *hr = malloc((size_t)(m + GUARD) * 2);
    memset(h, GUARD_BYTE, (size_t)(m + GUARD) * 2);
    memset(hr, GUARD_BYTE, (size_t)(m + GUARD) * 2);
    gk_to_f16_ref(f, m, hr);
    CHECK(IG_DEV(gk_to_f16)(f, m, h, NULL) == 0);
    CHECKF(memcmp(h, hr, (size_t)(m + GUARD) * 2) == 0, "to_f16: emu vs ref differs (or wrote "
           "past n)");
    int near = 1;
    for (int64_t i = 0; i < m; i++) /* nearest f16, or inf past its range */
        near &= fabsf(f[i]) > 65504.0f ? isinf(ig_f16_to_f32(hr[i]))
                                       : fabs(ig_f16_to_f32(hr[i]) - f[i]) <=
                                             fabs(f[i]) * 0x1p-11 + 0x1p-25;
    CHECK(near);
    free(f), free(h), free(hr);

    int64_t rows = 3, layers = 4, dd = 16, ld_rows = 5, all = layers * dd;
    float *pp = rand_floats(st, rows * all, -2.0f, 2.0f), *e = rand_floats(st, rows * all, -1, 1);
    size_t out_n = (size_t)(layers * ld_rows * 2 * dd);
    float *o = rand_floats(st, (int64_t)out_n, -5.0f, 5.0f), *ro = malloc(out_n * 4);
    float *o0 = malloc(out_n * 4);
    memcpy(ro, o, out_n * 4);
    memcpy(o0, o, out_n * 4);
    const float ts = 4.0f, is = (float)(1.0 / sqrt(2.0));
    gk_ple_combine_ref(pp, e, rows, layers, dd, ld_rows, ts, is, ro);
    CHECK(IG_DEV(gk_ple_combine)(pp, e, rows, layers, dd, ld_rows, ts, is, o, NULL) == 0);
    CHECKF(memcmp(o, ro, out_n * 4) == 0, "ple_combine: emu vs ref differs");
    worst = 0;
    int others = 1;
    for (int64_t l = 0; l < layers; l++)
        for (int64_t t = 0; t < ld_rows; t++)
            for (int64_t i = 0; i < 2 * dd; i++) {
                size_t k = (size_t)((l * ld_rows + t) * 2 * dd + i);
                if (t >= rows || i < dd) { /* the gate's half, rows past n: not written */
                    others &= ro[k] == o0[k];
                    continue;
                }
                size_t q = (size_t)(t * all + l * dd + i - dd);
                double want = ((double)pp[q] + (double)e[q] * ts) * is;
                worst = fmax(worst, fabs(ro[k] - want) / (fabs(want) + 1e-30));
            }
    CHECK(others);
    CHECKF(worst <= 3e-7, "ple_combine: twin vs double %.2e", worst);
    free(pp), free(e), free(o), free(ro), free(o0);
}

/* ---- greedy tokens (decode/greedy.cu) ---------------------------------------- */

/* Rows drawn from a few values (ties across threads and warps) with NaN,
 * +-inf and FLT_MAX among them, at a row stride wider than the row; every
 * row's token against the rule and the twin, nothing written past n_rows. */
static void test_greedy_rows(uint64_t *st)
{
    static const float pool[] = {NAN, INFINITY, -INFINITY, FLT_MAX, 1.0f, 2.0f, -3.0f, 0.5f};
    const int64_t vocabs[] = {1, 7, 32, 255, 256, 257, 1000, 4099, 128256};
    for (size_t v = 0; v < sizeof vocabs / sizeof *vocabs; v++) {
        const int64_t nv = vocabs[v], ld = nv + 3, rows = 1 + (int64_t)(v % 4);
        float *x = malloc((size_t)(rows * ld) * sizeof *x);
        int32_t ids[4 + GUARD], ref[4];
        for (int trial = 0; trial < (nv > 5000 ? 2 : 6); trial++) {
            unsigned allowed = (unsigned)test_rand_u64(st) & 255u;
            for (int64_t i = 0; i < rows * ld; i++) {
                unsigned k;
                do
                    k = (unsigned)(test_rand_u64(st) % 8);
                while (allowed && !(allowed >> k & 1));
                x[i] = pool[k];
            }
            if (trial % 2) /* a lone best late in row 0 */
                x[nv - 1 - (int64_t)(test_rand_u64(st) % (uint64_t)nv)] = 7.0f;
            for (int i = 0; i < 4 + GUARD; i++)
                ids[i] = -7;
            CHECK(IG_DEV(gk_greedy_rows)(x, ld, rows, nv, ids, NULL) == IG_OK);
            gk_greedy_rows_ref(x, ld, rows, nv, ref);
            for (int64_t t = 0; t < rows; t++) {
                int32_t want = test_greedy_rule(x + t * ld, nv);
                CHECKF(ids[t] == want && ref[t] == want, "greedy n_vocab %lld trial %d row %lld: "
                       "kernel %d, twin %d, rule %d", (long long)nv, trial, (long long)t,
                       ids[t], ref[t], want);
            }
            int untouched = 1;
            for (int i = (int)rows; i < 4 + GUARD; i++)
                untouched &= ids[i] == -7;
            CHECKF(untouched, "greedy n_vocab %lld: wrote past %lld rows", (long long)nv,
                   (long long)rows);
        }
        free(x);
    }
    CHECK(IG_DEV(gk_greedy_rows)(NULL, 4, 1, 8, NULL, NULL) != IG_OK); /* ld < n_vocab */
}

/* ---- dequantization --------------------------------------------------------- */

/* A random finite f16 scale of either sign, magnitudes 2^-14 .. 2. */
static uint16_t rand_scale(uint64_t *st)
{
    float m = ldexpf(1.0f + 0.5f * test_rand_f(st), -(int)(test_rand_u64(st) % 15));
    return ig_f32_to_f16(test_rand_u64(st) & 1 ? -m : m);
}

/* Fills a row of `cols` elements of `type` with random but finite values. */
static void fill_row(uint64_t *st, int type, unsigned char *row, int64_t cols)
{
    const struct quant_traits *t = quant_traits_of((uint32_t)type);
    size_t bytes = (size_t)(cols / t->block_elems) * t->block_bytes;
    for (size_t i = 0; i < bytes; i++)
        row[i] = (unsigned char)test_rand_u64(st);
    for (int64_t c = 0; c < cols / t->block_elems; c++) {
        unsigned char *b = row + (size_t)c * t->block_bytes;
        uint16_t h;
        switch (type) {
        case QUANT_F32: { /* up to past the f16 range, down to f16 subnormals */
            float f = ldexpf(test_rand_f(st), (int)(test_rand_u64(st) % 44) - 26);
            memcpy(b, &f, 4);
            break;
        }
        case QUANT_F16: case QUANT_BF16:
            memcpy(&h, b, 2);
            if (((h >> (type == QUANT_F16 ? 10 : 7)) & (type == QUANT_F16 ? 0x1f : 0xff)) ==
                (type == QUANT_F16 ? 0x1f : 0xff))
                h ^= 0x4000; /* clears the top exponent bit: no inf/NaN */
            memcpy(b, &h, 2);
            break;
        case QUANT_Q4_1:
            h = rand_scale(st);
            memcpy(b + offsetof(struct block_q4_1, m), &h, 2);
            /* fall through */
        default: /* Q8_0, Q4_0, Q4_1: d first */
            h = rand_scale(st);
            memcpy(b, &h, 2);
        }
    }
}

static void test_dequant(uint64_t *st)
{
    const int types[] = {QUANT_F32, QUANT_F16, QUANT_BF16, QUANT_Q8_0, QUANT_Q4_0, QUANT_Q4_1};
    const int64_t rows_s[] = {1, 3, 7}, cols_s[] = {32, 96, 576};
    for (size_t ti = 0; ti < 6; ti++) {
        CHECK(gk_dequant_supported(types[ti]));
        const struct quant_traits *t = quant_traits_of((uint32_t)types[ti]);
        for (size_t ri = 0; ri < 3; ri++)
            for (size_t ci = 0; ci < 3; ci++) {
                int type = types[ti];
                int64_t rows = rows_s[ri], cols = cols_s[ci];
                /* Padded rows (kept 4-byte aligned); one case writes to an unaligned dst. */
                size_t row_bytes = (size_t)(cols / t->block_elems) * t->block_bytes + 4 * ci;
                int shift = ri == 1 && ci == 1;
                unsigned char *src = malloc(row_bytes * (size_t)rows);
                memset(src, 0x5a, row_bytes * (size_t)rows);
                for (int64_t r = 0; r < rows; r++)
                    fill_row(st, type, src + (size_t)r * row_bytes, cols);
                int64_t n = rows * cols;
                struct out_buf ob;
                uint16_t *dst = (uint16_t *)out_init(&ob, (size_t)(n + shift) * 2, 2) + shift;
                uint16_t *ref = malloc((size_t)n * 2), *deq = malloc((size_t)n * 2);
                float *row = malloc((size_t)cols * 4);
                gk_dequant_f16_ref(type, src, rows, cols, row_bytes, ref);
                int rc = IG_DEV(gk_dequant_f16)(type, src, rows, cols, row_bytes, dst, NULL);
                for (int64_t r = 0; r < rows; r++) {
                    quant_dequantize_row(type, src + (size_t)r * row_bytes, row, cols);
                    for (int64_t c = 0; c < cols; c++)
                        deq[r * cols + c] = ig_f32_to_f16(row[c]);
                }
                CHECKF(rc == 0, "dequant %s: rc %d", t->name, rc);
                CHECKF(memcmp(dst, ref, (size_t)n * 2) == 0,
                       "dequant %s rows %lld cols %lld shift %d: emu vs ref differs", t->name,
                       (long long)rows, (long long)cols, shift);
                CHECKF(memcmp(ref, deq, (size_t)n * 2) == 0,
                       "dequant %s rows %lld cols %lld: ref vs quant_dequantize_row differs",
                       t->name, (long long)rows, (long long)cols);
                if (shift) /* the first element of the shifted output is the last poison */
                    CHECK(dst[-1] == 0xffff);
                CHECKF(out_guards_ok(&ob), "dequant %s: guards", t->name);
                free(src);
                free(ref);
                free(deq);
                free(row);
            }
    }
    CHECK(!gk_dequant_supported(QUANT_Q4_K) && !gk_dequant_supported(QUANT_Q6_K) &&
          !gk_dequant_supported(QUANT_Q5_0));
}

/* ---- random fill ------------------------------------------------------------ */

static void test_random(void)
{
    const int64_t ns[] = {1, 1000, 20001};
    for (size_t i = 0; i < 3; i++) {
        int64_t n = ns[i];
        uint64_t seed = 0x1234567ull * (i + 1);
        const float center = i == 2 ? 1.0f : 0.0f, scale = 0.02f * (float)(i + 1);
        struct out_buf oh, of;
        uint16_t *h = out_init(&oh, (size_t)n * 2, 2);
        float *f = out_init(&of, (size_t)n * 4, 4);
        uint16_t *rh = malloc((size_t)n * 2);
        float *rf = malloc((size_t)n * 4);
        gk_random_f16_ref(rh, n, seed, center, scale);
        gk_random_f32_ref(rf, n, seed, center, scale);
        CHECK(IG_DEV(gk_random_f16)(h, n, seed, center, scale, NULL) == 0);
        CHECK(IG_DEV(gk_random_f32)(f, n, seed, center, scale, NULL) == 0);
        CHECKF(memcmp(h, rh, (size_t)n * 2) == 0, "random f16 n %lld differs", (long long)n);
        CHECKF(memcmp(f, rf, (size_t)n * 4) == 0, "random f32 n %lld differs", (long long)n);
        double sum = 0;
        int in_range = 1, same_f16 = 1;
        for (int64_t j = 0; j < n; j++) {
            in_range &= rf[j] >= center - scale && rf[j] < center + scale;
            same_f16 &= rh[j] == ig_f32_to_f16(rf[j]);
            sum += rf[j];
        }
        CHECK(in_range && same_f16);
        if (n > 1000) /* uniform: the mean within ~5 sigma */
            CHECKF(fabs(sum / (double)n - center) < 5 * scale / sqrt(3.0 * (double)n),
                   "random mean %g", sum / (double)n);
        CHECK(out_guards_ok(&oh) && out_guards_ok(&of));
        free(rh);
        free(rf);
    }
    float a[4], b[4]; /* another seed, another stream */
    gk_random_f32_ref(a, 4, 1, 0.0f, 1.0f);
    gk_random_f32_ref(b, 4, 2, 0.0f, 1.0f);
    CHECK(memcmp(a, b, sizeof a) != 0);
}

/* ---- programmatic dependent launch -------------------------------------------- */

/* aligned_alloc's size must be a multiple of its alignment */
static void *alloc64(size_t bytes)
{
    return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

static void test_pdl(uint64_t *st)
{
    const int64_t n = 7, d = 576, vocab = 50;
    /* embedding: the tokens (a greedy kernel's) hidden */
    uint16_t *table = alloc64((size_t)(vocab * d * 2));
    for (int64_t i = 0; i < vocab * d; i++)
        table[i] = ig_f32_to_f16(test_rand_f(st));
    int32_t tok[7];
    for (int64_t t = 0; t < n; t++)
        tok[t] = (int32_t)(test_rand_u64(st) % vocab);
    float *x = alloc64((size_t)(n * d * 4));
    struct pdl_hide h = {0};
    pdl_hide_add(&h, tok, sizeof tok);
    PDL_PAIR("embed", &h, x, (size_t)(n * d * 4), (void)0, n,
             IG_DEV(gk_embed)(table, tok, n, d, 0, vocab, x, NULL));

    /* RMSNorm, with its int8 blocks and without: x hidden */
    float *w = rand_floats(st, d, 0.5f, 1.5f);
    uint16_t *y = alloc64((size_t)(n * d * 2));
    int8_t *xq = alloc64((size_t)(n * d));
    float *xqd = alloc64((size_t)(n * d / 16) * 4);
    pdl_hide_add(&h, x, (size_t)(n * d * 4));
    PDL_PAIR("rmsnorm", &h, y, (size_t)(n * d * 2), (void)0, n,
             IG_DEV(gk_rmsnorm)(x, d, w, n, d, 1e-5f, y, NULL));
    pdl_hide_add(&h, x, (size_t)(n * d * 4));
    PDL_PAIR("rmsnorm_xq", &h, xq, (size_t)(n * d), (void)0, n,
             IG_DEV(gk_rmsnorm_xq)(x, d, w, n, d, 1e-5f, y, xq, xqd, NULL));

    /* SwiGLU and GeGLU: gate|up hidden */
    float *gu = rand_floats(st, n * 2 * d, -6.0f, 6.0f);
    pdl_hide_add(&h, gu, (size_t)(n * 2 * d * 4));
    PDL_PAIR("swiglu", &h, y, (size_t)(n * d * 2), (void)0, n,
             IG_DEV(gk_swiglu)(gu, n, d, y, NULL));
    pdl_hide_add(&h, gu, (size_t)(n * 2 * d * 4));
    PDL_PAIR("geglu", &h, y, (size_t)(n * d * 2), (void)0, n,
             IG_DEV(gk_geglu)(gu, n, d, y, NULL));

    /* RoPE into the pool through the rows' tables: qkv and the positions
     * hidden (a hidden position reads as padding: nothing written) */
    struct qkv_rows rows;
    qkv_rows_make(st, n, 1, 5, &rows);
    const int64_t nh = 4, nkv = 2, hd = 64, wd = (nh + 2 * nkv) * hd;
    const int64_t bs = nkv * 64 * hd, cn = rows.n_blocks * bs;
    float *qkv = rand_floats(st, n * wd, -2.0f, 2.0f);
    double inv_freq[32];
    for (int i = 0; i < 32; i++)
        inv_freq[i] = pow(10000.0, -2.0 * i / 64.0);
    /* q, then the pool's K and V: one output area, compared whole */
    const size_t qb = (size_t)(n * nh * hd * 2), ob = qb + 2 * (size_t)cn * 2;
    uint16_t *o = alloc64(ob), *o0 = malloc(ob);
    for (size_t i = 0; i < ob / 2; i++)
        o0[i] = (uint16_t)(test_rand_u64(st) & 0x7bff);
    struct gk_qkv_params p = {
        .qkv = qkv, .inv_freq = inv_freq, .pos = rows.pos, .n = n, .n_head = nh,
        .n_head_kv = nkv, .head_dim = hd, .n_rot = hd, .rope_style = ROPE_HALF_SPLIT,
        .q = o, .k_cache = o + qb / 2, .v_cache = o + qb / 2 + cn,
        .block_table = rows.tables, .table_stride = rows.table_stride, .block_stride = bs,
        .head_stride = 64 * hd};
    pdl_hide_add(&h, qkv, (size_t)(n * wd * 4));
    pdl_hide_add(&h, rows.pos, (size_t)n * 4);
    PDL_PAIR("qkv_rope (pool)", &h, o, ob, memcpy(o, o0, ob), n, IG_DEV(gk_qkv_rope)(&p, NULL));

    /* ops/gpu_arch.cu: the head norm in place, the post norm into the
     * residual (x in place, y hidden), the bias rows, scale, soft-cap */
    float *r0 = rand_floats(st, n * wd, -3.0f, 3.0f), *r = malloc((size_t)(n * wd * 4));
    float *hw = rand_floats(st, hd, 0.5f, 1.5f);
    pdl_hide_add(&h, r, (size_t)(n * wd * 4));
    PDL_PAIR("head_rmsnorm", &h, r, (size_t)(n * wd * 4), memcpy(r, r0, (size_t)(n * wd * 4)), n,
             IG_DEV(gk_head_rmsnorm)(r, wd, n, nh + nkv, hd, hw, 1e-6f, NULL));
    pdl_hide_add(&h, r, (size_t)(n * wd * 4));
    pdl_hide_add(&h, qkv, (size_t)(n * wd * 4));
    PDL_PAIR("rmsnorm_add", &h, r, (size_t)(n * wd * 4), memcpy(r, r0, (size_t)(n * wd * 4)), n,
             IG_DEV(gk_rmsnorm_add)(r, wd, qkv, wd, w, n, wd, 1e-6f, NULL));
    pdl_hide_add(&h, r, (size_t)(n * wd * 4));
    PDL_PAIR("add_rows", &h, r, (size_t)(n * wd * 4), memcpy(r, r0, (size_t)(n * wd * 4)), 1,
             IG_DEV(gk_add_rows_f32)(r, wd, qkv, n, wd, NULL));
    pdl_hide_add(&h, r, (size_t)(n * wd * 4));
    PDL_PAIR("scale", &h, r, (size_t)(n * wd * 4), memcpy(r, r0, (size_t)(n * wd * 4)), 1,
             IG_DEV(gk_scale_f32)(r, n * wd, 1.5f, NULL));
    pdl_hide_add(&h, r, (size_t)(n * wd * 4));
    PDL_PAIR("softcap", &h, r, (size_t)(n * wd * 4), memcpy(r, r0, (size_t)(n * wd * 4)), 1,
             IG_DEV(gk_softcap)(r, n * wd, 30.0f, NULL));
    pdl_hide_add(&h, r0, (size_t)(n * wd * 4));
    PDL_PAIR("to_f16", &h, y, (size_t)(n * wd * 2), (void)0, 1,
             IG_DEV(gk_to_f16)(r0, n * wd, y, NULL));

    /* decode/greedy.cu: the logits (the output head's) hidden */
    int32_t *ids = alloc64((size_t)n * 4);
    pdl_hide_add(&h, r0, (size_t)(n * wd * 4));
    PDL_PAIR("greedy", &h, ids, (size_t)n * 4, (void)0, n,
             IG_DEV(gk_greedy_rows)(r0, wd, n, wd, ids, NULL));

    /* ops/gpu_kvq.cu: the quantized pool's write (q8_0 K and fp8 V, both
     * rotated by 64) with K, V, the positions and the tables hidden (a
     * hidden position reads as padding: nothing written; row 2 is padding,
     * its blocks wait and leave), then the Hadamard rotation of q in place */
    enum { KN = 3, KH = 2, KD = 64, NB = 4 };
    const int64_t khs = 64 * KD, kbs = KH * khs, kvn = 2 * KN * KH * KD;
    const size_t cb = (size_t)kvq_region(NB * kbs);
    uint16_t *kv = alloc64((size_t)kvn * 2), *kv0 = malloc((size_t)kvn * 2);
    for (int64_t i = 0; i < kvn; i++)
        kv0[i] = ig_f32_to_f16(2.0f * test_rand_f(st));
    int32_t *kpos = alloc64(KN * 4), *ktab = alloc64(KN * NB * 4);
    kpos[0] = 3, kpos[1] = 64, kpos[2] = -1;
    for (int i = 0; i < KN * NB; i++)
        ktab[i] = (i * 3 + 1) % NB;
    unsigned char *pool = alloc64(2 * cb);
    struct gk_kvq_params kp = {
        .k = kv, .v = kv + kvn / 2, .n = KN, .n_head_kv = KH, .head_dim = KD, .pos = kpos,
        .block_table = ktab, .table_stride = NB, .block_stride = kbs, .head_stride = khs,
        .k_cache = pool, .v_cache = pool + cb, .k_dtype = KVQ_Q8_0, .v_dtype = KVQ_FP8,
        .rot_k = 64, .rot_v = 64};
    memcpy(kv, kv0, (size_t)kvn * 2);
    pdl_hide_add(&h, kv, (size_t)kvn * 2);
    pdl_hide_add(&h, kpos, KN * 4);
    pdl_hide_add(&h, ktab, KN * NB * 4);
    PDL_PAIR("kvq_write", &h, pool, 2 * cb, memset(pool, 0, 2 * cb), KN * KH * 2,
             IG_DEV(gk_kvq_write)(&kp, NULL));
    pdl_hide_add(&h, kv, (size_t)kvn * 2);
    PDL_PAIR("hadamard_f16", &h, kv, (size_t)kvn * 2, memcpy(kv, kv0, (size_t)kvn * 2), 6,
             IG_DEV(gk_hadamard_f16)(kv, 6, kvn / 6, 64, NULL));
    free(table), free(x), free(w), free(y), free(xq), free(xqd), free(gu), free(rows.tables);
    free(qkv), free(o), free(o0), free(r0), free(r), free(hw), free(ids), free(kv), free(kv0);
    free(kpos), free(ktab), free(pool);
}

int main(void)
{
    uint64_t st = 0x9e3779b97f4a7c15ull;
    test_embed(&st);
    test_rmsnorm(&st);
    test_qkv_rope(&st);
    test_glu(&st, false);
    test_glu(&st, true);
    test_head_rmsnorm(&st);
    test_rmsnorm_add(&st);
    test_scale_softcap(&st);
    test_add_rows(&st);
    test_gemma4_ops(&st);
    test_greedy_rows(&st);
    test_dequant(&st);
    test_random();
    test_pdl(&st);
    return test_summary("test_gpu_ops_emu");
}
