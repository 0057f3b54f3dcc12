/* ops/qmatmul_x86.h: the body of the x86 int8 tile kernels, included by
 * ops/qmatmul_avx2.c (AVX2 + FMA + F16C), ops/qmatmul_vnni.c (the same plus
 * AVX512-VL/VNNI: vpdpbusd replaces vpmaddubsw + vpmaddwd, and 32 ymm
 * registers) and ops/qmatmul_avxvnni.c (AVX-VNNI: vpdpbusd's VEX form, 16
 * registers). The includer defines QMM_X86_TARGET (a target attribute),
 * QMM_X86_VNNI (0 or 1) and with VNNI QMM_X86_DPBUSD (the intrinsic of its
 * vpdpbusd), then names its table with QMM_X86_TABLE; every function here
 * is static to that file.
 *
 * One register tile is up to QMM_MR weight rows times QMM_NT tokens: a
 * weight block is unpacked to 32 bytes once and multiplied with every token
 * of the tile (u8 x s8 -> s32), and each token block is loaded once per row.
 * Every (row, token) pair keeps its own f32 accumulator (one ymm), updated
 * in the same order whatever the tile size. The token side of the per-block
 * scales (d, and s for the formats with an offset) is gathered into one xmm
 * per block, so each row's scales cost one vector multiply. */
#ifndef IGNITE_OPS_QMATMUL_X86_H
#define IGNITE_OPS_QMATMUL_X86_H

#include <immintrin.h>

#define AVX2 QMM_X86_TARGET
#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

/* Bytes ahead of the block being read that the decode GEMV asks the caches
 * for. The hardware prefetchers alone kept one thread's packed-group stream
 * at 29-30 GB/s from memory; asking 8 KiB ahead (every line of the block that
 * far on) gave 34-35 (bench/qmm_cpu, Zen 4; 4 and 16 KiB gained less), and
 * a decode step on one thread 1.2x (docs/benchmarks.md, issue 22). Past the
 * end of a thread's rows the requests touch 8 KiB it does not read (the
 * next thread's rows, or another allocation: a prefetch never faults),
 * 1.5-4.5 % of SmolLM2's 186-553 KB matrices. */
#define GEMV_PREFETCH_BYTES 8192

/* Which cache the requests fill. On AMD L1 (T0: the Zen 4 figures above;
 * Zen 4 documents T1 as filling L2 but drops some T1 requests, per the study
 * cited in docs/benchmarks.md). On Intel L2 (T1): a Sapphire Rapids-class
 * core ran a decode step 1.04-1.28x faster so, on one and two threads, 8 to
 * 32 KiB ahead alike; T0 requests each hold one of a core's few L1 fill
 * buffers until their line arrives. Asked once per group of 8 rows and the
 * kernels built for each answer: a test of it inside the block loop made
 * GCC lay the loop out worse (90-96 t/s against 106-111 for T1 alone). */
static inline bool gemv_prefetch_to_l2(void)
{
    return __builtin_cpu_is("intel");
}

AVX2 INLINE void prefetch_ahead(const uint8_t *blk, size_t bytes, const bool to_l2)
{
    const char *ahead = (const char *)blk + GEMV_PREFETCH_BYTES;
    if (to_l2)
        for (size_t o = 0; o < bytes; o += 64)
            _mm_prefetch(ahead + o, _MM_HINT_T1);
    else
        for (size_t o = 0; o < bytes; o += 64)
            _mm_prefetch(ahead + o, _MM_HINT_T0);
}

/* sum over groups of u8 x s8, as 8 f32 lanes */
AVX2 INLINE __m256 dot_us(__m256i u, __m256i s)
{
#if QMM_X86_VNNI
    return _mm256_cvtepi32_ps(QMM_X86_DPBUSD(_mm256_setzero_si256(), u, s));
#else
    __m256i p = _mm256_maddubs_epi16(u, s);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
#endif
}

AVX2 INLINE float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 16 bytes of nibbles -> 32 bytes: low nibbles first, then high. */
AVX2 INLINE __m256i nib32(const uint8_t *qs)
{
    __m128i b = _mm_loadu_si128((const __m128i *)qs);
    __m128i m = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}

AVX2 INLINE __m256i load32(const void *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

/* ---- 32-element block formats ----------------------------------------------- */

/* The IQ4 kinds exist in the packed layout only. */
enum kind { K_Q4_0, K_Q4_1, K_Q8_0, K_Q5_0, K_Q5_1, K_Q4_K, K_Q5_K, K_IQ4_NL, K_IQ4_XS,
            K_MXFP4 /* IQ4_NL's layout and kernels, its own levels */ };

/* The fifth bits of a Q5_0/Q5_1 block (qh, 32 bits: bit i for element i) as
 * 32 bytes, 16 where the bit is set: byte i takes byte i / 8 of qh (the
 * shuffle works within 128-bit lanes, both of which hold qh) and tests bit
 * i % 8 of it. */
AVX2 INLINE __m256i fifth_bits(const uint8_t *qh4)
{
    int32_t qh;
    memcpy(&qh, qh4, sizeof qh);
    const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(qh), pick), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(16));
}

/* The fifth bits of unpacked vector k of a packed 5-bit block (ops/qmatmul.h:
 * byte b of the block's plane holds vector k's byte b in bit k) as 16 where
 * set: bit k moved to bit 4 by one 16-bit shift, which moves every byte's
 * bits alike since the shift is under 8. */
AVX2 INLINE __m256i plane_bits(__m256i plane, const int k)
{
    __m256i v = k < 4 ? _mm256_slli_epi16(plane, 4 - k) : _mm256_srli_epi16(plane, k - 4);
    return _mm256_and_si256(v, _mm256_set1_epi8(16));
}

/* Field f of the tile's nt token blocks as one vector (lanes >= nt are 0):
 * the token side of every per-block scale is then one vector op per row. */
#define TOKEN_VEC(f, xb0, ldx, nt)                                                            \
    _mm_set_ps(nt > 3 ? (xb0)[3 * (ldx)].f : 0.0f, nt > 2 ? (xb0)[2 * (ldx)].f : 0.0f,         \
               nt > 1 ? (xb0)[(ldx)].f : 0.0f, (xb0)[0].f)

/* Lane t of v, in every lane. */
AVX2 INLINE __m256 lane(__m128 v, int t)
{
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_set1_epi32(t));
}

AVX2 INLINE void store_tile(__m256 acc[QMM_MR][QMM_NT], __m128 add[QMM_MR], const int mr,
                            const int nt, float *y, int64_t ldy)
{
    UNROLL for (int r = 0; r < mr; r++) {
        float a[4];
        _mm_storeu_ps(a, add[r]);
        UNROLL for (int t = 0; t < nt; t++)
            y[t * ldy + r] = hsum(acc[r][t]) + a[t];
    }
}

AVX2 INLINE void tile32(const enum kind kind, const uint8_t *w, size_t row_bytes, int64_t n_blk,
                        const struct qmm_q8 *x, int64_t ldx, const int mr, const int nt,
                        float *y, int64_t ldy)
{
    const size_t bb = kind == K_Q4_0 ? sizeof(struct block_q4_0)
                    : kind == K_Q4_1 ? sizeof(struct block_q4_1)
                    : kind == K_Q5_0 ? sizeof(struct block_q5_0)
                    : kind == K_Q5_1 ? sizeof(struct block_q5_1)
                                     : sizeof(struct block_q8_0);
    __m256 acc[QMM_MR][QMM_NT];
    __m128 add[QMM_MR];
    UNROLL for (int r = 0; r < mr; r++) {
        add[r] = _mm_setzero_ps();
        UNROLL for (int t = 0; t < nt; t++)
            acc[r][t] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < n_blk; b++) {
        const struct qmm_q8 *xb = x + b;
        __m128 dx = TOKEN_VEC(d, xb, ldx, nt);
        __m128 sx = kind == K_Q8_0 ? _mm_setzero_ps() : TOKEN_VEC(s, xb, ldx, nt);
        UNROLL for (int r = 0; r < mr; r++) {
            const uint8_t *blk = w + (size_t)r * row_bytes + (size_t)b * bb;
            /* the f16 scales, converted together: lane 0 d, lane 1 m (Q4_1) */
            int32_t dm32;
            memcpy(&dm32, blk, sizeof dm32);
            __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(dm32));
            __m128 dv = _mm_broadcastss_ps(dm);
            __m256i q, qa = _mm256_setzero_si256();
            if (kind == K_Q8_0) {
                q = load32(blk + 2);
                qa = _mm256_sign_epi8(q, q);
            } else if (kind == K_Q4_1) {
                q = nib32(blk + 4);
                add[r] = _mm_fmadd_ps(_mm_permute_ps(dm, 0x55), sx, add[r]);
            } else if (kind == K_Q5_0) { /* d, qh, qs: w = d (q - 16) */
                q = _mm256_or_si256(nib32(blk + 6), fifth_bits(blk + 2));
                add[r] = _mm_fmadd_ps(_mm_mul_ps(_mm_set1_ps(-16.0f), dv), sx, add[r]);
            } else if (kind == K_Q5_1) { /* d, m, qh, qs: w = d q + m */
                q = _mm256_or_si256(nib32(blk + 8), fifth_bits(blk + 4));
                add[r] = _mm_fmadd_ps(_mm_permute_ps(dm, 0x55), sx, add[r]);
            } else {
                q = nib32(blk + 2);
                add[r] = _mm_fmadd_ps(_mm_mul_ps(_mm_set1_ps(-8.0f), dv), sx, add[r]);
            }
            __m128 dd = _mm_mul_ps(dv, dx);
            UNROLL for (int t = 0; t < nt; t++) {
                __m256i xv = load32(xb[t * ldx].qs);
                __m256 p = kind == K_Q8_0 ? dot_us(qa, _mm256_sign_epi8(xv, q)) : dot_us(q, xv);
                acc[r][t] = _mm256_fmadd_ps(lane(dd, t), p, acc[r][t]);
            }
        }
    }
    store_tile(acc, add, mr, nt, y, ldy);
}

/* ---- Q4_K: 8 sub-blocks of 32 per super-block --------------------------------- */

static void k4_scales(const uint8_t *s, int sc[8], int mn[8])
{
    for (int j = 0; j < 8; j++)
        quant_k4_scale_min(s, j, &sc[j], &mn[j]);
}

AVX2 INLINE void tile_k4(const uint8_t *w, size_t row_bytes, int64_t n_blk,
                         const struct qmm_q8 *x, int64_t ldx, const int mr, const int nt,
                         float *y, int64_t ldy)
{
    __m256 acc[QMM_MR][QMM_NT];
    __m128 add[QMM_MR];
    UNROLL for (int r = 0; r < mr; r++) {
        add[r] = _mm_setzero_ps();
        UNROLL for (int t = 0; t < nt; t++)
            acc[r][t] = _mm256_setzero_ps();
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int64_t sb = 0; sb < n_blk / 8; sb++) {
        UNROLL for (int r = 0; r < mr; r++) {
            const struct block_q4_K *blk =
                (const struct block_q4_K *)(w + (size_t)r * row_bytes) + sb;
            float d = _cvtsh_ss(blk->d), dmin = _cvtsh_ss(blk->dmin);
            int sc[8], mn[8];
            k4_scales(blk->scales, sc, mn);
            for (int i = 0; i < 4; i++) {
                __m256i bytes = load32(blk->qs + 32 * i);
                __m256i h[2] = {_mm256_and_si256(bytes, m4),
                                _mm256_and_si256(_mm256_srli_epi16(bytes, 4), m4)};
                for (int k = 0; k < 2; k++) {
                    int j = 2 * i + k;
                    const struct qmm_q8 *xb = x + sb * 8 + j;
                    __m128 dd = _mm_mul_ps(_mm_set1_ps(d * (float)sc[j]), TOKEN_VEC(d, xb, ldx, nt));
                    add[r] = _mm_fmadd_ps(_mm_set1_ps(-dmin * (float)mn[j]),
                                          TOKEN_VEC(s, xb, ldx, nt), add[r]);
                    UNROLL for (int t = 0; t < nt; t++)
                        acc[r][t] = _mm256_fmadd_ps(lane(dd, t),
                                                    dot_us(h[k], load32(xb[t * ldx].qs)),
                                                    acc[r][t]);
                }
            }
        }
    }
    store_tile(acc, add, mr, nt, y, ldy);
}

/* ---- Q5_K: Q4_K with a fifth bit per quant in qh ------------------------------- */

AVX2 INLINE void tile_k5(const uint8_t *w, size_t row_bytes, int64_t n_blk,
                         const struct qmm_q8 *x, int64_t ldx, const int mr, const int nt,
                         float *y, int64_t ldy)
{
    __m256 acc[QMM_MR][QMM_NT];
    __m128 add[QMM_MR];
    UNROLL for (int r = 0; r < mr; r++) {
        add[r] = _mm_setzero_ps();
        UNROLL for (int t = 0; t < nt; t++)
            acc[r][t] = _mm256_setzero_ps();
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    for (int64_t sb = 0; sb < n_blk / 8; sb++) {
        UNROLL for (int r = 0; r < mr; r++) {
            const struct block_q5_K *blk =
                (const struct block_q5_K *)(w + (size_t)r * row_bytes) + sb;
            float d = _cvtsh_ss(blk->d), dmin = _cvtsh_ss(blk->dmin);
            int sc[8], mn[8];
            k4_scales(blk->scales, sc, mn);
            __m256i qh = load32(blk->qh); /* bit j of byte l: element l of sub-block j */
            for (int i = 0; i < 4; i++) {
                __m256i bytes = load32(blk->qs + 32 * i);
                __m256i h[2] = {_mm256_and_si256(bytes, m4),
                                _mm256_and_si256(_mm256_srli_epi16(bytes, 4), m4)};
                for (int k = 0; k < 2; k++) {
                    int j = 2 * i + k;
                    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, j), one);
                    __m256i u = _mm256_or_si256(h[k], _mm256_slli_epi16(hi, 4));
                    const struct qmm_q8 *xb = x + sb * 8 + j;
                    __m128 dd = _mm_mul_ps(_mm_set1_ps(d * (float)sc[j]), TOKEN_VEC(d, xb, ldx, nt));
                    add[r] = _mm_fmadd_ps(_mm_set1_ps(-dmin * (float)mn[j]),
                                          TOKEN_VEC(s, xb, ldx, nt), add[r]);
                    UNROLL for (int t = 0; t < nt; t++)
                        acc[r][t] = _mm256_fmadd_ps(lane(dd, t),
                                                    dot_us(u, load32(xb[t * ldx].qs)),
                                                    acc[r][t]);
                }
            }
        }
    }
    store_tile(acc, add, mr, nt, y, ldy);
}

/* ---- Q6_K: 16 sub-blocks of 16 per super-block -------------------------------- */

AVX2 INLINE void tile_k6(const uint8_t *w, size_t row_bytes, int64_t n_blk,
                         const struct qmm_q8 *x, int64_t ldx, const int mr, const int nt,
                         float *y, int64_t ldy)
{
    __m256 acc[QMM_MR][QMM_NT];
    UNROLL for (int r = 0; r < mr; r++)
        UNROLL for (int t = 0; t < nt; t++)
            acc[r][t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    const __m256i c32 = _mm256_set1_epi8(32);
    for (int64_t sb = 0; sb < n_blk / 8; sb++) {
        UNROLL for (int r = 0; r < mr; r++) {
            const struct block_q6_K *blk =
                (const struct block_q6_K *)(w + (size_t)r * row_bytes) + sb;
            float d = _cvtsh_ss(blk->d);
            for (int n = 0; n < 2; n++) {
                __m256i q0 = load32(blk->ql + 64 * n), q1 = load32(blk->ql + 64 * n + 32);
                __m256i h = load32(blk->qh + 32 * n);
                __m256i u[4];
                u[0] = _mm256_or_si256(_mm256_and_si256(q0, m4),
                                       _mm256_and_si256(_mm256_slli_epi16(h, 4), m30));
                u[1] = _mm256_or_si256(_mm256_and_si256(q1, m4),
                                       _mm256_and_si256(_mm256_slli_epi16(h, 2), m30));
                u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q0, 4), m4),
                                       _mm256_and_si256(h, m30));
                u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q1, 4), m4),
                                       _mm256_and_si256(_mm256_srli_epi16(h, 2), m30));
                for (int k = 0; k < 4; k++) {
                    int j = 4 * n + k;
                    __m256i scv = _mm256_set_m128i(_mm_set1_epi16(blk->scales[2 * j + 1]),
                                                   _mm_set1_epi16(blk->scales[2 * j]));
                    UNROLL for (int t = 0; t < nt; t++) {
                        const struct qmm_q8 *xb = x + t * ldx + sb * 8 + j;
                        __m256i xv = load32(xb->qs);
                        __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(u[k], xv),
                                                     _mm256_maddubs_epi16(c32, xv));
                        __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, scv));
                        acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(d * xb->d), s, acc[r][t]);
                    }
                }
            }
        }
    }
    UNROLL for (int r = 0; r < mr; r++)
        UNROLL for (int t = 0; t < nt; t++)
            y[t * ldy + r] = hsum(acc[r][t]);
}

/* ---- prefill GEMM: 8 rows as the 8 lanes ------------------------------------- */

/* For many tokens, 8 rows of a 32-element block format are first repacked
 * (struct qmm_pack8: each row's block unpacked to u8 quants and transposed,
 * so 32-bit lane j of w[k] holds row j's quants 4k..4k+3), then every token
 * costs per block 8 u8 x s8 dot-accumulates whose lanes are already the 8
 * rows' sums: no horizontal work and one scale FMA per 8 rows. Weights are
 * w = d q + m with q unsigned: Q4_0 has m = -8 d, Q4_1 its m, Q8_0 stores
 * q + 128 with m = -128 d (VNNI only: vpmaddubsw would saturate). */

/* 8 rows x 32 dwords -> 8 columns, in place. */
AVX2 INLINE void transpose8(__m256i r[8])
{
    __m256i t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int h = 0; h < 2; h++) {
        u[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h + 0], t[4 * h + 2]);
        u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h + 0], t[4 * h + 2]);
        u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
        u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
    }
    for (int k = 0; k < 4; k++) {
        r[k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x20);
        r[k + 4] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x31);
    }
}

AVX2 INLINE void pack8(const enum kind kind, const uint8_t *w, size_t row_bytes, int64_t n_blk,
                       struct qmm_pack8 *p)
{
    const size_t bb = kind == K_Q4_0 ? sizeof(struct block_q4_0)
                    : kind == K_Q4_1 ? sizeof(struct block_q4_1)
                    : kind == K_Q5_0 ? sizeof(struct block_q5_0)
                    : kind == K_Q5_1 ? sizeof(struct block_q5_1)
                                     : sizeof(struct block_q8_0);
    for (int64_t b = 0; b < n_blk; b++) {
        __m256i r[8];
        for (int j = 0; j < 8; j++) {
            const uint8_t *blk = w + (size_t)j * row_bytes + (size_t)b * bb;
            float d = _cvtsh_ss(ig_f16_load(blk));
            p[b].d[j] = d;
            if (kind == K_Q8_0) {
                r[j] = _mm256_xor_si256(load32(blk + 2), _mm256_set1_epi8((char)0x80));
                p[b].m[j] = -128.0f * d;
            } else if (kind == K_Q4_1) {
                r[j] = nib32(blk + 4);
                p[b].m[j] = _cvtsh_ss(ig_f16_load(blk + 2));
            } else if (kind == K_Q5_0) {
                r[j] = _mm256_or_si256(nib32(blk + 6), fifth_bits(blk + 2));
                p[b].m[j] = -16.0f * d;
            } else if (kind == K_Q5_1) {
                r[j] = _mm256_or_si256(nib32(blk + 8), fifth_bits(blk + 4));
                p[b].m[j] = _cvtsh_ss(ig_f16_load(blk + 2));
            } else {
                r[j] = nib32(blk + 2);
                p[b].m[j] = -8.0f * d;
            }
        }
        transpose8(r);
        for (int k = 0; k < 8; k++)
            _mm256_store_si256((__m256i *)p[b].q[k], r[k]);
    }
}

/* 5-bit quants: a fifth bit to unpack (KIND_FLUSH says whose AVX2 sums
 * need int32 part way). */
#define KIND_WIDE(kind) ((kind) == K_Q5_0 || (kind) == K_Q5_1 || (kind) == K_Q5_K)
/* Q4_0 and Q5_0 (w = d (q - 8), d (q - 16)): the zero point comes off each
 * block's integer sum (struct qmm_q8's sum8, sum16_pairs), where the other
 * formats' offsets m are f32 sums of their own. */
#define KIND_ZERO_POINT(kind) ((kind) == K_Q4_0 || (kind) == K_Q5_0)

/* Q5_0's zero point off the int16 pair sums s of a token block (AVX2): the
 * 5-bit sums of q x wrap in int16 (up to 16 * 31 * 127 a lane), but each
 * lane's sum of (q - 16) x over its 16 quants fits (at most 16 * 16 * 127
 * in size) and wrapping adds are exact modulo 2^16, so the difference is
 * exact; one subtract where flushing to int32 every 4 vectors took two
 * more operations a token and block. */
AVX2 INLINE __m256i minus_pairs16(__m256i s, const struct qmm_q8 *xb)
{
    int32_t pairs;
    memcpy(&pairs, xb->sum16_pairs, sizeof pairs);
    return _mm256_sub_epi16(s, _mm256_set1_epi32(pairs));
}

/* What a zero point takes off a token block's int32 sum: 8 sum(q) for Q4_0,
 * 16 sum(q) for Q5_0. */
AVX2 INLINE int32_t zero_point_sum(const enum kind kind, const struct qmm_q8 *xb)
{
    return kind == K_Q4_0 ? xb->sum8 : xb->sum16;
}

/* The zero point off the int32 sum: Q4_0's, and Q5_0's with VNNI (on AVX2
 * it came off the int16 sums: minus_pairs16). */
AVX2 INLINE __m256i minus_zero_point(const enum kind kind, __m256i sum, const struct qmm_q8 *xb)
{
    if (kind != K_Q4_0 && !QMM_X86_VNNI)
        return sum;
    return _mm256_sub_epi32(sum, _mm256_set1_epi32(zero_point_sum(kind, xb)));
}

/* 5-bit quants whose AVX2 int16 sums go to int32 every 4 vectors (Q5_0's
 * stay in int16: minus_pairs16). */
#define KIND_FLUSH(kind) (KIND_WIDE(kind) && (kind) != K_Q5_0)

#if !QMM_X86_VNNI
/* The AVX2 int32 sums of 8 rows' unsigned 4- or 5-bit quants q[0..8)
 * against token block xb (quants xq): pair sums in int16 (<= 2 * 15 * 128
 * for 4 bits; 5-bit ones, <= 2 * 31 * 128 each, to int32 every 4 steps or,
 * Q5_0's, less their zero point), then int32. The GEMM's C loop and the
 * GEMV share it, the assembly loop is its copy. */
AVX2 INLINE __m256i nibble_sums(const enum kind kind, const __m256i q[8], const int32_t *xq,
                                const struct qmm_q8 *xb)
{
    __m256i s = _mm256_setzero_si256(), s32 = _mm256_setzero_si256();
    UNROLL for (int k = 0; k < 8; k++) {
        s = _mm256_add_epi16(s, _mm256_maddubs_epi16(q[k], _mm256_set1_epi32(xq[k])));
        if (KIND_FLUSH(kind) && k == 3) {
            s32 = _mm256_madd_epi16(s, _mm256_set1_epi16(1));
            s = _mm256_setzero_si256();
        }
    }
    if (kind == K_Q5_0)
        s = minus_pairs16(s, xb);
    return _mm256_add_epi32(s32, _mm256_madd_epi16(s, _mm256_set1_epi16(1)));
}
#endif

#if !QMM_X86_VNNI
#include "ops/qmatmul_avx2_asm.h"
_Static_assert(QMM_NT == 4, "the assembly loop runs 4 tokens");
#endif

/* y[t * ldy + j] for j < 8, t < nt (a constant), from packed rows of a
 * kind's quants (for 5-bit ones but Q5_0's the AVX2 int16 sums go to int32
 * every 4 steps: KIND_FLUSH). */
AVX2 INLINE void gemm8_tokens(const struct qmm_pack8 *p, int64_t n_blk, const struct qmm_q8 *x,
                              int64_t ldx, const int nt, float *y, int64_t ldy,
                              const enum kind kind)
{
    const bool zp = KIND_ZERO_POINT(kind);
    __m256 acc[QMM_NT], add[QMM_NT];
    UNROLL for (int t = 0; t < nt; t++) {
        acc[t] = _mm256_setzero_ps();
        add[t] = _mm256_setzero_ps();
    }
    int64_t b0 = 0; /* the blocks already summed (by the assembly loop) */
#if !QMM_X86_VNNI
    if (nt == QMM_NT) {
        gemm8_4tokens_asm(p, n_blk, x, ldx, acc,
                          kind == K_Q4_0     ? ASM_Q4_0
                          : kind == K_Q5_0   ? ASM_Q5_0
                          : KIND_FLUSH(kind) ? ASM_WIDE
                                             : ASM_NARROW);
        b0 = n_blk;
    }
#endif
    for (int64_t b = b0; b < n_blk; b++) {
        __m256 d = _mm256_load_ps(p[b].d);
        UNROLL for (int t = 0; t < nt; t++) {
            const struct qmm_q8 *xb = x + t * ldx + b;
            const int32_t *xq = (const int32_t *)(const void *)xb->qs;
#if QMM_X86_VNNI
            __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
            UNROLL for (int k = 0; k < 8; k += 2) {
                s0 = QMM_X86_DPBUSD(s0, _mm256_load_si256((const __m256i *)p[b].q[k]),
                                    _mm256_set1_epi32(xq[k]));
                s1 = QMM_X86_DPBUSD(s1, _mm256_load_si256((const __m256i *)p[b].q[k + 1]),
                                    _mm256_set1_epi32(xq[k + 1]));
            }
            __m256i sum = _mm256_add_epi32(s0, s1);
#else
            __m256i q[8];
            UNROLL for (int k = 0; k < 8; k++)
                q[k] = _mm256_load_si256((const __m256i *)p[b].q[k]);
            __m256i sum = nibble_sums(kind, q, xq, xb);
#endif
            if (zp)
                sum = minus_zero_point(kind, sum, xb);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum),
                                     _mm256_mul_ps(d, _mm256_set1_ps(xb->d)), acc[t]);
        }
    }
    /* The offsets' sums (none for a zero point) in a loop of their own: the
     * same operations in the same order, and the loop above two operations a
     * block and token and four accumulators lighter (what lets the AVX2
     * assembly loop hold everything in the 16 ymm registers). */
    if (!zp)
        for (int64_t b = 0; b < n_blk; b++) {
            __m256 m = _mm256_load_ps(p[b].m);
            UNROLL for (int t = 0; t < nt; t++)
                add[t] = _mm256_fmadd_ps(m, _mm256_set1_ps(x[t * ldx + b].s), add[t]);
        }
    UNROLL for (int t = 0; t < nt; t++)
        _mm256_storeu_ps(y + t * ldy, _mm256_add_ps(acc[t], add[t]));
}

/* The next 8-row group's weights (the caller's next call: the stored rows
 * or the packed group after this one), asked for into L2 a few lines at
 * each of this group's `steps` token steps: its unpacking otherwise waited
 * on L3 or memory, a quarter of the packed GEMM's time outside the assembly
 * loop. L2 (T1) on every CPU: the lines are wanted thousands of cycles
 * later, past the token blocks streaming through L1; where Zen 4 drops a
 * T1 request the line is simply read when needed. At the end of a thread's
 * rows the requests touch bytes it does not read (the next thread's rows,
 * the next tensor: a prefetch never faults); the address is made as an
 * integer, not by pointer arithmetic past the weight. */
struct next_group {
    uintptr_t at;       /* the next line to ask for */
    uintptr_t end;      /* the group's end */
    size_t lines_per_step;
};

AVX2 INLINE struct next_group next_group_of(const uint8_t *w, size_t group_bytes, int64_t steps)
{
    uintptr_t at = (uintptr_t)w + group_bytes;
    size_t lines = (group_bytes + 63) / 64;
    struct next_group g = {at, at + group_bytes,
                           steps > 0 ? (lines + (size_t)steps - 1) / (size_t)steps : 0};
    return g;
}

AVX2 INLINE void next_group_step(struct next_group *g)
{
    for (size_t i = 0; i < g->lines_per_step && g->at < g->end; i++, g->at += 64)
        _mm_prefetch((const char *)g->at, _MM_HINT_T1);
}
/* The GEMV streams its own group (prefetch_ahead): nothing to ask. */
#define NO_NEXT_GROUP ((struct next_group){0, 0, 0})

/* The 8 rows in `pack` against nt tokens, QMM_NT at a time, asking for
 * `next` a step at each whole QMM_NT. */
AVX2 INLINE void gemm8_all(const struct qmm_pack8 *pack, int64_t n_blk, const struct qmm_q8 *x,
                           int64_t ldx, int64_t nt, float *y, int64_t ldy, const enum kind kind,
                           struct next_group next)
{
    int64_t t = 0;
    for (; t + QMM_NT <= nt; t += QMM_NT) {
        next_group_step(&next);
        gemm8_tokens(pack, n_blk, x + t * ldx, ldx, QMM_NT, y + t * ldy, ldy, kind);
    }
    switch (nt - t) {
    case 3: gemm8_tokens(pack, n_blk, x + t * ldx, ldx, 3, y + t * ldy, ldy, kind); break;
    case 2: gemm8_tokens(pack, n_blk, x + t * ldx, ldx, 2, y + t * ldy, ldy, kind); break;
    case 1: gemm8_tokens(pack, n_blk, x + t * ldx, ldx, 1, y + t * ldy, ldy, kind); break;
    default: break;
    }
}

/* Nibbles that index the IQ4 levels (one vpshufb to their bytes). */
#define KIND_LUT(kind) ((kind) == K_IQ4_NL || (kind) == K_IQ4_XS || (kind) == K_MXFP4)
/* Quants that are whole bytes q + 128 in the dot products (Q8_0's as
 * stored, the IQ4 levels' after the lookup), not 4 or 5 unsigned bits. */
#define KIND_BYTES(kind) ((kind) == K_Q8_0 || KIND_LUT(kind))

/* The nibbles of q[0..8) as the IQ4 levels' bytes v + 128, or with
 * `signed_levels` as the levels v themselves (the table's top bits flipped
 * once, where AVX2's GEMV would flip every looked-up byte). */
AVX2 INLINE void iq4_bytes(const enum kind kind, __m256i q[8], const bool signed_levels)
{
    static const uint8_t bytes[16] = {QMM_IQ4_BYTES}, mx_bytes[16] = {QMM_MXFP4_BYTES};
    __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128(
        (const __m128i *)(const void *)(kind == K_MXFP4 ? mx_bytes : bytes)));
    if (signed_levels)
        lut = _mm256_xor_si256(lut, _mm256_set1_epi8((char)0x80));
    UNROLL for (int k = 0; k < 8; k++)
        q[k] = _mm256_shuffle_epi8(lut, q[k]);
}

AVX2 INLINE void gemm8(const enum kind kind, const uint8_t *w, size_t row_bytes, int64_t n_blk,
                       const struct qmm_q8 *x, int64_t ldx, int64_t nt, float *y, int64_t ldy,
                       struct qmm_pack8 *pack)
{
    pack8(kind, w, row_bytes, n_blk, pack);
    gemm8_all(pack, n_blk, x, ldx, nt, y, ldy, kind,
              next_group_of(w, 8 * row_bytes, nt / QMM_NT));
}
_Static_assert(QMM_NT == 4, "gemm8 instantiates 1..4 tokens");

#define GEMM8(name, kind)                                                                    \
    AVX2 static void gemm8_##name(const uint8_t *w, size_t row_bytes, int64_t n_blk,         \
                                  const struct qmm_q8 *x, int64_t ldx, int64_t nt, float *y, \
                                  int64_t ldy, struct qmm_pack8 *pack)                       \
    {                                                                                       \
        gemm8(kind, w, row_bytes, n_blk, x, ldx, nt, y, ldy, pack);                          \
    }
GEMM8(q4_0, K_Q4_0)
GEMM8(q4_1, K_Q4_1)
GEMM8(q5_0, K_Q5_0)
GEMM8(q5_1, K_Q5_1)
#if QMM_X86_VNNI
GEMM8(q8_0, K_Q8_0)
#endif

static qmm_gemm8_fn gemm8_of(enum quant_type type)
{
    switch (type) {
    case QUANT_Q4_0: return gemm8_q4_0;
    case QUANT_Q4_1: return gemm8_q4_1;
    case QUANT_Q5_0: return gemm8_q5_0;
    case QUANT_Q5_1: return gemm8_q5_1;
#if QMM_X86_VNNI
    case QUANT_Q8_0: return gemm8_q8_0;
#endif
    default: return NULL;
    }
}

/* Where an unpacking stores its blocks' 8 rows: the entries of struct
 * qmm_pack8 (32 bytes a quant vector), or one half of the 16-row entries of
 * ops/qmatmul_zmm.h (64 bytes a vector, each 8-row group in its half).
 * Offsets in bytes from block b's first quant vector. */
struct unpack_dst {
    uint8_t *base; /* block 0's q[0] */
    size_t block;  /* from one block to the next */
    size_t vec;    /* from q[k] to q[k + 1] */
    size_t d, m;   /* to the 8 scales and the 8 offsets */
};

AVX2 INLINE struct unpack_dst pack8_dst(struct qmm_pack8 *p)
{
    return (struct unpack_dst){(uint8_t *)p, sizeof *p, sizeof p->q[0],
                               offsetof(struct qmm_pack8, d), offsetof(struct qmm_pack8, m)};
}

AVX2 INLINE void store_unpacked(const struct unpack_dst o, int64_t b, const __m256i q[8],
                                __m256 d, __m256 m)
{
    uint8_t *at = o.base + (size_t)b * o.block;
    UNROLL for (int k = 0; k < 8; k++)
        _mm256_store_si256((__m256i *)(void *)(at + (size_t)k * o.vec), q[k]);
    _mm256_store_ps((float *)(void *)(at + o.d), d);
    _mm256_store_ps((float *)(void *)(at + o.m), m);
}

/* ---- decode GEMV: the packed layout of ops/qmatmul.h ----------------------- */

/* A packed block's bytes (ops_qmm_packed_block_bytes, as a constant the
 * kernels fold) and where its quants start: after f16 d[8] (and m[8]), or
 * Q4_K's and Q5_K's u8 sc[8], mn[8]. */
AVX2 INLINE size_t packed_bytes(const enum kind kind)
{
    return kind == K_Q4_0 ? 144 : kind == K_Q4_1 ? 160 : kind == K_Q5_0 ? 176
         : kind == K_Q5_1 ? 192 : kind == K_Q4_K ? QMM_K4_SUPER / 8
         : kind == K_Q5_K ? QMM_K5_SUPER / 8
         : kind == K_IQ4_NL || kind == K_MXFP4 ? 144 /* Q4_0's layout */
         : kind == K_IQ4_XS ? QMM_XS_SUPER / 8 : 272;
}

AVX2 INLINE int packed_qoff(const enum kind kind)
{
    return kind == K_Q4_1 || kind == K_Q5_1 ? 32 : kind == K_IQ4_XS ? 8 : 16;
}

/* Block b of a packed group, and for Q4_K and Q5_K the head of its
 * super-block. */
AVX2 INLINE const uint8_t *packed_block(const enum kind kind, const uint8_t *p, int64_t b,
                                        size_t pb, const uint8_t **head)
{
    if (kind == K_Q4_K) {
        *head = qmm_k4_head(p, b);
        return qmm_k4_block(p, b);
    }
    if (kind == K_Q5_K) {
        *head = qmm_k5_head(p, b);
        return qmm_k5_block(p, b);
    }
    if (kind == K_IQ4_XS) {
        *head = qmm_xs_head(p, b);
        return qmm_xs_block(p, b);
    }
    *head = NULL;
    return p + (size_t)b * pb;
}

/* A packed block's 8 scales and offsets (w = d q + m): f16 d (and m) for
 * the 32-element formats, m derived from d where it is fixed; for Q4_K and
 * Q5_K the sub-block's d sc and -dmin mn from the super-block's head, exact
 * products (the values the stored rows' kernels form). */
AVX2 INLINE void packed_scales(const enum kind kind, const uint8_t *blk, const uint8_t *head,
                               __m256 *d, __m256 *m)
{
    if (kind == K_Q4_K || kind == K_Q5_K) {
        __m256 dd = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)head));
        __m256 dmin =
            _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(head + 16)));
        __m256 sc = _mm256_cvtepi32_ps(
            _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)blk)));
        __m256 mn = _mm256_cvtepi32_ps(
            _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(blk + 8))));
        *d = _mm256_mul_ps(dd, sc);
        *m = _mm256_mul_ps(_mm256_xor_ps(dmin, _mm256_set1_ps(-0.0f)), mn);
        return;
    }
    if (kind == K_IQ4_XS) { /* d sc, signed scales; Q8_0's -128 d sc */
        __m256 dd = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)head));
        __m256 sc = _mm256_cvtepi32_ps(
            _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)blk)));
        *d = _mm256_mul_ps(dd, sc);
        *m = _mm256_mul_ps(*d, _mm256_set1_ps(-128.0f));
        return;
    }
    *d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)blk));
    *m = kind == K_Q4_1 || kind == K_Q5_1
             ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(blk + 16)))
             : _mm256_mul_ps(*d, _mm256_set1_ps(kind == K_Q4_0   ? -8.0f
                                                : kind == K_Q5_0 ? -16.0f
                                                                 : -128.0f));
}

/* One sequential stream of packed groups, 8 rows in the 8 lanes: per block
 * the quants need at most a mask and a shift, the int32 sums are those of
 * gemm8_tokens and the f32 updates the same operations in the same order,
 * so the result equals the prefill GEMM's bit for bit. (Q8_0 without VNNI
 * has no GEMM: there this kernel serves every token count.) */
AVX2 INLINE void gemv8_tokens(const enum kind kind, const uint8_t *p, int64_t n_blk,
                              const struct qmm_q8 *x, int64_t ldx, const int nt, float *y,
                              int64_t ldy, const bool to_l2)
{
    const size_t pb = packed_bytes(kind);
    const int qoff = packed_qoff(kind);
    const bool wide = KIND_WIDE(kind), zp = KIND_ZERO_POINT(kind);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc[QMM_NT], add[QMM_NT];
    UNROLL for (int t = 0; t < nt; t++) {
        acc[t] = _mm256_setzero_ps();
        add[t] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < n_blk; b++) {
        const uint8_t *head;
        const uint8_t *blk = packed_block(kind, p, b, pb, &head);
        prefetch_ahead(blk, pb, to_l2);
        __m256 d, m;
        packed_scales(kind, blk, head, &d, &m);
        __m256i q[8];
        if (kind == K_Q8_0) {
            UNROLL for (int k = 0; k < 8; k++)
                q[k] = load32(blk + qoff + 32 * k);
        } else {
            UNROLL for (int v = 0; v < 4; v++) {
                __m256i V = load32(blk + qoff + 32 * v);
                q[2 * v] = _mm256_and_si256(V, m4);
                q[2 * v + 1] = _mm256_and_si256(_mm256_srli_epi16(V, 4), m4);
            }
            if (wide) { /* the fifth bits, from the plane after the nibbles */
                __m256i plane = load32(blk + qoff + 128);
                UNROLL for (int k = 0; k < 8; k++)
                    q[k] = _mm256_or_si256(q[k], plane_bits(plane, k));
            }
            if (KIND_LUT(kind))
                iq4_bytes(kind, q, !QMM_X86_VNNI);
        }
#if !QMM_X86_VNNI
        if (KIND_BYTES(kind)) {
            /* vpmaddubsw's pair sums of (q + 128) x would saturate int16:
             * back to signed q (the IQ4 levels come signed from their
             * table), summed as |q| x sign(x, q) (pairs of at most
             * 2 * 128 * 127), so the sums are of q x and there is no offset */
            if (kind == K_Q8_0)
                UNROLL for (int k = 0; k < 8; k++)
                    q[k] = _mm256_xor_si256(q[k], _mm256_set1_epi8((char)0x80));
            m = _mm256_setzero_ps();
        }
#endif
        UNROLL for (int t = 0; t < nt; t++) {
            const struct qmm_q8 *xb = x + t * ldx + b;
            const int32_t *xq = (const int32_t *)(const void *)xb->qs;
#if QMM_X86_VNNI
            __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
            UNROLL for (int k = 0; k < 8; k += 2) {
                s0 = QMM_X86_DPBUSD(s0, q[k], _mm256_set1_epi32(xq[k]));
                s1 = QMM_X86_DPBUSD(s1, q[k + 1], _mm256_set1_epi32(xq[k + 1]));
            }
            __m256i sum = _mm256_add_epi32(s0, s1);
#else
            __m256i sum;
            if (KIND_BYTES(kind)) {
                __m256i s = _mm256_setzero_si256();
                UNROLL for (int k = 0; k < 8; k++) {
                    __m256i pr = _mm256_maddubs_epi16(
                        _mm256_abs_epi8(q[k]), _mm256_sign_epi8(_mm256_set1_epi32(xq[k]), q[k]));
                    s = _mm256_add_epi32(s, _mm256_madd_epi16(pr, _mm256_set1_epi16(1)));
                }
                sum = s;
            } else {
                sum = nibble_sums(kind, q, xq, xb); /* as gemm8_tokens */
            }
#endif
            if (zp) /* as gemm8_tokens: the zero point in the integer sum, no offsets */
                sum = minus_zero_point(kind, sum, xb);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum),
                                     _mm256_mul_ps(d, _mm256_set1_ps(xb->d)), acc[t]);
            if (!zp)
                add[t] = _mm256_fmadd_ps(m, _mm256_set1_ps(xb->s), add[t]);
        }
    }
    UNROLL for (int t = 0; t < nt; t++)
        _mm256_storeu_ps(y + t * ldy, _mm256_add_ps(acc[t], add[t]));
}

AVX2 INLINE void gemv8(const enum kind kind, const uint8_t *p, int64_t n_blk,
                       const struct qmm_q8 *x, int64_t ldx, int64_t nt, int nr, float *y,
                       int64_t ldy, const bool to_l2)
{
    float tmp[QMM_NT * 8];
    for (int64_t t = 0; t < nt; t += QMM_NT) {
        int n = nt - t < QMM_NT ? (int)(nt - t) : QMM_NT;
        float *yt = nr == 8 ? y + t * ldy : tmp; /* ragged groups go through tmp */
        int64_t ld = nr == 8 ? ldy : 8;
        const struct qmm_q8 *xt = x + t * ldx;
        switch (n) {
        case 1: gemv8_tokens(kind, p, n_blk, xt, ldx, 1, yt, ld, to_l2); break;
        case 2: gemv8_tokens(kind, p, n_blk, xt, ldx, 2, yt, ld, to_l2); break;
        case 3: gemv8_tokens(kind, p, n_blk, xt, ldx, 3, yt, ld, to_l2); break;
        default: gemv8_tokens(kind, p, n_blk, xt, ldx, 4, yt, ld, to_l2); break;
        }
        if (nr < 8)
            for (int k = 0; k < n; k++)
                for (int j = 0; j < nr; j++)
                    y[(t + k) * ldy + j] = tmp[k * 8 + j];
    }
}

/* Bits 2 i and 2 i + 1 of every byte of a Q6_K plane (ops/qmatmul.h) as
 * bits 4 and 5: one 16-bit shift (under 8, so every byte moves alike) and
 * a mask. */
AVX2 INLINE __m256i top2_bits(__m256i plane, const int i)
{
    __m256i v = i < 2 ? _mm256_slli_epi16(plane, 4 - 2 * i) : i == 2 ? plane
                                                                     : _mm256_srli_epi16(plane, 2);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x30));
}

/* Packed Q6_K block b of group p (ops/qmatmul.h): its halves' scales
 * d sc_h (exact products) and its 8 vectors of unsigned 6-bit quants,
 * rebuilt from the nibbles and the plane of top bits. */
AVX2 INLINE void k6_block(const uint8_t *p, int64_t b, __m256 *d0, __m256 *d1, __m256i q[8])
{
    const int nib = 2 * QMM_PR, plane = nib + QMM_PR * QMM_QK / 2; /* offsets in the block */
    const uint8_t *blk = qmm_k6_block(p, b);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)qmm_k6_head(p, b)));
    *d0 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                               _mm_loadl_epi64((const __m128i *)(const void *)blk))));
    *d1 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                               _mm_loadl_epi64((const __m128i *)(const void *)(blk + 8)))));
    UNROLL for (int v = 0; v < 4; v++) {
        __m256i V = load32(blk + nib + 32 * v);
        q[2 * v] = _mm256_and_si256(V, m4);
        q[2 * v + 1] = _mm256_and_si256(_mm256_srli_epi16(V, 4), m4);
    }
    UNROLL for (int k = 0; k < 8; k++)
        q[k] = _mm256_or_si256(q[k], top2_bits(load32(blk + plane + 32 * (k / 4)), k % 4));
}

/* A Q6_K block's offsets for token block xb over -32: d_h dhs_h for its
 * halves (scales d0, d1). The caller multiplies the sum by -32 once (a
 * power of two: the same bits as on every term). */
AVX2 INLINE void k6_offsets(__m256 d0, __m256 d1, const struct qmm_q8 *xb, __m256 *add)
{
    *add = _mm256_fmadd_ps(d0, _mm256_set1_ps(xb->dhs[0]), *add);
    *add = _mm256_fmadd_ps(d1, _mm256_set1_ps(xb->dhs[1]), *add);
}

/* Packed Q2_K block b of group p (ops/qmatmul.h): its halves' scales
 * d sc_h (exact products: 11 by 4 bits) and its 8 vectors of 2-bit quants. */
AVX2 INLINE void k2_block(const uint8_t *p, int64_t b, __m256 *d0, __m256 *d1, __m256i q[8])
{
    const uint8_t *blk = qmm_k2_block(p, b);
    __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)qmm_k2_head(p, b)));
    *d0 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                               _mm_loadl_epi64((const __m128i *)(const void *)blk))));
    *d1 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                               _mm_loadl_epi64((const __m128i *)(const void *)(blk + 8)))));
    UNROLL for (int v = 0; v < 2; v++) {
        __m256i V = load32(blk + 4 * QMM_PR + 32 * v);
        UNROLL for (int s = 0; s < 4; s++) /* a 16-bit shift under 8 moves every byte alike */
            q[4 * v + s] = _mm256_and_si256(_mm256_srli_epi16(V, 2 * s), _mm256_set1_epi8(3));
    }
}

/* The offsets of Q2_K block b's halves, -dmin mn_h (exact products). */
AVX2 INLINE void k2_mins(const uint8_t *p, int64_t b, __m256 *m0, __m256 *m1)
{
    const uint8_t *blk = qmm_k2_block(p, b);
    __m256 dmin = _mm256_cvtph_ps(
        _mm_loadu_si128((const __m128i *)(const void *)(qmm_k2_head(p, b) + 2 * QMM_PR)));
    dmin = _mm256_xor_ps(dmin, _mm256_set1_ps(-0.0f));
    *m0 = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                                  (const __m128i *)(const void *)(blk + 2 * QMM_PR)))));
    *m1 = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                                  (const __m128i *)(const void *)(blk + 3 * QMM_PR)))));
}

/* Q2_K's offsets m0, m1 for token block xb: one fma per half with the
 * token's dhs_h. */
AVX2 INLINE void k2_offsets(__m256 m0, __m256 m1, const struct qmm_q8 *xb, __m256 *add)
{
    *add = _mm256_fmadd_ps(m0, _mm256_set1_ps(xb->dhs[0]), *add);
    *add = _mm256_fmadd_ps(m1, _mm256_set1_ps(xb->dhs[1]), *add);
}

/* Q6_K: y for nt (<= QMM_NT) tokens from packed group p, or with
 * `unpacked` from its blocks as gemm8p_q6_K left them in up (the same
 * values: the same bits, so prefill and decode agree). w = d sc_h (u - 32)
 * per 16-element half: each half summed apart, the -32 from the token's
 * dhs (k6_offsets, times -32 once at the end). The AVX2 pair sums (<= 2 *
 * 63 * 128) fit in int16 two vectors at a time. */
AVX2 INLINE void gemv8_k6_tokens(const bool k2, const uint8_t *p, const struct qmm_pack8 *up,
                                 const bool unpacked, int64_t n_blk, const struct qmm_q8 *x,
                                 int64_t ldx, const int nt, float *y, int64_t ldy,
                                 const bool to_l2)
{
    __m256 acc[QMM_NT], add[QMM_NT];
    UNROLL for (int t = 0; t < nt; t++) {
        acc[t] = _mm256_setzero_ps();
        add[t] = _mm256_setzero_ps();
    }
    int64_t b0 = 0; /* the blocks already summed (by the assembly loop) */
#if !QMM_X86_VNNI
    if (unpacked && nt == QMM_NT) {
        gemm8_4tokens_asm(up, n_blk, x, ldx, acc, ASM_K6);
        b0 = n_blk;
    }
#endif
    for (int64_t b = b0; b < n_blk; b++) {
        __m256 d0, d1, m0 = _mm256_setzero_ps(), m1 = m0; /* (m: Q2_K's) */
        __m256i q[8];
        if (unpacked) {
            d0 = _mm256_load_ps(up[b].d), d1 = _mm256_load_ps(up[b].m);
            UNROLL for (int k = 0; k < 8; k++)
                q[k] = _mm256_load_si256((const __m256i *)up[b].q[k]);
        } else if (k2) {
            prefetch_ahead(qmm_k2_block(p, b), QMM_K2_SUPER / 8, to_l2);
            k2_block(p, b, &d0, &d1, q);
            k2_mins(p, b, &m0, &m1);
        } else {
            prefetch_ahead(qmm_k6_block(p, b), QMM_K6_SUPER / 8, to_l2);
            k6_block(p, b, &d0, &d1, q);
        }
        UNROLL for (int t = 0; t < nt; t++) {
            const struct qmm_q8 *xb = x + t * ldx + b;
            const int32_t *xq = (const int32_t *)(const void *)xb->qs;
            __m256i s[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#if QMM_X86_VNNI
            UNROLL for (int k = 0; k < 8; k++)
                s[k / 4] = QMM_X86_DPBUSD(s[k / 4], q[k], _mm256_set1_epi32(xq[k]));
#else
            /* two vectors' pair sums in int16 (<= 2 * 2 * 63 * 128), then
             * to int32: exact integers, so the same sums as one at a time */
            UNROLL for (int k = 0; k < 8; k += 2) {
                __m256i pr =
                    _mm256_add_epi16(_mm256_maddubs_epi16(q[k], _mm256_set1_epi32(xq[k])),
                                     _mm256_maddubs_epi16(q[k + 1], _mm256_set1_epi32(xq[k + 1])));
                s[k / 4] = _mm256_add_epi32(s[k / 4], _mm256_madd_epi16(pr, _mm256_set1_epi16(1)));
            }
#endif
            __m256 xd = _mm256_set1_ps(xb->d);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[0]), _mm256_mul_ps(d0, xd), acc[t]);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[1]), _mm256_mul_ps(d1, xd), acc[t]);
            if (!unpacked && k2)
                k2_offsets(m0, m1, xb, &add[t]);
            else if (!unpacked)
                k6_offsets(d0, d1, xb, &add[t]);
        }
    }
    if (unpacked) /* apart, as gemm8_tokens's offsets (the same order) */
        for (int64_t b = 0; b < n_blk; b++) {
            __m256 d0 = _mm256_load_ps(up[b].d), d1 = _mm256_load_ps(up[b].m);
            __m256 m0 = _mm256_setzero_ps(), m1 = m0;
            if (k2)
                k2_mins(p, b, &m0, &m1);
            UNROLL for (int t = 0; t < nt; t++) {
                if (k2)
                    k2_offsets(m0, m1, x + t * ldx + b, &add[t]);
                else
                    k6_offsets(d0, d1, x + t * ldx + b, &add[t]);
            }
        }
    const __m256 scale = _mm256_set1_ps(k2 ? 1.0f : -32.0f); /* Q6_K's -32 (k6_offsets) */
    UNROLL for (int t = 0; t < nt; t++)
        _mm256_storeu_ps(y + t * ldy, _mm256_add_ps(acc[t], _mm256_mul_ps(add[t], scale)));
}

/* The tokens of y, QMM_NT at a time, from packed group p or its unpacked
 * blocks up (gemv8_k6_tokens; Q2_K's offsets read p either way); rows past
 * nr through tmp. The GEMM asks for its `next` group a step at each; the
 * GEMV, which streams its own group ahead (prefetch_ahead), passes
 * NO_NEXT_GROUP. */
AVX2 INLINE void k6_all(const bool k2, const uint8_t *p, const struct qmm_pack8 *up,
                        const bool unpacked, int64_t n_blk, const struct qmm_q8 *x, int64_t ldx,
                        int64_t nt, int nr, float *y, int64_t ldy, const bool to_l2,
                        struct next_group next)
{
    float tmp[QMM_NT * 8];
    for (int64_t t = 0; t < nt; t += QMM_NT) {
        next_group_step(&next);
        int n = nt - t < QMM_NT ? (int)(nt - t) : QMM_NT;
        float *yt = nr == 8 ? y + t * ldy : tmp; /* ragged groups go through tmp */
        int64_t ld = nr == 8 ? ldy : 8;
        const struct qmm_q8 *xt = x + t * ldx;
        switch (n) {
        case 1: gemv8_k6_tokens(k2, p, up, unpacked, n_blk, xt, ldx, 1, yt, ld, to_l2); break;
        case 2: gemv8_k6_tokens(k2, p, up, unpacked, n_blk, xt, ldx, 2, yt, ld, to_l2); break;
        case 3: gemv8_k6_tokens(k2, p, up, unpacked, n_blk, xt, ldx, 3, yt, ld, to_l2); break;
        default: gemv8_k6_tokens(k2, p, up, unpacked, n_blk, xt, ldx, 4, yt, ld, to_l2); break;
        }
        if (nr < 8)
            for (int k = 0; k < n; k++)
                for (int j = 0; j < nr; j++)
                    y[(t + k) * ldy + j] = tmp[k * 8 + j];
    }
}

AVX2 static void gemv8_q6_K(const uint8_t *p, int64_t n_blk, const struct qmm_q8 *x,
                            int64_t ldx, int64_t nt, int nr, float *y, int64_t ldy)
{
    if (gemv_prefetch_to_l2())
        k6_all(false, p, NULL, false, n_blk, x, ldx, nt, nr, y, ldy, true, NO_NEXT_GROUP);
    else
        k6_all(false, p, NULL, false, n_blk, x, ldx, nt, nr, y, ldy, false, NO_NEXT_GROUP);
}

AVX2 static void gemv8_q2_K(const uint8_t *p, int64_t n_blk, const struct qmm_q8 *x,
                            int64_t ldx, int64_t nt, int nr, float *y, int64_t ldy)
{
    if (gemv_prefetch_to_l2())
        k6_all(true, p, NULL, false, n_blk, x, ldx, nt, nr, y, ldy, true, NO_NEXT_GROUP);
    else
        k6_all(true, p, NULL, false, n_blk, x, ldx, nt, nr, y, ldy, false, NO_NEXT_GROUP);
}

/* A Q6_K (or Q2_K) group's blocks [b0, b1) unpacked, block b at entry
 * b - b0: d sc_0 in d, d sc_1 in m, the quants as bytes. */
AVX2 INLINE void unpack_k6(const bool k2, const uint8_t *w, int64_t b0, int64_t b1,
                           const struct unpack_dst out)
{
    for (int64_t b = b0; b < b1; b++) {
        __m256 d0, d1;
        __m256i q[8];
        if (k2)
            k2_block(w, b, &d0, &d1, q);
        else
            k6_block(w, b, &d0, &d1, q);
        store_unpacked(out, b - b0, q, d0, d1);
    }
}

/* Many tokens: the group's blocks unpacked once into `pack`, then the same
 * sums as gemv8_q6_K's, where it rebuilt every block's quants for each
 * QMM_NT tokens. */
AVX2 INLINE void gemm8p_k6(const bool k2, const uint8_t *w, int64_t n_blk,
                           const struct qmm_q8 *x, int64_t ldx, int64_t nt, float *y, int64_t ldy,
                           struct qmm_pack8 *pack)
{
    unpack_k6(k2, w, 0, n_blk, pack8_dst(pack));
    size_t block_bytes = k2 ? QMM_K2_SUPER / 8 : QMM_K6_SUPER / 8;
    k6_all(k2, w, pack, true, n_blk, x, ldx, nt, 8, y, ldy, false,
           next_group_of(w, (size_t)n_blk * block_bytes, (nt + QMM_NT - 1) / QMM_NT));
}

AVX2 static void gemm8p_q6_K(const uint8_t *w, size_t row_bytes, int64_t n_blk,
                             const struct qmm_q8 *x, int64_t ldx, int64_t nt, float *y,
                             int64_t ldy, struct qmm_pack8 *pack)
{
    (void)row_bytes;
    gemm8p_k6(false, w, n_blk, x, ldx, nt, y, ldy, pack);
}

AVX2 static void gemm8p_q2_K(const uint8_t *w, size_t row_bytes, int64_t n_blk,
                             const struct qmm_q8 *x, int64_t ldx, int64_t nt, float *y,
                             int64_t ldy, struct qmm_pack8 *pack)
{
    (void)row_bytes;
    gemm8p_k6(true, w, n_blk, x, ldx, nt, y, ldy, pack);
}

#define GEMV8(name, kind)                                                                    \
    AVX2 static void gemv8_##name(const uint8_t *p, int64_t n_blk, const struct qmm_q8 *x,  \
                                  int64_t ldx, int64_t nt, int nr, float *y, int64_t ldy)  \
    {                                                                                       \
        if (gemv_prefetch_to_l2())                                                          \
            gemv8(kind, p, n_blk, x, ldx, nt, nr, y, ldy, true);                            \
        else                                                                                \
            gemv8(kind, p, n_blk, x, ldx, nt, nr, y, ldy, false);                           \
    }
GEMV8(q4_0, K_Q4_0)
GEMV8(q4_1, K_Q4_1)
GEMV8(q5_0, K_Q5_0)
GEMV8(q5_1, K_Q5_1)
GEMV8(q8_0, K_Q8_0)
GEMV8(q4_K, K_Q4_K)
GEMV8(q5_K, K_Q5_K)
GEMV8(iq4_nl, K_IQ4_NL)
GEMV8(iq4_xs, K_IQ4_XS)
GEMV8(mxfp4, K_MXFP4)

/* The prefill GEMM on a packed group: its blocks are already 8 rows
 * interleaved, so the repacking is only the nibble split (no transpose).
 * Blocks [b0, b1), block b at entry b - b0. */
AVX2 INLINE void unpack8(const enum kind kind, const uint8_t *p, int64_t b0, int64_t b1,
                         const struct unpack_dst out)
{
    const size_t pb = packed_bytes(kind);
    const int qoff = packed_qoff(kind);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *head;
        const uint8_t *blk = packed_block(kind, p, b, pb, &head);
        __m256 d, m;
        packed_scales(kind, blk, head, &d, &m);
        __m256i q[8];
        if (kind == K_Q8_0) {
            UNROLL for (int k = 0; k < 8; k++)
                q[k] = load32(blk + qoff + 32 * k);
        } else {
            UNROLL for (int v = 0; v < 4; v++) {
                __m256i V = load32(blk + qoff + 32 * v);
                q[2 * v] = _mm256_and_si256(V, m4);
                q[2 * v + 1] = _mm256_and_si256(_mm256_srli_epi16(V, 4), m4);
                if (KIND_WIDE(kind)) {
                    __m256i plane = load32(blk + qoff + 128);
                    q[2 * v] = _mm256_or_si256(q[2 * v], plane_bits(plane, 2 * v));
                    q[2 * v + 1] = _mm256_or_si256(q[2 * v + 1], plane_bits(plane, 2 * v + 1));
                }
            }
            if (KIND_LUT(kind))
                iq4_bytes(kind, q, false);
        }
        store_unpacked(out, b - b0, q, d, m);
    }
}

/* gemm8 with w a packed group (row_bytes unused). */
AVX2 INLINE void gemm8p(const enum kind kind, const uint8_t *w, int64_t n_blk,
                        const struct qmm_q8 *x, int64_t ldx, int64_t nt, float *y, int64_t ldy,
                        struct qmm_pack8 *pack)
{
    unpack8(kind, w, 0, n_blk, pack8_dst(pack));
    gemm8_all(pack, n_blk, x, ldx, nt, y, ldy, kind,
              next_group_of(w, (size_t)n_blk * packed_bytes(kind), nt / QMM_NT));
}

#define GEMM8P(name, kind)                                                                   \
    AVX2 static void gemm8p_##name(const uint8_t *w, size_t row_bytes, int64_t n_blk,        \
                                   const struct qmm_q8 *x, int64_t ldx, int64_t nt, float *y, \
                                   int64_t ldy, struct qmm_pack8 *pack)                      \
    {                                                                                       \
        (void)row_bytes;                                                                    \
        gemm8p(kind, w, n_blk, x, ldx, nt, y, ldy, pack);                                    \
    }
GEMM8P(q4_0, K_Q4_0)
GEMM8P(q4_1, K_Q4_1)
GEMM8P(q5_0, K_Q5_0)
GEMM8P(q5_1, K_Q5_1)
GEMM8P(q4_K, K_Q4_K)
GEMM8P(q5_K, K_Q5_K)
/* Whole bytes (up to 255, the IQ4 levels' up to 241) only where vpdpbusd sums
 * them: AVX2's vpmaddubsw pairs would saturate int16 (its GEMV signs them). */
#if QMM_X86_VNNI
GEMM8P(q8_0, K_Q8_0)
GEMM8P(iq4_nl, K_IQ4_NL)
GEMM8P(iq4_xs, K_IQ4_XS)
GEMM8P(mxfp4, K_MXFP4)
#endif

static qmm_gemm8_fn gemm8p_of(enum quant_type type)
{
    switch (type) {
    case QUANT_Q4_0: return gemm8p_q4_0;
    case QUANT_Q4_1: return gemm8p_q4_1;
    case QUANT_Q5_0: return gemm8p_q5_0;
    case QUANT_Q5_1: return gemm8p_q5_1;
    case QUANT_Q4_K: return gemm8p_q4_K;
    case QUANT_Q5_K: return gemm8p_q5_K;
    case QUANT_Q2_K: return gemm8p_q2_K;
    case QUANT_Q3_K: /* packed as Q6_K */
    case QUANT_Q6_K: return gemm8p_q6_K;
#if QMM_X86_VNNI
    case QUANT_Q8_0: return gemm8p_q8_0;
    case QUANT_IQ4_NL: return gemm8p_iq4_nl;
    case QUANT_IQ4_XS: return gemm8p_iq4_xs;
    case QUANT_MXFP4: return gemm8p_mxfp4;
#endif
    default: return NULL;
    }
}

static qmm_gemv8_fn gemv8_of(enum quant_type type)
{
    switch (type) {
    case QUANT_Q4_0: return gemv8_q4_0;
    case QUANT_Q4_1: return gemv8_q4_1;
    case QUANT_Q5_0: return gemv8_q5_0;
    case QUANT_Q5_1: return gemv8_q5_1;
    case QUANT_Q8_0: return gemv8_q8_0;
    case QUANT_IQ4_NL: return gemv8_iq4_nl;
    case QUANT_Q4_K: return gemv8_q4_K;
    case QUANT_Q5_K: return gemv8_q5_K;
    case QUANT_Q2_K: return gemv8_q2_K;
    case QUANT_Q3_K: /* packed as Q6_K */
    case QUANT_Q6_K: return gemv8_q6_K;
    case QUANT_IQ4_XS: return gemv8_iq4_xs;
    case QUANT_MXFP4: return gemv8_mxfp4;
    default: return NULL;
    }
}

/* ---- f32, f16, bf16 weights: 8 rows as lanes, f32 FMA ----------------------------- */

/* With many tokens, 8 rows are converted to f32 and transposed once
 * (p[c * 8 + j] = row j, column c), then each token costs one FMA per column
 * for all 8 rows, FGEMM_NT tokens at a time (the accumulators fill the
 * registers; each packed column is loaded once per FGEMM_NT tokens). Plain
 * f32 sums: the fast path; the exact path (ops/matmul.c) flushes into f64. */
#if !QMM_X86_VNNI || defined(QMM_X86_ZMM) /* the AVX2 file's, and the AVX-512 file's packing */

AVX2 INLINE __m256 load8_as_f32(enum quant_type type, const uint8_t *row, int64_t c)
{
    if (type == QUANT_F32)
        return _mm256_loadu_ps((const float *)(const void *)row + c);
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(row + 2 * c));
    if (type == QUANT_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); /* bf16 */
}

/* Packs rows [0, nr) (nr <= 8; missing rows repeat the last) of cols columns:
 * column c's 8 floats at p + c * stride (8, or 16 where two groups share a
 * column: ops/qmatmul_zmm.h). */
AVX2 INLINE void fpack8(enum quant_type type, const uint8_t *w, size_t row_bytes, int nr,
                        int64_t cols, float *p, const int64_t stride)
{
    for (int64_t c = 0; c < cols; c += 8) {
        __m256i r[8];
        for (int j = 0; j < 8; j++)
            r[j] = _mm256_castps_si256(
                load8_as_f32(type, w + (size_t)(j < nr ? j : nr - 1) * row_bytes, c));
        transpose8(r);
        for (int k = 0; k < 8; k++)
            _mm256_store_si256((__m256i *)(void *)(p + (c + k) * stride), r[k]);
    }
}

/* n values of a packed float copy (ops/qmatmul.h, QMM_FPR) as f32 at dst:
 * the conversion the GEMMs do once per 16-row group and token block, a
 * plain stream (the copy is column-major already). n a multiple of 8. */
AVX2 INLINE void fconvert(enum quant_type type, const uint8_t *src, int64_t n, float *dst)
{
    for (int64_t i = 0; i < n; i += 8)
        _mm256_store_ps(dst + i, load8_as_f32(type, src, i));
}

/* Bytes of one value of a float type. */
INLINE size_t fvalue_bytes(enum quant_type type)
{
    return type == QUANT_F32 ? 4 : 2;
}
#endif

#if !QMM_X86_VNNI /* built once, in the AVX2 file */
#define FGEMM_NT 8

/* Column c's 8 floats at p + c * stride (8: fpack8's scratch; 16: half of
 * a 16-row group, the packed copy's or its conversion's). */
AVX2 INLINE void fgemm8_tokens(const float *p, const int64_t stride, int64_t cols,
                               const float *x, int64_t ldx, const int nt, float *y, int64_t ldy)
{
    __m256 acc[FGEMM_NT];
    UNROLL for (int t = 0; t < nt; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t c = 0; c < cols; c++) {
        __m256 wv = _mm256_load_ps(p + c * stride);
        UNROLL for (int t = 0; t < nt; t++)
            acc[t] = _mm256_fmadd_ps(wv, _mm256_broadcast_ss(x + t * ldx + c), acc[t]);
    }
    UNROLL for (int t = 0; t < nt; t++)
        _mm256_storeu_ps(y + t * ldy, acc[t]);
}

/* All nt tokens against the 8 rows (nr of them kept) of f32 columns at p. */
AVX2 INLINE void fgemm8_run(const float *p, const int64_t stride, int nr, int64_t cols,
                            const float *x, int64_t ldx, int64_t nt, float *y, int64_t ldy)
{
    float tmp[FGEMM_NT * 8];
    for (int64_t t = 0; t < nt; t += FGEMM_NT) {
        int n = nt - t < FGEMM_NT ? (int)(nt - t) : FGEMM_NT;
        float *yt = nr == 8 ? y + t * ldy : tmp;
        int64_t ld = nr == 8 ? ldy : 8;
        const float *xt = x + t * ldx;
        switch (n) {
        case 1: fgemm8_tokens(p, stride, cols, xt, ldx, 1, yt, ld); break;
        case 2: fgemm8_tokens(p, stride, cols, xt, ldx, 2, yt, ld); break;
        case 3: fgemm8_tokens(p, stride, cols, xt, ldx, 3, yt, ld); break;
        case 4: fgemm8_tokens(p, stride, cols, xt, ldx, 4, yt, ld); break;
        case 5: fgemm8_tokens(p, stride, cols, xt, ldx, 5, yt, ld); break;
        case 6: fgemm8_tokens(p, stride, cols, xt, ldx, 6, yt, ld); break;
        case 7: fgemm8_tokens(p, stride, cols, xt, ldx, 7, yt, ld); break;
        default: fgemm8_tokens(p, stride, cols, xt, ldx, 8, yt, ld); break;
        }
        if (nr < 8)
            for (int k = 0; k < n; k++)
                for (int j = 0; j < nr; j++)
                    y[(t + k) * ldy + j] = tmp[k * 8 + j];
    }
}

/* y[t * ldy + j] for j < nr (<= 8), t < nt: rows of w against f32 tokens x. */
AVX2 static void fgemm8(enum quant_type type, const uint8_t *w, size_t row_bytes, int nr,
                        int64_t cols, const float *x, int64_t ldx, int64_t nt, float *y,
                        int64_t ldy, float *pack)
{
    fpack8(type, w, row_bytes, nr, cols, pack, 8);
    fgemm8_run(pack, 8, nr, cols, x, ldx, nt, y, ldy);
}
_Static_assert(FGEMM_NT == 8, "fgemm8 instantiates 1..8 tokens");

/* One token step read from the packed copy as it is: g 8-row halves of
 * 16-row groups (half k's column c at h[k] + 16 c values) against nt
 * tokens, each half's lanes and each token an accumulator of its own, so
 * g halves are in flight at once (one token alone is one FMA chain a half:
 * its latency, not memory, would bound it). out[t * 8 g + 8 k + j]. The
 * FMAs of each lane are fgemm8_tokens's, in the same order. */
AVX2 INLINE void fgemv8_halves(const enum quant_type type, const uint8_t *const *h, const int g,
                               int64_t cols, const float *x, int64_t ldx, const int nt,
                               float *out)
{
    __m256 acc[4][3];
    UNROLL for (int k = 0; k < g; k++)
        UNROLL for (int t = 0; t < nt; t++)
            acc[k][t] = _mm256_setzero_ps();
    for (int64_t c = 0; c < cols; c++) {
        __m256 wv[4];
        UNROLL for (int k = 0; k < g; k++)
            wv[k] = load8_as_f32(type, h[k], c * QMM_FPR);
        UNROLL for (int t = 0; t < nt; t++) {
            __m256 xb = _mm256_broadcast_ss(x + t * ldx + c);
            UNROLL for (int k = 0; k < g; k++)
                acc[k][t] = _mm256_fmadd_ps(wv[k], xb, acc[k][t]);
        }
    }
    UNROLL for (int t = 0; t < nt; t++)
        UNROLL for (int k = 0; k < g; k++)
            _mm256_storeu_ps(out + t * 8 * g + 8 * k, acc[k][t]);
}

/* Halves in flight for nt tokens of one step (acc[4][3] above). */
#define FGEMV8_HALVES(nt) ((nt) == 1 ? 4 : 2)

AVX2 INLINE void fgemv8_halves_t(const enum quant_type type, const uint8_t *const *h, int g,
                                 int64_t cols, const float *x, int64_t ldx, int nt, float *out)
{
    switch (nt * 8 + g) {
    case 8 + 1: fgemv8_halves(type, h, 1, cols, x, ldx, 1, out); break;
    case 8 + 2: fgemv8_halves(type, h, 2, cols, x, ldx, 1, out); break;
    case 8 + 3: fgemv8_halves(type, h, 3, cols, x, ldx, 1, out); break;
    case 8 + 4: fgemv8_halves(type, h, 4, cols, x, ldx, 1, out); break;
    case 16 + 1: fgemv8_halves(type, h, 1, cols, x, ldx, 2, out); break;
    case 16 + 2: fgemv8_halves(type, h, 2, cols, x, ldx, 2, out); break;
    case 24 + 1: fgemv8_halves(type, h, 1, cols, x, ldx, 3, out); break;
    default: fgemv8_halves(type, h, 2, cols, x, ldx, 3, out); break;
    }
}

/* The packed float copy (ops/qmatmul.h: qmm_fgemm_packed_fn) on 8 rows a
 * register: up to 3 tokens straight from the copy, several halves at once;
 * more through each 16-row group's f32 conversion (the layout fgemm8_tokens
 * reads with stride 16), made once per call. */
AVX2 INLINE void fgemm8_packed_t(const enum quant_type type, const uint8_t *p, int64_t cols,
                                 int64_t r0, int64_t r1, const float *x, int64_t ldx, int64_t nt,
                                 float *y, int64_t ldy, float *scratch)
{
    const size_t es = fvalue_bytes(type), group_bytes = (size_t)(QMM_FPR * cols) * es;
    const int64_t h0 = r0 / 8, h1 = (r1 + 7) / 8;
    if (nt <= 3) {
        const int G = FGEMV8_HALVES(nt);
        for (int64_t h = h0; h < h1; h += G) {
            int g = h1 - h < G ? (int)(h1 - h) : G;
            const uint8_t *hp[4];
            for (int k = 0; k < g; k++)
                hp[k] = p + (size_t)((h + k) / 2) * group_bytes + (size_t)((h + k) % 2) * 8 * es;
            float out[3 * 32];
            fgemv8_halves_t(type, hp, g, cols, x, ldx, (int)nt, out);
            for (int64_t t = 0; t < nt; t++)
                for (int64_t r = h * 8; r < (h + g) * 8 && r < r1; r++)
                    y[t * ldy + r - r0] = out[t * 8 * g + r - h * 8];
        }
        return;
    }
    for (int64_t grp = h0 / 2; grp * 2 < h1; grp++) {
        const uint8_t *gp = p + (size_t)grp * group_bytes;
        const float *f = (const float *)(const void *)gp;
        if (type != QUANT_F32) {
            fconvert(type, gp, QMM_FPR * cols, scratch);
            f = scratch;
        }
        for (int64_t h = grp * 2; h < grp * 2 + 2; h++)
            if (h >= h0 && h < h1)
                fgemm8_run(f + 8 * (h % 2), QMM_FPR, r1 - h * 8 < 8 ? (int)(r1 - h * 8) : 8,
                           cols, x, ldx, nt, y + (h * 8 - r0), ldy);
    }
}

AVX2 static void fgemm8_packed(enum quant_type type, const uint8_t *p, int64_t cols, int64_t r0,
                               int64_t r1, const float *x, int64_t ldx, int64_t nt, float *y,
                               int64_t ldy, float *scratch)
{
    switch (type) {
    case QUANT_F32:
        fgemm8_packed_t(QUANT_F32, p, cols, r0, r1, x, ldx, nt, y, ldy, scratch);
        break;
    case QUANT_F16:
        fgemm8_packed_t(QUANT_F16, p, cols, r0, r1, x, ldx, nt, y, ldy, scratch);
        break;
    default:
        fgemm8_packed_t(QUANT_BF16, p, cols, r0, r1, x, ldx, nt, y, ldy, scratch);
        break;
    }
}
#endif

/* ---- instantiation: (mr, nt) constants ------------------------------------------ */

/* Tiles of QMM_MR or 1 rows times 1..QMM_NT tokens are instantiated (8
 * bodies per format: compile time matters in sanitizer builds); 2 or 3 rows
 * (the end of a weight) run as single rows, in the same order per output. */
#define DISPATCH_NT(call, MR)                                                                \
    switch (nt) {                                                                           \
    case 1: call(MR, 1); break;                                                             \
    case 2: call(MR, 2); break;                                                             \
    case 3: call(MR, 3); break;                                                             \
    default: call(MR, 4); break;                                                            \
    }
_Static_assert(QMM_MR == 4 && QMM_NT == 4, "DISPATCH_NT instantiates 4 x 1..4 tiles");

#define CALL32_q4_0(a, b) tile32(K_Q4_0, wr, row_bytes, n_blk, x, ldx, a, b, yr, ldy)
#define CALL32_q4_1(a, b) tile32(K_Q4_1, wr, row_bytes, n_blk, x, ldx, a, b, yr, ldy)
#define CALL32_q8_0(a, b) tile32(K_Q8_0, wr, row_bytes, n_blk, x, ldx, a, b, yr, ldy)
#define CALL32_q5_0(a, b) tile32(K_Q5_0, wr, row_bytes, n_blk, x, ldx, a, b, yr, ldy)
#define CALL32_q5_1(a, b) tile32(K_Q5_1, wr, row_bytes, n_blk, x, ldx, a, b, yr, ldy)
#define CALL_q4_K(a, b) tile_k4(wr, row_bytes, n_blk, x, ldx, a, b, yr, ldy)
#define CALL_q5_K(a, b) tile_k5(wr, row_bytes, n_blk, x, ldx, a, b, yr, ldy)
#define CALL_q6_K(a, b) tile_k6(wr, row_bytes, n_blk, x, ldx, a, b, yr, ldy)

#define TILE(name, call)                                                                     \
    AVX2 static void tile_##name(const uint8_t *w, size_t row_bytes, int64_t n_blk,          \
                                 const struct qmm_q8 *x, int64_t ldx, int mr, int nt,       \
                                 float *y, int64_t ldy)                                     \
    {                                                                                       \
        if (mr == QMM_MR) {                                                                 \
            const uint8_t *wr = w;                                                          \
            float *yr = y;                                                                  \
            DISPATCH_NT(call, QMM_MR)                                                       \
            return;                                                                         \
        }                                                                                   \
        for (int r = 0; r < mr; r++) {                                                      \
            const uint8_t *wr = w + (size_t)r * row_bytes;                                  \
            float *yr = y + r;                                                              \
            DISPATCH_NT(call, 1)                                                            \
        }                                                                                   \
    }
TILE(q4_0, CALL32_q4_0)
TILE(q4_1, CALL32_q4_1)
TILE(q8_0, CALL32_q8_0)
TILE(q5_0, CALL32_q5_0)
TILE(q5_1, CALL32_q5_1)
TILE(q4_K, CALL_q4_K)
TILE(q5_K, CALL_q5_K)
TILE(q6_K, CALL_q6_K)

/* The tile kernel of this build for `type`, NULL where it has none. */
static qmm_tile_fn tile_of(enum quant_type type)
{
    switch (type) {
    case QUANT_Q4_0: return tile_q4_0;
    case QUANT_Q4_1: return tile_q4_1;
    case QUANT_Q8_0: return tile_q8_0;
    case QUANT_Q5_0: return tile_q5_0;
    case QUANT_Q5_1: return tile_q5_1;
    case QUANT_Q4_K: return tile_q4_K;
    case QUANT_Q5_K: return tile_q5_K;
    case QUANT_Q6_K: return tile_q6_K;
    default: return NULL;
    }
}

/* The ISA's table of ops/qmatmul.h: ops_qmm_tile_<isa> and the rest. */
#define QMM_X86_TABLE(isa)                                                                   \
    qmm_tile_fn ops_qmm_tile_##isa(enum quant_type type) { return tile_of(type); }            \
    qmm_gemm8_fn ops_qmm_gemm8_##isa(enum quant_type type) { return gemm8_of(type); }         \
    qmm_gemv8_fn ops_qmm_gemv8_##isa(enum quant_type type) { return gemv8_of(type); }         \
    qmm_gemm8_fn ops_qmm_gemm8_packed_##isa(enum quant_type type) { return gemm8p_of(type); }

#endif
