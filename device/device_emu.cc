/* device/device_emu.cc: the device layer (device/device.h) on the host, for
 * the emulator build (names end in _emu). "Device" memory is host memory
 * (256-byte aligned, exact size so ASan bounds it), the main stream is
 * synchronous (copies are memcpy, kernels run to completion at launch), the
 * copy stream runs late (its work queued, run at the latest point CUDA's
 * ordering allows: see "the copy stream" below), there are no graphs
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

/* The copy stream's queued work: a download, or an event's record. */
struct late_op {
    void *dst;
    const void *src;
    size_t bytes;
    bool unordered;       /* a download not after the main stream's latest work */
    bool record;          /* a record of ev (NULL once destroyed), else a copy */
    struct dev_event *ev;
    uint64_t ticket;      /* the record's */
};

struct dev {
    int64_t t0_ns;
    bool timer_running;
    int64_t extra_launches; /* GEMMs and noted twins: launches the emulator did not run */
    struct late_op *late;   /* the copy stream's queue, [n_late] not yet run */
    size_t n_late, cap_late;
    uint64_t tickets;       /* records so far on the copy stream */
    int64_t main_writes;    /* main-stream copies and memsets that write device memory */
    int64_t copy_seen;      /* the main stream's work the copy stream waited for */
};

/* An event: done, or recorded on the copy stream and not yet reached there
 * (ticket: its latest record's). */
struct dev_event {
    uint64_t ticket;
    bool pending;
    int64_t main_at; /* recorded on the main stream: its work then (main_work) */
};

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

/* Work still queued on the copy stream is dropped: its memory may be gone
 * (CUDA's frees wait for it; the emulator's do not). */
void IG_DEV(dev_close)(struct dev *d)
{
    if (d)
        free(d->late);
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

/* ---- the copy stream ----
 * Its downloads and records are queued and run, in order, only when CUDA
 * would have to have run them: the host waits on an event recorded there
 * (cudaEventSynchronize), or the main stream waits on one (cudaStreamWaitEvent:
 * run at the wait, see there). So a download reads its source then, after
 * whatever the main stream wrote there meanwhile, and its destination holds
 * stale bytes until then. Waits for main-stream events cost nothing (the main
 * stream's work is done at launch). An event's waits see its latest record
 * at their call (CUDA runtime API, cudaEventRecord: "APIs such as
 * cudaStreamWaitEvent use the most recently captured state at the time of
 * the API call"); one never recorded is done.
 * Strict where it cannot know: a download queued when the copy stream has
 * not waited for all of the main stream's work so far may run before that
 * work on a GPU, and the emulator keeps no older copy of the memory, so it
 * writes 0xff bytes (NaN in every float type) instead: a use that does not
 * wait reads garbage, even one whose source that work never wrote. */
/* The main stream's work so far: kernels the emulator ran, GEMMs and noted
 * twins, copies and memsets that write device memory. */
static int64_t main_work(const struct dev *d)
{
    return (int64_t)ig_emu_launches() + d->extra_launches + d->main_writes;
}

static void run_late(struct dev *d, uint64_t ticket)
{
    size_t k = 0;
    while (k < d->n_late) {
        struct late_op *op = &d->late[k++];
        if (!op->record) {
            if (op->bytes && op->unordered)
                memset(op->dst, 0xff, op->bytes);
            else if (op->bytes)
                memcpy(op->dst, op->src, op->bytes);
            continue;
        }
        if (op->ev && op->ev->ticket == op->ticket)
            op->ev->pending = false;
        if (op->ticket >= ticket)
            break;
    }
    memmove(d->late, d->late + k, (d->n_late - k) * sizeof *d->late);
    d->n_late -= k;
}

static int push_late(struct dev *d, struct late_op op)
{
    if (d->n_late == d->cap_late) {
        size_t cap = d->cap_late ? 2 * d->cap_late : 64;
        struct late_op *q = (struct late_op *)realloc(d->late, cap * sizeof *q);
        if (!q)
            return ig_error(IG_E_NOMEM, "emulated device: out of host memory queueing a copy");
        d->late = q;
        d->cap_late = cap;
    }
    d->late[d->n_late++] = op;
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
    for (size_t k = 0; k < d->n_late; k++)
        if (d->late[k].ev == e) {
            d->late[k].ev = NULL;
        }
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
    e->main_at = 0;
    return push_late(d, (struct late_op){NULL, NULL, 0, false, true, e, e->ticket});
}

/* The main stream waiting on a copy-stream event runs the copy stream up to
 * it at once: the main stream's next work may be a kernel launch, which goes
 * to the emulator without passing here, and the host code in between is
 * not ordered against the copy by CUDA either. */
int IG_DEV(dev_stream_wait)(struct dev *d, enum dev_stream_id s, struct dev_event *e)
{
    if (s == DEV_STREAM_MAIN && e->pending)
        run_late(d, e->ticket);
    if (s == DEV_STREAM_COPY && e->main_at > d->copy_seen)
        d->copy_seen = e->main_at;
    return IG_OK; /* (main's events are done, the copy stream's own in order) */
}

int IG_DEV(dev_event_sync)(struct dev *d, struct dev_event *e)
{
    if (e->pending)
        run_late(d, e->ticket);
    return IG_OK;
}

int IG_DEV(dev_download_async)(struct dev *d, enum dev_stream_id s, void *dst, const void *src,
                               size_t bytes)
{
    if (!in_host_block(dst, bytes))
        return ig_error(IG_E_INTERNAL, "dev_download_async: %zu bytes into memory not from "
                        "dev_alloc_host (pageable: a GPU copies it synchronously)", bytes);
    if (s == DEV_STREAM_MAIN)
        return copy(dst, src, bytes);
    const bool unordered = main_work(d) > d->copy_seen;
    return push_late(d, (struct late_op){dst, src, bytes, unordered, false, NULL, 0});
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
