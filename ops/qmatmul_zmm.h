/* ops/qmatmul_zmm.h: the AVX512-VNNI set's prefill GEMMs on 16 rows a
 * register, the int8 one and the one for f32, f16 and bf16 weights,
 * included by ops/qmatmul_vnni.c after ops/qmatmul_x86.h, whose unpacking,
 * packing and token steps they widen.
 *
 * Why: a core with two 512-bit multiply pipes (Intel's Xeons; Zen 5) runs a
 * zmm vpdpbusd nearly as often as a ymm one, so nearly twice the
 * multiply-adds (bench/fma_peak on a Sapphire Rapids-class core: 436 G a
 * second against 251; the int8 GEMM 1.45x, docs/benchmarks.md), and a zmm
 * FMA likewise. A core that splits zmm in two (Zen 4) runs each as two ymm
 * operations: the same work.
 *
 * Two consecutive 8-row groups are unpacked side by side, the first in the
 * low 256 bits of every quant vector, scale and offset, the second in the
 * high, and each token block's quants are broadcast from memory. Every lane
 * then does what the same lane of gemm8_tokens, gemv8_k6_tokens or
 * fgemm8_tokens (whose columns are packed the same way) does, in
 * the same order, so every result is theirs bit for bit: a row's output
 * does not depend on whether its group ran in a pair or alone
 * (tests/cpu/test_qmatmul.c). */
#ifndef IGNITE_OPS_QMATMUL_ZMM_H
#define IGNITE_OPS_QMATMUL_ZMM_H

/* Tokens a step: 8 quant vectors, 8 accumulators and the step's
 * temporaries fit the 32 zmm registers. */
#define ZMM_NT 8

/* A block of two groups: q[k] bytes 0-31 the first group's vector k, 32-63
 * the second's; d and m their 8 scales and offsets each. */
struct pack16 {
    uint8_t q[8][64] __attribute__((aligned(64)));
    float d[16] __attribute__((aligned(64)));
    float m[16] __attribute__((aligned(64)));
};
_Static_assert(sizeof(struct pack16) == 2 * sizeof(struct qmm_pack8),
               "n_blk entries fit the 2 n_blk of scratch ops_qmm_gemm16_packed is given");
_Static_assert(sizeof(struct qmm_pack8) % 64 == 0,
               "each thread's slice of the context's scratch (ops_ctx_qpack) is 64-byte aligned");

/* Where group h (0 or 1) of a pair unpacks. */
AVX2 INLINE struct unpack_dst half_dst(struct pack16 *p, const int h)
{
    return (struct unpack_dst){(uint8_t *)p + 32 * h, sizeof *p, sizeof p->q[0],
                               offsetof(struct pack16, d), offsetof(struct pack16, m)};
}

AVX2 INLINE __m512 join8(__m256 lo, __m256 hi)
{
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)),
                                               _mm256_castps_pd(hi), 1));
}

/* The 32-element formats, Q4_K, Q5_K and the IQ4 kinds: gemm8_tokens's
 * VNNI steps on 16 lanes. */
AVX2 INLINE void gemm16_tokens(const struct pack16 *p, int64_t n_blk, const struct qmm_q8 *x,
                               int64_t ldx, const int nt, float *y, int64_t ldy,
                               const enum kind kind)
{
    const bool zp = KIND_ZERO_POINT(kind);
    __m512 acc[ZMM_NT], add[ZMM_NT];
    UNROLL for (int t = 0; t < nt; t++) {
        acc[t] = _mm512_setzero_ps();
        add[t] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < n_blk; b++) {
        __m512 d = _mm512_load_ps(p[b].d);
        __m512i q[8];
        UNROLL for (int k = 0; k < 8; k++)
            q[k] = _mm512_load_si512((const void *)p[b].q[k]);
        UNROLL for (int t = 0; t < nt; t++) {
            const struct qmm_q8 *xb = x + t * ldx + b;
            const int32_t *xq = (const int32_t *)(const void *)xb->qs;
            __m512i sum = _mm512_setzero_si512();
            UNROLL for (int k = 0; k < 8; k++)
                sum = _mm512_dpbusd_epi32(sum, q[k], _mm512_set1_epi32(xq[k]));
            if (zp)
                sum = _mm512_sub_epi32(sum, _mm512_set1_epi32(zero_point_sum(kind, xb)));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum),
                                     _mm512_mul_ps(d, _mm512_set1_ps(xb->d)), acc[t]);
        }
    }
    if (!zp) /* the offsets apart, as gemm8_tokens's */
        for (int64_t b = 0; b < n_blk; b++) {
            __m512 m = _mm512_load_ps(p[b].m);
            UNROLL for (int t = 0; t < nt; t++)
                add[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(x[t * ldx + b].s), add[t]);
        }
    UNROLL for (int t = 0; t < nt; t++)
        _mm512_storeu_ps(y + t * ldy, _mm512_add_ps(acc[t], add[t]));
}

/* Q6_K (and Q3_K) or Q2_K (k2; its offsets from the packed groups w0, w1):
 * gemv8_k6_tokens's steps on unpacked blocks, on 16 lanes. */
AVX2 INLINE void gemm16_k6_tokens(const bool k2, const uint8_t *w0, const uint8_t *w1,
                                  const struct pack16 *p, int64_t n_blk, const struct qmm_q8 *x,
                                  int64_t ldx, const int nt, float *y, int64_t ldy)
{
    __m512 acc[ZMM_NT], add[ZMM_NT];
    UNROLL for (int t = 0; t < nt; t++) {
        acc[t] = _mm512_setzero_ps();
        add[t] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < n_blk; b++) {
        __m512 d0 = _mm512_load_ps(p[b].d), d1 = _mm512_load_ps(p[b].m);
        __m512i q[8];
        UNROLL for (int k = 0; k < 8; k++)
            q[k] = _mm512_load_si512((const void *)p[b].q[k]);
        UNROLL for (int t = 0; t < nt; t++) {
            const struct qmm_q8 *xb = x + t * ldx + b;
            const int32_t *xq = (const int32_t *)(const void *)xb->qs;
            __m512i s[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
            UNROLL for (int k = 0; k < 8; k++)
                s[k / 4] = _mm512_dpbusd_epi32(s[k / 4], q[k], _mm512_set1_epi32(xq[k]));
            __m512 xd = _mm512_set1_ps(xb->d);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[0]), _mm512_mul_ps(d0, xd), acc[t]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[1]), _mm512_mul_ps(d1, xd), acc[t]);
        }
    }
    for (int64_t b = 0; b < n_blk; b++) { /* k6_offsets, k2_offsets */
        __m512 o0 = _mm512_load_ps(p[b].d), o1 = _mm512_load_ps(p[b].m);
        if (k2) {
            __m256 a0, a1, b0, b1;
            k2_mins(w0, b, &a0, &a1);
            k2_mins(w1, b, &b0, &b1);
            o0 = join8(a0, b0);
            o1 = join8(a1, b1);
        }
        UNROLL for (int t = 0; t < nt; t++) {
            const struct qmm_q8 *xb = x + t * ldx + b;
            add[t] = _mm512_fmadd_ps(o0, _mm512_set1_ps(xb->dhs[0]), add[t]);
            add[t] = _mm512_fmadd_ps(o1, _mm512_set1_ps(xb->dhs[1]), add[t]);
        }
    }
    const __m512 scale = _mm512_set1_ps(k2 ? 1.0f : -32.0f); /* as gemv8_k6_tokens */
    UNROLL for (int t = 0; t < nt; t++)
        _mm512_storeu_ps(y + t * ldy, _mm512_add_ps(acc[t], _mm512_mul_ps(add[t], scale)));
}

/* The token step for tokens [t, t + n), n 1, 2, 4 or ZMM_NT. */
#define GEMM16_STEP(t, n)                                                                    \
    (k6 ? gemm16_k6_tokens(k2, w, w + group_bytes, p, n_blk, x + (t) * ldx, ldx, n,          \
                           y + (t) * ldy, ldy)                                               \
        : gemm16_tokens(p, n_blk, x + (t) * ldx, ldx, n, y + (t) * ldy, ldy, kind))

/* Two packed groups (at w and w + group_bytes) against nt tokens: unpacked
 * once, then ZMM_NT tokens a step and the rest 4, 2 and 1 at a time (a
 * token's sums do not depend on its step), asking for the next pair. */
AVX2 INLINE void gemm16p(const enum kind kind, const bool k6, const bool k2, const uint8_t *w,
                         size_t group_bytes, int64_t n_blk, const struct qmm_q8 *x, int64_t ldx,
                         int64_t nt, float *y, int64_t ldy, struct qmm_pack8 *pack)
{
    struct pack16 *p = (struct pack16 *)(void *)pack;
    for (int h = 0; h < 2; h++) {
        if (k6)
            unpack_k6(k2, w + h * group_bytes, n_blk, half_dst(p, h));
        else
            unpack8(kind, w + h * group_bytes, n_blk, half_dst(p, h));
    }
    /* the next pair asked for over the whole steps and the rest as one */
    struct next_group next =
        next_group_of(w, 2 * group_bytes, nt / ZMM_NT + (nt % ZMM_NT != 0));
    int64_t t = 0;
    for (; t + ZMM_NT <= nt; t += ZMM_NT) {
        next_group_step(&next);
        GEMM16_STEP(t, ZMM_NT);
    }
    next_group_step(&next);
    if (nt - t >= 4) {
        GEMM16_STEP(t, 4);
        t += 4;
    }
    if (nt - t >= 2) {
        GEMM16_STEP(t, 2);
        t += 2;
    }
    if (nt - t >= 1)
        GEMM16_STEP(t, 1);
}
_Static_assert(ZMM_NT == 8, "gemm16p's remainder runs 4, 2 and 1 tokens");

#define GEMM16P(name, kind, k6, k2)                                                          \
    AVX2 static void gemm16p_##name(const uint8_t *w, size_t group_bytes, int64_t n_blk,     \
                                    const struct qmm_q8 *x, int64_t ldx, int64_t nt,         \
                                    float *y, int64_t ldy, struct qmm_pack8 *pack)           \
    {                                                                                       \
        gemm16p(kind, k6, k2, w, group_bytes, n_blk, x, ldx, nt, y, ldy, pack);             \
    }
GEMM16P(q4_0, K_Q4_0, false, false)
GEMM16P(q4_1, K_Q4_1, false, false)
GEMM16P(q5_0, K_Q5_0, false, false)
GEMM16P(q5_1, K_Q5_1, false, false)
GEMM16P(q8_0, K_Q8_0, false, false)
GEMM16P(q4_K, K_Q4_K, false, false)
GEMM16P(q5_K, K_Q5_K, false, false)
GEMM16P(iq4_nl, K_IQ4_NL, false, false)
GEMM16P(iq4_xs, K_IQ4_XS, false, false)
GEMM16P(mxfp4, K_MXFP4, false, false)
GEMM16P(q6_K, K_Q4_0, true, false) /* (kind unused by the k6 steps) */
GEMM16P(q2_K, K_Q4_0, true, true)

/* The same types as gemm8p_of. */
static qmm_gemm16_fn gemm16p_of(enum quant_type type)
{
    switch (type) {
    case QUANT_Q4_0: return gemm16p_q4_0;
    case QUANT_Q4_1: return gemm16p_q4_1;
    case QUANT_Q5_0: return gemm16p_q5_0;
    case QUANT_Q5_1: return gemm16p_q5_1;
    case QUANT_Q8_0: return gemm16p_q8_0;
    case QUANT_Q4_K: return gemm16p_q4_K;
    case QUANT_Q5_K: return gemm16p_q5_K;
    case QUANT_IQ4_NL: return gemm16p_iq4_nl;
    case QUANT_IQ4_XS: return gemm16p_iq4_xs;
    case QUANT_MXFP4: return gemm16p_mxfp4;
    case QUANT_Q2_K: return gemm16p_q2_K;
    case QUANT_Q3_K: /* packed as Q6_K */
    case QUANT_Q6_K: return gemm16p_q6_K;
    default: return NULL;
    }
}

/* ---- f32, f16, bf16 weights: fgemm8 on 16 rows ---------------------------------- */

/* fgemm8_tokens's FMAs, column by column in the same order, on 16 lanes. */
AVX2 INLINE void fgemm16_tokens(const float *p, int64_t cols, const float *x, int64_t ldx,
                                const int nt, float *y, int64_t ldy)
{
    __m512 acc[ZMM_NT];
    UNROLL for (int t = 0; t < nt; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t c = 0; c < cols; c++) {
        __m512 wv = _mm512_load_ps(p + c * 16);
        UNROLL for (int t = 0; t < nt; t++)
            acc[t] = _mm512_fmadd_ps(wv, _mm512_set1_ps(x[t * ldx + c]), acc[t]);
    }
    UNROLL for (int t = 0; t < nt; t++)
        _mm512_storeu_ps(y + t * ldy, acc[t]);
}

/* 16 rows: the two 8-row groups packed side by side, column c's 16 floats
 * at pack + 16 c. */
AVX2 static void fgemm16(enum quant_type type, const uint8_t *w, size_t row_bytes, int64_t cols,
                         const float *x, int64_t ldx, int64_t nt, float *y, int64_t ldy,
                         float *pack)
{
    fpack8(type, w, row_bytes, 8, cols, pack, 16);
    fpack8(type, w + 8 * row_bytes, row_bytes, 8, cols, pack + 8, 16);
    for (int64_t t = 0; t < nt; t += ZMM_NT) {
        int n = nt - t < ZMM_NT ? (int)(nt - t) : ZMM_NT;
        const float *xt = x + t * ldx;
        float *yt = y + t * ldy;
        switch (n) {
        case 1: fgemm16_tokens(pack, cols, xt, ldx, 1, yt, ldy); break;
        case 2: fgemm16_tokens(pack, cols, xt, ldx, 2, yt, ldy); break;
        case 3: fgemm16_tokens(pack, cols, xt, ldx, 3, yt, ldy); break;
        case 4: fgemm16_tokens(pack, cols, xt, ldx, 4, yt, ldy); break;
        case 5: fgemm16_tokens(pack, cols, xt, ldx, 5, yt, ldy); break;
        case 6: fgemm16_tokens(pack, cols, xt, ldx, 6, yt, ldy); break;
        case 7: fgemm16_tokens(pack, cols, xt, ldx, 7, yt, ldy); break;
        default: fgemm16_tokens(pack, cols, xt, ldx, 8, yt, ldy); break;
        }
    }
}

#endif
