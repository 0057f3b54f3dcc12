/* prefill/attn_decode_qk_x86.h: the body of prefill/attn_decode_qk.c's
 * kernels, included once per instruction set (no include guard). The
 * includer defines QK_TARGET (a target attribute), QK_NAME(name) (the
 * set's suffix) and, where vpdpbusd runs, QK_DPBUSD (its intrinsic). */

#define QK_FN QK_TARGET static inline __attribute__((always_inline))
/* the loops over a tile's rows and keys, unrolled: their sums stay in registers */
#define QK_UNROLL _Pragma("GCC unroll 4")

/* Lane i: sum over j < 4 of key quant 4i + j times query quant 4i + j, exact
 * in int32, whatever the set (the tile kernel's lanes). q8_0 with vpdpbusd:
 * ku the key bytes + 128 (unsigned), xc -128 times the query's four-quant
 * sums, so the sum starts at the offset's product; without: |k| times x
 * signed as k (pairs <= 2 * 128 * 127, no int16 saturation). q4_0: ku the
 * nibbles 0..15 (the -8 is the tile's f32 term, below). */
QK_FN __m256i QK_NAME(kdot)(const enum kv_dtype dt, __m256i ku, __m256i ka, __m256i x,
                            __m256i xc)
{
#ifdef QK_DPBUSD
    (void)ka;
    return QK_DPBUSD(dt == KV_Q8_0 ? xc : _mm256_setzero_si256(), ku, x);
#else
    (void)xc;
    __m256i p = dt == KV_Q8_0 ? _mm256_maddubs_epi16(ka, _mm256_sign_epi8(x, ku))
                              : _mm256_maddubs_epi16(ku, x);
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
#endif
}

/* The scores of four keys for rows 0 .. n - 1 (n <= 3; v[r][j]: row r's
 * eight lane sums for key j) through v8_sums8, each sum in v8_sum's order
 * (the tile's hsum), plus the row's add, to s[r * ss + j]. Rows n.. of v
 * are not read. */
QK_FN void QK_NAME(sums4)(const int n, attn_v8 v[3][4], const __m128 *add, float *s,
                          int64_t ss)
{
    const attn_v8 *b = v[n > 1 ? 1 : 0];
    attn_v8 sum;
    v8_sums8(v[0][0], v[0][1], v[0][2], v[0][3], b[0], b[1], b[2], b[3], sum);
    _mm_storeu_ps(s, _mm_add_ps(_mm256_castps256_ps128((__m256)sum), add[0]));
    if (n > 1)
        _mm_storeu_ps(s + ss, _mm_add_ps(_mm256_extractf128_ps((__m256)sum, 1), add[1]));
    if (n > 2) {
        const attn_v8 *e = v[2];
        v8_sums8(e[0], e[1], e[2], e[3], e[0], e[1], e[2], e[3], sum);
        _mm_storeu_ps(s + 2 * ss, _mm_add_ps(_mm256_castps256_ps128((__m256)sum), add[2]));
    }
}

/* Rows 0 .. n - 1 (n <= 3) of x against keys 0 .. nk - 1 (nk 4 or 1) at k
 * (rb bytes a key), their scores to s[r * ss + j]. Per (row, key) an
 * eight-lane f32 sum, each block's lanes added by FMA with the product of
 * the two scales (rounded once, as the tile kernel's dd); q4_0's -8 dk sx
 * by FMAs in a lane of its own (lanes: keys, as the tile's per-row add). */
QK_FN void QK_NAME(keys)(const enum kv_dtype dt, const int n, const int nk,
                         const struct qmm_q8 *x, int64_t nb, const __m256i *xc,
                         const uint8_t *k, size_t rb, float *s, int64_t ss)
{
    const size_t bb = dt == KV_Q8_0 ? sizeof(struct block_q8_0) : sizeof(struct block_q4_0);
    __m256 acc[3][4];
    __m128 add[3];
    QK_UNROLL for (int r = 0; r < n; r++) {
        add[r] = _mm_setzero_ps();
        QK_UNROLL for (int j = 0; j < nk; j++)
            acc[r][j] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *kb = k + (size_t)b * bb;
        __m128i h = _mm_setzero_si128();
        h = _mm_insert_epi16(h, ig_f16_load(kb), 0);
        if (nk == 4) {
            h = _mm_insert_epi16(h, ig_f16_load(kb + rb), 1);
            h = _mm_insert_epi16(h, ig_f16_load(kb + 2 * rb), 2);
            h = _mm_insert_epi16(h, ig_f16_load(kb + 3 * rb), 3);
        }
        __m128 dk = _mm_cvtph_ps(h);
        float dd[3][4];
        QK_UNROLL for (int r = 0; r < n; r++) {
            const struct qmm_q8 *xb = x + r * nb + b;
            _mm_storeu_ps(dd[r], _mm_mul_ps(dk, _mm_set1_ps(xb->d)));
            if (dt == KV_Q4_0)
                add[r] = _mm_fmadd_ps(_mm_mul_ps(_mm_set1_ps(-8.0f), dk), _mm_set1_ps(xb->s),
                                      add[r]);
        }
        QK_UNROLL for (int j = 0; j < nk; j++) {
            const uint8_t *q = kb + (size_t)j * rb + 2;
            __m256i ku, ka = _mm256_setzero_si256();
            if (dt == KV_Q8_0) {
                ku = _mm256_loadu_si256((const __m256i *)(const void *)q);
#ifdef QK_DPBUSD
                ku = _mm256_xor_si256(ku, _mm256_set1_epi8((char)0x80));
#else
                ka = _mm256_sign_epi8(ku, ku);
#endif
            } else {
                __m128i v = _mm_loadu_si128((const __m128i *)(const void *)q);
                __m128i m = _mm_set1_epi8(0x0f);
                ku = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m),
                                      _mm_and_si128(v, m));
            }
            QK_UNROLL for (int r = 0; r < n; r++) {
                __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)x[r * nb + b].qs);
                __m256 p = _mm256_cvtepi32_ps(QK_NAME(kdot)(dt, ku, ka, xv, xc[r * nb + b]));
                acc[r][j] = _mm256_fmadd_ps(_mm256_set1_ps(dd[r][j]), p, acc[r][j]);
            }
        }
    }
    if (nk == 1) {
        QK_UNROLL for (int r = 0; r < n; r++) {
            attn_v8 a = (attn_v8)acc[r][0];
            s[r * ss] = v8_sum(a) + add[r][0];
        }
        return;
    }
    attn_v8 v[3][4];
    QK_UNROLL for (int r = 0; r < n; r++)
        QK_UNROLL for (int j = 0; j < 4; j++)
            v[r][j] = (attn_v8)acc[r][j];
    QK_NAME(sums4)(n, v, add, s, ss);
}

#ifdef QK_ZMM
/* keys() for four keys on AVX512-VNNI: two keys side by side in a zmm
 * (lanes 0..7 the first's eight lane sums, 8..15 the second's), so each
 * vpdpbusd, conversion and FMA covers two keys where keys() spends one on
 * each. Every lane sees keys()'s operations: the same exact int32 sums, the
 * same conversion, the FMA with the same dk dx (computed as keys() computes
 * it, then spread to its key's eight lanes), and at the end the halves go
 * through the same v8_sums8; so the same bits (tests/cpu/test_attn_qk.c). */
QK_FN void QK_NAME(keys4z)(const enum kv_dtype dt, const int n, const struct qmm_q8 *x,
                           int64_t nb, const __m512i *xcz, const uint8_t *k, size_t rb,
                           float *s, int64_t ss)
{
    const size_t bb = dt == KV_Q8_0 ? sizeof(struct block_q8_0) : sizeof(struct block_q4_0);
    const __m512i lo2 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i hi2 = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);
    __m512 acc[3][2];
    __m128 add[3];
    QK_UNROLL for (int r = 0; r < n; r++) {
        add[r] = _mm_setzero_ps();
        acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *kb = k + (size_t)b * bb;
        __m128i h = _mm_setzero_si128();
        h = _mm_insert_epi16(h, ig_f16_load(kb), 0);
        h = _mm_insert_epi16(h, ig_f16_load(kb + rb), 1);
        h = _mm_insert_epi16(h, ig_f16_load(kb + 2 * rb), 2);
        h = _mm_insert_epi16(h, ig_f16_load(kb + 3 * rb), 3);
        __m128 dk = _mm_cvtph_ps(h);
        __m512i ku[2];
        QK_UNROLL for (int j = 0; j < 2; j++) { /* keys 2j and 2j + 1 */
            const uint8_t *q0 = kb + (size_t)(2 * j) * rb + 2, *q1 = q0 + rb;
            if (dt == KV_Q8_0) {
                __m512i z = _mm512_inserti64x4(
                    _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)q0)),
                    _mm256_loadu_si256((const __m256i *)(const void *)q1), 1);
                ku[j] = _mm512_xor_si512(z, _mm512_set1_epi8((char)0x80));
            } else { /* 128-bit lanes: q0's low nibbles, its high ones, q1's, q1's */
                __m128i v0 = _mm_loadu_si128((const __m128i *)(const void *)q0);
                __m128i v1 = _mm_loadu_si128((const __m128i *)(const void *)q1);
                __m512i z = _mm512_inserti64x4(
                    _mm512_castsi256_si512(_mm256_broadcastsi128_si256(v0)),
                    _mm256_broadcastsi128_si256(v1), 1);
                z = _mm512_srlv_epi64(z, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0));
                ku[j] = _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
            }
        }
        QK_UNROLL for (int r = 0; r < n; r++) {
            const struct qmm_q8 *xb = x + r * nb + b;
            __m512 dd = _mm512_castps128_ps512(_mm_mul_ps(dk, _mm_set1_ps(xb->d)));
            if (dt == KV_Q4_0)
                add[r] = _mm_fmadd_ps(_mm_mul_ps(_mm_set1_ps(-8.0f), dk), _mm_set1_ps(xb->s),
                                      add[r]);
            __m512i xv = _mm512_broadcast_i64x4(
                _mm256_loadu_si256((const __m256i *)(const void *)xb->qs));
            __m512i xc = dt == KV_Q8_0 ? xcz[r * nb + b] : _mm512_setzero_si512();
            QK_UNROLL for (int j = 0; j < 2; j++) {
                __m512 p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(xc, ku[j], xv));
                __m512 d2 = _mm512_permutexvar_ps(j ? hi2 : lo2, dd);
                acc[r][j] = _mm512_fmadd_ps(d2, p, acc[r][j]);
            }
        }
    }
    /* v8_sums8 on the halves: keys()'s reduction */
#define QK_LO(z) ((attn_v8)_mm512_castps512_ps256(z))
#define QK_HI(z) ((attn_v8)_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(z), 1)))
    attn_v8 v[3][4];
    QK_UNROLL for (int r = 0; r < n; r++)
        QK_UNROLL for (int j = 0; j < 2; j++) {
            v[r][2 * j] = QK_LO(acc[r][j]);
            v[r][2 * j + 1] = QK_HI(acc[r][j]);
        }
    QK_NAME(sums4)(n, v, add, s, ss);
#undef QK_LO
#undef QK_HI
}
#endif

/* Rows 0 .. n - 1 of the call against keys c0 .. nc - 1, four at a time
 * (the next tile's same rows requested as these are read), then one. */
QK_FN void QK_NAME(rows)(const enum kv_dtype dt, const int n, const struct qmm_q8 *x,
                         int64_t nb, const uint8_t *kt, int64_t c0, int64_t nc, float *s,
                         int64_t ss, const uint8_t *pf)
{
    size_t rb = kv_dtype_row_bytes(dt, nb * QMM_QK);
    __m256i xc[3 * QK_MAX_BLOCKS];
#ifdef QK_ZMM
    __m512i xcz[3 * QK_MAX_BLOCKS]; /* xc in both halves */
#endif
    for (int64_t i = 0; i < n * nb; i++) {
#ifdef QK_DPBUSD
        __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)x[i].qs);
        __m256i s128 = QK_DPBUSD(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80), xv);
        xc[i] = _mm256_sub_epi32(_mm256_setzero_si256(), s128);
#else
        xc[i] = _mm256_setzero_si256();
#endif
#ifdef QK_ZMM
        xcz[i] = _mm512_broadcast_i64x4(xc[i]);
#endif
    }
    int64_t c = c0;
    for (; c + 4 <= nc; c += 4) {
        if (pf)
            for (size_t o = 0; o < 4 * rb; o += 64)
                prefetch_line(pf + (size_t)c * rb + o);
#ifdef QK_ZMM
        QK_NAME(keys4z)(dt, n, x, nb, xcz, kt + (size_t)c * rb, rb, s + c, ss);
#else
        QK_NAME(keys)(dt, n, 4, x, nb, xc, kt + (size_t)c * rb, rb, s + c, ss);
#endif
    }
    for (; c < nc; c++)
        QK_NAME(keys)(dt, n, 1, x, nb, xc, kt + (size_t)c * rb, rb, s + c, ss);
}

/* The rows in blocks of three, the last four or two as two blocks of two, a
 * lone row alone (attn_decode.c's grouping); the first block prefetches. */
QK_FN void QK_NAME(scores)(const enum kv_dtype dt, const struct qmm_q8 *qq, int64_t rows,
                           const uint8_t *kt, int64_t c0, int64_t nc, int64_t hd, float *s,
                           int64_t ss, const uint8_t *pf)
{
    int64_t nb = hd / QMM_QK;
    for (int64_t r = 0; r < rows;) {
        int64_t n = block_rows(rows - r);
        const struct qmm_q8 *x = qq + r * nb;
        float *sr = s + r * ss;
        const uint8_t *pfr = r == 0 ? pf : NULL;
        if (n == 3)
            QK_NAME(rows)(dt, 3, x, nb, kt, c0, nc, sr, ss, pfr);
        else if (n == 2)
            QK_NAME(rows)(dt, 2, x, nb, kt, c0, nc, sr, ss, pfr);
        else
            QK_NAME(rows)(dt, 1, x, nb, kt, c0, nc, sr, ss, pfr);
        r += n;
    }
}

QK_TARGET static void QK_NAME(scores_q8_0)(const struct qmm_q8 *qq, int64_t rows,
                                           const uint8_t *kt, int64_t c0, int64_t nc,
                                           int64_t hd, float *s, int64_t ss, const uint8_t *pf)
{
    QK_NAME(scores)(KV_Q8_0, qq, rows, kt, c0, nc, hd, s, ss, pf);
}

QK_TARGET static void QK_NAME(scores_q4_0)(const struct qmm_q8 *qq, int64_t rows,
                                           const uint8_t *kt, int64_t c0, int64_t nc,
                                           int64_t hd, float *s, int64_t ss, const uint8_t *pf)
{
    QK_NAME(scores)(KV_Q4_0, qq, rows, kt, c0, nc, hd, s, ss, pf);
}

#undef QK_FN
#undef QK_UNROLL
