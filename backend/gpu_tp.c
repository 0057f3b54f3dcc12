/* backend/gpu_tp.c: a tensor-parallel rank of the CUDA backend
 * (backend/tp.h runs the ranks; models/tp.h splits the model). The rank's
 * model is its part: Q|K|V and gate|up by output rows, wo and down by
 * input columns, the output head by vocabulary rows. So wo's and down's
 * products are partial sums, which the layer loop's two reduce points
 * (gpu_forward.c) sum over the ranks before the residual goes on:
 *
 *   partial  rank 0: x += W_0 in, rank r > 0: x = W_r in (the product's
 *            beta), or with a post norm (Gemma 3) proj = W_r in; a
 *            mixture of experts' weighted sum over the rank's experts the
 *            same way (rank r > 0's x zeroed before it: gpu_tp_partial_rows);
 *            Gemma 4's MoE sums its two parts before their norms itself
 *            (gpu_tp_sum_rows: one all-reduce of both) and adds to x on
 *            every rank, leaving this reduce nothing;
 *   reduce   x (or proj) summed over the ranks in place (backend/
 *            gpu_reduce.h: NCCL, or the host path), then with a post norm
 *            x += RMSNorm(proj).
 *
 * The residual add thus rides in the all-reduce: no launch of its own, and
 * none of the fused norm tails (the next norm needs the whole sum).
 *
 * The vocabulary: a rank holds token_embd's rows of its vocabulary part
 * alone (models/tp.c's shard; the last rank any rows past the vocabulary),
 * so the embedding kernel writes the rows of the step's tokens that fall
 * there and zeros for the others, and one more all-reduce before layer 0
 * sums them (x + 0 = x: one process's rows, bit for bit). The output head
 * is the same rows, the file's own or (tied) token_embd's, so every rank
 * computes its vocabulary rows of the logits, gathered on rank 0 over MPI
 * (the greedy token then picked there). Gemma 4's per-layer table splits
 * by the same rows, its looked-up rows summed by one more all-reduce
 * (gpu_gemma4.c). Compiled twice like gpu.c
 * (backend/gpu.h). Covered by tests/tp/test_tp_gpu.py. */
#include "backend/cpu_layer.h"
#include "backend/gpu_impl.h"
#include "backend/gpu_reduce.h"

#include "core/coll.h"
#include "core/status.h"
#include "decode/greedy.h"
#include "ops/gpu_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gpu_tp {
    struct cpu_tp *share;     /* the rank's vocabulary rows and the gather's scratch */
    struct gpu_reduce *red;   /* NULL until gpu_tp_connect */
    /* the partial product waiting for the reduce: buf [rows][n_embd] (x's
     * rows, or proj with a post norm into x) */
    float *buf, *x;
    const float *post_norm;
    int64_t rows;
    float *host;              /* [cap] logits on their way to rank 0 */
    int64_t cap;
    bool stats;               /* IGNITE_TP_STATS: rank 0 says which reduce runs */
};

int IG_DEV(gpu_tp_open)(struct gpu_backend *g, struct cpu_tp *share)
{
    g->tp = calloc(1, sizeof *g->tp);
    if (!g->tp)
        return ig_error(IG_E_NOMEM, "out of memory");
    g->tp->share = share;
    g->tp->stats = getenv("IGNITE_TP_STATS") != NULL;
    g->vocab0 = share->v0[share->rank]; /* the shard's token_embd starts there */
    return IG_OK;
}

void IG_DEV(gpu_tp_free)(struct gpu_backend *g)
{
    if (!g->tp)
        return;
    if (g->tp->red)
        g->tp->red->free(g->tp->red);
    free(g->tp->host);
    free(g->tp);
    g->tp = NULL;
}

/* A rank's CUDA device: `first` plus its rank on this machine (the
 * launcher's environment), modulo the devices there; ranks beyond the
 * devices share them. */
int IG_DEV(gpu_tp_device)(int first, int n_devices, int *ranks_here)
{
    static const char *const local_rank[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                             "SLURM_LOCALID", "PMI_LOCAL_RANK"};
    static const char *const local_size[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                             "SLURM_NTASKS_PER_NODE", "PMI_LOCAL_SIZE"};
    int lr = ig_coll_rank(), ls = ig_coll_size();
    for (size_t i = 0; i < sizeof local_rank / sizeof local_rank[0]; i++)
        if (getenv(local_rank[i])) {
            lr = atoi(getenv(local_rank[i]));
            break;
        }
    for (size_t i = 0; i < sizeof local_size / sizeof local_size[0]; i++)
        if (getenv(local_size[i])) {
            ls = atoi(getenv(local_size[i]));
            break;
        }
    *ranks_here = ls > 0 ? ls : 1;
    return n_devices > 0 ? (first + lr) % n_devices : first;
}

/* IGNITE_TP_REDUCE: "auto" (unset), "nccl" or "mpi"; anything else NULL. */
static const char *reduce_asked(void)
{
    const char *e = getenv("IGNITE_TP_REDUCE");
    if (!e || !*e || !strcmp(e, "auto"))
        return "auto";
    return !strcmp(e, "nccl") || !strcmp(e, "mpi") ? e : NULL;
}

int IG_DEV(gpu_tp_connect)(struct backend *b)
{
    struct gpu_backend *g = (struct gpu_backend *)b;
    const char *mode = reduce_asked();
    char why[400] = "";
    if (!mode) /* the same environment on every rank: each refuses alike */
        return ig_coll_rank() ? IG_E_USAGE
                              : ig_error(IG_E_USAGE, "IGNITE_TP_REDUCE=%s: expected auto, "
                                         "nccl or mpi", getenv("IGNITE_TP_REDUCE"));
    bool nccl = strcmp(mode, "mpi") != 0, host_memory = false;
#ifdef IG_EMU_BACKEND
    /* asked for alone, and only from a library that reads host memory (the
     * tests' stand-in: gpu_reduce_nccl_open refuses real NCCL here) */
    nccl = host_memory = !strcmp(mode, "nccl");
#else
    if (!strcmp(mode, "auto")) { /* NCCL where every rank loads it and has its own GPU */
        int here, n_dev = IG_DEV(dev_count)();
        IG_DEV(gpu_tp_device)(0, n_dev, &here);
        int64_t no = here > n_dev || !gpu_reduce_nccl_loads(why, sizeof why);
        ig_coll_allreduce_max(&no);
        nccl = !no;
    }
#endif
    int st = nccl ? gpu_reduce_nccl_open(host_memory, &g->tp->red)
                  : IG_DEV(gpu_reduce_host_open)(g->dev, &g->tp->red);
    if (st != IG_OK)
        return st;
    g->no_graph |= !g->tp->red->capturable; /* the host path's steps run without graphs */
#ifndef IG_EMU_BACKEND
    /* NCCL sets up its connections at a communicator's first collective,
     * allocating memory: inside a decode graph's capture (a first step of a
     * row a sequence) that fails. One sum here, outside any capture, on every
     * rank (docs/gpu.md, "Review against real CUDA and NCCL semantics"). */
    if (nccl) {
        float *one = NULL;
        st = IG_DEV(dev_alloc)(g->dev, sizeof *one, (void **)&one);
        if (st == IG_OK && (st = IG_DEV(dev_memset)(g->dev, one, 0, sizeof *one)) == IG_OK &&
            (st = g->tp->red->sum(g->tp->red, one, 1, g->stream)) == IG_OK)
            st = IG_DEV(dev_sync)(g->dev);
        IG_DEV(dev_free)(g->dev, one);
        if (st != IG_OK)
            return st;
    }
#endif
    if (g->tp->stats && ig_coll_rank() == 0)
        fprintf(stderr, "tp: the ranks' sums by %s%s%s%s\n", g->tp->red->name,
                why[0] ? " (NCCL: " : "", why, why[0] ? ")" : "");
    return IG_OK;
}

/* ---- the reduces: the embedded rows, the two points of a layer -------------------- */

int IG_DEV(gpu_tp_embedded)(struct gpu_backend *g, float *x, int64_t n)
{
    return g->tp->red->sum(g->tp->red, x, n * g->m->hp.n_embd, g->stream);
}

int IG_DEV(gpu_tp_sum_rows)(struct gpu_backend *g, float *rows, int64_t n)
{
    return g->tp->red->sum(g->tp->red, rows, n * g->m->hp.n_embd, g->stream);
}

int IG_DEV(gpu_tp_ple_rows)(struct gpu_backend *g, float *rows, int64_t n)
{
    const struct model_hparams *hp = &g->m->hp;
    return g->tp->red->sum(g->tp->red, rows, n * hp->n_layer * hp->n_embd_per_layer, g->stream);
}

int IG_DEV(gpu_tp_partial)(struct gpu_backend *g, const struct gpu_matrix *w,
                           const uint16_t *in, int64_t ld_in, int64_t rows, float *x,
                           const float *post_norm)
{
    struct gpu_tp *t = g->tp;
    int64_t e = g->m->hp.n_embd;
    float *dst = post_norm ? g->proj : x;
    float beta = !post_norm && t->share->rank == 0 ? 1.0f : 0.0f; /* x once in the sum */
    IG_ASSERT(!t->buf); /* every partial meets its reduce */
    t->buf = dst;
    t->x = x;
    t->post_norm = post_norm;
    t->rows = rows;
    if (w->n_parts == 0) /* an empty share (models/tp.c: no columns): x alone, or zeros */
        return beta == 1.0f ? IG_OK
                            : IG_DEV(dev_memset)(g->dev, dst, 0, (size_t)(rows * e) * sizeof *dst);
    return IG_DEV(gpu_matmul)(g, w, in, ld_in, rows, dst, e, beta);
}

bool IG_DEV(gpu_tp_partial_rows)(struct gpu_backend *g, float *x, int64_t rows)
{
    struct gpu_tp *t = g->tp;
    IG_ASSERT(!t->buf); /* every partial meets its reduce */
    t->buf = t->x = x;
    t->post_norm = NULL;
    t->rows = rows;
    return t->share->rank == 0; /* x once in the sum */
}

int IG_DEV(gpu_tp_reduce)(struct gpu_backend *g)
{
    struct gpu_tp *t = g->tp;
    if (!t->buf) /* the block added nothing (the last layer's rows all past) */
        return IG_OK;
    const struct model_hparams *hp = &g->m->hp;
    int64_t e = hp->n_embd;
    float *buf = t->buf;
    t->buf = NULL;
    int st = t->red->sum(t->red, buf, t->rows * e, g->stream);
    if (st == IG_OK && t->post_norm)
        st = IG_DEV(gk_rmsnorm_add)(t->x, e, g->proj, e, t->post_norm, t->rows, e,
                                    (float)hp->norm_eps, g->stream);
    return st;
}

/* ---- the logits ---------------------------------------------------------------------- */

/* Rows of the step that want logits. */
static int64_t wanted(const struct backend_batch *b)
{
    if (!b->want_logits)
        return b->n_seqs;
    int64_t k = 0;
    for (int64_t r = 0; r < b->n_rows; r++)
        k += b->want_logits[r];
    return k;
}

static int grow(void **p, int64_t *cap, int64_t n, size_t size)
{
    if (n <= *cap)
        return IG_OK;
    void *q = realloc(*p, (size_t)n * size);
    if (!q)
        return ig_error(IG_E_NOMEM, "rank %d: out of memory for %lld rows of logits",
                        ig_coll_rank(), (long long)n);
    *p = q;
    *cap = n;
    return IG_OK;
}

/* The k wanted rows of the ranks' logits: each rank's [k][n_v] (t->host,
 * packed from rows of n_vocab) gathered on rank 0 into the whole rows of
 * `out` [k][n_vocab]. */
static int gather(struct gpu_tp *t, int64_t k, float *out)
{
    struct cpu_tp *s = t->share;
    int64_t nv = s->n_vocab, mine = s->n_v[s->rank], at = 0;
    for (int64_t i = 0; i < k; i++) /* packed in place: row i's part moves down */
        memmove(t->host + i * mine, t->host + i * nv, (size_t)mine * sizeof *t->host);
    for (int r = 0; r < s->n_ranks; r++) {
        s->cnt[r] = k * s->n_v[r];
        s->at[r] = at;
        at += s->cnt[r];
    }
    float *all = NULL;
    if (s->rank == 0 && !(all = malloc((size_t)(k * nv) * sizeof *all)))
        ig_coll_abort(ig_error(IG_E_NOMEM, "rank 0: out of memory for the logits' gather"));
    ig_coll_gatherv(t->host, k * mine, all, s->cnt, s->at, 0);
    for (int r = 0; s->rank == 0 && r < s->n_ranks; r++)
        for (int64_t i = 0; i < k; i++)
            memcpy(out + i * nv + s->v0[r], all + s->at[r] + i * s->n_v[r],
                   (size_t)s->n_v[r] * sizeof *out);
    free(all);
    return IG_OK;
}

int IG_DEV(gpu_tp_step)(struct gpu_backend *g, const struct backend_batch *batch,
                        int (*run)(struct gpu_backend *, const struct backend_batch *))
{
    struct gpu_tp *t = g->tp;
    struct cpu_tp *s = t->share;
    int64_t k = wanted(batch), nv = s->n_vocab;
    struct backend_batch b = *batch;
    int st = grow((void **)&t->host, &t->cap, (k ? k : 1) * nv, sizeof *t->host);
    if (st != IG_OK)
        ig_coll_abort(st);
    b.logits = t->host; /* the rank's vocabulary rows, in rows of n_vocab */
    b.greedy = NULL;
    /* a rank that fails in its forward would leave the others in an
     * all-reduce: the job ends, this rank's line naming it */
    if ((st = run(g, &b)) != IG_OK)
        ig_coll_abort(st);
    if (!k)
        return IG_OK;
    float *out = batch->greedy ? t->host : batch->logits; /* rank 0's; t->host is packed */
    if (s->rank == 0 && batch->greedy && !(out = malloc((size_t)(k * nv) * sizeof *out)))
        ig_coll_abort(ig_error(IG_E_NOMEM, "rank 0: out of memory for %lld rows of logits",
                               (long long)k));
    gather(t, k, out);
    if (s->rank == 0 && batch->greedy) {
        gk_greedy_rows_ref(out, nv, k, nv, batch->greedy);
        free(out);
    }
    return IG_OK;
}
