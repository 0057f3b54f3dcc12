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

/* ---- unpacking two groups at once: Q4_K and Q6_K -------------------------- */

/* 32 bytes of group 0 (at a) and of group 1 (at b) as one vector: the
 * halves of a pack16 entry's vectors. */
AVX2 INLINE __m512i join32(const uint8_t *a, const uint8_t *b)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(load32(a)), load32(b), 1);
}

/* 8 f16 of each group as 16 f32. */
AVX2 INLINE __m512 join_f16(const uint8_t *a, const uint8_t *b)
{
    return _mm512_cvtph_ps(_mm256_set_m128i(_mm_loadu_si128((const __m128i *)(const void *)b),
                                            _mm_loadu_si128((const __m128i *)(const void *)a)));
}

/* 8 bytes of each group (group 0's first), for a widening conversion. */
AVX2 INLINE __m128i join_bytes8(const uint8_t *a, const uint8_t *b)
{
    return _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(const void *)a),
                              _mm_loadl_epi64((const __m128i *)(const void *)b));
}

/* The nibbles of two groups' blocks (128 bytes each at a and b) split into
 * the 8 quant vectors. */
AVX2 INLINE void split16(const uint8_t *a, const uint8_t *b, __m512i q[8])
{
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    UNROLL for (int v = 0; v < 4; v++) {
        __m512i V = join32(a + 32 * v, b + 32 * v);
        q[2 * v] = _mm512_and_si512(V, m4);
        q[2 * v + 1] = _mm512_and_si512(_mm512_srli_epi16(V, 4), m4);
    }
}

AVX2 INLINE void store16(struct pack16 *e, const __m512i q[8], __m512 d, __m512 m)
{
    UNROLL for (int k = 0; k < 8; k++)
        _mm512_store_si512((void *)e->q[k], q[k]);
    _mm512_store_ps(e->d, d);
    _mm512_store_ps(e->m, m);
}

/* Q4_K blocks [b0, b1) of the groups w0 and w1 into p (block b at entry
 * b - b0): unpack8 of each into its half, the same values (the exact
 * products d sc, -dmin mn), on 512-bit vectors: half the operations. */
AVX2 INLINE void unpack16_k4(const uint8_t *w0, const uint8_t *w1, int64_t b0, int64_t b1,
                             struct pack16 *p)
{
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *h0 = qmm_k4_head(w0, b), *h1 = qmm_k4_head(w1, b);
        const uint8_t *k0 = qmm_k4_block(w0, b), *k1 = qmm_k4_block(w1, b);
        __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(join_bytes8(k0, k1)));
        __m512 mn = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(join_bytes8(k0 + 8, k1 + 8)));
        __m512 d = _mm512_mul_ps(join_f16(h0, h1), sc);
        __m512 dmin = join_f16(h0 + 16, h1 + 16); /* negated: its sign bit flipped (no DQ) */
        dmin = _mm512_castsi512_ps(
            _mm512_xor_si512(_mm512_castps_si512(dmin), _mm512_set1_epi32(INT32_MIN)));
        __m512 m = _mm512_mul_ps(dmin, mn);
        __m512i q[8];
        split16(k0 + 2 * QMM_PR, k1 + 2 * QMM_PR, q);
        store16(p + (b - b0), q, d, m);
    }
}

/* top2_bits on 512 bits. */
AVX2 INLINE __m512i top2_bits16(__m512i plane, const int i)
{
    __m512i v = i < 2 ? _mm512_slli_epi16(plane, 4 - 2 * i) : i == 2 ? plane
                                                                     : _mm512_srli_epi16(plane, 2);
    return _mm512_and_si512(v, _mm512_set1_epi8(0x30));
}

/* Q6_K (and Q3_K) blocks [b0, b1) of w0 and w1 into p: k6_block of each
 * into its half (d sc_0 in d, d sc_1 in m), on 512-bit vectors. */
AVX2 INLINE void unpack16_k6(const uint8_t *w0, const uint8_t *w1, int64_t b0, int64_t b1,
                             struct pack16 *p)
{
    const int nib = 2 * QMM_PR, plane = nib + QMM_PR * QMM_QK / 2; /* offsets in the block */
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *k0 = qmm_k6_block(w0, b), *k1 = qmm_k6_block(w1, b);
        __m512 d = join_f16(qmm_k6_head(w0, b), qmm_k6_head(w1, b));
        __m512 d0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(join_bytes8(k0, k1))));
        __m512 d1 = _mm512_mul_ps(
            d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(join_bytes8(k0 + 8, k1 + 8))));
        __m512i q[8];
        split16(k0 + nib, k1 + nib, q);
        __m512i top[2] = {join32(k0 + plane, k1 + plane), join32(k0 + plane + 32, k1 + plane + 32)};
        UNROLL for (int k = 0; k < 8; k++)
            q[k] = _mm512_or_si512(q[k], top2_bits16(top[k / 4], k % 4));
        store16(p + (b - b0), q, d0, d1);
    }
}

/* Blocks [b0, b1) of the pair w0, w1 unpacked into p from entry 0. */
AVX2 INLINE void unpack_pair(const enum kind kind, const bool k6, const bool k2,
                             const uint8_t *w0, const uint8_t *w1, int64_t b0, int64_t b1,
                             struct pack16 *p)
{
    if (k6 && !k2)
        unpack16_k6(w0, w1, b0, b1, p);
    else if (!k6 && kind == K_Q4_K)
        unpack16_k4(w0, w1, b0, b1, p);
    else
        for (int h = 0; h < 2; h++) {
            if (k6)
                unpack_k6(k2, h ? w1 : w0, b0, b1, half_dst(p, h));
            else
                unpack8(kind, h ? w1 : w0, b0, b1, half_dst(p, h));
        }
}

/* Blocks a chunk where rows are long (gemm16p): both groups' unpacked
 * blocks (640 bytes each) and 8 tokens' blocks of x (60 bytes each) stay in
 * L1 (35 KB) through a chunk's token steps, where a whole row's unpacked
 * blocks (245 KB for Gemma 4's 12288 columns) came from L2 at every step. */
#define ZMM_KC 32

/* sum + u x (the int32 at s, broadcast), with the broadcast inside the
 * vpdpbusd (an {1to16} memory operand) where GCC emits it apart. */
AVX2 INLINE __m512i dpbusd_bcst(__m512i sum, __m512i u, const int32_t *s)
{
#if defined(__GNUC__) && !defined(__clang__)
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(sum) : "v"(u), "m"(*s));
    return sum;
#else
    return _mm512_dpbusd_epi32(sum, u, _mm512_set1_epi32(*s));
#endif
}

/* The 32-element formats, Q4_K, Q5_K and the IQ4 kinds: gemm8_tokens's
 * integer sums and scale FMAs for blocks [0, n_blk) of p (x from the same
 * block on) into acc, on 16 lanes. Vector k of every token before vector
 * k + 1 of any: nt independent vpdpbusd chains side by side, where one
 * token's chain of 8 followed another's (the same integers, and the FMAs
 * of each token in the same order). */
AVX2 INLINE void gemm16_sums(const struct pack16 *p, int64_t n_blk, const struct qmm_q8 *x,
                             int64_t ldx, const int nt, __m512 acc[ZMM_NT], const enum kind kind,
                             struct next_group *next)
{
    const bool zp = KIND_ZERO_POINT(kind);
    for (int64_t b = 0; b < n_blk; b++) {
        next_group_step(next);
        __m512 d = _mm512_load_ps(p[b].d);
        __m512i sum[ZMM_NT];
        UNROLL for (int t = 0; t < nt; t++)
            sum[t] = _mm512_setzero_si512();
        UNROLL for (int k = 0; k < 8; k++) {
            __m512i q = _mm512_load_si512((const void *)p[b].q[k]);
            UNROLL for (int t = 0; t < nt; t++) {
                const int32_t *xq = (const int32_t *)(const void *)x[t * ldx + b].qs;
                sum[t] = dpbusd_bcst(sum[t], q, xq + k);
            }
        }
        UNROLL for (int t = 0; t < nt; t++) {
            const struct qmm_q8 *xb = x + t * ldx + b;
            if (zp)
                sum[t] = _mm512_sub_epi32(sum[t], _mm512_set1_epi32(zero_point_sum(kind, xb)));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[t]),
                                     _mm512_mul_ps(d, _mm512_set1_ps(xb->d)), acc[t]);
        }
    }
}

/* The offsets' sums apart, as gemm8_tokens's: block b's 16 offsets at
 * m + b * m_step floats. */
AVX2 INLINE void gemm16_offsets(const float *m, size_t m_step, int64_t n_blk,
                                const struct qmm_q8 *x, int64_t ldx, const int nt,
                                __m512 add[ZMM_NT])
{
    for (int64_t b = 0; b < n_blk; b++) {
        __m512 mv = _mm512_load_ps(m + (size_t)b * m_step);
        UNROLL for (int t = 0; t < nt; t++)
            add[t] = _mm512_fmadd_ps(mv, _mm512_set1_ps(x[t * ldx + b].s), add[t]);
    }
}

/* Q6_K (and Q3_K) or Q2_K: gemv8_k6_tokens's sums on unpacked blocks, on
 * 16 lanes: each half's 4 vectors for every token, then that half's FMA
 * (a token's FMAs in gemv8_k6_tokens's order: half 0, half 1, block by
 * block). */
AVX2 INLINE void gemm16_k6_sums(const struct pack16 *p, int64_t n_blk, const struct qmm_q8 *x,
                                int64_t ldx, const int nt, __m512 acc[ZMM_NT],
                                struct next_group *next)
{
    for (int64_t b = 0; b < n_blk; b++) {
        next_group_step(next);
        UNROLL for (int h = 0; h < 2; h++) {
            __m512 dh = _mm512_load_ps(h ? p[b].m : p[b].d);
            __m512i sum[ZMM_NT];
            UNROLL for (int t = 0; t < nt; t++)
                sum[t] = _mm512_setzero_si512();
            UNROLL for (int k = 4 * h; k < 4 * h + 4; k++) {
                __m512i q = _mm512_load_si512((const void *)p[b].q[k]);
                UNROLL for (int t = 0; t < nt; t++) {
                    const int32_t *xq = (const int32_t *)(const void *)x[t * ldx + b].qs;
                    sum[t] = dpbusd_bcst(sum[t], q, xq + k);
                }
            }
            UNROLL for (int t = 0; t < nt; t++)
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[t]),
                                         _mm512_mul_ps(dh, _mm512_set1_ps(x[t * ldx + b].d)),
                                         acc[t]);
        }
    }
}

/* k6_offsets, k2_offsets on 16 lanes for blocks [0, n_blk): Q6_K's halves'
 * scales at o + b * o_step and 16 floats on; Q2_K's mins from the packed
 * groups w0, w1. */
AVX2 INLINE void gemm16_k6_offsets(const bool k2, const uint8_t *w0, const uint8_t *w1,
                                   const float *o, size_t o_step, int64_t n_blk,
                                   const struct qmm_q8 *x, int64_t ldx, const int nt,
                                   __m512 add[ZMM_NT])
{
    for (int64_t b = 0; b < n_blk; b++) {
        __m512 o0, o1;
        if (k2) {
            __m256 a0, a1, b0, b1;
            k2_mins(w0, b, &a0, &a1);
            k2_mins(w1, b, &b0, &b1);
            o0 = join8(a0, b0);
            o1 = join8(a1, b1);
        } else {
            o0 = _mm512_load_ps(o + (size_t)b * o_step);
            o1 = _mm512_load_ps(o + (size_t)b * o_step + 16);
        }
        UNROLL for (int t = 0; t < nt; t++) {
            const struct qmm_q8 *xb = x + t * ldx + b;
            add[t] = _mm512_fmadd_ps(o0, _mm512_set1_ps(xb->dhs[0]), add[t]);
            add[t] = _mm512_fmadd_ps(o1, _mm512_set1_ps(xb->dhs[1]), add[t]);
        }
    }
}

/* Where a pair's offsets come from: its unpacked blocks (p, one chunk), or
 * where rows go in chunks the copy of every block's (off: 16 floats a
 * block, Q6_K's two halves' 32). */
struct offsets16 {
    const float *at;
    size_t step; /* floats from one block's to the next */
};

/* nt (a constant) tokens' sums over one chunk, blocks [c0, c0 + n_blk) of
 * the pair (unpacked in p from entry 0): the accumulators start at zero
 * (`resume` false) or from what the chunk before left in y; with `off` the
 * chunk is the whole row and y gets acc plus the offsets' sums, else acc
 * alone (gemm16_finish adds them). */
AVX2 INLINE void gemm16_chunk(const enum kind kind, const bool k6, const bool k2,
                              const uint8_t *w0, const uint8_t *w1, const struct pack16 *p,
                              int64_t c0, int64_t n_blk, const struct qmm_q8 *x, int64_t ldx,
                              const int nt, float *y, int64_t ldy, const bool resume,
                              const struct offsets16 *off, struct next_group *next)
{
    __m512 acc[ZMM_NT], add[ZMM_NT];
    UNROLL for (int t = 0; t < nt; t++) {
        acc[t] = resume ? _mm512_loadu_ps(y + t * ldy) : _mm512_setzero_ps();
        add[t] = _mm512_setzero_ps();
    }
    if (k6)
        gemm16_k6_sums(p, n_blk, x + c0, ldx, nt, acc, next);
    else
        gemm16_sums(p, n_blk, x + c0, ldx, nt, acc, kind, next);
    if (!off) {
        UNROLL for (int t = 0; t < nt; t++)
            _mm512_storeu_ps(y + t * ldy, acc[t]);
        return;
    }
    if (k6)
        gemm16_k6_offsets(k2, w0, w1, off->at, off->step, n_blk, x, ldx, nt, add);
    else if (!KIND_ZERO_POINT(kind))
        gemm16_offsets(off->at, off->step, n_blk, x, ldx, nt, add);
    const __m512 scale = _mm512_set1_ps(k2 ? 1.0f : -32.0f); /* as gemv8_k6_tokens */
    UNROLL for (int t = 0; t < nt; t++)
        _mm512_storeu_ps(y + t * ldy, k6 ? _mm512_add_ps(acc[t], _mm512_mul_ps(add[t], scale))
                                         : _mm512_add_ps(acc[t], add[t]));
}

/* After the last chunk: the offsets' sums over the whole row, added to the
 * sums the chunks left in y (the same operations as gemm16_chunk's whole
 * row: the offsets never depended on the quants). */
AVX2 INLINE void gemm16_finish(const enum kind kind, const bool k6, const bool k2,
                               const uint8_t *w0, const uint8_t *w1, int64_t n_blk,
                               const struct qmm_q8 *x, int64_t ldx, const int nt, float *y,
                               int64_t ldy, const struct offsets16 *off)
{
    __m512 add[ZMM_NT];
    UNROLL for (int t = 0; t < nt; t++)
        add[t] = _mm512_setzero_ps();
    if (k6)
        gemm16_k6_offsets(k2, w0, w1, off->at, off->step, n_blk, x, ldx, nt, add);
    else if (!KIND_ZERO_POINT(kind))
        gemm16_offsets(off->at, off->step, n_blk, x, ldx, nt, add);
    const __m512 scale = _mm512_set1_ps(k2 ? 1.0f : -32.0f);
    UNROLL for (int t = 0; t < nt; t++) {
        __m512 acc = _mm512_loadu_ps(y + t * ldy);
        _mm512_storeu_ps(y + t * ldy, k6 ? _mm512_add_ps(acc, _mm512_mul_ps(add[t], scale))
                                         : _mm512_add_ps(acc, add[t]));
    }
}

/* One chunk's token step for tokens [t, t + n), n 1, 2, 4 or ZMM_NT, or the
 * finishing step (chunk < 0). */
#define GEMM16_STEP(t, n)                                                                    \
    (chunk < 0 ? gemm16_finish(kind, k6, k2, w, w + group_bytes, n_blk, x + (t) * ldx, ldx,   \
                               n, y + (t) * ldy, ldy, &off)                                  \
               : gemm16_chunk(kind, k6, k2, w, w + group_bytes, p, c0, c1 - c0,              \
                              x + (t) * ldx, ldx, n, y + (t) * ldy, ldy, c0 > 0,             \
                              chunked ? NULL : &off, &next))

/* Two packed groups (at w and w + group_bytes) against nt tokens. A row of
 * under 2 ZMM_KC blocks is one chunk: unpacked once, then ZMM_NT tokens a
 * step and the rest 4, 2 and 1 at a time (a token's sums do not depend on
 * its step). Longer rows go ZMM_KC blocks a chunk, each unpacked and then
 * run for every token, the accumulators kept in y between chunks (each
 * token's operations in the same order), the blocks' offsets copied aside
 * (after the chunk's entries in `pack`) and summed at the end. The next
 * pair is asked for over all the steps. */
AVX2 INLINE void gemm16p(const enum kind kind, const bool k6, const bool k2, const uint8_t *w,
                         size_t group_bytes, int64_t n_blk, const struct qmm_q8 *x, int64_t ldx,
                         int64_t nt, float *y, int64_t ldy, struct qmm_pack8 *pack)
{
    struct pack16 *p = (struct pack16 *)(void *)pack;
    const bool chunked = n_blk >= 2 * ZMM_KC;
    const int64_t kc = chunked ? ZMM_KC : n_blk, n_chunks = (n_blk + kc - 1) / kc;
    /* chunked: every block's offsets (Q6_K: both halves' scales) after the
     * chunk's entries; the scratch holds n_blk entries, and kc of them plus
     * n_blk x 128 bytes fit since kc <= n_blk / 2 */
    const size_t off_floats = k6 ? 32 : 16;
    float *copy = (float *)(void *)(p + kc);
    struct offsets16 off = chunked ? (struct offsets16){copy, off_floats}
                                   : (struct offsets16){k6 ? p[0].d : p[0].m,
                                                        sizeof *p / sizeof(float)};
    /* the next pair asked for a few lines at each block of every step: in
     * bursts at each step (70 lines for Gemma 4's Q6_K ffn_down, 36 steps
     * of 384 blocks) the requests stalled the loop (11 % of its samples) */
    const int64_t steps = nt / ZMM_NT + (nt % 8 >= 4) + (nt % 4 >= 2) + (nt % 2);
    struct next_group next = next_group_of(w, 2 * group_bytes, steps * n_blk);
    for (int64_t chunk = 0; chunk <= n_chunks; chunk++) {
        int64_t c0 = chunk * kc, c1 = c0 + kc < n_blk ? c0 + kc : n_blk;
        if (chunk == n_chunks) {
            if (!chunked)
                break;
            chunk = -1; /* the finishing steps */
        } else {
            unpack_pair(kind, k6, k2, w, w + group_bytes, c0, c1, p);
            if (chunked)
                for (int64_t b = c0; b < c1; b++) {
                    const struct pack16 *e = p + (b - c0);
                    if (k6) {
                        memcpy(copy + (size_t)b * 32, e->d, sizeof e->d);
                        memcpy(copy + (size_t)b * 32 + 16, e->m, sizeof e->m);
                    } else {
                        memcpy(copy + (size_t)b * 16, e->m, sizeof e->m);
                    }
                }
        }
        int64_t t = 0;
        for (; t + ZMM_NT <= nt; t += ZMM_NT)
            GEMM16_STEP(t, ZMM_NT);
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
        if (chunk < 0)
            break;
    }
}
_Static_assert(ZMM_NT == 8, "gemm16p's remainder runs 4, 2 and 1 tokens");
_Static_assert(ZMM_KC * sizeof(struct pack16) + 2 * ZMM_KC * 32 * sizeof(float) <=
                   2 * ZMM_KC * sizeof(struct pack16),
               "a chunked row's offsets fit after its chunk in the scratch");

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

/* Column c's 16 values of a 16-row group at p + 16 c values, as f32:
 * f32 (fgemm16's scratch, or an F32 weight's packed copy), f16 or bf16 (the
 * packed copy, ops/qmatmul.h QMM_FPR). */
AVX2 INLINE __m512 load16_as_f32(const enum quant_type type, const uint8_t *p, int64_t c)
{
    if (type == QUANT_F32)
        return _mm512_load_ps((const float *)(const void *)p + c * 16);
    __m256i h = _mm256_load_si256((const __m256i *)(const void *)(p + 32 * c));
    if (type == QUANT_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); /* bf16 */
}

/* fgemm8_tokens's FMAs, column by column in the same order, on 16 lanes. */
AVX2 INLINE void fgemm16_tokens(const enum quant_type type, const uint8_t *p, int64_t cols,
                                const float *x, int64_t ldx, const int nt, float *y,
                                int64_t ldy)
{
    __m512 acc[ZMM_NT];
    UNROLL for (int t = 0; t < nt; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t c = 0; c < cols; c++) {
        __m512 wv = load16_as_f32(type, p, c);
        UNROLL for (int t = 0; t < nt; t++)
            acc[t] = _mm512_fmadd_ps(wv, _mm512_set1_ps(x[t * ldx + c]), acc[t]);
    }
    UNROLL for (int t = 0; t < nt; t++)
        _mm512_storeu_ps(y + t * ldy, acc[t]);
}

/* All nt tokens against the 16 f32 rows a column at p, ZMM_NT at a time. */
AVX2 INLINE void fgemm16_run(const float *p, int64_t cols, const float *x, int64_t ldx,
                             int64_t nt, float *y, int64_t ldy)
{
    const uint8_t *pb = (const uint8_t *)(const void *)p;
    for (int64_t t = 0; t < nt; t += ZMM_NT) {
        int n = nt - t < ZMM_NT ? (int)(nt - t) : ZMM_NT;
        const float *xt = x + t * ldx;
        float *yt = y + t * ldy;
        switch (n) {
        case 1: fgemm16_tokens(QUANT_F32, pb, cols, xt, ldx, 1, yt, ldy); break;
        case 2: fgemm16_tokens(QUANT_F32, pb, cols, xt, ldx, 2, yt, ldy); break;
        case 3: fgemm16_tokens(QUANT_F32, pb, cols, xt, ldx, 3, yt, ldy); break;
        case 4: fgemm16_tokens(QUANT_F32, pb, cols, xt, ldx, 4, yt, ldy); break;
        case 5: fgemm16_tokens(QUANT_F32, pb, cols, xt, ldx, 5, yt, ldy); break;
        case 6: fgemm16_tokens(QUANT_F32, pb, cols, xt, ldx, 6, yt, ldy); break;
        case 7: fgemm16_tokens(QUANT_F32, pb, cols, xt, ldx, 7, yt, ldy); break;
        default: fgemm16_tokens(QUANT_F32, pb, cols, xt, ldx, 8, yt, ldy); break;
        }
    }
}

/* 16 rows: the two 8-row groups packed side by side, column c's 16 floats
 * at pack + 16 c. */
AVX2 static void fgemm16(enum quant_type type, const uint8_t *w, size_t row_bytes, int64_t cols,
                         const float *x, int64_t ldx, int64_t nt, float *y, int64_t ldy,
                         float *pack)
{
    fpack8(type, w, row_bytes, 8, cols, pack, 16);
    fpack8(type, w + 8 * row_bytes, row_bytes, 8, cols, pack + 8, 16);
    fgemm16_run(pack, cols, x, ldx, nt, y, ldy);
}

/* ---- the packed float copy: several 16-row groups in flight ---------------- */

/* One token step read from the packed copy as it is: g consecutive 16-row
 * groups (group_bytes apart) against nt tokens, an accumulator each, so g
 * FMA chains a token run at once (one alone would wait on its latency, not
 * on memory). out[t * ldo + 16 k + j]. Each lane's FMAs are
 * fgemm16_tokens's, in the same order. With one token the streams are asked
 * for GEMV_PREFETCH_BYTES ahead, a line at a time. */
AVX2 INLINE void fgemv16_groups(const enum quant_type type, const uint8_t *p, size_t group_bytes,
                                const int g, int64_t cols, const float *x, int64_t ldx,
                                const int nt, float *out, int64_t ldo, const bool to_l2)
{
    const int64_t line_cols = type == QUANT_F32 ? 1 : 2; /* a 64-byte line's columns */
    __m512 acc[4][ZMM_NT];
    UNROLL for (int k = 0; k < g; k++)
        UNROLL for (int t = 0; t < nt; t++)
            acc[k][t] = _mm512_setzero_ps();
    for (int64_t c = 0; c < cols; c += line_cols) {
        if (nt == 1)
            UNROLL for (int k = 0; k < g; k++)
                prefetch_ahead(p + (size_t)k * group_bytes + (size_t)c * 64 / line_cols, 64,
                               to_l2);
        UNROLL for (int64_t i = 0; i < line_cols; i++) {
            __m512 wv[4];
            UNROLL for (int k = 0; k < g; k++)
                wv[k] = load16_as_f32(type, p + (size_t)k * group_bytes, c + i);
            UNROLL for (int t = 0; t < nt; t++) {
                __m512 xb = _mm512_set1_ps(x[t * ldx + c + i]);
                UNROLL for (int k = 0; k < g; k++)
                    acc[k][t] = _mm512_fmadd_ps(wv[k], xb, acc[k][t]);
            }
        }
    }
    UNROLL for (int t = 0; t < nt; t++)
        UNROLL for (int k = 0; k < g; k++)
            _mm512_storeu_ps(out + t * ldo + 16 * k, acc[k][t]);
}

/* Groups in flight for a step of nt tokens: at most 8 accumulators. */
#define FGEMV16_GROUPS(nt) ((nt) <= 2 ? 4 : (nt) <= 4 ? 2 : 1)

AVX2 INLINE void fgemv16_groups_t(const enum quant_type type, const uint8_t *p,
                                  size_t group_bytes, int g, int64_t cols, const float *x,
                                  int64_t ldx, int nt, float *out, int64_t ldo, const bool to_l2)
{
#define FGEMV16_CASE(G, NT)                                                                   \
    case (NT) * 8 + (G):                                                                      \
        fgemv16_groups(type, p, group_bytes, G, cols, x, ldx, NT, out, ldo, to_l2);          \
        break;
    switch (nt * 8 + g) {
        FGEMV16_CASE(1, 1) FGEMV16_CASE(2, 1) FGEMV16_CASE(3, 1) FGEMV16_CASE(4, 1)
        FGEMV16_CASE(1, 2) FGEMV16_CASE(2, 2) FGEMV16_CASE(3, 2) FGEMV16_CASE(4, 2)
        FGEMV16_CASE(1, 3) FGEMV16_CASE(2, 3) FGEMV16_CASE(1, 4) FGEMV16_CASE(2, 4)
        FGEMV16_CASE(1, 5) FGEMV16_CASE(1, 6) FGEMV16_CASE(1, 7)
    default: fgemv16_groups(type, p, group_bytes, 1, cols, x, ldx, 8, out, ldo, to_l2); break;
    }
#undef FGEMV16_CASE
}
_Static_assert(ZMM_NT == 8, "fgemv16_groups_t instantiates 1..8 tokens");

/* The packed float copy (ops/qmatmul.h: qmm_fgemm_packed_fn) on 16 rows a
 * register: a step of up to ZMM_NT tokens straight from the copy, several
 * groups at once; more through each group's f32 conversion (fgemm16's
 * scratch layout, an F32 copy as it is), made once per call. Groups that
 * [r0, r1) covers in part (a chunk starting at a group's second half, the
 * weight's ragged end) go through out and keep their rows in range. */
AVX2 INLINE void fgemm16_packed_t(const enum quant_type type, const uint8_t *p, int64_t cols,
                                  int64_t r0, int64_t r1, const float *x, int64_t ldx,
                                  int64_t nt, float *y, int64_t ldy, float *scratch,
                                  const bool to_l2)
{
    const size_t group_bytes = (size_t)(QMM_FPR * cols) * fvalue_bytes(type);
    const int64_t g0 = r0 / QMM_FPR, g1 = (r1 + QMM_FPR - 1) / QMM_FPR;
    float out[ZMM_NT * 4 * QMM_FPR];
    if (nt <= ZMM_NT) {
        const int G = FGEMV16_GROUPS(nt);
        for (int64_t grp = g0; grp < g1; grp += G) {
            int g = g1 - grp < G ? (int)(g1 - grp) : G;
            const uint8_t *gp = p + (size_t)grp * group_bytes;
            int64_t lo = grp * QMM_FPR, hi = (grp + g) * QMM_FPR;
            if (lo >= r0 && hi <= r1) {
                fgemv16_groups_t(type, gp, group_bytes, g, cols, x, ldx, (int)nt, y + (lo - r0),
                                 ldy, to_l2);
                continue;
            }
            fgemv16_groups_t(type, gp, group_bytes, g, cols, x, ldx, (int)nt, out, 4 * QMM_FPR,
                             to_l2);
            for (int64_t t = 0; t < nt; t++)
                for (int64_t r = lo > r0 ? lo : r0; r < hi && r < r1; r++)
                    y[t * ldy + r - r0] = out[t * 4 * QMM_FPR + r - lo];
        }
        return;
    }
    for (int64_t grp = g0; grp < g1; grp++) {
        const uint8_t *gp = p + (size_t)grp * group_bytes;
        const float *f = (const float *)(const void *)gp;
        if (type != QUANT_F32) {
            fconvert(type, gp, QMM_FPR * cols, scratch);
            f = scratch;
        }
        int64_t lo = grp * QMM_FPR, hi = lo + QMM_FPR;
        if (lo >= r0 && hi <= r1) {
            fgemm16_run(f, cols, x, ldx, nt, y + (lo - r0), ldy);
            continue;
        }
        for (int64_t t = 0; t < nt; t += ZMM_NT) { /* out holds ZMM_NT tokens */
            int64_t n = nt - t < ZMM_NT ? nt - t : ZMM_NT;
            fgemm16_run(f, cols, x + t * ldx, ldx, n, out, QMM_FPR);
            for (int64_t k = 0; k < n; k++)
                for (int64_t r = lo > r0 ? lo : r0; r < hi && r < r1; r++)
                    y[(t + k) * ldy + r - r0] = out[k * QMM_FPR + r - lo];
        }
    }
}

AVX2 static void fgemm16_packed(enum quant_type type, const uint8_t *p, int64_t cols, int64_t r0,
                                int64_t r1, const float *x, int64_t ldx, int64_t nt, float *y,
                                int64_t ldy, float *scratch)
{
    const bool l2 = gemv_prefetch_to_l2();
    switch (type) {
    case QUANT_F32:
        if (l2)
            fgemm16_packed_t(QUANT_F32, p, cols, r0, r1, x, ldx, nt, y, ldy, scratch, true);
        else
            fgemm16_packed_t(QUANT_F32, p, cols, r0, r1, x, ldx, nt, y, ldy, scratch, false);
        break;
    case QUANT_F16:
        if (l2)
            fgemm16_packed_t(QUANT_F16, p, cols, r0, r1, x, ldx, nt, y, ldy, scratch, true);
        else
            fgemm16_packed_t(QUANT_F16, p, cols, r0, r1, x, ldx, nt, y, ldy, scratch, false);
        break;
    default:
        if (l2)
            fgemm16_packed_t(QUANT_BF16, p, cols, r0, r1, x, ldx, nt, y, ldy, scratch, true);
        else
            fgemm16_packed_t(QUANT_BF16, p, cols, r0, r1, x, ldx, nt, y, ldy, scratch, false);
        break;
    }
}

#endif
