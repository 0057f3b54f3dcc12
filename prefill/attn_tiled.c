/* prefill/attn_tiled.c: tiled causal attention with an online softmax (the
 * CPU twin of the CUDA prefill kernel), for every row of a step.
 *
 * A work item is (sequence, KV head, query tile): the rows of the item are the
 * ATTN_TILE_Q query tokens of every query head in the KV head's group. The
 * item walks the K/V tiles from position 0 to the last position its queries
 * can see (tiles above the causal diagonal are never touched), and keeps per
 * row a running max m, a running sum l and an unnormalized output o:
 *   m' = max(m, max_c s_c),  l' = l e^(m - m') + sum_c e^(s_c - m'),
 *   o' = o e^(m - m') + sum_c e^(s_c - m') v_c,   out = o / l at the end.
 * On a tile that crosses the diagonal each row simply stops at its own
 * position, so there is no mask value and no n x n buffer. A sliding window
 * starts the walk at the first tile the tile's first query can see; on the
 * tile that crosses a row's window edge the row starts at its edge, so the
 * blocks before the window of the tile's first query are never read.
 * A K/V tile is one cache block, found through the sequence's block table.
 * Writing K/V into the cache is the caller's (backend/cpu.c).
 * Covered by tests/cpu/test_attn_tiled.c. */
#include "prefill/attn_tiled.h"

#include "core/half.h"
#include "core/status.h"
#include "ops/simd.h"

#include <math.h>
#include <stdbool.h>

/* Score and output columns handled per register block (vectorizable). */
#define ATTN_COL_BLOCK 16
_Static_assert(ATTN_TILE_K % ATTN_COL_BLOCK == 0, "key tile is whole column blocks");

/* ---- per-thread scratch -------------------------------------------------------- */

struct attn_scratch {
    float *q;  /* [rows, head_dim] queries of the item, pre-multiplied by scale */
    float *kt; /* [head_dim, ATTN_TILE_K] K tile, transposed */
    float *v;  /* [ATTN_TILE_K, head_dim] V tile */
    float *s;  /* [rows, ATTN_TILE_K] scores, then probabilities */
    float *o;  /* [rows, head_dim] unnormalized output */
    float *m;  /* [rows] running max */
    float *l;  /* [rows] running sum */
    float *corr; /* [rows] e^(m_old - m_new) of the current tile */
    float *krow; /* [head_dim] one K row in f32, before it is transposed */
    int32_t *lo, *hi; /* [rows] each row's visible columns of the current tile */
};

static int64_t max_rows(int64_t n_head, int64_t n_head_kv)
{
    return n_head / n_head_kv * ATTN_TILE_Q;
}

int64_t attn_tiled_scratch_floats(int64_t n_head, int64_t n_head_kv, int64_t head_dim)
{
    int64_t rows = max_rows(n_head, n_head_kv);
    int64_t hd = (head_dim + ATTN_COL_BLOCK - 1) / ATTN_COL_BLOCK * ATTN_COL_BLOCK;
    return rows * hd * 2 + hd * ATTN_TILE_K * 2 + rows * ATTN_TILE_K + rows * 5 + hd;
}

static struct attn_scratch carve(float *p, int64_t n_head, int64_t n_head_kv, int64_t head_dim)
{
    int64_t rows = max_rows(n_head, n_head_kv);
    int64_t hd = (head_dim + ATTN_COL_BLOCK - 1) / ATTN_COL_BLOCK * ATTN_COL_BLOCK;
    struct attn_scratch s;
    s.q = p, p += rows * hd;
    s.kt = p, p += hd * ATTN_TILE_K;
    s.v = p, p += ATTN_TILE_K * hd;
    s.s = p, p += rows * ATTN_TILE_K;
    s.o = p, p += rows * hd;
    s.m = p, p += rows;
    s.l = p, p += rows;
    s.corr = p, p += rows;
    s.krow = p, p += hd;
    s.lo = (int32_t *)(void *)p, p += rows;
    s.hi = (int32_t *)(void *)p;
    return s;
}

/* ---- loading a K/V tile ------------------------------------------------------- */

/* dst[0..n) = the cache's row at src as f32: plain loops the AVX2 clone turns
 * into vcvtph2ps (through the compiler's _Float16 where it has one). */
static inline void row_to_f32(enum kv_dtype dt, const void *src, float *dst, int64_t n)
{
    if (dt == KV_F32) {
        const float *f = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = f[i];
        return;
    }
#if defined(__FLT16_MAX__) && defined(__x86_64__)
    const _Float16 *h = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = (float)h[i];
#else
    const ig_f16 *h = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = ig_f16_to_f32(h[i]);
#endif
}

/* kt[d][c] = K[k0 + c][d] and v[c][d] = V[k0 + c][d] for c0 <= c < nc;
 * the other columns of kt are zeroed so score blocks can run full width
 * (columns before c0 are behind every row's window: their positions are
 * never read, so a cache may have dropped them). The tile is one cache
 * block (k0 a multiple of KV_BLOCK): one contiguous run of rows per KV head. */
OPS_SIMD_CLONES
static void load_kv_tile(const struct attn_params *p, const int32_t *table, int64_t kvh,
                         int64_t k0, int64_t c0, int64_t nc, struct attn_scratch *sc)
{
    int64_t hd = p->head_dim;
    enum kv_dtype dt = p->kv.dtype;
    size_t row = (size_t)hd * kv_dtype_bytes(dt);
    const char *kr = (const char *)kv_row(&p->kv, p->kv.k, table, kvh, k0) + (size_t)c0 * row;
    const char *vr = (const char *)kv_row(&p->kv, p->kv.v, table, kvh, k0) + (size_t)c0 * row;
    for (int64_t d = 0; d < hd; d++)
        for (int64_t c = 0; c < c0; c++)
            sc->kt[d * ATTN_TILE_K + c] = 0.0f;
    for (int64_t c = c0; c < nc; c++, kr += row, vr += row) {
        row_to_f32(dt, kr, sc->krow, hd);
        row_to_f32(dt, vr, sc->v + c * hd, hd);
        for (int64_t d = 0; d < hd; d++)
            sc->kt[d * ATTN_TILE_K + c] = sc->krow[d];
    }
    for (int64_t d = 0; d < hd; d++)
        for (int64_t c = nc; c < ATTN_TILE_K; c++)
            sc->kt[d * ATTN_TILE_K + c] = 0.0f;
}

/* ---- one work item ----------------------------------------------------------- */

/* Rows of queries whose scores are computed together: each loaded column
 * block of the K tile serves ATTN_ROW_BLOCK rows. */
#define ATTN_ROW_BLOCK 4

/* Eight floats; unaligned loads and stores through the _u type. */
typedef float attn_v8 __attribute__((vector_size(32)));
typedef float attn_v8u __attribute__((vector_size(32), aligned(4)));

/* (macros: a function passing 32-byte vectors would have another ABI in
 * the baseline clone) */
#define v8_load(p) (*(const attn_v8u *)(const void *)(p))
#define v8_store(p, v) (*(attn_v8u *)(void *)(p) = (v))

_Static_assert(ATTN_COL_BLOCK == 16, "a column block is two vectors of 8");

/* The row loops must unroll (-O2 does not): the accumulators then live in
 * registers instead of an array on the stack. */
#define ATTN_UNROLL _Pragma("GCC unroll 8")

/* s[r][0..ATTN_TILE_K) = q[r] . K tile, register-blocked over columns and
 * rows. Each score sums over d in order, whatever its row block: a row's
 * scores do not depend on how the rows are grouped. */
OPS_SIMD_CLONES
static void scores(const struct attn_scratch *sc, int64_t rows, int64_t hd)
{
    int64_t r = 0;
    for (; r + ATTN_ROW_BLOCK <= rows; r += ATTN_ROW_BLOCK) {
        const float *q = sc->q + r * hd;
        for (int64_t cb = 0; cb < ATTN_TILE_K; cb += ATTN_COL_BLOCK) {
            attn_v8 acc[ATTN_ROW_BLOCK][2] = {{{0}}};
            for (int64_t d = 0; d < hd; d++) {
                const float *kt = sc->kt + d * ATTN_TILE_K + cb;
                attn_v8 k0 = v8_load(kt), k1 = v8_load(kt + 8);
                ATTN_UNROLL for (int i = 0; i < ATTN_ROW_BLOCK; i++) {
                    float qv = q[i * hd + d];
                    acc[i][0] += qv * k0;
                    acc[i][1] += qv * k1;
                }
            }
            ATTN_UNROLL for (int i = 0; i < ATTN_ROW_BLOCK; i++) {
                v8_store(sc->s + (r + i) * ATTN_TILE_K + cb, acc[i][0]);
                v8_store(sc->s + (r + i) * ATTN_TILE_K + cb + 8, acc[i][1]);
            }
        }
    }
    for (; r < rows; r++) {
        const float *q = sc->q + r * hd;
        for (int64_t cb = 0; cb < ATTN_TILE_K; cb += ATTN_COL_BLOCK) {
            attn_v8 acc0 = {0}, acc1 = {0};
            for (int64_t d = 0; d < hd; d++) {
                const float *kt = sc->kt + d * ATTN_TILE_K + cb;
                acc0 += q[d] * v8_load(kt);
                acc1 += q[d] * v8_load(kt + 8);
            }
            v8_store(sc->s + r * ATTN_TILE_K + cb, acc0);
            v8_store(sc->s + r * ATTN_TILE_K + cb + 8, acc1);
        }
    }
}

/* s = cap * tanh(s / cap) over the rows' scores (Gemma 2 style soft-capping). */
static void softcap_scores(struct attn_scratch *sc, int64_t rows, float cap)
{
    float inv = 1.0f / cap;
    for (int64_t i = 0; i < rows * ATTN_TILE_K; i++)
        sc->s[i] = cap * tanhf(sc->s[i] * inv);
}

/* Online-softmax update of row r over its visible columns [c0, c1): turns
 * s[r][c0..c1) into probabilities relative to the new max and sets corr[r].
 * Columns outside are never read (before a window's edge they may hold
 * anything the cache held). */
static void softmax_update(struct attn_scratch *sc, int64_t r, int64_t c0, int64_t c1)
{
    float *s = sc->s + r * ATTN_TILE_K;
    float mx = sc->m[r];
    for (int64_t c = c0; c < c1; c++)
        mx = s[c] > mx ? s[c] : mx;
    float corr = expf(sc->m[r] - mx); /* 0 on the first tile: m = -inf */
    float sum = 0.0f;
    for (int64_t c = c0; c < c1; c++) {
        s[c] = expf(s[c] - mx);
        sum += s[c];
    }
    sc->m[r] = mx;
    sc->l[r] = sc->l[r] * corr + sum;
    sc->corr[r] = corr;
}

/* o[r] = o[r] * corr[r] + sum_{c0 <= c < c1} s[r][c] v[c], a column block of
 * o at a time held in registers while the keys stream past. */
OPS_SIMD_CLONES
static void accumulate(struct attn_scratch *sc, int64_t r, int64_t c0, int64_t c1, int64_t hd)
{
    const float *s = sc->s + r * ATTN_TILE_K;
    float *o = sc->o + r * hd;
    float corr = sc->corr[r];
    int64_t db = 0;
    for (; db + ATTN_COL_BLOCK <= hd; db += ATTN_COL_BLOCK) {
        attn_v8 a0 = v8_load(o + db) * corr, a1 = v8_load(o + db + 8) * corr;
        for (int64_t c = c0; c < c1; c++) {
            const float *v = sc->v + c * hd + db;
            a0 += s[c] * v8_load(v);
            a1 += s[c] * v8_load(v + 8);
        }
        v8_store(o + db, a0);
        v8_store(o + db + 8, a1);
    }
    for (; db < hd; db++) {
        float acc = o[db] * corr;
        for (int64_t c = c0; c < c1; c++)
            acc += s[c] * sc->v[c * hd + db];
        o[db] = acc;
    }
}

/* accumulate() for rows r .. r + ATTN_ROW_BLOCK - 1, which share the
 * columns [c0, c1): each V column block is loaded once for all of them. The
 * sums run in accumulate's order, so a row gets the same bits either way. */
OPS_SIMD_CLONES
static void accumulate_rows(struct attn_scratch *sc, int64_t r, int64_t c0, int64_t c1,
                            int64_t hd)
{
    int64_t db = 0;
    for (; db + ATTN_COL_BLOCK <= hd; db += ATTN_COL_BLOCK) {
        attn_v8 acc[ATTN_ROW_BLOCK][2];
        ATTN_UNROLL for (int i = 0; i < ATTN_ROW_BLOCK; i++) {
            const float *o = sc->o + (r + i) * hd + db;
            acc[i][0] = v8_load(o) * sc->corr[r + i];
            acc[i][1] = v8_load(o + 8) * sc->corr[r + i];
        }
        for (int64_t c = c0; c < c1; c++) {
            const float *v = sc->v + c * hd + db;
            attn_v8 v0 = v8_load(v), v1 = v8_load(v + 8);
            ATTN_UNROLL for (int i = 0; i < ATTN_ROW_BLOCK; i++) {
                float pc = sc->s[(r + i) * ATTN_TILE_K + c];
                acc[i][0] += pc * v0;
                acc[i][1] += pc * v1;
            }
        }
        ATTN_UNROLL for (int i = 0; i < ATTN_ROW_BLOCK; i++) {
            v8_store(sc->o + (r + i) * hd + db, acc[i][0]);
            v8_store(sc->o + (r + i) * hd + db + 8, acc[i][1]);
        }
    }
    for (int i = 0; i < ATTN_ROW_BLOCK; i++)
        for (int64_t d = db; d < hd; d++) {
            float acc = sc->o[(r + i) * hd + d] * sc->corr[r + i];
            for (int64_t c = c0; c < c1; c++)
                acc += sc->s[(r + i) * ATTN_TILE_K + c] * sc->v[c * hd + d];
            sc->o[(r + i) * hd + d] = acc;
        }
}

/* Rows of an item: r = g * nq + i is query head kvh * group + g, token t0 + i
 * of sequence s. */
static void run_item(const struct attn_params *p, const struct attn_seq *s, int64_t kvh,
                     int64_t t0, int64_t nq, struct attn_scratch *sc)
{
    int64_t hd = p->head_dim, group = p->n_head / p->n_head_kv;
    int64_t rows = group * nq;

    for (int64_t g = 0; g < group; g++) {
        int64_t h = kvh * group + g;
        for (int64_t i = 0; i < nq; i++) {
            int64_t r = g * nq + i;
            const float *q = s->q + (t0 + i) * p->q_tok_stride + h * hd;
            for (int64_t d = 0; d < hd; d++) {
                sc->q[r * hd + d] = q[d] * p->scale;
                sc->o[r * hd + d] = 0.0f;
            }
            sc->m[r] = -INFINITY;
            sc->l[r] = 0.0f;
        }
    }

    /* Keys kbegin .. kend - 1 are visible to at least one query of the
     * tile: the last query sees up to kend - 1, the first from kbegin on. */
    int64_t kend = s->pos0 + t0 + nq;
    int64_t kbegin = p->window > 0 ? s->pos0 + t0 - p->window + 1 : 0;
    kbegin = kbegin > 0 ? kbegin : 0;
    for (int64_t k0 = kbegin / ATTN_TILE_K * ATTN_TILE_K; k0 < kend; k0 += ATTN_TILE_K) {
        int64_t nc = kend - k0 < ATTN_TILE_K ? kend - k0 : ATTN_TILE_K;
        load_kv_tile(p, s->table, kvh, k0, kbegin > k0 ? kbegin - k0 : 0, nc, sc);
        scores(sc, rows, hd);
        if (p->softcap > 0)
            softcap_scores(sc, rows, p->softcap);
        /* Each row's visible columns [lo, hi): query token i sees keys up to
         * position pos0 + t0 + i, and with a window from pos0 + t0 + i -
         * window + 1 on; hi = 0 when the tile is in its future or behind its
         * window. */
        int32_t *lo = sc->lo, *hi = sc->hi;
        for (int64_t r = 0; r < rows; r++) {
            int64_t i = r % nq;
            int64_t nvis = s->pos0 + t0 + i + 1 - k0;
            int64_t first = 0;
            if (p->window > 0)
                first = s->pos0 + t0 + i - p->window + 1 - k0;
            first = first > 0 ? first : 0;
            nvis = nvis > nc ? nc : nvis;
            lo[r] = (int32_t)first;
            hi[r] = (int32_t)(nvis > first ? nvis : 0);
            if (hi[r])
                softmax_update(sc, r, lo[r], hi[r]);
        }
        for (int64_t r = 0; r < rows;) {
            bool same = r + ATTN_ROW_BLOCK <= rows && hi[r];
            for (int k = 1; same && k < ATTN_ROW_BLOCK; k++)
                same = lo[r + k] == lo[r] && hi[r + k] == hi[r];
            if (same) {
                accumulate_rows(sc, r, lo[r], hi[r], hd);
                r += ATTN_ROW_BLOCK;
                continue;
            }
            if (hi[r])
                accumulate(sc, r, lo[r], hi[r], hd);
            r++;
        }
    }

    for (int64_t g = 0; g < group; g++) {
        int64_t h = kvh * group + g;
        for (int64_t i = 0; i < nq; i++) {
            int64_t r = g * nq + i;
            float inv = 1.0f / sc->l[r];
            float *out = s->out + (t0 + i) * p->out_tok_stride + h * hd;
            for (int64_t d = 0; d < hd; d++)
                out[d] = sc->o[r * hd + d] * inv;
        }
    }
}

/* ---- the parallel driver ----------------------------------------------------- */

/* Work items are numbered sequence by sequence; first_item[i] is sequence
 * i's first, first_item[n_seqs] the total. */
struct attn_job {
    const struct attn_params *p;
    float *scratch;
    int64_t scratch_stride;
    const int64_t *first_item;
};

static int64_t n_qtiles(const struct attn_seq *s)
{
    return (s->n_tokens + ATTN_TILE_Q - 1) / ATTN_TILE_Q;
}

static void attn_task(void *arg, int64_t i0, int64_t i1, int thread)
{
    const struct attn_job *job = arg;
    const struct attn_params *p = job->p;
    struct attn_scratch sc = carve(job->scratch + thread * job->scratch_stride, p->n_head,
                                   p->n_head_kv, p->head_dim);
    int64_t si = 0;
    for (int64_t item = i0; item < i1; item++) {
        while (item >= job->first_item[si + 1])
            si++;
        const struct attn_seq *s = &p->seqs[si];
        int64_t local = item - job->first_item[si];
        /* Latest query tiles (the most keys) first, so the tail balances. */
        int64_t kvh = local % p->n_head_kv;
        int64_t qt = n_qtiles(s) - 1 - local / p->n_head_kv;
        int64_t t0 = qt * ATTN_TILE_Q;
        int64_t nq = s->n_tokens - t0 < ATTN_TILE_Q ? s->n_tokens - t0 : ATTN_TILE_Q;
        run_item(p, s, kvh, t0, nq, &sc);
    }
}

void attn_tiled_run(const struct attn_params *p, struct ops_pool *pool, float *scratch,
                    int64_t scratch_stride)
{
    IG_ASSERT(p->n_head_kv > 0 && p->n_head % p->n_head_kv == 0);
    IG_ASSERT(scratch_stride >= attn_tiled_scratch_floats(p->n_head, p->n_head_kv, p->head_dim));
    IG_ASSERT(p->window >= 0);
    int64_t *first = p->item_offsets;
    first[0] = 0;
    for (int64_t i = 0; i < p->n_seqs; i++) {
        IG_ASSERT(p->seqs[i].pos0 >= 0 && p->seqs[i].n_tokens >= 0);
        first[i + 1] = first[i] + n_qtiles(&p->seqs[i]) * p->n_head_kv;
    }
    struct attn_job job = {p, scratch, scratch_stride, first};
    ops_pool_run(pool, first[p->n_seqs], 1, attn_task, &job);
}
