/* device/device_emu.cc: the device layer (device/device.h) on the host, for
 * the emulator build (names end in _emu). "Device" memory is host memory
 * (256-byte aligned, exact size so ASan bounds it), the main stream is
 * synchronous (copies are memcpy, kernels run to completion at launch), the
 * copy and transfer streams run late (their work queued, run at the latest
 * point CUDA's ordering allows: see "the late streams" below), there are no graphs
 * (dev_graph_begin fails silently and callers launch directly), timers
 * measure host wall time, and the GEMM is a plain CPU loop.
 * Covered by tests/emu/test_device_emu.c. */
#include "device/device.h"

#include "core/half.h"
#include "core/status.h"
#include "core/timer.h"
#include "emu/emu.h"

#include <atomic>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <map>

/* dev_alloc_host's blocks (start -> bytes): dev_download_async's dst must lie
 * in one. Into pageable memory cudaMemcpyAsync returns only once the copy is
 * done (CUDA runtime API, "API synchronization behavior"): on a GPU the copy
 * stream would stall the host, so the emulator refuses it. */
static std::map<const unsigned char *, size_t> host_blocks;

static bool in_host_block(const void *p, size_t bytes)
{
    const unsigned char *q = (const unsigned char *)p;
    auto it = host_blocks.upper_bound(q);
    if (it == host_blocks.begin())
        return false;
    --it;
    return (size_t)(q - it->first) + bytes <= it->second;
}

/* A late stream's queued work: a download, an event's record, or a call. */
enum late_kind { LATE_COPY, LATE_RECORD, LATE_CALL };
struct late_op {
    enum late_kind kind;
    void *dst;
    const void *src;
    size_t bytes;
    bool unordered;       /* a download or call not after the main stream's latest work */
    struct dev_event *ev; /* a record's (NULL once destroyed) */
    uint64_t ticket;      /* the record's */
    dev_stream_fn fn;     /* a call's */
    void *user;
};

/* A stream other than the main one (DEV_STREAM_COPY, DEV_STREAM_P2P). */
struct lane {
    struct late_op *ops; /* queued, [n] not yet run */
    size_t n, cap;
    int64_t seen;        /* the main stream's work this stream waited for */
};
enum { N_LANES = 2 };

struct dev {
    int64_t t0_ns;
    bool timer_running;
    int64_t extra_launches; /* GEMMs and noted twins: launches the emulator did not run */
    struct lane lanes[N_LANES]; /* [stream - 1] */
    uint64_t tickets;       /* records so far on the late streams */
    int64_t main_writes;    /* main-stream copies and memsets that write device memory */
};

/* An event: done, or recorded on a late stream and not yet reached there
 * (ticket: its latest record's, lane its stream's). */
struct dev_event {
    uint64_t ticket;
    bool pending;
    int lane;
    int64_t main_at; /* recorded on the main stream: its work then (main_work) */
};

static struct lane *lane_of(struct dev *d, enum dev_stream_id s)
{
    IG_ASSERT(s == DEV_STREAM_COPY || s == DEV_STREAM_P2P);
    return &d->lanes[(int)s - 1];
}

struct dev_graph {
    int unused;
};

/* Host memory the emulated device may hand out: the machine's RAM, so an
 * absurd request fails with IG_E_NOMEM as on a GPU (and never reaches the
 * allocator, which ASan would abort on). Free is Linux's MemAvailable (free
 * pages plus the page cache it can reclaim): _SC_AVPHYS_PAGES leaves the
 * cache out, so a busy page cache made the emulator refuse small models. */
static size_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[128];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (size_t)kb * 1024;
}

static void host_memory(size_t *total, size_t *free_b)
{
    long page = sysconf(_SC_PAGESIZE), phys = sysconf(_SC_PHYS_PAGES);
    long avail = sysconf(_SC_AVPHYS_PAGES);
    *total = page > 0 && phys > 0 ? (size_t)page * (size_t)phys : 0;
    *free_b = mem_available();
    if (!*free_b && page > 0 && avail > 0)
        *free_b = (size_t)page * (size_t)avail;
}

/* memcpy with a zero size and a NULL pointer is undefined: skip it. */
static int copy(void *dst, const void *src, size_t bytes)
{
    if (bytes)
        memcpy(dst, src, bytes);
    return IG_OK;
}

extern "C" {

/* One emulated device, or IGNITE_EMU_DEVICES=N (1..64; else 1): as many as
 * a machine of N GPUs, so that each rank of `mpirun -np N ignite_emu` opens
 * its own index as on such a machine (each is host memory of its process). */
int IG_DEV(dev_count)(void)
{
    const char *e = getenv("IGNITE_EMU_DEVICES");
    char *end;
    long n = e ? strtol(e, &end, 10) : 1;
    return e && *e && !*end && n >= 1 && n <= 64 ? (int)n : 1;
}

int IG_DEV(dev_open)(int index, struct dev **out)
{
    *out = NULL;
    int n = IG_DEV(dev_count)();
    if (index < 0 || index >= n)
        return ig_error(IG_E_DEVICE, "emulated device %d: not present (the emulator has %d: "
                        "IGNITE_EMU_DEVICES)", index, n);
    struct dev *d = (struct dev *)calloc(1, sizeof *d);
    if (!d)
        return ig_error(IG_E_NOMEM, "out of host memory opening the emulated device");
    *out = d;
    return IG_OK;
}

/* Work still queued on the late streams is dropped: its memory may be gone
 * (CUDA's frees wait for it; the emulator's do not), and a transfer's peer
 * may be gone too. A call is told so (DEV_CALL_DROP), to free its own. */
void IG_DEV(dev_close)(struct dev *d)
{
    for (int k = 0; d && k < N_LANES; k++) {
        for (size_t i = 0; i < d->lanes[k].n; i++)
            if (d->lanes[k].ops[i].kind == LATE_CALL)
                (void)d->lanes[k].ops[i].fn(d->lanes[k].ops[i].user, NULL, DEV_CALL_DROP);
        free(d->lanes[k].ops);
    }
    free(d);
}

void IG_DEV(dev_get_info)(const struct dev *d, struct dev_info *info)
{
    (void)d;
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "emulator");
    info->n_sm = 1;
    host_memory(&info->mem_total, &info->mem_free);
}

/* Launches under the emulator ignore the stream: the main stream is
 * synchronous. */
void *IG_DEV(dev_stream)(struct dev *d)
{
    (void)d;
    return NULL;
}

/* ---- the late streams (copy, transfers) ----
 * Their downloads, calls and records are queued and run, in order, only when
 * CUDA would have to have run them: the host waits on an event recorded there
 * (cudaEventSynchronize), or the main stream waits on one (cudaStreamWaitEvent:
 * run at the wait, see there); or when the host says it would idle or block
 * (dev_streams_run: a GPU runs them on its own meanwhile). So a download
 * reads its source then, after whatever the main stream wrote there
 * meanwhile, and its destination holds stale bytes until then; a call (an
 * NCCL group of the transfer stream) reads and writes its buffers then too.
 * Waits for main-stream events cost nothing (the main stream's work is done
 * at launch). An event's waits see its latest record at their call (CUDA
 * runtime API, cudaEventRecord: "APIs such as cudaStreamWaitEvent use the
 * most recently captured state at the time of the API call"); one never
 * recorded is done.
 * Strict where it cannot know: a download queued when its stream has not
 * waited for all of the main stream's work so far may run before that work
 * on a GPU, and the emulator keeps no older copy of the memory, so it writes
 * 0xff bytes (NaN in every float type) instead: a use that does not wait
 * reads garbage, even one whose source that work never wrote. A call so
 * queued is told so (DEV_CALL_STALE) and sends 0xff bytes likewise. */
/* The main stream's work so far: kernels the emulator ran, GEMMs and noted
 * twins, copies and memsets that write device memory. */
static int64_t main_work(const struct dev *d)
{
    return (int64_t)ig_emu_launches() + d->extra_launches + d->main_writes;
}

/* Runs lane L's work up to the record of `ticket` (all of it: UINT64_MAX).
 * Returns the first failed call's status (CUDA reports a stream's failure at
 * the next wait on it). A call may block on another process, never on this
 * device (it queues nothing here). */
static int run_late(struct lane *L, uint64_t ticket)
{
    int st = IG_OK;
    size_t k = 0;
    while (k < L->n) {
        const struct late_op *op = &L->ops[k++];
        if (op->kind == LATE_COPY && op->bytes && op->unordered)
            memset(op->dst, 0xff, op->bytes);
        else if (op->kind == LATE_COPY && op->bytes)
            memcpy(op->dst, op->src, op->bytes);
        if (op->kind == LATE_CALL) {
            int rc = op->fn(op->user, NULL, op->unordered ? DEV_CALL_STALE : DEV_CALL_RUN);
            st = st != IG_OK ? st : rc;
        }
        if (op->kind != LATE_RECORD)
            continue;
        if (op->ev && op->ev->ticket == op->ticket)
            op->ev->pending = false;
        if (op->ticket >= ticket)
            break;
    }
    if (k) /* (an empty lane's ops may be NULL) */
        memmove(L->ops, L->ops + k, (L->n - k) * sizeof *L->ops);
    L->n -= k;
    return st;
}

static int push_late(struct lane *L, struct late_op op)
{
    if (L->n == L->cap) {
        size_t cap = L->cap ? 2 * L->cap : 64;
        struct late_op *q = (struct late_op *)realloc(L->ops, cap * sizeof *q);
        if (!q)
            return ig_error(IG_E_NOMEM, "emulated device: out of host memory queueing a copy");
        L->ops = q;
        L->cap = cap;
    }
    L->ops[L->n++] = op;
    return IG_OK;
}

void *IG_DEV(dev_stream_of)(struct dev *d, enum dev_stream_id s)
{
    (void)d;
    (void)s;
    return NULL;
}

int IG_DEV(dev_event_create)(struct dev *d, struct dev_event **e)
{
    (void)d;
    *e = (struct dev_event *)calloc(1, sizeof **e);
    return *e ? IG_OK : ig_error(IG_E_NOMEM, "emulated device: out of host memory (an event)");
}

/* A record still queued forgets the event (CUDA lets a pending event be
 * destroyed). */
void IG_DEV(dev_event_destroy)(struct dev *d, struct dev_event *e)
{
    if (!e)
        return;
    for (int k = 0; k < N_LANES; k++)
        for (size_t i = 0; i < d->lanes[k].n; i++)
            if (d->lanes[k].ops[i].ev == e)
                d->lanes[k].ops[i].ev = NULL;
    free(e);
}

int IG_DEV(dev_event_record)(struct dev *d, enum dev_stream_id s, struct dev_event *e)
{
    if (s == DEV_STREAM_MAIN) { /* the main stream's work so far is done */
        e->main_at = main_work(d);
        e->pending = false;
        e->ticket = 0;
        return IG_OK;
    }
    e->ticket = ++d->tickets;
    e->pending = true;
    e->lane = (int)s - 1;
    e->main_at = 0;
    struct late_op op = {};
    op.kind = LATE_RECORD;
    op.ev = e;
    op.ticket = e->ticket;
    return push_late(lane_of(d, s), op);
}

/* Waiting on a late stream's event runs that stream up to it at once: the
 * main stream's next work may be a kernel launch, which goes to the emulator
 * without passing here, and the host code in between is not ordered against
 * the late work by CUDA either. (A late stream waiting on another's: the
 * other's work runs now, earlier than a GPU might; never needed so far.) */
int IG_DEV(dev_stream_wait)(struct dev *d, enum dev_stream_id s, struct dev_event *e)
{
    if (e->pending && (s == DEV_STREAM_MAIN || e->lane != (int)s - 1))
        return run_late(&d->lanes[e->lane], e->ticket);
    if (s != DEV_STREAM_MAIN && e->main_at > lane_of(d, s)->seen)
        lane_of(d, s)->seen = e->main_at;
    return IG_OK; /* (main's events are done, a stream's own in order) */
}

int IG_DEV(dev_event_sync)(struct dev *d, struct dev_event *e)
{
    return e->pending ? run_late(&d->lanes[e->lane], e->ticket) : IG_OK;
}

/* A call (an NCCL group: NCCL's calls are queued on their stream and run on
 * the device in its order, NCCL user guide, "CUDA Stream Semantics";
 * ncclGroupEnd returns once they are queued, api/group.html) runs where its
 * stream does here, reading and writing its buffers then. A send or receive
 * "is blocking for the GPU" until its peer's match (api/p2p.html): on a GPU
 * that holds its stream, not the host; here the host runs it, so it blocks
 * in the stand-in's MPI until the peer runs the match. The peer does so at
 * the latest where it would idle or block itself (dev_streams_run): no
 * deadlock a GPU would not have, as long as every rank runs its streams
 * before it waits on another (cli/pd.c's round does, each round). */
int IG_DEV(dev_stream_call)(struct dev *d, enum dev_stream_id s, dev_stream_fn fn, void *user)
{
    struct lane *L = lane_of(d, s);
    struct late_op op = {};
    op.kind = LATE_CALL;
    op.fn = fn;
    op.user = user;
    op.unordered = main_work(d) > L->seen;
    int st = push_late(L, op);
    if (st != IG_OK)
        (void)fn(user, NULL, DEV_CALL_DROP);
    return st;
}

/* Where the host would idle or block on another process, the late streams'
 * work so far runs, as a GPU's would meanwhile. */
int IG_DEV(dev_streams_run)(struct dev *d)
{
    int st = IG_OK;
    for (int k = 0; k < N_LANES; k++) {
        int rc = run_late(&d->lanes[k], UINT64_MAX);
        st = st != IG_OK ? st : rc;
    }
    return st;
}

int IG_DEV(dev_download_async)(struct dev *d, enum dev_stream_id s, void *dst, const void *src,
                               size_t bytes)
{
    if (!in_host_block(dst, bytes))
        return ig_error(IG_E_INTERNAL, "dev_download_async: %zu bytes into memory not from "
                        "dev_alloc_host (pageable: a GPU copies it synchronously)", bytes);
    if (s == DEV_STREAM_MAIN)
        return copy(dst, src, bytes);
    struct lane *L = lane_of(d, s);
    struct late_op op = {};
    op.kind = LATE_COPY;
    op.dst = dst;
    op.src = src;
    op.bytes = bytes;
    op.unordered = main_work(d) > L->seen;
    return push_late(L, op);
}

/* IGNITE_EMU_DEVICE_MEM=BYTES: the most the emulated device's allocations
 * hold at once (not pinned host memory; not in dev_info's figures), so a
 * test can run a device that fills up; the most held is told at exit (what
 * a run needed). Unset: the host's memory alone. */
static size_t device_cap(void)
{
    const char *e = getenv("IGNITE_EMU_DEVICE_MEM");
    return e && *e ? (size_t)strtoull(e, NULL, 10) : 0;
}
static std::atomic<size_t> device_held, device_peak; /* (usable sizes, where capped) */

static void tell_peak(void)
{
    fprintf(stderr, "emulated device: %zu bytes held at most (IGNITE_EMU_DEVICE_MEM)\n",
            device_peak.load());
}

static int alloc_mem(size_t bytes, void **p, bool device);

int IG_DEV(dev_alloc)(struct dev *d, size_t bytes, void **p)
{
    (void)d;
    return alloc_mem(bytes, p, true);
}

static int alloc_mem(size_t bytes, void **p, bool device)
{
    *p = NULL;
    size_t total, free_b;
    host_memory(&total, &free_b);
    void *q = NULL;
    /* posix_memalign, not aligned_alloc: no rounding of the size to the
     * alignment, so ASan reports an overrun by a single byte. */
    if ((total && bytes > total) || posix_memalign(&q, 256, bytes ? bytes : 1) != 0)
        return ig_error(IG_E_NOMEM, "emulated device: out of memory: %zu bytes asked for, "
                        "%zu of %zu host bytes free", bytes, free_b, total);
    /* IGNITE_EMU_POISON=1: fresh device memory is 0xff bytes (NaN in f32, f16
     * and bf16), as a real device's may hold anything: a read before the first
     * write shows as NaN every time, not only where malloc reused a block. */
    const char *poison = getenv("IGNITE_EMU_POISON");
    if (poison && *poison && strcmp(poison, "0") != 0)
        memset(q, 0xff, bytes);
    size_t cap = device ? device_cap() : 0;
    if (cap) {
        size_t u = malloc_usable_size(q), held = device_held += u;
        if (held > cap) {
            device_held -= u;
            free(q);
            return ig_error(IG_E_NOMEM, "emulated device: out of memory: %zu bytes asked for, "
                            "%zu of IGNITE_EMU_DEVICE_MEM=%zu held", bytes, held - u, cap);
        }
        static std::atomic<bool> told;
        if (!told.exchange(true))
            atexit(tell_peak);
        for (size_t was = device_peak; held > was && !device_peak.compare_exchange_weak(was, held);)
            ;
    }
    *p = q;
    return IG_OK;
}

void IG_DEV(dev_free)(struct dev *d, void *p)
{
    (void)d;
    if (p && device_cap())
        device_held -= malloc_usable_size(p);
    free(p);
}

int IG_DEV(dev_alloc_host)(struct dev *d, size_t bytes, void **p)
{
    (void)d;
    int st = alloc_mem(bytes, p, false);
    if (st == IG_OK)
        host_blocks[(const unsigned char *)*p] = bytes;
    return st;
}

void IG_DEV(dev_free_host)(struct dev *d, void *p)
{
    host_blocks.erase((const unsigned char *)p);
    free(p);
}

int IG_DEV(dev_upload)(struct dev *d, void *dst, const void *src, size_t bytes)
{
    d->main_writes++;
    return copy(dst, src, bytes);
}

int IG_DEV(dev_download)(struct dev *d, void *dst, const void *src, size_t bytes)
{
    return copy(dst, src, bytes);
}

int IG_DEV(dev_upload_async)(struct dev *d, void *dst, const void *src, size_t bytes)
{
    d->main_writes++;
    return copy(dst, src, bytes);
}

int IG_DEV(dev_copy)(struct dev *d, void *dst, const void *src, size_t bytes)
{
    d->main_writes++;
    /* cudaMemcpy between overlapping ranges is undefined too; memmove makes
     * the emulator forgiving where it cannot check. */
    if (bytes)
        memmove(dst, src, bytes);
    return IG_OK;
}

int IG_DEV(dev_memset)(struct dev *d, void *p, int byte, size_t bytes)
{
    d->main_writes++;
    if (bytes)
        memset(p, byte, bytes);
    return IG_OK;
}

int IG_DEV(dev_sync)(struct dev *d)
{
    return IG_OK;
}

int IG_DEV(dev_timer_start)(struct dev *d)
{
    d->t0_ns = ig_now_ns();
    d->timer_running = true;
    return IG_OK;
}

int IG_DEV(dev_timer_stop)(struct dev *d, double *ms)
{
    *ms = 0;
    if (!d->timer_running)
        return ig_error(IG_E_INTERNAL, "emulated device: timer stopped without a start");
    d->timer_running = false;
    *ms = (double)(ig_now_ns() - d->t0_ns) / 1e6;
    return IG_OK;
}

/* No graphs: silently refused, callers run their launches directly. */
int IG_DEV(dev_graph_begin)(struct dev *d)
{
    return IG_E_DEVICE;
}

int IG_DEV(dev_graph_end)(struct dev *d, struct dev_graph **g)
{
    *g = NULL;
    return ig_error(IG_E_INTERNAL, "emulated device: dev_graph_end without a capture");
}

int IG_DEV(dev_graph_launch)(struct dev *d, struct dev_graph *g)
{
    return ig_error(IG_E_INTERNAL, "emulated device: dev_graph_launch of a graph never made");
}

void IG_DEV(dev_graph_free)(struct dev_graph *g)
{
    free(g);
}

int64_t IG_DEV(dev_graph_nodes)(const struct dev_graph *g)
{
    (void)g;
    return -1;
}

int64_t IG_DEV(dev_launches)(struct dev *d)
{
    return (int64_t)ig_emu_launches() + d->extra_launches;
}

void IG_DEV(dev_note_launch)(struct dev *d)
{
    d->extra_launches++;
}

/* Products of f16 values are exact in f32 (11 + 11 significant bits), so each
 * step rounds only the f32 sum, summed in column order; beta y is added last,
 * as cuBLAS does with alpha AB + beta C. */
int IG_DEV(dev_gemm_f16)(struct dev *d, const uint16_t *w, const uint16_t *x, float *y,
                         int64_t rows, int64_t cols, int64_t n, int64_t ld_x, int64_t ld_y,
                         float beta)
{
    d->extra_launches++;
    if (rows < 0 || cols < 0 || n < 0 || ld_x < cols || ld_y < rows ||
        (beta != 0.0f && beta != 1.0f))
        return ig_error(IG_E_INTERNAL,
                        "dev_gemm_f16: bad shape rows %lld cols %lld n %lld ld_x %lld ld_y %lld "
                        "beta %g (emulated device)", (long long)rows, (long long)cols,
                        (long long)n, (long long)ld_x, (long long)ld_y, (double)beta);
    /* Each operand converted to f32 once (the conversions dominated); the
     * sums still run in column order. */
    float *xf = (float *)malloc((size_t)(n * cols + cols + 1) * sizeof(float));
    if (!xf)
        return ig_error(IG_E_NOMEM, "dev_gemm_f16: out of host memory (%lld floats)",
                        (long long)(n * cols + cols));
    float *wf = xf + n * cols;
    for (int64_t t = 0; t < n; t++)
        for (int64_t c = 0; c < cols; c++)
            xf[t * cols + c] = ig_f16_to_f32(x[t * ld_x + c]);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++)
            wf[c] = ig_f16_to_f32(w[r * cols + c]);
        /* Four tokens at a time share each weight's load (a fifth of the
         * emulated backend tests' time went here); each sum keeps its order. */
        int64_t t = 0;
        for (; t + 4 <= n; t += 4) {
            const float *x0 = xf + t * cols, *x1 = x0 + cols, *x2 = x1 + cols, *x3 = x2 + cols;
            float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
            for (int64_t c = 0; c < cols; c++) {
                const float wc = wf[c];
                s0 += wc * x0[c];
                s1 += wc * x1[c];
                s2 += wc * x2[c];
                s3 += wc * x3[c];
            }
            const float sums[4] = {s0, s1, s2, s3};
            for (int k = 0; k < 4; k++) {
                float *out = &y[(t + k) * ld_y + r];
                *out = beta == 0.0f ? sums[k] : sums[k] + *out; /* beta 0: y never read */
            }
        }
        for (; t < n; t++) {
            const float *xt = xf + t * cols;
            float sum = 0.0f;
            for (int64_t c = 0; c < cols; c++)
                sum += wf[c] * xt[c];
            float *out = &y[t * ld_y + r];
            *out = beta == 0.0f ? sum : sum + *out;
        }
    }
    free(xf);
    return IG_OK;
}

} /* extern "C" */
