/* backend/tp_rank.c: a tensor-parallel rank's part (struct tp_rank): every
 * rank's share of the model (models/tp.h), this rank's part as a model and
 * its CPU backend, the agreement of all ranks on the set-up (a failing
 * rank named on rank 0 in one line), and what each rank spent
 * (IGNITE_TP_STATS). Covered by tests/tp/. */
#include "backend/tp_impl.h"

#include "backend/cpu.h"
#include "core/coll.h"
#include "core/status.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int tp_grow(struct tp_rank *r, size_t bytes)
{
    if (bytes <= r->buf_cap)
        return IG_OK;
    char *p = realloc(r->buf, bytes);
    if (!p)
        return ig_error(IG_E_NOMEM, "out of memory for a message of %zu bytes", bytes);
    r->buf = p;
    r->buf_cap = bytes;
    return IG_OK;
}

void tp_rank_free(struct tp_rank *r)
{
    if (!r)
        return;
    backend_free(r->cpu);
    kv_store_free(r->staging);
    kv_memory_free(r->part_mem);
    model_tp_shard_free(r->shard);
    for (int i = 0; r->parts && i < r->tp.n_ranks; i++)
        model_tp_part_free(&r->parts[i]);
    free(r->parts);
    free(r->tp.v0);
    free(r->tp.n_v);
    free(r->tp.at);
    free(r->tp.cnt);
    free(r->tp.part);
    free(r->tp.all);
    free(r->ids);
    free(r->buf);
    free(r);
}

/* Setting up read whole pages of the file around the rank's part (the
 * column copies, the packing): they are dropped, so that what stays
 * resident is what the rank reads from now on, its part (the mapping is
 * private and read-only: a page read again comes from the file). */
static void drop_file_pages(const struct model *m)
{
    if (!m->gguf || !m->gguf->map.data || m->gguf->map.read || m->gguf->map.locked)
        return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)m->gguf->map.data & ~(page - 1);
    uintptr_t e = (uintptr_t)m->gguf->map.data + m->gguf->map.size;
    madvise((void *)a, e - a, MADV_DONTNEED);
}

/* A rank reads its rows of Gemma 4's per-layer table a token at a time
 * (backend/cpu_ple.c), scattered: read-around would page in the rows about
 * each, another rank's at the ends of its range and tokens it may never
 * see elsewhere (128 KiB a fault for an E2B row of 9 KiB), so the range is
 * marked random (the pages a rank holds: IGNITE_TP_STATS). */
static void table_random(const struct model *shard)
{
    const struct model_weight *E = &shard->w[MODEL_PLE_TOK_EMBD];
    if (!shard->hp.has_ple || !E->data || !E->rows)
        return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)E->data & ~(page - 1), e = (uintptr_t)E->data + model_weight_size(E);
    madvise((void *)a, e - a, MADV_RANDOM);
}

/* This rank's backend over its part: the CPU's, or the GPU's. */
static int rank_backend(struct tp_rank *r, const struct backend_opts *o)
{
    if (o->device.kind == BACKEND_CPU) {
        r->packed = true;
        return backend_cpu_create_tp(r->shard, o, &r->tp, &r->cpu);
    }
    const struct backend_cuda *cuda = backend_cuda();
    if (!cuda)
        return ig_error(IG_E_DEVICE, "this ignite was built without CUDA");
    return cuda->create_tp(r->shard, o, &r->tp, &r->cpu);
}

/* This rank's part of m and its backend. */
static int rank_setup(const struct model *m, const struct backend_opts *o, struct tp_rank **out)
{
    int rank = ig_coll_rank(), n = ig_coll_size();
    *out = NULL;
    struct tp_rank *r = calloc(1, sizeof *r);
    if (!r)
        return ig_error(IG_E_NOMEM, "out of memory");
    r->m = m;
    r->tp = (struct cpu_tp){.rank = rank, .n_ranks = n, .n_vocab = m->hp.n_vocab};
    r->parts = calloc((size_t)n, sizeof *r->parts);
    r->tp.v0 = calloc((size_t)n, sizeof *r->tp.v0);
    r->tp.n_v = calloc((size_t)n, sizeof *r->tp.n_v);
    r->tp.at = calloc((size_t)n, sizeof *r->tp.at);
    r->tp.cnt = calloc((size_t)n, sizeof *r->tp.cnt);
    int st = r->parts && r->tp.v0 && r->tp.n_v && r->tp.at && r->tp.cnt
                 ? IG_OK
                 : ig_error(IG_E_NOMEM, "out of memory");
    for (int i = 0; st == IG_OK && i < n; i++) {
        st = model_tp_part(m, i, n, &r->parts[i]);
        if (st == IG_OK) {
            r->tp.v0[i] = r->parts[i].v0;
            r->tp.n_v[i] = r->parts[i].n_v;
        }
    }
    if (st == IG_OK)
        st = model_tp_shard(m, &r->parts[rank], &r->shard);
    if (st == IG_OK)
        st = rank_backend(r, o);
    if (st == IG_OK) {
        drop_file_pages(m);
        table_random(r->shard);
    }
    r->map = m->gguf ? &m->gguf->map : NULL;
    if (m->hp.has_ple) {
        r->ple_at = m->w[MODEL_PLE_TOK_EMBD].data;
        r->ple_bytes = model_weight_size(&m->w[MODEL_PLE_TOK_EMBD]);
    }
    if (st != IG_OK) {
        tp_rank_free(r);
        return st;
    }
    *out = r;
    return IG_OK;
}

/* Every rank's setup status: IG_OK where all went well, else (on every
 * rank) the status of the failing rank, and on rank 0 one line naming it
 * with its message. */
static int agree(int st, const char *msg)
{
    int64_t v = st == IG_OK ? -1 : (int64_t)st * MODEL_TP_MAX_RANKS + ig_coll_rank();
    ig_coll_allreduce_max(&v);
    if (v < 0)
        return IG_OK;
    int bad = (int)(v % MODEL_TP_MAX_RANKS), status = (int)(v / MODEL_TP_MAX_RANKS);
    char line[512];
    snprintf(line, sizeof line, "%s", msg);
    ig_coll_bcast(line, sizeof line, bad);
    if (ig_coll_rank() == 0)
        ig_error(status, "rank %d of %d: %s", bad, ig_coll_size(), line);
    return status;
}

/* rank_setup with its one line captured for agree(). */
int tp_setup_agreed(const struct model *m, const struct backend_opts *o, int st_before,
                        const char *msg_before, struct tp_rank **out)
{
    char msg[512] = "";
    int st = st_before;
    *out = NULL;
    if (st == IG_OK) {
        ig_error_capture(msg, sizeof msg);
        st = rank_setup(m, o, out);
        ig_error_capture(NULL, 0);
    } else {
        snprintf(msg, sizeof msg, "%s", msg_before);
    }
    int all = agree(st, msg);
    if (all == IG_OK && o->device.kind != BACKEND_CPU) /* the GPUs' all-reduce, agreed */
        all = backend_cuda()->tp_connect((*out)->cpu);
    if (all != IG_OK) {
        tp_rank_free(*out);
        *out = NULL;
    }
    return all;
}

/* ---- what each rank spent (IGNITE_TP_STATS=1) ------------------------------------ */

/* This rank's resident memory, MiB (VmRSS; 0 where /proc is absent). */
static double rss_mib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            kib = atof(line + 6);
    if (f)
        fclose(f);
    return kib / 1024.0;
}

/* Every rank at the backend's end: its steps, seconds in collectives,
 * resident MiB and the weights' share of it (the model file's pages it has
 * mapped, its packed copies) and a GPU rank's weights on its device to rank
 * 0, which prints a line a rank where IGNITE_TP_STATS is set (the cost of
 * the all-reduces and what a rank holds: docs/benchmarks.md, docs/gpu.md). */
void tp_stats(struct tp_rank *r)
{
    enum { K = 7 };
    int n = ig_coll_size();
    size_t ple = !r->map ? 0 : r->map->read ? r->ple_bytes
                                             : ig_resident_bytes(r->ple_at, r->ple_bytes);
    float mine[K] = {(float)r->steps, (float)ig_coll_seconds(), (float)rss_mib(),
                     r->map ? (float)ig_mapped_resident(r->map) / 1048576.0f : 0.0f,
                     r->packed ? (float)backend_cpu_packed_bytes(r->cpu) / 1048576.0f : 0.0f,
                     (float)r->cpu->weight_bytes / 1048576.0f, (float)ple / 1048576.0f};
    float all[K * MODEL_TP_MAX_RANKS];
    int64_t cnt[MODEL_TP_MAX_RANKS], at[MODEL_TP_MAX_RANKS];
    for (int i = 0; i < n; i++)
        cnt[i] = K, at[i] = K * i;
    ig_coll_gatherv(mine, K, all, cnt, at, 0);
    if (ig_coll_rank() != 0 || !getenv("IGNITE_TP_STATS"))
        return;
    for (int i = 0; i < n; i++) {
        const float *a = all + K * i;
        fprintf(stderr, "tp: rank %d of %d: %.0f steps, %.3f s in collectives (%.3f ms a "
                "step), resident %.1f MiB (model file pages %.1f, packed weights %.1f), "
                "device weights %.3f MiB", i, n, a[0], a[1], a[0] > 0 ? 1e3 * a[1] / a[0] : 0.0,
                a[2], a[3], a[4], a[5]);
        if (r->ple_bytes) /* Gemma 4's per-layer table: its vocabulary rows a rank */
            fprintf(stderr, ", per-layer table pages %.3f of %.3f MiB", a[6],
                    (double)r->ple_bytes / 1048576.0);
        fputc('\n', stderr);
    }
}

