/* emu/sched.cc: the emulator's launch loop and scheduler: blocks one after
 * another, a block's threads as fibers, __syncthreads, the arrival side of
 * warp and warpgroup collectives, deadlock reports and the seeded thread
 * order; when no thread can run, TMA loads in flight land (emu/tma.cc).
 * Leaves shared memory to emu/smem.cc, named barriers, mbarriers and the
 * vector clocks to emu/sync.cc and collective math to emu/warp.cc and
 * emu/wgmma.cc.
 * Covered by tests/emu/test_emu_sched.cc. */
#include "emu/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ig_emu_dim3 ig_emu_threadIdx, ig_emu_blockIdx, ig_emu_blockDim, ig_emu_gridDim;

struct emu_ctx emu;

static char emu_error[1024];
static uint64_t emu_seed = 1;
static int emu_quiet;
static int emu_sm_count = 3;
static unsigned emu_max_grid_y = 65535;
static std::vector<emu_fiber> emu_pool; /* stacks reused across launches */
static uint64_t emu_launch_count;
static int emu_next_pdl;                 /* ig_emu_next_launch_pdl */
static size_t emu_next_smem_optin;       /* ig_emu_next_launch_smem_optin */
static struct ig_emu_pdl_hooks emu_pdl_hooks;

/* Big enough for a kernel's register arrays with ASan's redzones. */
#define EMU_STACK_BYTES (256u * 1024u)
#define EMU_MAX_THREADS 1024u
#define EMU_WARP 32u
#define EMU_WARPGROUP 128u

void ig_emu_set_seed(uint64_t seed) { emu_seed = seed; }
void ig_emu_set_sm_count(int n) { emu_sm_count = n < 1 ? 1 : n; }
int ig_emu_sm_count(void) { return emu_sm_count; }
void ig_emu_set_max_grid_y(unsigned n) { emu_max_grid_y = n < 1 ? 65535 : n; }
unsigned ig_emu_max_grid_y(void) { return emu_max_grid_y; }
void ig_emu_set_quiet(int quiet) { emu_quiet = quiet; }
const char *ig_emu_last_error(void) { return emu_error; }
uint64_t ig_emu_launches(void) { return emu_launch_count; }
struct ig_emu_stats ig_emu_last_stats(void) { return emu.stats; }
void ig_emu_next_launch_pdl(void) { emu_next_pdl = 1; }
void ig_emu_next_launch_smem_optin(size_t bytes) { emu_next_smem_optin = bytes; }
void ig_emu_set_pdl_hooks(const struct ig_emu_pdl_hooks *hooks)
{
    emu_pdl_hooks = hooks ? *hooks : ig_emu_pdl_hooks{};
}

static void emu_vfault(const char *fmt, va_list ap)
{
    if (emu.faulted)
        return;
    emu.faulted = 1;
    char msg[768];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (emu.cur)
        snprintf(emu_error, sizeof emu_error, "block (%u,%u,%u) thread (%u,%u,%u): %s",
                 ig_emu_blockIdx.x, ig_emu_blockIdx.y, ig_emu_blockIdx.z, emu.cur->idx.x,
                 emu.cur->idx.y, emu.cur->idx.z, msg);
    else
        snprintf(emu_error, sizeof emu_error, "block (%u,%u,%u): %s", ig_emu_blockIdx.x,
                 ig_emu_blockIdx.y, ig_emu_blockIdx.z, msg);
    if (!emu_quiet)
        fprintf(stderr, "emu: %s\n", emu_error);
}

void emu_fault(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emu_vfault(fmt, ap);
    va_end(ap);
}

void emu_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emu_vfault(fmt, ap);
    va_end(ap);
    struct emu_thread *t = emu.cur;
    t->state = EMU_DONE;
    emu_fiber_exit(&t->fiber, &emu.sched);
}

/* xorshift64*: small, seeded, good enough to permute thread orders. */
EMU_NO_SANITIZE static uint64_t emu_rand(void)
{
    emu.rng ^= emu.rng >> 12;
    emu.rng ^= emu.rng << 25;
    emu.rng ^= emu.rng >> 27;
    return emu.rng * 0x2545f4914f6cdd1dull;
}

EMU_NO_SANITIZE void emu_shuffle(unsigned *v, size_t n)
{
    if (!emu_seed)
        return;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(emu_rand() % i);
        unsigned tmp = v[i - 1];
        v[i - 1] = v[j];
        v[j] = tmp;
    }
}

EMU_NO_SANITIZE void emu_wake(unsigned i)
{
    (*emu.blk->threads)[i].state = EMU_RUNNABLE;
    emu.blk->runq.push_back(i);
}

EMU_NO_SANITIZE void emu_block_current(int state)
{
    struct emu_thread *t = emu.cur;
    t->state = state;
    emu_fiber_yield(&t->fiber, &emu.sched);
}

/* ---- griddepcontrol (programmatic dependent launch) ------------------------ */

/* Once every thread of a dependent launch's block waits in
 * griddepcontrol.wait or has exited, the previous kernel has finished: its
 * writes appear (the hook) and the waiting threads go on. */
static void emu_griddep_check(struct emu_block *b)
{
    if (!emu.pdl || b->griddep_done || !b->n_at_griddep ||
        b->n_at_griddep + b->n_done != b->n)
        return;
    b->griddep_done = true;
    b->n_at_griddep = 0;
    emu.stats.griddep_waits++;
    if (emu_pdl_hooks.show)
        emu_pdl_hooks.show(emu_pdl_hooks.ctx);
    unsigned *order = b->order.data(), k = 0;
    for (unsigned i = 0; i < b->n; i++)
        if ((*b->threads)[i].state == EMU_AT_GRIDDEP)
            order[k++] = i;
    emu_shuffle(order, k);
    for (unsigned i = 0; i < k; i++)
        emu_wake(order[i]);
}

void ig_emu_grid_dependency_wait(void)
{
    struct emu_block *b = emu.blk;
    if (!emu.pdl || b->griddep_done)
        return; /* a plain launch, or the block has met here already */
    emu.cur->state = EMU_AT_GRIDDEP;
    b->n_at_griddep++;
    emu_griddep_check(b);
    emu_block_current(EMU_AT_GRIDDEP);
}

void ig_emu_launch_dependents(void) { emu.stats.triggers++; }

/* ---- a thread's life ------------------------------------------------------ */

static void emu_thread_main(void *arg)
{
    struct emu_thread *t = (struct emu_thread *)arg;
    emu_fiber_entered(&t->fiber, &emu.sched);
    emu.fn(emu.fn_ctx);
    size_t left = t->uncommitted.size();
    for (auto &g : t->groups)
        left += g.size();
    if (left)
        emu_fail("exits with %zu cp.async not waited for (missing cp.async.wait_group?)", left);
    left = t->bulk_uncommitted.size();
    for (auto &g : t->bulk_groups)
        left += g.size();
    if (left)
        emu_fail("exits with %zu TMA stores not waited for (missing cp.async.bulk.commit_group "
                 "/ wait_group?)", left);
    emu_wgmma_check_exit(t);
    t->state = EMU_DONE;
    emu.blk->n_done++;
    emu_griddep_check(emu.blk);
    if (emu.blk->n_at_barrier)
        emu_fault("exits while %u threads wait at the barrier at %s:%d: a barrier not all "
                  "threads reach", emu.blk->n_at_barrier, emu.blk->bar_file, emu.blk->bar_line);
    emu_fiber_finish(&t->fiber, &emu.sched);
}

/* ---- barriers ------------------------------------------------------------- */

void ig_emu_barrier(const char *file, int line)
{
    struct emu_block *b = emu.blk;
    struct emu_thread *t = emu.cur;
    if (b->n_done)
        emu_fail("barrier at %s:%d reached after %u threads of the block exited", file, line,
                 b->n_done);
    if (b->n_at_barrier == 0) {
        b->bar_file = file;
        b->bar_line = line;
    } else if (b->bar_line != line || strcmp(b->bar_file, file)) {
        emu_fail("waits at barrier %s:%d while other threads wait at %s:%d", file, line,
                 b->bar_file, b->bar_line);
    }
    t->bar_file = file;
    t->bar_line = line;
    if (++b->n_at_barrier == b->n) {
        b->n_at_barrier = 0;
        emu.stats.barriers++;
        /* Everyone's accesses before it happen before everyone's after. */
        std::vector<uint32_t> &j = b->join;
        j.assign(b->n_agents, 0u);
        for (auto &th : *b->threads)
            emu_vc_join(j, th.vc);
        /* No heap memory may stay live across a switch: a fault abandons
         * suspended threads, which would leak it. */
        unsigned *order = b->order.data();
        for (unsigned i = 0; i < b->n; i++) {
            struct emu_thread &th = (*b->threads)[i];
            th.vc = j;
            emu_vc_tick(&th);
            order[i] = i;
        }
        emu_sync_note_barrier(b, order, b->n);
        emu_shuffle(order, b->n);
        for (unsigned i = 0; i < b->n; i++)
            emu_wake(order[i]);
    }
    emu_block_current(EMU_AT_BARRIER);
}

/* ---- warp collectives: arrival ------------------------------------------- */

/* The arrival path (these functions, emu_shuffle, emu_wake, emu_block_current)
 * touches only the emulator's own state and small locals, and runs once per
 * lane and collective: no ASan frames (EMU_NO_SANITIZE); the collectives' math,
 * which reads and writes the lanes' registers, keeps ASan. */

/* The calling thread arrives at a collective of the `size` consecutive
 * threads its group spans (a warp or a warpgroup), its operands already
 * stored; the last to arrive computes it for the whole group and releases
 * them in a seeded order. */
EMU_NO_SANITIZE static void emu_group_arrive(unsigned size, unsigned *arrived, int state,
                             int (*compute)(struct emu_block *, unsigned), const char *what,
                             const char *unit)
{
    struct emu_block *b = emu.blk;
    if (b->n % size)
        emu_fail("%s in a block of %u threads (not whole %s)", what, b->n, unit);
    unsigned g = emu.cur->tid / size;
    if (++arrived[g] < size) {
        emu_block_current(state);
        return;
    }
    arrived[g] = 0;
    emu.stats.collectives++;
    if (compute(b, g)) {
        unsigned order[EMU_WARPGROUP];
        for (unsigned l = 0; l < size; l++)
            order[l] = g * size + l;
        emu_shuffle(order, size);
        for (unsigned l = 0; l < size; l++)
            emu_wake(order[l]);
    }
    emu_block_current(state);
}

void emu_wake_warpgroup(unsigned g)
{
    unsigned order[EMU_WARPGROUP];
    for (unsigned l = 0; l < EMU_WARPGROUP; l++)
        order[l] = g * EMU_WARPGROUP + l;
    emu_shuffle(order, EMU_WARPGROUP);
    for (unsigned l = 0; l < EMU_WARPGROUP; l++)
        emu_wake(order[l]);
}

static int emu_warp_compute_all(struct emu_block *b, unsigned w)
{
    emu_warp_compute(b, w);
    return 1;
}

/* A lane arrives at a warp collective (mma, ldmatrix, shfl, vote). */
EMU_NO_SANITIZE static void emu_collective(const struct emu_coll *c)
{
    emu.cur->coll = *c;
    emu_group_arrive(EMU_WARP, emu.blk->warp_arrived.data(), EMU_AT_WARP, emu_warp_compute_all,
                     "warp collective", "warps");
}

/* A thread arrives at a warpgroup collective (wgmma and its fence, commit
 * and wait). */
void emu_wg_collective(const struct emu_wgcoll *c)
{
    emu.cur->wgc = *c;
    emu_group_arrive(EMU_WARPGROUP, emu.blk->wg_arrived.data(), EMU_AT_WARPGROUP,
                     emu_warpgroup_compute, "wgmma", "warpgroups of 128");
}

EMU_NO_SANITIZE void ig_emu_mma_16816(int kind, float d[4], const uint32_t a[4], const uint32_t b[2],
                      const float c[4])
{
    struct emu_coll k = {};
    k.op = EMU_OP_MMA;
    k.kind = kind;
    k.in[0] = a;
    k.in[1] = b;
    k.in[2] = c;
    k.out = d;
    emu_collective(&k);
}

EMU_NO_SANITIZE void ig_emu_ldmatrix(int num, int trans, uint32_t *r, const void *row)
{
    struct emu_coll k = {};
    k.op = EMU_OP_LDSM;
    k.kind = num | (trans ? 16 : 0);
    k.in[0] = row;
    k.out = r;
    emu_collective(&k);
}

EMU_NO_SANITIZE uint32_t ig_emu_shfl(int mode, uint32_t mask, uint32_t v, uint32_t b, uint32_t c)
{
    uint32_t out = 0;
    struct emu_coll k = {};
    k.op = EMU_OP_SHFL;
    k.kind = mode;
    k.v = v;
    k.b = b;
    k.c = c;
    k.mask = mask;
    k.out = &out;
    emu_collective(&k);
    return out;
}

EMU_NO_SANITIZE void ig_emu_syncwarp(void)
{
    struct emu_coll k = {};
    k.op = EMU_OP_SYNCWARP;
    k.mask = 0xffffffffu;
    emu_collective(&k);
}

EMU_NO_SANITIZE uint32_t ig_emu_vote(int mode, uint32_t mask, int pred)
{
    uint32_t out = 0;
    struct emu_coll k = {};
    k.op = EMU_OP_VOTE;
    k.kind = mode;
    k.v = pred != 0;
    k.mask = mask;
    k.out = &out;
    emu_collective(&k);
    return out;
}

/* ---- the launch ----------------------------------------------------------- */

static const char *emu_state_name(int s)
{
    switch (s) {
    case EMU_AT_BARRIER: return "at a barrier";
    case EMU_AT_WARP: return "in a warp collective";
    case EMU_AT_WARPGROUP: return "in a warpgroup collective";
    case EMU_AT_NBAR: return "at a named barrier";
    case EMU_AT_MBAR: return "waiting on an mbarrier";
    case EMU_AT_GRIDDEP: return "in griddepcontrol.wait";
    case EMU_DONE: return "exited";
    default: return "runnable";
    }
}

/* Nothing can run but not every thread has exited: say who waits where. */
static void emu_report_deadlock(struct emu_block *b)
{
    unsigned at_bar = 0, at_warp = 0, done = 0;
    const struct emu_thread *other = NULL, *warp = NULL, *group = NULL, *nbar = NULL,
                            *mbar = NULL;
    for (auto &t : *b->threads) {
        if (t.state == EMU_AT_BARRIER) {
            at_bar++;
            continue;
        }
        if (!other)
            other = &t;
        if (t.state == EMU_AT_WARP) {
            at_warp++;
            if (!warp)
                warp = &t;
        } else if (t.state == EMU_AT_WARPGROUP) {
            at_warp++;
            if (!group)
                group = &t;
        } else if (t.state == EMU_AT_NBAR) {
            if (!nbar)
                nbar = &t;
        } else if (t.state == EMU_AT_MBAR) {
            if (!mbar)
                mbar = &t;
        } else if (t.state == EMU_DONE) {
            done++;
        }
    }
    /* A warpgroup waiting for registers is the root cause of what waits on it. */
    for (size_t g = 0; g < b->wg.size(); g++)
        if (b->wg[g].maxnreg_waiting) {
            emu_fault("deadlock: warpgroup %zu waits in setmaxnreg.inc for %d registers per "
                      "thread that the CTA's pool never has (%ld free): a missing "
                      "setmaxnreg.dec?", g, b->wg[g].maxnreg_want, b->reg_pool);
            return;
        }
    if (at_bar)
        emu_fault("deadlock: the barrier at %s:%d is reached by %u of %u threads (%u wait in "
                  "warp or warpgroup collectives, %u exited; thread %u is %s)",
                  b->bar_file, b->bar_line, at_bar, b->n, at_warp, done, other->tid,
                  emu_state_name(other->state));
    else if (mbar) {
        const auto it = b->mbar.find(mbar->mbar_off);
        size_t off = 0; /* the mbarrier's offset in its shared array */
        for (const auto &sm : b->smem)
            if (mbar->mbar_off >= (size_t)(uintptr_t)sm.data &&
                mbar->mbar_off < (size_t)(uintptr_t)sm.data + sm.bytes)
                off = mbar->mbar_off - (size_t)(uintptr_t)sm.data;
        emu_fault("deadlock: thread %u waits for phase %u of the mbarrier at shared offset %zu, "
                  "which needs %u more arrivals and %lld tx bytes (%u threads exited)",
                  mbar->tid, mbar->mbar_phase, off,
                  it != b->mbar.end() ? it->second.pending : 0u,
                  it != b->mbar.end() ? (long long)it->second.tx : 0ll, done);
    } else if (nbar) {
        const struct emu_nbar *nb = &b->nbar[nbar->nbar_id];
        emu_fault("deadlock: thread %u waits at named barrier %d (%s:%d), %u of %u threads "
                  "arrived (%u threads exited)", nbar->tid, nbar->nbar_id, nbar->bar_file,
                  nbar->bar_line, nb->arrived, nb->count, done);
    } else if (warp)
        emu_fault("deadlock: warp %u waits in a collective that %u of its lanes never reach "
                  "(%u threads exited)",
                  warp->tid / EMU_WARP, EMU_WARP - b->warp_arrived[warp->tid / EMU_WARP], done);
    else if (group)
        emu_fault("deadlock: warpgroup %u waits in a wgmma collective that %u of its threads "
                  "never reach (%u threads exited)",
                  group->tid / EMU_WARPGROUP,
                  EMU_WARPGROUP - b->wg_arrived[group->tid / EMU_WARPGROUP], done);
    else
        emu_fault("deadlock: %u threads neither runnable nor exited", b->n - done);
}

static int emu_run_block(struct emu_block *b)
{
    unsigned *order = b->order.data();
    for (unsigned i = 0; i < b->n; i++) {
        struct emu_thread &t = (*b->threads)[i];
        t.state = EMU_RUNNABLE;
        t.bar_file = NULL;
        t.bar_line = 0;
        t.uncommitted.clear();
        t.groups.clear();
        t.bulk_uncommitted.clear();
        t.bulk_groups.clear();
        t.proxy_fences = 0;
        emu_fiber_prepare(&t.fiber, emu_thread_main, &t);
        order[i] = i;
    }
    emu_shuffle(order, b->n);
    for (unsigned i = 0; i < b->n; i++)
        b->runq.push_back(order[i]);
    emu_sync_block_start(b);
    for (;;) {
        while (!b->runq.empty() && !emu.faulted) {
            unsigned i = b->runq.front();
            b->runq.pop_front();
            struct emu_thread *t = &(*b->threads)[i];
            emu.cur = t;
            ig_emu_threadIdx = t->idx;
            emu.stats.switches++;
            emu_fiber_resume(&emu.sched, &t->fiber);
            emu.cur = NULL;
        }
        /* No thread can run: TMA loads land now, as late as they may,
         * which may complete mbarrier phases threads wait for. */
        if (emu.faulted || b->n_done == b->n || !emu_tma_complete_loads(b))
            break;
    }
    if (!emu.faulted && b->n_done != b->n)
        emu_report_deadlock(b);
    if (!emu.faulted)
        emu_sync_block_end(b);
    return emu.faulted ? -1 : 0;
}

int ig_emu_launch(ig_emu_dim3 grid, ig_emu_dim3 block, size_t dyn_smem, ig_emu_kernel_fn fn,
                  void *ctx)
{
    emu_error[0] = 0;
    emu_launch_count++;
    emu.pdl = emu_next_pdl;
    emu_next_pdl = 0;
    emu.smem_optin = emu_next_smem_optin;
    emu_next_smem_optin = 0;
    memset(&emu.stats, 0, sizeof emu.stats);
    emu.faulted = 0;
    emu.cur = NULL;
    uint64_t nthreads = (uint64_t)block.x * block.y * block.z;
    if (!grid.x || !grid.y || !grid.z || !nthreads || nthreads > EMU_MAX_THREADS ||
        block.z > 64 || grid.y > emu_max_grid_y || grid.z > 65535) {
        emu_fault("invalid launch: grid (%u,%u,%u), block (%u,%u,%u)", grid.x, grid.y, grid.z,
                  block.x, block.y, block.z);
        return -1;
    }
    while (emu_pool.size() < nthreads) {
        emu_pool.emplace_back();
        if (emu_fiber_alloc(&emu_pool.back(), EMU_STACK_BYTES)) {
            emu_pool.pop_back();
            emu_fault("cannot allocate fiber stacks for %llu threads",
                      (unsigned long long)nthreads);
            return -1;
        }
    }
    std::vector<emu_thread> threads(nthreads);
    for (unsigned i = 0; i < nthreads; i++) {
        threads[i].fiber = emu_pool[i];
        threads[i].tid = i;
        threads[i].idx = ig_emu_dim3(i % block.x, (i / block.x) % block.y, i / (block.x * block.y));
    }
    emu.fn = fn;
    emu.fn_ctx = ctx;
    emu.rng = emu_seed * 0x9e3779b97f4a7c15ull + 1;
    /* Dynamic shared memory starts at a multiple of 16 that is never one of
     * 1024, so kernels must align their swizzled wgmma tiles themselves. */
    emu.smem_base = 16u * (uint32_t)(1 + emu_seed % 63);
    ig_emu_blockDim = block;
    ig_emu_gridDim = grid;
    int rc = 0;
    for (unsigned z = 0; z < grid.z && !rc; z++)
        for (unsigned y = 0; y < grid.y && !rc; y++)
            for (unsigned x = 0; x < grid.x && !rc; x++) {
                struct emu_block b;
                b.threads = &threads;
                b.smem_total = 0;
                b.n = (unsigned)nthreads;
                b.n_done = b.n_at_barrier = b.n_at_griddep = 0;
                b.griddep_done = false;
                b.warp_arrived.assign((b.n + EMU_WARP - 1) / EMU_WARP, 0);
                b.wg_arrived.assign((b.n + EMU_WARPGROUP - 1) / EMU_WARPGROUP, 0);
                b.wg.resize(b.wg_arrived.size());
                b.n_agents = b.n + (unsigned)b.wg.size() + 1;
                b.order.resize(b.n);
                ig_emu_blockIdx = ig_emu_dim3(x, y, z);
                emu.blk = &b;
                b.bar_file = NULL;
                b.bar_line = 0;
                b.dyn = NULL;
                rc = emu_smem_alloc_dynamic(&b, dyn_smem);
                if (emu.pdl && emu_pdl_hooks.hide)
                    emu_pdl_hooks.hide(emu_pdl_hooks.ctx);
                if (!rc)
                    rc = emu_run_block(&b);
                if (emu.pdl && !b.griddep_done) {
                    if (emu_pdl_hooks.show) /* the inputs back, whatever happened */
                        emu_pdl_hooks.show(emu_pdl_hooks.ctx);
                    if (!rc) {
                        emu_fault("a block of a programmatic dependent launch ended without "
                                  "griddepcontrol.wait: the grid may complete before the "
                                  "kernel it depends on");
                        rc = -1;
                    }
                }
                emu_smem_free_all(&b);
                emu.blk = NULL;
                emu.stats.blocks++;
            }
    /* Give the stacks back to the pool (the thread structs are dropped). */
    for (unsigned i = 0; i < nthreads; i++)
        emu_pool[i] = threads[i].fiber;
    return rc;
}
