/* backend/cpu_deltanet_lanes.h: the body of backend/cpu_deltanet.c's vector
 * kernels (the convolution, the row steps, the chunk, the recurrent step),
 * included once per instruction set (no include guard). The includer
 * defines DN_TARGET (a target attribute, or nothing), DN_NAME(name) (the
 * set's suffix), DN_LANES (16 or 8) and DN_VEC (DN_LANES floats of GCC's
 * vector extension, at any alignment).
 *
 * Why once per set rather than target_clones over 16-float vectors: GCC
 * lowered those on AVX2 through general registers and the stack (the
 * x86-64-v3 clone of chunk_rows took 4.7x the AVX-512 one's samples of a
 * pp512, 7x in a harness); here an AVX2 set's vector is one ymm register
 * and its 16-column blocks two of them. Each element's operations, and
 * their order, are the same at either width and in the scalar tails: every
 * set gives the same bits (tests/cpu/test_deltanet.py holds IGNITE_SIMD=avx2
 * and =scalar to the AVX-512 set's logits). */

#define DN_FN DN_TARGET static inline __attribute__((always_inline))
#define DN_V(p) (*(DN_VEC *)(void *)(p))
/* vectors of a block of 16 columns (gemm_acc) */
#define DN_NV (16 / DN_LANES)
#define DN_UNROLL _Pragma("GCC unroll 4")

/* ---- the convolution ------------------------------------------------------------ */

/* One row's block of nc channels: x[c] = silu(w_(K-1) x[c] + sum_i w_i
 * hist_i[c]), the taps oldest first (ring slot (t + i) % (K - 1)), x's
 * inputs into the ring's oldest slot; DN_LANES lanes, then one at a time,
 * each element's operations in that order in every width. The SiLU's expf
 * through ops_exp_row (its bits, several lanes a call): one expf call an
 * element was a third of the convolution's time. */
DN_FN void DN_NAME(conv_row)(float *restrict x, const float *restrict wt, float *restrict hist,
                             float *restrict e, int64_t t, int64_t K, int64_t W, int64_t nc)
{
    float *slot = K > 1 ? hist + t % (K - 1) * W : NULL; /* the oldest input, replaced */
    int64_t c = 0;
    for (; c + DN_LANES <= nc; c += DN_LANES) {
        DN_VEC in = DN_V(x + c), acc = DN_V(wt + (K - 1) * W + c) * in;
        for (int64_t i = 0; i < K - 1; i++)
            acc += DN_V(wt + i * W + c) * DN_V(hist + (t + i) % (K - 1) * W + c);
        if (slot)
            DN_V(slot + c) = in;
        DN_V(x + c) = acc;
        DN_V(e + c) = -acc;
    }
    for (; c < nc; c++) {
        float in = x[c], acc = wt[(K - 1) * W + c] * in;
        for (int64_t i = 0; i < K - 1; i++)
            acc += wt[i * W + c] * hist[(t + i) % (K - 1) * W + c];
        if (slot)
            slot[c] = in;
        x[c] = acc;
        e[c] = -acc;
    }
    ops_exp_row(e, nc, 0.0f); /* expf(-x) (-x - 0 is -x) */
    for (c = 0; c + DN_LANES <= nc; c += DN_LANES)
        DN_V(x + c) = DN_V(x + c) / (1.0f + DN_V(e + c)); /* SiLU */
    for (; c < nc; c++)
        x[c] = x[c] / (1.0f + e[c]);
}

DN_TARGET static void DN_NAME(conv_task)(void *arg, int64_t i0, int64_t i1, int thread)
{
    const struct dn_job *j = arg;
    int64_t W = j->conv_w, nblk = (j->C + W - 1) / W, K = j->K;
    const float *w = j->L->w[LAYER_DN_CONV].data; /* [C, K] */
    float *wt = ops_ctx_scratch(j->s->ops, thread); /* [K][W] */
    float *hist = wt + K * W;                       /* [K - 1][W] */
    float *e = hist + (K - 1) * W;                  /* [W] */
    for (int64_t it = i0; it < i1; it++) {
        const struct backend_seq *q = &j->s->batch->seqs[it / nblk];
        int64_t c0 = it % nblk * W, nc = c0 + W < j->C ? W : j->C - c0;
        float *st = conv_state(j, q->slot);
        /* the last K - 1 inputs of the block's channels, oldest first, as a
         * ring (K <= 64: model.c) */
        for (int64_t i = 0; i < K - 1; i++)
            memcpy(hist + i * W, st + i * j->C + c0, (size_t)nc * sizeof(float));
        for (int64_t i = 0; i < K; i++)
            for (int64_t c = 0; c < nc; c++)
                wt[i * W + c] = w[(c0 + c) * K + i];
        for (int64_t t = 0; t < q->n_rows; t++) {
            float *x = j->qkv + (q->row0 + t) * j->C + c0;
            /* two rows ahead: the next page's lines on their way */
            if (t + 2 < q->n_rows)
                for (int64_t c = 0; c < nc; c += 16)
                    __builtin_prefetch(x + 2 * j->C + c, 1);
            DN_NAME(conv_row)(x, wt, hist, e, t, K, W, nc);
        }
        for (int64_t i = 0; i < K - 1; i++)
            memcpy(st + i * j->C + c0, hist + (q->n_rows + i) % (K - 1) * W,
                   (size_t)nc * sizeof(float));
    }
}

/* ---- per row: L2 norms of q and k, beta and the decay ------------------------- */

/* y *= a over n. */
DN_FN void DN_NAME(scale)(float *y, float a, int64_t n)
{
    int64_t i = 0;
    for (; i + DN_LANES <= n; i += DN_LANES)
        DN_V(y + i) *= a;
    for (; i < n; i++)
        y[i] *= a;
}

/* The heads of q and k L2-normalized (2 Hk heads of D floats from row),
 * q's scaled by qscale: transformers' l2norm, x / sqrt(sum x^2 + 1e-6). */
DN_FN void DN_NAME(l2norm_heads)(const struct dn_job *j, float *row, float qscale, double *ss)
{
    sumsq_rows(row, j->D, 2 * j->Hk, j->D, ss);
    for (int64_t h = 0; h < 2 * j->Hk; h++) {
        float r = (float)(1.0 / sqrt(ss[h] + 1e-6)) * (h < j->Hk ? qscale : 1.0f);
        DN_NAME(scale)(row + h * j->D, r, j->D);
    }
}

DN_TARGET static void DN_NAME(gates_task)(void *arg, int64_t r0, int64_t r1, int thread)
{
    const struct dn_job *j = arg;
    double *ss = scratch_doubles(j, thread, 0); /* [2 Hk] */
    const float *dt = j->L->w[LAYER_DN_DT].data, *A = j->L->w[LAYER_DN_A].data;
    float qscale = 1.0f / sqrtf((float)j->D);
    for (int64_t r = r0; r < r1; r++) {
        DN_NAME(l2norm_heads)(j, j->qkv + r * j->C, qscale, ss);
        for (int64_t h = 0; h < j->Hv; h++) {
            float *b = j->beta + r * j->Hv + h, *g = j->g + r * j->Hv + h;
            *b = sigmoidf(*b);
            float a = *g + dt[h];
            float sp = a > 20.0f ? a : log1pf(expf(a)); /* softplus, as torch's threshold */
            *g = A[h] * sp;
        }
    }
}

/* ---- the delta rule ------------------------------------------------------------- */

/* out[m] = a.b_m for m < n, the rows b_m given transposed (the chunk's
 * keys): b_m's element d at bt[d ldt + m] (columns up to n rounded up to 16
 * readable, ldt >= that). Each a.b_m in one order of operations: eight
 * partial sums, element d into sum d % 8 (d ascending), combined as ((s0 +
 * s4) + (s1 + s5)) + ((s2 + s6) + (s3 + s7)), then the elements past the
 * last multiple of 8 one at a time; the eight sums are the lanes of the
 * 8-lane dot these were before, so the same bits. DN_LANES rows a vector:
 * DN_LANES multiply-adds an instruction where that dot's steps, four rows
 * at a time, had 8. */
DN_FN void DN_NAME(dots_t)(const float *restrict a, const float *restrict bt, int64_t ldt,
                           int64_t n, int64_t len, float *restrict out)
{
    for (int64_t m = 0; m < n; m += DN_LANES) {
        const float *b = bt + m;
        DN_VEC s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, s4 = {0}, s5 = {0}, s6 = {0}, s7 = {0};
        int64_t d = 0;
        for (; d + 8 <= len; d += 8) {
            const float *bd = b + d * ldt;
            s0 += a[d] * DN_V(bd);
            s1 += a[d + 1] * DN_V(bd + ldt);
            s2 += a[d + 2] * DN_V(bd + 2 * ldt);
            s3 += a[d + 3] * DN_V(bd + 3 * ldt);
            s4 += a[d + 4] * DN_V(bd + 4 * ldt);
            s5 += a[d + 5] * DN_V(bd + 5 * ldt);
            s6 += a[d + 6] * DN_V(bd + 6 * ldt);
            s7 += a[d + 7] * DN_V(bd + 7 * ldt);
        }
        DN_VEC sum = ((s0 + s4) + (s1 + s5)) + ((s2 + s6) + (s3 + s7));
        for (; d < len; d++)
            sum += a[d] * DN_V(b + d * ldt);
        if (n - m >= DN_LANES)
            DN_V(out + m) = sum;
        else
            for (int64_t l = 0; l < n - m; l++)
                out[m + l] = sum[l];
    }
}

/* y += a x over n. */
DN_FN void DN_NAME(axpy)(float *restrict y, float a, const float *restrict x, int64_t n)
{
    int64_t i = 0;
    for (; i + DN_LANES <= n; i += DN_LANES)
        DN_V(y + i) += a * DN_V(x + i);
    for (; i < n; i++)
        y[i] += a * x[i];
}

/* y = x a over n (a copy then scale(), in one pass). */
DN_FN void DN_NAME(copy_scaled)(float *restrict y, const float *restrict x, float a, int64_t n)
{
    int64_t i = 0;
    for (; i + DN_LANES <= n; i += DN_LANES)
        DN_V(y + i) = DN_V(x + i) * a;
    for (; i < n; i++)
        y[i] = x[i] * a;
}

/* Y[r] += sum_k A[r a_rs + k a_cs] B[k] over rows r < rows, k < inner, each
 * row of Y and B n floats (ldy, ldb apart): four rows of Y at a time, so
 * each row of B is loaded once for four, 16 columns of them (DN_NV
 * vectors: 4 DN_NV sums) held in registers over the whole sum (k ascending
 * for every element, as axpy's would add them one k at a time: the same
 * bits). Inlined, so that each set's caller has its own. With tri >= 0, A
 * is lower triangular: row r's A is zero at every k > r + tri (the chunk's
 * T, zero above its diagonal, set so), and a group of four rows stops at
 * the last k its last row reads: half the multiply-adds of a chunk's T
 * products. What that leaves out is (+0) B added to a sum: the sum's bits
 * unless it is -0 or B is not finite. With zero true, Y's rows start from 0
 * (not read): the sums 0 + ... as from rows set to zero, without the
 * memset. */
DN_FN void DN_NAME(gemm_acc)(float *restrict Y, int64_t ldy, const float *A, int64_t a_rs,
                             int64_t a_cs, const float *B, int64_t ldb, int64_t rows,
                             int64_t inner, int64_t n, int64_t tri, bool zero)
{
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
        int64_t ks = tri >= 0 && r + 4 + tri < inner ? r + 4 + tri : inner;
        float *y0 = Y + r * ldy, *y1 = y0 + ldy, *y2 = y1 + ldy, *y3 = y2 + ldy;
        const float *a0 = A + r * a_rs, *a1 = a0 + a_rs, *a2 = a1 + a_rs, *a3 = a2 + a_rs;
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) {
            DN_VEC s0[DN_NV], s1[DN_NV], s2[DN_NV], s3[DN_NV], z = {0};
            DN_UNROLL
            for (int v = 0; v < DN_NV; v++) {
                int64_t o = i + v * DN_LANES;
                s0[v] = zero ? z : DN_V(y0 + o), s1[v] = zero ? z : DN_V(y1 + o);
                s2[v] = zero ? z : DN_V(y2 + o), s3[v] = zero ? z : DN_V(y3 + o);
            }
            for (int64_t k = 0; k < ks; k++) {
                float c0 = a0[k * a_cs], c1 = a1[k * a_cs], c2 = a2[k * a_cs], c3 = a3[k * a_cs];
                DN_UNROLL
                for (int v = 0; v < DN_NV; v++) {
                    DN_VEC bv = DN_V(B + k * ldb + i + v * DN_LANES);
                    s0[v] += c0 * bv;
                    s1[v] += c1 * bv;
                    s2[v] += c2 * bv;
                    s3[v] += c3 * bv;
                }
            }
            DN_UNROLL
            for (int v = 0; v < DN_NV; v++) {
                int64_t o = i + v * DN_LANES;
                DN_V(y0 + o) = s0[v], DN_V(y1 + o) = s1[v];
                DN_V(y2 + o) = s2[v], DN_V(y3 + o) = s3[v];
            }
        }
        if (zero)
            for (int64_t l = i; l < n; l++)
                y0[l] = y1[l] = y2[l] = y3[l] = 0.0f;
        for (int64_t k = 0; k < ks && i < n; k++) {
            const float *b = B + k * ldb;
            float c0 = a0[k * a_cs], c1 = a1[k * a_cs], c2 = a2[k * a_cs], c3 = a3[k * a_cs];
            for (int64_t l = i; l < n; l++) {
                y0[l] += c0 * b[l];
                y1[l] += c1 * b[l];
                y2[l] += c2 * b[l];
                y3[l] += c3 * b[l];
            }
        }
    }
    for (; r < rows; r++) {
        int64_t ks = tri >= 0 && r + 1 + tri < inner ? r + 1 + tri : inner;
        if (zero)
            memset(Y + r * ldy, 0, (size_t)n * sizeof *Y);
        for (int64_t k = 0; k < ks; k++)
            DN_NAME(axpy)(Y + r * ldy, A[r * a_rs + k * a_cs], B + k * ldb, n);
    }
}

/* One row t of head h by the recurrent step: S and o, in two passes over
 * S (64 KiB a head at head dim 128: 18 layers' states are past L2) where
 * four took each row of S again: the decay and S^T k row by row, then the
 * update and S^T q. Each element's operations are those of the four passes
 * (the sums i ascending): the same bits. */
DN_TARGET static void DN_NAME(step_row)(const struct dn_job *j, float *S, int64_t t, int64_t h,
                                        float *kv)
{
    int64_t D = j->D, kh = key_head(j, h);
    const float *q = QROW(j, t, kh), *k = KROW(j, t, kh), *v = VROW(j, t, h);
    float decay = expf(j->g[t * j->Hv + h]), beta = j->beta[t * j->Hv + h];
    memset(kv, 0, (size_t)D * sizeof *kv); /* S^T k, S decayed */
    for (int64_t i = 0; i < D; i++) {
        DN_NAME(scale)(S + i * D, decay, D);
        DN_NAME(axpy)(kv, k[i], S + i * D, D);
    }
    for (int64_t c = 0; c < D; c++)
        kv[c] = beta * (v[c] - kv[c]);
    float *o = j->out + t * j->Hv * D + h * D;
    memset(o, 0, (size_t)D * sizeof *o);
    for (int64_t i = 0; i < D; i++) {
        DN_NAME(axpy)(S + i * D, k[i], kv, D);
        DN_NAME(axpy)(o, q[i], S + i * D, D);
    }
}

/* Rows [0, c) of one head as one chunk (c <= DN_CHUNK), from and into S; the
 * outputs of rows [p0, c) only (the rows before p0 were a prompt's rows of
 * an earlier step, run again from its checkpoint for the state: each
 * output row's operations are the same whatever c and p0, so its bits are
 * those of the whole chunk; tests/cpu/test_deltanet.py). sc: the thread's
 * scratch of dn_scratch_floats. */
DN_TARGET static void DN_NAME(chunk_rows)(const struct dn_job *j, float *S,
                                          const struct dn_rows *r, int64_t c, int64_t p0,
                                          float *sc)
{
    int64_t D = j->D;
    float *G = sc;                      /* [c] cumulative log decay */
    float *T = G + DN_CHUNK;            /* [c, c] (I + lower)^-1, then q.k decay */
    float *U = T + DN_CHUNK * DN_CHUNK; /* [c, D] T (beta v), then v_new */
    float *W = U + DN_CHUNK * D;        /* [c, D] T (beta e^G k) */
    float *X = W + DN_CHUNK * D;        /* [c, D] rows being combined */
    float *VB = X + DN_CHUNK * D;       /* [c, D] beta v */
    float *E = VB + DN_CHUNK * D;       /* [c, c] e^(G_i - G_m) for m <= i */
    float *KC = E + DN_CHUNK * DN_CHUNK; /* [c, D] the chunk's keys, side by side */
    float *KT = KC + DN_CHUNK * D;       /* [D, DN_CHUNK] and transposed (dots_t) */
    float acc = 0;
    for (int64_t i = 0; i < c; i++) {
        acc += r->g[i * r->gs];
        G[i] = acc;
    }
    /* the keys, read c times each below, copied out of their rows C floats
     * apart: a multiple of 4 KiB there, all c of them fell in the same few
     * L1 sets and evicted each other */
    for (int64_t m = 0; m < c; m++)
        memcpy(KC + m * D, r->k + m * r->ks, (size_t)D * sizeof *KC);
    /* KT's columns up to c rounded up to 16 (dots_t reads them; those past
     * c come out in lanes never stored) */
    int64_t c16 = (c + 15) / 16 * 16;
    for (int64_t d = 0; d < D; d++)
        for (int64_t m = 0; m < c16; m++)
            KT[d * DN_CHUNK + m] = m < c ? KC[m * D + d] : 0.0f;
    /* T = (I - M)^-1 by forward substitution, M[i][m] = -beta_i k_i.k_m
     * e^(G_i - G_m) for m < i (transformers' loop over the rows) */
    for (int64_t i = 0; i < c; i++) {
        const float *ki = KC + i * D;
        float bi = r->beta[i * r->gs];
        float *Ti = T + i * c, *Mi = X, *Ei = E + i * c; /* row i of M, then of T */
        DN_NAME(dots_t)(ki, KT, DN_CHUNK, i, D, Mi);
        for (int64_t m = 0; m <= i; m++)
            Ei[m] = G[i] - G[m];
        ops_exp_row(Ei, i + 1, 0.0f); /* expf's bits, several lanes a call */
        for (int64_t m = 0; m < i; m++)
            Mi[m] = -bi * Mi[m] * Ei[m];
        /* T_i = sum_(m < i) M_im T_m over the rows already solved (T_mm = 1);
         * row m of T is zero beyond m */
        for (int64_t p = 0; p < c; p++)
            Ti[p] = 0.0f;
        for (int64_t m = 0; m < i; m++)
            DN_NAME(axpy)(Ti, Mi[m], T + m * c, m + 1);
        Ti[i] = 1.0f;
    }
    /* U = T (beta v), W = T (beta e^G k): the scaled rows into VB and X
     * first, then the products (T's zeros above the diagonal included) */
    for (int64_t m = 0; m < c; m++) {
        float bm = r->beta[m * r->gs];
        DN_NAME(copy_scaled)(VB + m * D, r->v + m * r->vs, bm, D);
        DN_NAME(copy_scaled)(X + m * D, KC + m * D, bm * expf(G[m]), D);
    }
    DN_NAME(gemm_acc)(U, D, T, c, 1, VB, D, c, c, D, 0, true);
    DN_NAME(gemm_acc)(W, D, T, c, 1, X, D, c, c, D, 0, true);
    /* v_new = U - W S (into U) */
    DN_NAME(gemm_acc)(X, D, W, D, 1, S, D, c, D, D, -1, true);
    for (int64_t i = 0; i < c; i++)
        DN_NAME(axpy)(U + i * D, -1.0f, X + i * D, D);
    /* o_i = e^(G_i) q_i S + sum_(m <= i) (q_i.k_m) e^(G_i - G_m) v_new_m */
    int64_t n_out = c - p0;
    DN_NAME(gemm_acc)(r->o, r->os, r->q, r->qs, 1, S, D, n_out, D, D, -1, true);
    /* the chunk's own part: T := (q_i.k_m) e^(G_i - G_m) for m <= i, 0 above */
    for (int64_t i = p0; i < c; i++) {
        const float *qi = r->q + (i - p0) * r->qs;
        DN_NAME(scale)(r->o + (i - p0) * r->os, expf(G[i]), D);
        float *Ti = T + i * c;
        DN_NAME(dots_t)(qi, KT, DN_CHUNK, i + 1, D, Ti);
        for (int64_t m = 0; m < c; m++)
            Ti[m] = m <= i ? Ti[m] * E[i * c + m] : 0.0f;
    }
    DN_NAME(gemm_acc)(r->o, r->os, T + p0 * c, c, 1, U, D, n_out, c, D, p0, false);
    /* S = e^(G_last) S + sum_m (e^(G_last - G_m) k_m) v_new_m^T */
    float last = G[c - 1], el = expf(last);
    DN_NAME(scale)(S, el, D * D);
    for (int64_t m = 0; m < c; m++) { /* X = the decayed keys [c, D] */
        DN_NAME(copy_scaled)(X + m * D, KC + m * D, expf(last - G[m]), D);
    }
    DN_NAME(gemm_acc)(S, D, X, 1, D, U, D, D, c, D, -1, false);
}

/* ---- the gated norm ------------------------------------------------------------ */

/* o = rmsnorm(o) w silu(z) per value head of each row: the heads' sums of
 * squares four at a time (sumsq_rows), the row's sigmoids through
 * ops_exp_row into the thread's scratch (expf's bits, several lanes a
 * call), each element's operations as one at a time. */
DN_TARGET static void DN_NAME(norm_task)(void *arg, int64_t r0, int64_t r1, int thread)
{
    const struct dn_job *j = arg;
    const float *w = j->L->w[LAYER_DN_NORM].data;
    float eps = (float)ops_ctx_model(j->s->ops)->hp.norm_eps;
    int64_t D = j->D, vd = j->Hv * D;
    float *e = ops_ctx_scratch(j->s->ops, thread); /* [Hv D] */
    double *ss = scratch_doubles(j, thread, vd);   /* [Hv] */
    for (int64_t r = r0; r < r1; r++) {
        float *orow = j->out + r * vd;
        const float *zrow = j->z + r * vd;
        for (int64_t i = 0; i < vd; i++)
            e[i] = -zrow[i];
        ops_exp_row(e, vd, 0.0f); /* expf(-z) */
        sumsq_rows(orow, D, j->Hv, D, ss);
        for (int64_t h = 0; h < j->Hv; h++) {
            float *o = orow + h * D;
            const float *z = zrow + h * D, *eh = e + h * D;
            float rs = (float)(1.0 / sqrt(ss[h] / (double)D + eps));
            int64_t i = 0;
            for (; i + DN_LANES <= D; i += DN_LANES)
                DN_V(o + i) = DN_V(o + i) * rs * DN_V(w + i) *
                              (DN_V(z + i) * (1.0f / (1.0f + DN_V(eh + i))));
            for (; i < D; i++)
                o[i] = o[i] * rs * w[i] * (z[i] * (1.0f / (1.0f + eh[i])));
        }
    }
}

/* The set's kernels, as cpu_deltanet.c's dispatch takes them. */
static const struct dn_kernels DN_NAME(dn_kernels) = {
    .conv_task = DN_NAME(conv_task), .gates_task = DN_NAME(gates_task),
    .norm_task = DN_NAME(norm_task), .chunk_rows = DN_NAME(chunk_rows),
    .step_row = DN_NAME(step_row), .name = DN_SET_NAME,
};

#undef DN_FN
#undef DN_V
#undef DN_NV
#undef DN_UNROLL
