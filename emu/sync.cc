/* emu/sync.cc: happens-before and the synchronization objects beyond
 * __syncthreads: named barriers (bar.sync / bar.arrive id, count),
 * __syncwarp's join, mbarriers (init, arrive, expect_tx, complete_tx,
 * try_wait.parity, phases), fence.mbarrier_init, and setmaxnreg's register
 * pool. Semantics and the PTX ISA sections they come from: docs/wgmma.md.
 *
 * Happens-before is tracked with vector clocks, one entry per agent: each
 * thread, each warpgroup's wgmma (its operand reads) and the TMA unit. A
 * release (an arrival at a barrier, named barrier or mbarrier) publishes the
 * thread's clock and moves it on; an acquire (leaving a barrier, a bar.sync,
 * a successful mbarrier wait, a wgmma.wait_group) joins what was published
 * into the thread's clock. So two accesses are ordered exactly when a chain
 * of these goes from one to the other: a named barrier orders only its
 * participants, an mbarrier phase only its arrivals (and the TMA loads that
 * complete on it) before its waiters, not a global epoch. The shadow of
 * shared memory (emu/smem.cc) checks every access against these clocks.
 *
 * Faults: a named barrier id outside 1..15, a count that is not a positive
 * multiple of 32 or differs from the count the instance was opened with, a
 * thread arriving twice at one instance, arrivals left when the block ends;
 * an mbarrier used before its init is ordered before the use, init twice,
 * more arrivals in a phase than its count; setmaxnreg outside 24..256 or not
 * a multiple of 8, a .dec that grows or an .inc that shrinks the count, a
 * second setmaxnreg with no barrier of the whole warpgroup since the first,
 * an .inc the CTA's register pool can never serve (a deadlock).
 * Covered by tests/emu/test_emu_sync.cc. */
#include "emu/internal.h"

#include <stdio.h>
#include <string.h>

#define EMU_WARPGROUP 128u

/* Four entries at a time with GCC's vector extension (-O2 does not
 * vectorize these loops itself): a barrier of n threads joins n clocks of
 * n + groups + 1 entries, a wgmma issue meets 128 of them. */
typedef uint32_t emu_v4u __attribute__((vector_size(16)));

EMU_NO_SANITIZE void emu_vc_join(std::vector<uint32_t> &dst, const std::vector<uint32_t> &src)
{
    const size_t n = dst.size() < src.size() ? dst.size() : src.size();
    uint32_t *d = dst.data();
    const uint32_t *s = src.data();
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        emu_v4u a, b;
        memcpy(&a, d + i, sizeof a);
        memcpy(&b, s + i, sizeof b);
        a = a < b ? b : a;
        memcpy(d + i, &a, sizeof a);
    }
    for (; i < n; i++)
        d[i] = d[i] < s[i] ? s[i] : d[i];
}

EMU_NO_SANITIZE void emu_vc_meet(uint32_t *dst, const uint32_t *src, size_t n)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        emu_v4u a, b;
        memcpy(&a, dst + i, sizeof a);
        memcpy(&b, src + i, sizeof b);
        a = a > b ? b : a;
        memcpy(dst + i, &a, sizeof a);
    }
    for (; i < n; i++)
        dst[i] = dst[i] > src[i] ? src[i] : dst[i];
}

void emu_sync_block_start(struct emu_block *b)
{
    for (auto &t : *b->threads) {
        t.vc.assign(b->n_agents, 0u);
        t.vc[t.tid] = 1;
    }
    for (auto &nb : b->nbar) {
        nb.count = nb.arrived = 0;
        nb.waiters.clear();
    }
    b->mbar.clear();
    b->tma.clear();
    b->tma_loads.clear();
    b->tma_clock = 0;
    b->reg_pool = 0;
    b->launch_regs = 0;
    b->readers.clear();
    for (auto &g : b->wg) {
        g.wgmma_clock = 0;
        g.regs = 0;
        g.maxnreg_unsynced = g.maxnreg_waiting = g.maxnreg_want = 0;
    }
}

int emu_sync_block_end(struct emu_block *b)
{
    for (int id = 1; id < 16; id++) {
        const struct emu_nbar *nb = &b->nbar[id];
        if (nb->count && nb->arrived) {
            emu_fault("named barrier %d has %u of its %u arrivals when the block ends (first "
                      "arrival at %s:%d): a count its participants do not make up?",
                      id, nb->arrived, nb->count, nb->file, nb->line);
            return -1;
        }
    }
    if (!b->tma_loads.empty()) {
        emu_fault("%zu TMA loads still in flight when the block ends (issued by thread %u; "
                  "nobody waited on their mbarrier)", b->tma_loads.size(),
                  b->tma[b->tma_loads[0]].issuer);
        return -1;
    }
    return 0;
}

void emu_sync_note_barrier(struct emu_block *b, const unsigned *threads, size_t n)
{
    unsigned counts[8] = {0};
    for (size_t i = 0; i < n; i++)
        if (threads[i] / EMU_WARPGROUP < 8)
            counts[threads[i] / EMU_WARPGROUP]++;
    for (size_t g = 0; g < b->wg.size() && g < 8; g++)
        if (counts[g] == EMU_WARPGROUP)
            b->wg[g].maxnreg_unsynced = 0;
}

/* ---- named barriers ------------------------------------------------------- */

void ig_emu_named_barrier(int id, int count, int wait, const char *file, int line)
{
    struct emu_block *b = emu.blk;
    struct emu_thread *t = emu.cur;
    const char *op = wait ? "bar.sync" : "bar.arrive";
    if (id < 1 || id > 15)
        emu_fail("%s %d at %s:%d: named barriers are 1..15 here (0 is __syncthreads')", op, id,
                 file, line);
    if (count <= 0 || count % 32 || (unsigned)count > b->n)
        emu_fail("%s %d, %d at %s:%d: the thread count must be a positive multiple of 32, at "
                 "most the block's %u", op, id, count, file, line, b->n);
    struct emu_nbar *nb = &b->nbar[id];
    if (!nb->count) {
        nb->count = (unsigned)count;
        nb->arrived = 0;
        nb->waiters.clear();
        nb->warp_in.assign(b->n, 0);
        nb->acc.assign(b->n_agents, 0u);
        nb->file = file;
        nb->line = line;
    } else if (nb->count != (unsigned)count) {
        emu_fail("%s %d, %d at %s:%d while the threads already there (first at %s:%d) use "
                 "count %u: every participant must give the same count", op, id, count, file,
                 line, nb->file, nb->line, nb->count);
    }
    if (nb->warp_in[t->tid])
        emu_fail("%s %d at %s:%d: this thread already arrived at the barrier's current "
                 "instance (%u of %u arrivals): more barrier instructions than the count "
                 "allows before it completes", op, id, file, line, nb->arrived, nb->count);
    nb->warp_in[t->tid] = 1;
    emu_vc_join(nb->acc, t->vc);
    emu_vc_tick(t);
    if (wait)
        nb->waiters.push_back(t->tid);
    if (++nb->arrived < nb->count) {
        if (wait) {
            t->nbar_id = id;
            t->bar_file = file;
            t->bar_line = line;
            emu_block_current(EMU_AT_NBAR);
        }
        return;
    }
    /* Complete: every waiter is ordered after every arrival. */
    emu.stats.named_barriers++;
    emu_sync_note_barrier(b, nb->waiters.data(), nb->waiters.size());
    unsigned *order = b->order.data();
    size_t k = 0;
    for (unsigned w : nb->waiters) {
        emu_vc_join((*b->threads)[w].vc, nb->acc);
        if (w != t->tid)
            order[k++] = w;
    }
    nb->count = 0;
    emu_shuffle(order, k);
    for (size_t i = 0; i < k; i++)
        emu_wake(order[i]);
}

/* ---- mbarriers ------------------------------------------------------------ */

/* The shadow key of an mbarrier: its address (the map is per block). */
static size_t emu_mbar_key(const void *bar, const char *what)
{
    if ((uintptr_t)bar & 7)
        emu_fail("%s at %p: an mbarrier is 8 bytes, 8-byte aligned", what, bar);
    emu_smem_find(bar, 8, what);
    return (size_t)(uintptr_t)bar;
}

struct emu_mbar *emu_mbar_at(struct emu_block *b, size_t off, const char *what)
{
    auto it = b->mbar.find(off);
    if (it == b->mbar.end())
        emu_fail("%s on shared memory that holds no initialized mbarrier (missing "
                 "mbarrier.init?)", what);
    return &it->second;
}

/* A thread's operation on m must be ordered after its init. */
static void emu_mbar_check_use(const struct emu_mbar *m, const struct emu_thread *t,
                               const char *what)
{
    if (t->tid != m->init_tid && t->vc[m->init_tid] < m->init_clk)
        emu_fail("%s on an mbarrier whose mbarrier.init (by thread %u) is not ordered before it "
                 "(a missing barrier after the init?)", what, m->init_tid);
}

/* Completes the current phase when all arrivals came and tx-count is 0:
 * waiters of it acquire every arrival's clock. */
static void emu_mbar_try_complete(struct emu_block *b, size_t key, struct emu_mbar *m)
{
    if (m->pending || m->tx)
        return;
    m->phase++;
    m->pending = m->expected;
    emu_vc_join(m->done, m->acc);
    std::fill(m->acc.begin(), m->acc.end(), 0u);
    emu.stats.mbarrier_phases++;
    unsigned *order = b->order.data();
    size_t k = 0;
    for (auto &th : *b->threads)
        if (th.state == EMU_AT_MBAR && th.mbar_off == key && m->phase > th.mbar_phase) {
            th.state = EMU_RUNNABLE; /* woken once */
            order[k++] = th.tid;
        }
    emu_shuffle(order, k);
    for (size_t i = 0; i < k; i++)
        emu_wake(order[i]);
}

void ig_emu_mbarrier_init(void *bar, uint32_t count)
{
    struct emu_block *b = emu.blk;
    struct emu_thread *t = emu.cur;
    const size_t key = emu_mbar_key(bar, "mbarrier.init");
    if (count < 1 || count > (1u << 20) - 1)
        emu_fail("mbarrier.init with count %u (1 .. 2^20 - 1)", count);
    if (b->mbar.count(key))
        emu_fail("mbarrier.init on a live mbarrier (the ISA leaves that undefined: "
                 "mbarrier.inval first)");
    emu_smem_thread_write(t, bar, 8, "mbarrier.init");
    struct emu_mbar &m = b->mbar[key];
    m.expected = m.pending = count;
    m.tx = 0;
    m.phase = 0;
    m.init_tid = t->tid;
    m.init_clk = t->vc[t->tid];
    m.init_fenced = 0;
    m.acc.assign(b->n_agents, 0u);
    m.done.assign(b->n_agents, 0u);
}

void ig_emu_fence_mbarrier_init(void)
{
    for (auto &kv : emu.blk->mbar)
        if (kv.second.init_tid == emu.cur->tid)
            kv.second.init_fenced = 1;
}

void ig_emu_mbarrier_arrive(void *bar, uint32_t tx)
{
    struct emu_block *b = emu.blk;
    struct emu_thread *t = emu.cur;
    const char *what = tx ? "mbarrier.arrive.expect_tx" : "mbarrier.arrive";
    const size_t key = emu_mbar_key(bar, what);
    struct emu_mbar *m = emu_mbar_at(b, key, what);
    emu_mbar_check_use(m, t, what);
    if (m->pending == 0)
        emu_fail("%s: phase %u of the mbarrier already has its %u arrivals (it waits for %lld "
                 "tx bytes): more arrivals than its count", what, m->phase, m->expected,
                 (long long)m->tx);
    m->tx += tx;
    emu_vc_join(m->acc, t->vc);
    emu_vc_tick(t);
    m->pending--;
    emu_mbar_try_complete(b, key, m);
}

void emu_mbar_complete_tx(struct emu_block *b, size_t off, uint32_t bytes,
                          const std::vector<uint32_t> &vc)
{
    auto it = b->mbar.find(off);
    if (it == b->mbar.end())
        return; /* checked at issue */
    struct emu_mbar *m = &it->second;
    m->tx -= bytes;
    emu_vc_join(m->acc, vc);
    emu_mbar_try_complete(b, off, m);
}

void ig_emu_mbarrier_wait(void *bar, uint32_t parity)
{
    struct emu_block *b = emu.blk;
    struct emu_thread *t = emu.cur;
    const char *what = "mbarrier.try_wait.parity";
    const size_t key = emu_mbar_key(bar, what);
    struct emu_mbar *m = emu_mbar_at(b, key, what);
    emu_mbar_check_use(m, t, what);
    if (parity > 1)
        emu_fail("%s with parity %u (0 or 1)", what, parity);
    /* The phase with this parity has completed when the current phase's
     * parity differs: it is the one before. Otherwise wait for the current. */
    if ((m->phase & 1u) == parity) {
        t->mbar_off = key;
        t->mbar_phase = m->phase;
        emu_block_current(EMU_AT_MBAR);
        m = emu_mbar_at(b, key, what);
    }
    emu_vc_join(t->vc, m->done);
}

/* ---- setmaxnreg ----------------------------------------------------------- */

int emu_setmaxnreg(struct emu_block *b, unsigned g, const struct emu_wgcoll *c)
{
    const char *op = c->kind ? "setmaxnreg.inc" : "setmaxnreg.dec";
    const int regs = c->n;
    if (regs < 24 || regs > 256 || regs % 8)
        emu_fail("%s %d: the count must be a multiple of 8 in 24..256", op, regs);
    if (c->launch_regs < 24 || c->launch_regs > 256)
        emu_fail("%s: launch register count %d out of range", op, c->launch_regs);
    if (b->launch_regs && b->launch_regs != c->launch_regs)
        emu_fail("%s: launch register count %d, earlier %d", op, c->launch_regs, b->launch_regs);
    b->launch_regs = c->launch_regs;
    struct emu_wg *wg = &b->wg[g];
    if (!wg->regs)
        wg->regs = c->launch_regs;
    if (wg->maxnreg_unsynced)
        emu_fail("%s %d: warpgroup %u executed a setmaxnreg and no barrier of all its warps "
                 "since (the ISA asks for one between two)", op, regs, g);
    if (!c->kind) {
        if (regs > wg->regs)
            emu_fail("%s %d on warps that own %d registers per thread: .dec must not grow the "
                     "count", op, regs, wg->regs);
        b->reg_pool += (long)(wg->regs - regs) * (long)EMU_WARPGROUP;
        wg->regs = regs;
        wg->maxnreg_unsynced = 1;
        /* Warpgroups waiting in an .inc may be served now. */
        for (size_t o = 0; o < b->wg.size(); o++) {
            struct emu_wg *w = &b->wg[o];
            long need = (long)(w->maxnreg_want - w->regs) * (long)EMU_WARPGROUP;
            if (!w->maxnreg_waiting || need > b->reg_pool)
                continue;
            b->reg_pool -= need;
            w->regs = w->maxnreg_want;
            w->maxnreg_waiting = 0;
            w->maxnreg_unsynced = 1;
            emu_wake_warpgroup((unsigned)o);
        }
        return 1;
    }
    if (regs < wg->regs)
        emu_fail("%s %d on warps that own %d registers per thread: .inc must not shrink the "
                 "count", op, regs, wg->regs);
    long need = (long)(regs - wg->regs) * (long)EMU_WARPGROUP;
    if (need > b->reg_pool) { /* blocks until a .dec frees enough */
        wg->maxnreg_waiting = 1;
        wg->maxnreg_want = regs;
        return 0;
    }
    b->reg_pool -= need;
    wg->regs = regs;
    wg->maxnreg_unsynced = 1;
    return 1;
}

void ig_emu_setmaxnreg(int inc, int regs, int launch_regs)
{
    struct emu_wgcoll c = {};
    c.op = EMU_WG_SETMAXNREG;
    c.kind = inc != 0;
    c.n = regs;
    c.launch_regs = launch_regs;
    emu_wg_collective(&c);
}
