/* ops/gpu_deltanet_ref.c: the CPU twins of ops/gpu_deltanet.cu (contracts
 * in ops/gpu_deltanet.h): the kernels' arithmetic in their order, each f32
 * operation rounded (built without FMA contraction), so an emulated kernel
 * matches its twin bit for bit. Covered by tests/emu/test_deltanet_emu.c. */
#include "ops/gpu_deltanet.h"

#include "core/half.h"

#include <math.h>

static int64_t key_head(const struct gk_dn_shape *s, int64_t h)
{
    return s->grouped ? h / (s->Hv / s->Hk) : h % s->Hk;
}

void gk_dn_conv_ref(const struct gk_dn_shape *s, float *qkv, const float *conv_w,
                    const struct gk_dn_seq *seqs, int64_t n_seqs)
{
    int K = (int)s->K;
    for (int64_t i = 0; i < n_seqs; i++) {
        struct gk_dn_seq q = seqs[i];
        if (q.n_rows <= 0)
            continue;
        float *st = s->state + (int64_t)q.slot * s->state_floats;
        for (int64_t c = 0; c < s->C; c++) {
            float hist[GK_DN_MAX_CONV - 1];
            for (int k = 0; k < K - 1; k++)
                hist[k] = q.pos0 == 0 ? 0.0f : st[k * s->C + c];
            for (int32_t t = 0; t < q.n_rows; t++) {
                float *x = qkv + (int64_t)(q.row0 + t) * s->C + c, in = *x;
                float acc = conv_w[c * K + K - 1] * in;
                for (int k = 0; k < K - 1; k++)
                    acc += conv_w[c * K + k] * hist[k];
                for (int k = 0; k + 1 < K - 1; k++)
                    hist[k] = hist[k + 1];
                if (K > 1)
                    hist[K - 2] = in;
                *x = acc / (1.0f + expf(-acc));
            }
            for (int k = 0; k < K - 1; k++)
                st[k * s->C + c] = hist[k];
        }
    }
}

/* The kernels' warp sum of lanes' partial sums of x[d]^2 (d = lane + 32 i),
 * xor butterflies: lane 0's result. */
static float warp_sumsq(const float *x, int64_t n)
{
    float part[32];
    for (int l = 0; l < 32; l++) {
        part[l] = 0;
        for (int64_t d = l; d < n; d += 32)
            part[l] += x[d] * x[d];
    }
    for (int m = 16; m > 0; m >>= 1) {
        float next[32];
        for (int l = 0; l < 32; l++)
            next[l] = part[l] + part[l ^ m];
        for (int l = 0; l < 32; l++)
            part[l] = next[l];
    }
    return part[0];
}

void gk_dn_gates_ref(const struct gk_dn_shape *s, float *qkv, float *beta, float *alpha,
                     const float *dt, const float *A, int64_t n)
{
    float qscale = 1.0f / sqrtf((float)s->D);
    for (int64_t t = 0; t < n; t++) {
        for (int64_t hh = 0; hh < 2 * s->Hk; hh++) {
            float *x = qkv + t * s->C + hh * s->D;
            float r = 1.0f / sqrtf(warp_sumsq(x, s->D) + 1e-6f);
            if (hh < s->Hk)
                r *= qscale;
            for (int64_t d = 0; d < s->D; d++)
                x[d] *= r;
        }
        for (int64_t h = 0; h < s->Hv; h++) {
            float *b = beta + t * s->Hv + h, *g = alpha + t * s->Hv + h;
            *b = 1.0f / (1.0f + expf(-*b));
            float a = *g + dt[h];
            float sp = a > 20.0f ? a : log1pf(expf(a));
            *g = A[h] * sp;
        }
    }
}

void gk_dn_rule_ref(const struct gk_dn_shape *s, const float *qkv, const float *beta,
                    const float *g, float *out, const struct gk_dn_seq *seqs, int64_t n_seqs)
{
    int64_t D = s->D;
    for (int64_t i = 0; i < n_seqs; i++) {
        struct gk_dn_seq q = seqs[i];
        if (q.n_rows <= 0 || (s->split && q.chunked))
            continue;
        for (int64_t h = 0; h < s->Hv; h++) {
            int64_t kh = key_head(s, h);
            float *S = s->state + (int64_t)q.slot * s->state_floats + (s->K - 1) * s->C +
                       h * D * D;
            if (q.pos0 == 0)
                for (int64_t e = 0; e < D * D; e++)
                    S[e] = 0.0f;
            for (int32_t r = 0; r < q.n_rows; r++) {
                int64_t t = q.row0 + r;
                const float *qv = qkv + t * s->C + kh * D, *kv = qkv + t * s->C + (s->Hk + kh) * D;
                const float *v = qkv + t * s->C + (2 * s->Hk + h) * D;
                float decay = expf(g[t * s->Hv + h]), b = beta[t * s->Hv + h];
                for (int64_t j = 0; j < D; j++) { /* column j, as a pair of threads does */
                    float sk[2] = {0, 0}, o[2] = {0, 0};
                    for (int64_t k = 0; k < D; k++) {
                        S[k * D + j] *= decay;
                        sk[k >= D / 2] += kv[k] * S[k * D + j];
                    }
                    float u = b * (v[j] - (sk[0] + sk[1]));
                    for (int64_t k = 0; k < D; k++) {
                        S[k * D + j] += kv[k] * u;
                        o[k >= D / 2] += qv[k] * S[k * D + j];
                    }
                    out[(t * s->Hv + h) * D + j] = o[0] + o[1];
                }
            }
        }
    }
}

void gk_dn_norm_ref(const struct gk_dn_shape *s, const float *o, const float *z,
                    const float *w, float eps, int64_t n, uint16_t *y)
{
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < s->Hv; h++) {
            int64_t base = (t * s->Hv + h) * s->D;
            float r = 1.0f / sqrtf(warp_sumsq(o + base, s->D) / (float)s->D + eps);
            for (int64_t d = 0; d < s->D; d++) {
                float zz = z[base + d];
                y[base + d] = ig_f32_to_f16(zz / (1.0f + expf(-zz)) * (o[base + d] * r * w[d]));
            }
        }
}

void gk_gate_split_ref(const float *raw, int64_t n, int64_t n_head, int64_t n_head_kv,
                       int64_t hd, float *qkv, float *gate)
{
    int64_t q_dim = n_head * hd, kv2 = 2 * n_head_kv * hd;
    for (int64_t t = 0; t < n; t++) {
        const float *src = raw + t * (2 * q_dim + kv2);
        for (int64_t i = 0; i < q_dim; i++) {
            int64_t at = i / hd * 2 * hd + i % hd;
            qkv[t * (q_dim + kv2) + i] = src[at];
            gate[t * q_dim + i] = src[at + hd];
        }
        for (int64_t i = 0; i < kv2; i++)
            qkv[t * (q_dim + kv2) + q_dim + i] = src[2 * q_dim + i];
    }
}

void gk_gate_apply_ref(uint16_t *att, const float *gate, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        att[i] = ig_f32_to_f16(ig_f16_to_f32(att[i]) / (1.0f + expf(-gate[i])));
}
