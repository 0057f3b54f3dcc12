/* prefill/attn_tiled.c: tiled causal attention with an online softmax (the
 * CPU twin of the CUDA prefill kernel).
 *
 * A work item is (KV head, query tile): the rows of the item are the
 * ATTN_TILE_Q query tokens of every query head in the KV head's group. The
 * item walks the K/V tiles from position 0 to the last position its queries
 * can see (tiles above the causal diagonal are never touched), and keeps per
 * row a running max m, a running sum l and an unnormalized output o:
 *   m' = max(m, max_c s_c),  l' = l e^(m - m') + sum_c e^(s_c - m'),
 *   o' = o e^(m - m') + sum_c e^(s_c - m') v_c,   out = o / l at the end.
 * On a tile that crosses the diagonal each row simply stops at its own
 * position, so there is no mask value and no n x n buffer. A sliding window
 * starts the walk at the first tile the tile's first query can see; on the
 * tile that crosses a row's window edge the row starts at its edge.
 * Writing K/V into the cache is the caller's (prefill/prefill.c).
 * Covered by tests/cpu/test_attn_tiled.c. */
#include "prefill/attn_tiled.h"

#include "core/half.h"
#include "core/status.h"
#include "ops/simd.h"

#include <math.h>

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
};

static int64_t max_rows(int64_t n_head, int64_t n_head_kv)
{
    return n_head / n_head_kv * ATTN_TILE_Q;
}

int64_t attn_tiled_scratch_floats(int64_t n_head, int64_t n_head_kv, int64_t head_dim)
{
    int64_t rows = max_rows(n_head, n_head_kv);
    int64_t hd = (head_dim + ATTN_COL_BLOCK - 1) / ATTN_COL_BLOCK * ATTN_COL_BLOCK;
    return rows * hd * 2 + hd * ATTN_TILE_K * 2 + rows * ATTN_TILE_K + rows * 3;
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
    s.corr = p;
    return s;
}

/* ---- loading a K/V tile ------------------------------------------------------- */

static inline float kv_elem(const void *base, enum kv_dtype dt, int64_t i)
{
    return dt == KV_F32 ? ((const float *)base)[i] : ig_f16_to_f32(((const ig_f16 *)base)[i]);
}

/* kt[d][c] = K[k0 + c][d] and v[c][d] = V[k0 + c][d] for c0 <= c < nc;
 * the other columns of kt are zeroed so score blocks can run full width
 * (columns before c0 are behind every row's window: their positions are
 * never read, so a cache may have dropped them). Rows are found through the
 * block table; a tile inside one block (block_size a multiple of
 * ATTN_TILE_K, as in the KV cache) reads one contiguous run. */
static void load_kv_tile(const struct attn_params *p, int64_t kvh, int64_t k0, int64_t c0,
                         int64_t nc, struct attn_scratch *sc)
{
    int64_t hd = p->head_dim, bs = p->block_size;
    size_t eb = kv_dtype_bytes(p->kv_dtype);
    for (int64_t d = 0; d < hd; d++)
        for (int64_t c = 0; c < c0; c++)
            sc->kt[d * ATTN_TILE_K + c] = 0.0f;
    for (int64_t c = c0; c < nc; c++) {
        int64_t pos = k0 + c;
        size_t off = (size_t)(kvh * p->kv_head_stride + (pos % bs) * hd) * eb;
        const char *kr = (const char *)p->k_blocks[pos / bs] + off;
        const char *vr = (const char *)p->v_blocks[pos / bs] + off;
        for (int64_t d = 0; d < hd; d++) {
            sc->kt[d * ATTN_TILE_K + c] = kv_elem(kr, p->kv_dtype, d);
            sc->v[c * hd + d] = kv_elem(vr, p->kv_dtype, d);
        }
    }
    for (int64_t d = 0; d < hd; d++)
        for (int64_t c = nc; c < ATTN_TILE_K; c++)
            sc->kt[d * ATTN_TILE_K + c] = 0.0f;
}

/* ---- one work item ----------------------------------------------------------- */

/* s[r][0..ATTN_TILE_K) = q[r] . K tile, register-blocked over columns. */
OPS_SIMD_CLONES
static void scores(const struct attn_scratch *sc, int64_t rows, int64_t hd)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *q = sc->q + r * hd;
        for (int64_t cb = 0; cb < ATTN_TILE_K; cb += ATTN_COL_BLOCK) {
            float acc[ATTN_COL_BLOCK] = {0};
            for (int64_t d = 0; d < hd; d++) {
                const float *kt = sc->kt + d * ATTN_TILE_K + cb;
                for (int j = 0; j < ATTN_COL_BLOCK; j++)
                    acc[j] += q[d] * kt[j];
            }
            for (int j = 0; j < ATTN_COL_BLOCK; j++)
                sc->s[r * ATTN_TILE_K + cb + j] = acc[j];
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
        float acc[ATTN_COL_BLOCK];
        for (int j = 0; j < ATTN_COL_BLOCK; j++)
            acc[j] = o[db + j] * corr;
        for (int64_t c = c0; c < c1; c++) {
            const float *v = sc->v + c * hd + db;
            float pc = s[c];
            for (int j = 0; j < ATTN_COL_BLOCK; j++)
                acc[j] += pc * v[j];
        }
        for (int j = 0; j < ATTN_COL_BLOCK; j++)
            o[db + j] = acc[j];
    }
    for (; db < hd; db++) {
        float acc = o[db] * corr;
        for (int64_t c = c0; c < c1; c++)
            acc += s[c] * sc->v[c * hd + db];
        o[db] = acc;
    }
}

/* Rows of an item: r = g * nq + i is query head kvh * group + g, token t0 + i. */
static void run_item(const struct attn_params *p, int64_t kvh, int64_t t0, int64_t nq,
                     struct attn_scratch *sc)
{
    int64_t hd = p->head_dim, group = p->n_head / p->n_head_kv;
    int64_t rows = group * nq;

    for (int64_t g = 0; g < group; g++) {
        int64_t h = kvh * group + g;
        for (int64_t i = 0; i < nq; i++) {
            int64_t r = g * nq + i;
            const float *q = p->q + (t0 + i) * p->q_tok_stride + h * hd;
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
    int64_t kend = p->pos0 + t0 + nq;
    int64_t kbegin = p->window > 0 ? p->pos0 + t0 - p->window + 1 : 0;
    kbegin = kbegin > 0 ? kbegin : 0;
    for (int64_t k0 = kbegin / ATTN_TILE_K * ATTN_TILE_K; k0 < kend; k0 += ATTN_TILE_K) {
        int64_t nc = kend - k0 < ATTN_TILE_K ? kend - k0 : ATTN_TILE_K;
        load_kv_tile(p, kvh, k0, kbegin > k0 ? kbegin - k0 : 0, nc, sc);
        scores(sc, rows, hd);
        if (p->softcap > 0)
            softcap_scores(sc, rows, p->softcap);
        for (int64_t r = 0; r < rows; r++) {
            /* Query token i sees keys up to position pos0 + t0 + i, and
             * with a window from pos0 + t0 + i - window + 1 on. */
            int64_t i = r % nq;
            int64_t nvis = p->pos0 + t0 + i + 1 - k0;
            if (nvis <= 0)
                continue; /* the whole tile is in this row's future */
            if (nvis > nc)
                nvis = nc;
            int64_t first = 0;
            if (p->window > 0) {
                first = p->pos0 + t0 + i - p->window + 1 - k0;
                if (first >= nvis)
                    continue; /* the whole tile is behind this row's window */
                first = first > 0 ? first : 0;
            }
            softmax_update(sc, r, first, nvis);
            accumulate(sc, r, first, nvis, hd);
        }
    }

    for (int64_t g = 0; g < group; g++) {
        int64_t h = kvh * group + g;
        for (int64_t i = 0; i < nq; i++) {
            int64_t r = g * nq + i;
            float inv = 1.0f / sc->l[r];
            float *out = p->out + (t0 + i) * p->out_tok_stride + h * hd;
            for (int64_t d = 0; d < hd; d++)
                out[d] = sc->o[r * hd + d] * inv;
        }
    }
}

/* ---- the parallel driver ----------------------------------------------------- */

struct attn_job {
    const struct attn_params *p;
    float *scratch;
    int64_t scratch_stride;
    int64_t n_qtiles;
};

static void attn_task(void *arg, int64_t i0, int64_t i1, int thread)
{
    const struct attn_job *job = arg;
    const struct attn_params *p = job->p;
    struct attn_scratch sc = carve(job->scratch + thread * job->scratch_stride, p->n_head,
                                   p->n_head_kv, p->head_dim);
    for (int64_t item = i0; item < i1; item++) {
        /* Latest query tiles (the most keys) first, so the tail balances. */
        int64_t kvh = item % p->n_head_kv;
        int64_t qt = job->n_qtiles - 1 - item / p->n_head_kv;
        int64_t t0 = qt * ATTN_TILE_Q;
        int64_t nq = p->n_tokens - t0 < ATTN_TILE_Q ? p->n_tokens - t0 : ATTN_TILE_Q;
        run_item(p, kvh, t0, nq, &sc);
    }
}

void attn_tiled_run(const struct attn_params *p, struct ops_pool *pool, float *scratch,
                    int64_t scratch_stride)
{
    IG_ASSERT(p->n_head_kv > 0 && p->n_head % p->n_head_kv == 0);
    IG_ASSERT(scratch_stride >= attn_tiled_scratch_floats(p->n_head, p->n_head_kv, p->head_dim));
    IG_ASSERT(p->pos0 >= 0 && p->n_tokens >= 0 && p->block_size > 0 && p->window >= 0);
    struct attn_job job = {p, scratch, scratch_stride,
                           (p->n_tokens + ATTN_TILE_Q - 1) / ATTN_TILE_Q};
    ops_pool_run(pool, job.n_qtiles * p->n_head_kv, 1, attn_task, &job);
}
